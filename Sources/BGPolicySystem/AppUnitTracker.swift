import BGPolicyCore

/// Turns the user manager's `UnitNew`/`UnitRemoved` into `AppUnitEvent`s: only app units
/// (`app-*.scope`, `app-*.service`, ids by `AppIdentityParser.appID(fromUnitName:)`) pass, and
/// each live unit opens once. Pure, so the filtering is tested without a bus.
///
/// systemd sends `UnitNew` when it loads a unit into memory; for the transient scopes and
/// services that launchers create, that is when the app starts. A second `UnitNew` for a unit
/// still live (should the manager announce it again) is not a second open. A `UnitRemoved`
/// always closes, even for a unit opened before the agent was watching: the app did go away.
/// Known gap: a query that loads an app *service* that is not running (`systemctl --user
/// status app-….service`) also brings a `UnitNew`, and is taken for an open.
struct AppUnitTracker: Sendable {
    /// App units seen opening and not yet removed.
    private(set) var live: Set<String> = []
    /// A bound on `live`, so that a manager that never sends `UnitRemoved` cannot grow it
    /// without end; past it, repeated `UnitNew`s are no longer recognised as repeats.
    static let maximumLive = 4096

    init() {}

    /// The app units among `units` (the manager's running units, listed when the agent
    /// connects), which become the live ones, in the order listed. Which of them the user
    /// opened is the agent's to say. A unit running before the agent watched was opened then:
    /// a `UnitNew` for it later is not a new open.
    mutating func running(units: [String]) -> [RunningAppUnit] {
        live = []
        var running: [RunningAppUnit] = []
        for unit in units {
            guard let appID = AppIdentityParser.appID(fromUnitName: unit) else { continue }
            running.append(RunningAppUnit(appID: appID, unit: unit))
            if live.count < Self.maximumLive { live.insert(unit) }
        }
        return running
    }

    /// The event for the manager's signal `member` about `unit`, or nil when it says nothing
    /// about an app (another signal, a unit that is not an app unit, a repeated `UnitNew`).
    mutating func event(member: String, unit: String) -> AppUnitEvent? {
        let change: AppUnitEvent.Change
        switch member {
        case "UnitNew": change = .opened
        case "UnitRemoved": change = .closed
        default: return nil
        }
        guard let appID = AppIdentityParser.appID(fromUnitName: unit) else { return nil }
        switch change {
        case .opened:
            if live.contains(unit) { return nil }
            if live.count < Self.maximumLive { live.insert(unit) }
        case .closed:
            live.remove(unit)
        }
        return AppUnitEvent(appID: appID, change: change, unit: unit, autostart: AppIdentityParser.isAutostartUnit(unit))
    }
}
