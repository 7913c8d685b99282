/// One completed refresh in a replay.
public struct ReplayRefresh: Sendable, Equatable {
    public let time: Double
    public let appID: String
    public init(time: Double, appID: String) {
        self.time = time
        self.appID = appID
    }
}

/// Runs a `ReplayPolicy` over a trace in virtual time.
///
/// Order: the replay runs from the first to the last event of the trace. A wake that falls at
/// the same instant as an event happens first (so a refresh at the instant of an open counts as
/// before it). Wakes outside `[first event, last event]` do not happen. The driver asks again
/// for the next wake after every event and every wake, so a policy may change its plan at any
/// of them.
public enum ReplayDriver {
    public static func run(_ trace: UsageTrace, policy: inout some ReplayPolicy) -> [ReplayRefresh] {
        guard let span = trace.span else { return [] }
        var refreshes: [ReplayRefresh] = []
        var now = span.start.nextDown
        var index = 0
        let events = trace.events
        while true {
            let eventTime = index < events.count ? events[index].time : Double.infinity
            if let wake = policy.nextWake(after: now), wake > now, wake <= eventTime, wake <= span.end {
                now = wake
                var seen = Set<String>()
                for app in policy.wake(at: wake) where seen.insert(app).inserted {
                    refreshes.append(ReplayRefresh(time: wake, appID: app))
                }
                for app in seen.sorted() { policy.resubmitted(appID: app, at: wake) }
                continue
            }
            guard index < events.count else { break }
            let event = events[index]
            index += 1
            now = event.time
            policy.observe(event)
            if event.kind == .open { policy.resubmitted(appID: event.appID, at: event.time) }
        }
        return refreshes
    }
}
