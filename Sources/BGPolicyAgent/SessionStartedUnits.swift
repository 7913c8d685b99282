import BGPolicyCore
import BGPolicySystem

/// The app units the session started, not the user (`TaskEngine.appUnitChanged`): the units of
/// XDG autostart entries (`AppIdentityParser.isAutostartUnit`), and the unit an app they start
/// moves into at once. `flatpak run` always moves itself into a new
/// `app-flatpak-<id>-<pid>.scope`, so a Flatpak app started at login shows up as an autostart
/// service and then, a moment later, as a scope of its own, which is no more the user's doing.
///
/// The engine keeps the units the autostart started (`followers`) in the store too, so that an
/// agent that restarts while they run (an upgrade, a crash) still knows them: by then their
/// autostart unit has gone, and the scope alone looks like an app the user opened.
/// Pure, with the time passed in.
struct SessionStartedUnits: Sendable {
    /// How soon after an app's autostart unit another unit of the same app counts as part of it.
    static let followSeconds: Double = 10
    /// A bound on the units remembered, so that a manager that never sends `UnitRemoved` cannot
    /// grow them without end.
    static let maximumUnits = 4096

    /// When each app's autostart unit last appeared, for `followSeconds`.
    private var autostartedAt: [AppID: Double] = [:]
    /// Units that are not autostart units but were started by one (the Flatpak scopes), while they run.
    private(set) var followers: Set<String> = []

    init() {}

    /// Units an earlier run of the agent recorded (the store's), at start.
    mutating func restore(_ units: [String]) {
        followers = Set(units.prefix(Self.maximumUnits))
    }

    /// Keeps, of the units started by the session, those among `running` (the units the user
    /// manager runs when the agent connects): the others are gone. Returns whether any was.
    mutating func keepOnly(running: Set<String>) -> Bool {
        let kept = followers.intersection(running)
        defer { followers = kept }
        return kept.count != followers.count
    }

    /// Whether `event`, which came at `time`, is the session's doing rather than the user's: an
    /// autostart unit appearing or going, a unit of the same app appearing within
    /// `followSeconds` after its autostart unit did, or such a unit going.
    mutating func isSessionStart(_ event: AppUnitEvent, at time: Double) -> Bool {
        switch event.change {
        case .opened:
            if event.autostart {
                if autostartedAt.count >= 64 { autostartedAt = autostartedAt.filter { time - $0.value <= Self.followSeconds } }
                if autostartedAt.count < Self.maximumUnits { autostartedAt[event.appID] = time }
                return true
            }
            guard let started = autostartedAt[event.appID], time >= started, time - started <= Self.followSeconds else {
                return false
            }
            if followers.count < Self.maximumUnits { followers.insert(event.unit) }
            return true
        case .closed:
            return followers.remove(event.unit) != nil || event.autostart
        }
    }

    /// Whether the app unit `unit` (a registering process's) was started by the session.
    func contains(unit: String) -> Bool {
        AppIdentityParser.isAutostartUnit(unit) || followers.contains(unit)
    }
}

extension SessionStartedUnits {
    /// Forgets `appID` (`TaskEngine.forgetApp`): its autostart unit's appearance and its units
    /// started by the session.
    mutating func forget(_ appID: AppID) {
        autostartedAt[appID] = nil
        followers = followers.filter { AppIdentityParser.appID(fromUnitName: $0) != appID }
    }
}
