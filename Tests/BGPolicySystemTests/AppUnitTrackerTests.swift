import BGPolicyCore
import Testing

@testable import BGPolicySystem

@Suite("AppUnitTracker")
struct AppUnitTrackerTests {
    /// App units GNOME and KDE really create, and the app each belongs to.
    static let appUnits: [(unit: String, id: String, autostart: Bool)] = [
        ("app-gnome-org.gnome.Maps-12345.scope", "org.gnome.Maps", false),
        (#"app-gnome-firefox\x2desr-9876.scope"#, "firefox-esr", false),
        ("app-org.kde.konsole-a1b2c3.scope", "org.kde.konsole", false),
        ("app-org.kde.dolphin@12ab.service", "org.kde.dolphin", false),
        ("app-flatpak-org.gnome.Maps-4242.scope", "org.gnome.Maps", false),
        // Started by the session at login from an XDG autostart entry.
        (#"app-gnome-org.gnome.Evolution\x2dalarm\x2dnotify@autostart.service"#, "org.gnome.Evolution-alarm-notify", true),
    ]

    /// Units that are not apps: the login session, system-ish services, slices, the manager.
    static let otherUnits = [
        "session-2.scope", "dbus.service", "user@1000.service", "app.slice", "app-gnome-org.gnome.Maps.slice",
        "init.scope", "dbus-:1.2-org.example.App@0.service", "app-.scope", "app-.service", "org.gnome.Shell@wayland.service",
        "pipewire.socket", "app-gnome-org.gnome.Maps-12345.mount", "",
    ]

    @Test("UnitNew of an app unit opens its app; UnitRemoved closes it; an autostart unit says so", arguments: appUnits)
    func openClose(unit: String, id: String, autostart: Bool) throws {
        var tracker = AppUnitTracker()
        let appID = try #require(AppID(rawValue: id))
        #expect(tracker.event(member: "UnitNew", unit: unit) == AppUnitEvent(appID: appID, change: .opened, unit: unit, autostart: autostart))
        #expect(tracker.event(member: "UnitRemoved", unit: unit) == AppUnitEvent(appID: appID, change: .closed, unit: unit, autostart: autostart))
        #expect(tracker.live.isEmpty)
    }

    @Test("Units that are not app units say nothing", arguments: otherUnits)
    func otherUnitsIgnored(unit: String) {
        var tracker = AppUnitTracker()
        #expect(tracker.event(member: "UnitNew", unit: unit) == nil)
        #expect(tracker.event(member: "UnitRemoved", unit: unit) == nil)
        #expect(tracker.live.isEmpty)
    }

    @Test("Other manager signals say nothing, even about app units", arguments: ["JobNew", "JobRemoved", "Reloading", "StartupFinished", "unitnew", ""])
    func otherSignalsIgnored(member: String) {
        var tracker = AppUnitTracker()
        #expect(tracker.event(member: member, unit: "app-gnome-org.gnome.Maps-12345.scope") == nil)
    }

    @Test("A unit loaded again while live is not a second open; after its removal it is")
    func repeatedUnitNew() {
        var tracker = AppUnitTracker()
        let unit = "app-org.kde.konsole-a1b2c3.scope"
        #expect(tracker.event(member: "UnitNew", unit: unit)?.change == .opened)
        #expect(tracker.event(member: "UnitNew", unit: unit) == nil)
        #expect(tracker.event(member: "UnitRemoved", unit: unit)?.change == .closed)
        #expect(tracker.event(member: "UnitNew", unit: unit)?.change == .opened)
    }

    @Test("Two instances of one app open and close each on their own")
    func twoInstances() {
        var tracker = AppUnitTracker()
        let first = "app-gnome-org.gnome.Maps-100.scope", second = "app-gnome-org.gnome.Maps-200.scope"
        #expect(tracker.event(member: "UnitNew", unit: first)?.change == .opened)
        #expect(tracker.event(member: "UnitNew", unit: second)?.change == .opened)
        #expect(tracker.event(member: "UnitRemoved", unit: first)?.appID.rawValue == "org.gnome.Maps")
        #expect(tracker.live == [second])
    }

    @Test("A unit removed that was never seen opening still closes its app")
    func removedUnseen() {
        var tracker = AppUnitTracker()
        #expect(tracker.event(member: "UnitRemoved", unit: "app-org.kde.dolphin@12ab.service")?.change == .closed)
    }

    @Test("The units running at connect are the live ones: every app unit is returned with its app (autostart ones too: which the user opened is the agent's to say), a UnitNew for one is no new open, and units that are not apps are left out")
    func runningAtConnect() throws {
        var tracker = AppUnitTracker()
        _ = tracker.event(member: "UnitNew", unit: "app-gnome-org.gnome.Maps-12345.scope")
        let units = Self.appUnits.map(\.unit) + Self.otherUnits
        let running = tracker.running(units: units)
        #expect(running == (try Self.appUnits.map { RunningAppUnit(appID: try #require(AppID(rawValue: $0.id)), unit: $0.unit) }))
        // The list replaces what was live before (Maps' unit is in it again, by another name: two instances).
        #expect(tracker.live == Set(Self.appUnits.map(\.unit)))
        #expect(tracker.event(member: "UnitNew", unit: "app-org.kde.konsole-a1b2c3.scope") == nil)
        #expect(tracker.event(member: "UnitRemoved", unit: "app-org.kde.konsole-a1b2c3.scope")?.change == .closed)
        // A unit live before the list and not in it is gone: its next UnitNew opens.
        #expect(tracker.running(units: []).isEmpty)
        #expect(tracker.event(member: "UnitNew", unit: "app-org.kde.dolphin@12ab.service")?.change == .opened)
    }

    @Test("The set of live units is bounded")
    func bounded() {
        var tracker = AppUnitTracker()
        for n in 0..<(AppUnitTracker.maximumLive + 10) {
            #expect(tracker.event(member: "UnitNew", unit: "app-gnome-org.gnome.Maps-\(n).scope") != nil)
        }
        #expect(tracker.live.count == AppUnitTracker.maximumLive)
    }
}
