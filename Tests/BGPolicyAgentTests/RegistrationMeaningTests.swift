import BGPolicyCore
import BGPolicySystem
import Testing

@testable import BGPolicyAgent

@Suite("RegistrationMeaning and SessionStartedUnits: which registrations and units are the user opening an app")
struct RegistrationMeaningTests {
    /// (launched by the agent, background only, in a unit the session's autostart started,
    /// process start, agent start) → meaning; starts in seconds since boot.
    static let cases: [(Bool, Bool, Bool, Double?, Double?, RegistrationMeaning)] = [
        // Started after the agent: opened.
        (false, false, false, 1000, 900, .opened),
        // Started a moment before the agent: it may be the call that activated the agent.
        (false, false, false, 896, 900, .opened),
        // Started well before: the agent restarted and the app registers again.
        (false, false, false, 100, 900, .alreadyRunning),
        (false, false, false, 894.9, 900, .alreadyRunning),
        // What cannot be read counts as an open.
        (false, false, false, nil, 900, .opened),
        (false, false, false, 100, nil, .opened),
        // Not the user's doing, whenever the process started.
        (true, false, false, 1000, 900, .notOpened(.launchedByTheAgent)),
        (true, false, false, 100, 900, .notOpened(.launchedByTheAgent)),
        (false, false, true, 1000, 900, .notOpened(.autostarted)),
        (false, false, true, 100, 900, .notOpened(.autostarted)),
        (false, true, false, 1000, 900, .notOpened(.backgroundOnly)),
        (false, true, false, 100, 900, .notOpened(.backgroundOnly)),
    ]

    @Test("the meaning of a registration", arguments: cases)
    func meaning(_ row: (Bool, Bool, Bool, Double?, Double?, RegistrationMeaning)) {
        let (launched, backgroundOnly, autostarted, processStart, agentStart, expected) = row
        #expect(RegistrationMeaning.of(
            launchedByAgent: launched, backgroundOnly: backgroundOnly, autostarted: autostarted,
            processStart: processStart, agentStart: agentStart) == expected)
    }

    static let tray = "app-org.example.Tray@autostart.service"
    static let trayScope = "app-flatpak-org.example.Tray-4242.scope"

    func event(_ unit: String, _ change: AppUnitEvent.Change) throws -> AppUnitEvent {
        let appID = try #require(AppIdentityParser.appID(fromUnitName: unit))
        return AppUnitEvent(appID: appID, change: change, unit: unit, autostart: AppIdentityParser.isAutostartUnit(unit))
    }

    @Test("an autostart unit, and the Flatpak scope its app moves into at once, are the session's; a later scope is the user's")
    func flatpakAutostart() throws {
        var units = SessionStartedUnits()
        #expect(units.isSessionStart(try event(Self.tray, .opened), at: 1000))
        #expect(units.contains(unit: Self.tray))
        // flatpak run moves into its own scope a moment later; the autostart service then ends.
        #expect(units.isSessionStart(try event(Self.trayScope, .opened), at: 1001.5))
        #expect(units.contains(unit: Self.trayScope))
        #expect(units.isSessionStart(try event(Self.tray, .closed), at: 1002))
        // Another app's unit meanwhile is the user's.
        #expect(!units.isSessionStart(try event("app-gnome-org.gnome.Maps-77.scope", .opened), at: 1003))
        #expect(!units.contains(unit: "app-gnome-org.gnome.Maps-77.scope"))
        // The autostarted app quits: its scope going is no leave; the user opens it later.
        #expect(units.isSessionStart(try event(Self.trayScope, .closed), at: 2000))
        #expect(!units.contains(unit: Self.trayScope))
        let later = "app-flatpak-org.example.Tray-5151.scope"
        #expect(!units.isSessionStart(try event(later, .opened), at: 1000 + SessionStartedUnits.followSeconds + 1))
        #expect(!units.isSessionStart(try event(later, .closed), at: 3000))
        // A clock that went back is no follow-on.
        #expect(units.isSessionStart(try event(Self.tray, .opened), at: 5000))
        #expect(!units.isSessionStart(try event(Self.trayScope, .opened), at: 4990))
    }

    @Test("the units the session started, as an earlier run recorded them, are the session's until they are no longer running")
    func restoredAfterARestart() throws {
        var units = SessionStartedUnits()
        units.restore([Self.trayScope, "app-flatpak-org.example.Gone-9.scope"])
        // The autostart unit is long gone; the scope alone is still the session's.
        #expect(units.contains(unit: Self.trayScope))
        #expect(!units.contains(unit: "app-gnome-org.gnome.Maps-77.scope"))
        // At connect, the manager runs the scope and not the other: that one is forgotten.
        let forgot = units.keepOnly(running: [Self.trayScope, "app-gnome-org.gnome.Maps-77.scope"])
        #expect(forgot)
        #expect(units.followers == [Self.trayScope])
        let forgotAgain = units.keepOnly(running: [Self.trayScope])
        #expect(!forgotAgain)
        // Its going is still no leave.
        #expect(units.isSessionStart(try event(Self.trayScope, .closed), at: 10))
        #expect(units.followers.isEmpty)
        // What is restored stays bounded.
        units.restore((0..<(SessionStartedUnits.maximumUnits + 5)).map { "app-flatpak-org.example.A\($0)-1.scope" })
        #expect(units.followers.count == SessionStartedUnits.maximumUnits)
    }

    @Test("what is remembered stays bounded")
    func bounded() throws {
        var units = SessionStartedUnits()
        // A flood of autostarts within seconds: up to the bound, each app's scope follows it.
        var followed = 0
        for n in 0..<(SessionStartedUnits.maximumUnits + 10) {
            #expect(units.isSessionStart(try event("app-org.example.A\(n)@autostart.service", .opened), at: Double(n) / 1000))
            if units.isSessionStart(try event("app-flatpak-org.example.A\(n)-1.scope", .opened), at: Double(n) / 1000) { followed += 1 }
        }
        #expect(followed == SessionStartedUnits.maximumUnits)
        #expect(units.followers.count == SessionStartedUnits.maximumUnits)
    }
}
