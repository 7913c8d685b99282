import BGPolicyCore
import BGPolicySystem

/// The app units the user opened that are running, by app (`TaskEngine.appUnitChanged`): an
/// app is open while any of its units runs, and left when the last one goes.
///
/// One app often has several. A launcher makes a scope for every launch, and an app already
/// running (Firefox, most terminals) takes the launch over in its first process: the new scope
/// ends within a second, or stays for as long as the window it opened. Counted by app, the end
/// of the second scope was taken for the user leaving an app still in use, and the end of the
/// first, later, for nothing at all. Pure, so that the counting is tested without a bus.
struct OpenedAppUnits: Sendable {
    /// A bound on the units remembered, so that a manager that never sends `UnitRemoved` cannot
    /// grow them without end (as `AppUnitTracker.maximumLive`). Past it a unit is not
    /// remembered: its app's other units still say whether the app is open.
    static let maximumUnits = 4096

    private var units: [AppID: Set<String>] = [:]
    private var count = 0
    /// Units opened while their app was in use by its own word (`TaskEngine.appUnitChanged`):
    /// a launch from the launcher handed to the app's running process.
    private var handedOff: Set<String> = []

    init() {}

    /// The units running when the agent connected to the user manager, those the user opened.
    init(running: some Sequence<RunningAppUnit>) {
        for running in running { _ = open(running.unit, of: running.appID) }
    }

    /// The apps with a unit running.
    var apps: Set<AppID> { Set(units.keys) }

    /// Whether a unit of `appID` runs.
    func contains(_ appID: AppID) -> Bool { units[appID] != nil }

    /// `unit` of `appID` opened. Returns whether it is the app's first, that is, whether no
    /// other unit of the app runs. `handedOff`: the app was in use by its own word already.
    mutating func open(_ unit: String, of appID: AppID, handedOff: Bool = false) -> Bool {
        let first = units[appID] == nil
        if count < Self.maximumUnits, units[appID, default: []].insert(unit).inserted {
            count += 1
            if handedOff { self.handedOff.insert(unit) }
        }
        return first
    }

    /// Whether `unit` opened while its app was in use by its own word (`open`'s `handedOff`).
    func isHandedOff(_ unit: String) -> Bool { handedOff.contains(unit) }

    /// `unit` of `appID` went. Returns whether it was the app's last, that is, whether no other
    /// unit of the app runs now. A unit never seen opening (one the agent's launch started, or
    /// one opened while the agent was not watching) is the last if no other runs: the app did
    /// go away.
    mutating func close(_ unit: String, of appID: AppID) -> Bool {
        guard var mine = units[appID] else { return true }
        if mine.remove(unit) != nil { count -= 1 }
        handedOff.remove(unit)
        units[appID] = mine.isEmpty ? nil : mine
        return mine.isEmpty
    }
}
