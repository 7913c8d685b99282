import BGPolicyCore
import BGPolicySystem
import Testing

@testable import BGPolicyAgent

@Suite("OpenedAppUnits: an app is open while any of its units runs")
struct OpenedAppUnitsTests {
    static let konsole = AppID(rawValue: "org.kde.konsole")!
    static let maps = AppID(rawValue: "org.gnome.Maps")!
    static let first = "app-org.kde.konsole-a1b2c3.scope"
    static let second = "app-org.kde.konsole-d4e5f6.scope"

    @Test func aSecondLaunchIsNeitherAnOpenNorALeave() {
        var units = OpenedAppUnits()
        let opened = units.open(Self.first, of: Self.konsole)
        // The second launch hands its window to the running Konsole and its scope ends.
        let openedAgain = units.open(Self.second, of: Self.konsole)
        let secondWasLast = units.close(Self.second, of: Self.konsole)
        #expect(opened && !openedAgain && !secondWasLast)
        #expect(units.contains(Self.konsole))
        let firstWasLast = units.close(Self.first, of: Self.konsole)
        #expect(firstWasLast)
        #expect(!units.contains(Self.konsole) && units.apps.isEmpty)
    }

    @Test func aUnitOpenedForAnAppInUseByItsWordIsKnownAsHandedOffUntilItGoes() {
        var units = OpenedAppUnits()
        let first = units.open(Self.first, of: Self.konsole, handedOff: true)
        #expect(first && units.isHandedOff(Self.first))
        _ = units.open(Self.second, of: Self.konsole)
        #expect(!units.isHandedOff(Self.second))
        _ = units.close(Self.first, of: Self.konsole)
        #expect(!units.isHandedOff(Self.first))
        // Opened again later, not handed off: it is an ordinary unit.
        _ = units.open(Self.first, of: Self.konsole)
        #expect(!units.isHandedOff(Self.first))
    }

    @Test func theUnitsGoInAnyOrderAndTheLastIsTheLeave() {
        var units = OpenedAppUnits()
        for unit in [Self.first, Self.second] { _ = units.open(unit, of: Self.konsole) }
        // The same unit announced twice is one.
        let repeated = units.open(Self.second, of: Self.konsole)
        #expect(!repeated)
        let firstWasLast = units.close(Self.first, of: Self.konsole)
        let secondWasLast = units.close(Self.second, of: Self.konsole)
        #expect(!firstWasLast && secondWasLast)
    }

    @Test func theUnitsListedAtConnectCountAsOpenedAndAppsApart() {
        var units = OpenedAppUnits(running: [
            RunningAppUnit(appID: Self.konsole, unit: Self.first),
            RunningAppUnit(appID: Self.konsole, unit: Self.second),
            RunningAppUnit(appID: Self.maps, unit: "app-gnome-org.gnome.Maps-12345.scope"),
        ])
        #expect(units.apps == [Self.konsole, Self.maps])
        let secondWasLast = units.close(Self.second, of: Self.konsole)
        let mapsWasLast = units.close("app-gnome-org.gnome.Maps-12345.scope", of: Self.maps)
        #expect(!secondWasLast && mapsWasLast)
        #expect(units.apps == [Self.konsole])
    }

    @Test func aUnitNeverSeenOpeningIsTheLastOnlyWhenNoOtherRuns() {
        var units = OpenedAppUnits()
        // Opened while the agent was not watching, or started by the agent's own launch.
        let unseenAlone = units.close(Self.second, of: Self.konsole)
        #expect(unseenAlone)
        _ = units.open(Self.first, of: Self.konsole)
        let unseenBeside = units.close(Self.second, of: Self.konsole)
        #expect(!unseenBeside && units.contains(Self.konsole))
    }

    @Test func pastTheBoundAUnitIsNotRememberedAndTheOthersStillCount() {
        var units = OpenedAppUnits()
        for index in 0..<OpenedAppUnits.maximumUnits {
            _ = units.open("app-org.kde.konsole-\(index).scope", of: Self.konsole)
        }
        let mapsFirst = units.open("app-gnome-org.gnome.Maps-1.scope", of: Self.maps)
        #expect(mapsFirst && !units.contains(Self.maps))
        // One Konsole unit going makes room again.
        let konsoleLast = units.close("app-org.kde.konsole-0.scope", of: Self.konsole)
        #expect(!konsoleLast)
        _ = units.open("app-gnome-org.gnome.Maps-1.scope", of: Self.maps)
        #expect(units.contains(Self.maps))
    }
}
