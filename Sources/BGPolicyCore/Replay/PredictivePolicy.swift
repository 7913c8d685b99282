/// The `bgpolicy` refresh policy in replay: the agent's `RefreshPlanner` on a virtual clock.
///
/// Windows open on the 15-min grid (SPEC §2, on battery; aligned to the Unix epoch), and a
/// second after each open, as the agent opens one when an app is opened (the user is at work;
/// a replay has no unlock, charger or network events). In each window the apps with a pending
/// refresh request (each app resubmits after each open and each refresh) are the candidates, all
/// in good standing (a trace has no slice results), and the planner chooses among them. A
/// refresh at a grid point serves opens in the next 15 minutes, so its lead before a predicted
/// open is 0–15 min.
public struct PredictivePolicy: ReplayPolicy {
    public var gridSeconds: Double = 900
    public private(set) var planner: RefreshPlanner
    private var pending: Set<String> = []
    /// The window a second after the last open, until it has come.
    private var opportunity: Double?
    /// Whether windows open after opens (the default, as in the agent).
    public var opportunistic = true

    public init(registeredAppCount: Int = 0) {
        planner = RefreshPlanner(slotSeconds: 900, registeredAppCount: registeredAppCount)
    }

    public mutating func observe(_ event: UsageEvent) {
        if event.kind == .open {
            planner.recordOpen(of: event.appID, at: event.time)
            if opportunistic { opportunity = event.time + 1 }
        }
    }

    public mutating func resubmitted(appID: String, at time: Double) {
        pending.insert(appID)
    }

    public mutating func nextWake(after time: Double) -> Double? {
        var grid = (time / gridSeconds).rounded(.down) * gridSeconds
        while grid <= time { grid += gridSeconds }
        if let opportunity, opportunity > time, opportunity < grid { return opportunity }
        return grid
    }

    public mutating func wake(at time: Double) -> [String] {
        planner.advance(to: time)
        let isOpportunity = time == opportunity
        if isOpportunity { opportunity = nil }
        let candidates = pending.sorted().map { RefreshPlanner.Candidate(appID: $0) }
        let chosen = planner.choose(at: time, among: candidates, opportunistic: isOpportunity)
        planner.recordWindow(at: time, refreshed: chosen)
        for app in chosen { pending.remove(app) }
        return chosen
    }
}
