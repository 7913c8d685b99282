/// `oracle:<lead>`: with hindsight, refreshes each app exactly `lead` before each of its opens.
/// Opens of one app at the same instant get one refresh; a refresh that would fall before the
/// trace's first event does not happen (no open it serves is scored).
public struct OraclePolicy: ReplayPolicy {
    /// (time, apps) in time order.
    private let plan: [(time: Double, apps: [String])]
    private var cursor = 0

    public init(trace: UsageTrace, lead: Double) {
        var byTime: [Double: Set<String>] = [:]
        for event in trace.events where event.kind == .open {
            byTime[event.time - lead, default: []].insert(event.appID)
        }
        plan = byTime.keys.sorted().map { ($0, byTime[$0]!.sorted()) }
    }

    public mutating func observe(_ event: UsageEvent) {}
    public mutating func resubmitted(appID: String, at time: Double) {}

    public mutating func nextWake(after time: Double) -> Double? {
        while cursor < plan.count, plan[cursor].time <= time { cursor += 1 }
        return cursor < plan.count ? plan[cursor].time : nil
    }

    public mutating func wake(at time: Double) -> [String] {
        guard cursor < plan.count, plan[cursor].time == time else { return [] }
        return plan[cursor].apps
    }
}
