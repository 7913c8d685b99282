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
///
/// A reload of the manager (`systemctl --user daemon-reload`, run by package updates and
/// whenever the user enables a unit) frees every unit and builds it again: between
/// `Reloading(true)` and `Reloading(false)` every unit goes with a `UnitRemoved` and comes
/// back with a `UnitNew` (systemd sends `Reloading(false)` only once those are out). Taken one
/// by one they would close and open every running app. So they are held
/// (`reloadStarted`), and at the end (`reloadFinished`) only what really changed is said: the
/// units the manager runs then (or, if it cannot list them, what the held signals add up to)
/// against those live before.
struct AppUnitTracker: Sendable {
    /// What the manager said of app units while it reloads.
    struct Reload: Sendable, Equatable {
        /// Units it announced removed.
        var removed: Set<String> = []
        /// Units it announced new, and not removed again since: a unit in both was built again.
        var new: Set<String> = []

        /// Holds the signal that `unit` changed. Each set is bounded as `live` is; past it, a
        /// unit is not held, and the list at the end still says whether it runs.
        mutating func hold(_ change: AppUnitEvent.Change, _ unit: String) {
            switch change {
            case .opened:
                if new.count < AppUnitTracker.maximumLive { new.insert(unit) }
            case .closed:
                new.remove(unit)
                if removed.count < AppUnitTracker.maximumLive { removed.insert(unit) }
            }
        }
    }

    /// App units seen opening and not yet removed.
    private(set) var live: Set<String> = []
    /// The reload under way, between `Reloading(true)` and `Reloading(false)`; nil otherwise.
    private(set) var reload: Reload?
    /// Units the last reload's end closed. The `UnitRemoved` of one that went just after the
    /// reload may still be on its way: sent after `Reloading(false)` but before the list was,
    /// it is read after the list, and is no second close.
    private var closedByReload: Set<String> = []
    /// A bound on `live`, so that a manager that never sends `UnitRemoved` cannot grow it
    /// without end; past it, repeated `UnitNew`s are no longer recognised as repeats.
    static let maximumLive = 4096

    init() {}

    /// The app units among `units` (the manager's running units, listed when the agent
    /// connects), which become the live ones, in the order listed. Which of them the user
    /// opened is the agent's to say. A unit running before the agent watched was opened then:
    /// a `UnitNew` for it later is not a new open. Signals held for a reload are dropped: the
    /// list says what runs.
    mutating func running(units: [String]) -> [RunningAppUnit] {
        live = []
        reload = nil
        closedByReload = []
        var running: [RunningAppUnit] = []
        for unit in units {
            guard let appID = AppIdentityParser.appID(fromUnitName: unit) else { continue }
            running.append(RunningAppUnit(appID: appID, unit: unit))
            if live.count < Self.maximumLive { live.insert(unit) }
        }
        return running
    }

    /// The event for the manager's signal `member` about `unit`, or nil when it says nothing
    /// about an app (another signal, a unit that is not an app unit, a repeated `UnitNew`, a
    /// signal held while the manager reloads, the late `UnitRemoved` of a unit the reload's
    /// end closed).
    mutating func event(member: String, unit: String) -> AppUnitEvent? {
        let change: AppUnitEvent.Change
        switch member {
        case "UnitNew": change = .opened
        case "UnitRemoved": change = .closed
        default: return nil
        }
        guard let appID = AppIdentityParser.appID(fromUnitName: unit) else { return nil }
        if reload != nil {
            reload?.hold(change, unit)
            return nil
        }
        switch change {
        case .opened:
            closedByReload.remove(unit)
            if live.contains(unit) { return nil }
            if live.count < Self.maximumLive { live.insert(unit) }
        case .closed:
            if closedByReload.remove(unit) != nil { return nil }
            live.remove(unit)
        }
        return event(appID: appID, change: change, unit: unit)
    }

    /// `Reloading(true)`: unit signals are held until `reloadFinished`. A second one before
    /// the end (a reload asked for during one) goes on holding.
    mutating func reloadStarted() {
        if reload == nil { reload = Reload() }
        closedByReload = []
    }

    /// `Reloading(false)`, with `units`, the manager's running units listed after it, or nil
    /// when it could not list them. Returns what really changed across the reload, the closes
    /// first: a unit live before and not running now closed, as did one removed and not built
    /// again (even if it was not known live: a `UnitRemoved` always closes); one running now
    /// that was neither live nor removed opened. A unit removed and built again is neither, nor
    /// is one built again that does not run (a loaded app service that is inactive). Without a
    /// list, the running ones are taken to be those live before and not removed for good, and
    /// those announced new that were not there before. The units running become the live ones.
    /// Also called for a `Reloading(false)` without its `Reloading(true)` (the agent connected
    /// during a reload): nothing is held then, and the list is only checked against `live`.
    mutating func reloadFinished(running units: [String]?) -> [AppUnitEvent] {
        let held = reload ?? Reload()
        reload = nil
        let before = live
        let gone = held.removed.subtracting(held.new)
        let after: Set<String>
        let order: [String]
        if let units {
            order = units.filter { AppIdentityParser.appID(fromUnitName: $0) != nil }
            after = Set(order)
        } else {
            after = before.subtracting(gone).union(held.new.subtracting(held.removed))
            order = after.sorted()
        }
        let closed = before.union(gone).subtracting(after)
        live = []
        for unit in order where live.count < Self.maximumLive { live.insert(unit) }
        closedByReload = closed.count <= Self.maximumLive ? closed : []
        var events: [AppUnitEvent] = []
        for unit in closed.sorted() {
            guard let appID = AppIdentityParser.appID(fromUnitName: unit) else { continue }
            events.append(event(appID: appID, change: .closed, unit: unit))
        }
        var opened: Set<String> = []
        for unit in order where !before.contains(unit) && !held.removed.contains(unit) && opened.insert(unit).inserted {
            guard let appID = AppIdentityParser.appID(fromUnitName: unit) else { continue }
            events.append(event(appID: appID, change: .opened, unit: unit))
        }
        return events
    }

    private func event(appID: AppID, change: AppUnitEvent.Change, unit: String) -> AppUnitEvent {
        AppUnitEvent(appID: appID, change: change, unit: unit, autostart: AppIdentityParser.isAutostartUnit(unit))
    }
}
