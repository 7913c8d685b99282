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
    /// The refreshes the policy made, in time order.
    public static func run(_ trace: UsageTrace, policy: inout some ReplayPolicy) -> [ReplayRefresh] {
        var refreshes: [ReplayRefresh] = []
        run(trace, policy: &policy) { refreshes.append($0) }
        return refreshes
    }

    /// Hands each refresh the policy makes to `made`, in time order, as it is made.
    public static func run(_ trace: UsageTrace, policy: inout some ReplayPolicy,
                           each made: (ReplayRefresh) -> Void) {
        guard let span = trace.span else { return }
        var now = span.start.nextDown
        var index = 0
        let events = trace.events
        while true {
            let eventTime = index < events.count ? events[index].time : Double.infinity
            if let wake = policy.nextWake(after: now), wake > now, wake <= eventTime, wake <= span.end {
                now = wake
                var apps = policy.wake(at: wake)
                // Each app once, resubmitted in sorted order. A list sorted already (`periodic`'s:
                // every app of the trace, at every wake) is taken as it is.
                let sorted = zip(apps, apps.dropFirst()).allSatisfy { $0 < $1 }
                if !sorted {
                    var seen = Set<String>()
                    apps.removeAll { !seen.insert($0).inserted }
                }
                for app in apps { made(ReplayRefresh(time: wake, appID: app)) }
                for app in sorted ? apps : apps.sorted() { policy.resubmitted(appID: app, at: wake) }
                continue
            }
            guard index < events.count else { break }
            let event = events[index]
            index += 1
            now = event.time
            policy.observe(event)
            if event.kind == .open { policy.resubmitted(appID: event.appID, at: event.time) }
        }
    }
}
