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

    static let maps = "app-gnome-org.gnome.Maps-12345.scope"
    static let nautilus = "app-gnome-org.gnome.Nautilus-12345.scope"
    static let konsole = "app-org.kde.konsole-a1b2c3.scope"
    static let dolphin = "app-org.kde.dolphin@12ab.service"

    /// A tracker with `live` running, as listed when it connected, and a reload started in which
    /// the manager removed `removed` and announced `new`, in that order, with other units among them.
    func reloading(live: [String], removed: [String], new: [String]) -> AppUnitTracker {
        var tracker = AppUnitTracker()
        _ = tracker.running(units: live)
        tracker.reloadStarted()
        for unit in removed + ["dbus.service"] { #expect(tracker.event(member: "UnitRemoved", unit: unit) == nil) }
        for unit in new + ["dbus.service"] { #expect(tracker.event(member: "UnitNew", unit: unit) == nil) }
        return tracker
    }

    func event(_ unit: String, _ change: AppUnitEvent.Change) throws -> AppUnitEvent {
        AppUnitEvent(appID: try #require(AppIdentityParser.appID(fromUnitName: unit)), change: change, unit: unit)
    }

    @Test("A reload that builds every unit again says nothing, whether the manager lists its units or not")
    func reloadRebuildsUnits() {
        for listed in [true, false] {
            let running = [Self.nautilus, Self.konsole]
            var tracker = reloading(live: running, removed: running, new: running)
            #expect(tracker.reload == AppUnitTracker.Reload(removed: Set(running), new: Set(running)))
            #expect(tracker.reloadFinished(running: listed ? running + ["dbus.service"] : nil) == [])
            #expect(tracker.reload == nil)
            #expect(tracker.live == Set(running))
            // Afterwards signals count again: a running unit announced again is still no open.
            #expect(tracker.event(member: "UnitNew", unit: Self.nautilus) == nil)
            #expect(tracker.event(member: "UnitRemoved", unit: Self.nautilus)?.change == .closed)
        }
    }

    @Test("Across a reload, a unit that went closes and one that appeared opens, after it; one built again but not running (an inactive app service) is neither")
    func reloadChanges() throws {
        var tracker = reloading(
            live: [Self.nautilus, Self.konsole], removed: [Self.nautilus, Self.konsole, Self.dolphin],
            new: [Self.nautilus, Self.dolphin, Self.maps])
        let events = tracker.reloadFinished(running: [Self.maps, Self.nautilus])
        #expect(events == [try event(Self.konsole, .closed), try event(Self.maps, .opened)])
        #expect(tracker.live == [Self.maps, Self.nautilus])
    }

    @Test("Without the list, the held signals say what changed: a unit removed for good closes, even one not known live; one only announced new opens")
    func reloadWithoutList() throws {
        var tracker = reloading(
            live: [Self.nautilus, Self.konsole], removed: [Self.nautilus, Self.konsole, Self.dolphin],
            new: [Self.nautilus, Self.maps])
        let events = tracker.reloadFinished(running: nil)
        #expect(events == [try event(Self.dolphin, .closed), try event(Self.konsole, .closed), try event(Self.maps, .opened)])
        #expect(tracker.live == [Self.maps, Self.nautilus])
    }

    @Test("A unit removed after the reload and before the list was made is closed by the reload's end, and its late UnitRemoved is no second close")
    func lateRemovalAfterReload() throws {
        var tracker = reloading(live: [Self.konsole], removed: [Self.konsole], new: [Self.konsole])
        #expect(tracker.reloadFinished(running: []) == [try event(Self.konsole, .closed)])
        #expect(tracker.event(member: "UnitRemoved", unit: Self.konsole) == nil)
        // Only once: a unit of that name opening and closing again later is heard.
        #expect(tracker.event(member: "UnitNew", unit: Self.konsole)?.change == .opened)
        #expect(tracker.event(member: "UnitRemoved", unit: Self.konsole)?.change == .closed)
    }

    @Test("A unit that opens after the reload and before the list was made opens once")
    func lateOpenAfterReload() throws {
        var tracker = reloading(live: [], removed: [], new: [])
        #expect(tracker.reloadFinished(running: [Self.maps]) == [try event(Self.maps, .opened)])
        #expect(tracker.event(member: "UnitNew", unit: Self.maps) == nil)
    }

    @Test("The end of a reload whose start was not seen checks the list against the live units")
    func reloadEndAlone() throws {
        var tracker = AppUnitTracker()
        _ = tracker.running(units: [Self.konsole])
        #expect(tracker.reloadFinished(running: [Self.konsole, Self.maps]) == [try event(Self.maps, .opened)])
        #expect(tracker.reloadFinished(running: nil) == [])
        #expect(tracker.live == [Self.konsole, Self.maps])
    }

    @Test("A second Reloading(true) goes on holding; connecting to a manager anew drops what was held")
    func reloadHeldStateCleared() throws {
        var tracker = reloading(live: [Self.konsole], removed: [Self.konsole], new: [])
        tracker.reloadStarted()
        #expect(tracker.reload?.removed == [Self.konsole])
        // The manager went during the reload; the next one lists its units.
        #expect(tracker.running(units: [Self.konsole]) == [RunningAppUnit(appID: try #require(AppID(rawValue: "org.kde.konsole")), unit: Self.konsole)])
        #expect(tracker.reload == nil)
        #expect(tracker.event(member: "UnitRemoved", unit: Self.konsole)?.change == .closed)
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
