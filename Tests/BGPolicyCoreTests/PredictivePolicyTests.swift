import BGPolicyCore
import Testing

@Suite("PredictivePolicy")
struct PredictivePolicyTests {
    /// Three apps opened daily at fixed times, 07:25, 12:40 and 21:35 (and Mail at 09:50 on
    /// weekdays only), for five weeks.
    static var routine: UsageTrace {
        var events: [UsageEvent] = []
        let monday = UsagePredictorTests.monday
        for d in 0..<35 {
            let day = monday + Double(d) * 86_400
            var opens: [(Double, String)] = [(26_700, "org.example.News"), (45_600, "org.example.Chat"),
                                             (77_700, "org.example.News")]
            if d % 7 < 5 { opens.append((35_400, "org.example.Mail")) }
            for (offset, app) in opens.sorted(by: { $0.0 < $1.0 }) {
                events.append(UsageEvent(time: day + offset, appID: app, kind: .open))
                events.append(UsageEvent(time: day + offset + 300, appID: app, kind: .close))
            }
        }
        return UsageTrace(events: events)
    }

    @Test func refreshesOnTheGridOrJustAfterAnOpenOrACloseAtMostOncePer15MinutesPerApp() {
        var policy = PredictivePolicy()
        let trace = Self.routine
        let refreshes = ReplayDriver.run(trace, policy: &policy)
        #expect(!refreshes.isEmpty)
        // A window on the 15-min grid; the one a second after an open, for apps not in use
        // (here the app opened); or the one a second after a close, for the app left.
        let afterOpens = Dictionary(trace.events.filter { $0.kind == .open }.map { ($0.time + 1, $0.appID) }) { a, _ in a }
        let afterCloses = Set(trace.events.filter { $0.kind == .close }.map { "\($0.time + 1) \($0.appID)" })
        #expect(refreshes.allSatisfy { refresh in
            refresh.time.truncatingRemainder(dividingBy: 900) == 0 || afterCloses.contains("\(refresh.time) \(refresh.appID)")
                || afterOpens[refresh.time].map { $0 != refresh.appID } == true
        })
        var last: [String: Double] = [:]
        for refresh in refreshes {
            if let previous = last[refresh.appID] { #expect(refresh.time - previous >= 900) }
            last[refresh.appID] = refresh.time
        }
        // Only apps that were opened (and so have a pending request) are refreshed.
        #expect(Set(refreshes.map(\.appID)).isSubset(of: ["org.example.News", "org.example.Chat", "org.example.Mail"]))
    }

    @Test func learnsARoutineWithFewWakeupsAndLittleWaste() {
        let trace = Self.routine
        let bgpolicy = ReplayPolicyChoice.bgpolicy.metrics(over: trace)
        let periodic = ReplayPolicyChoice.periodic(seconds: 3600).metrics(over: trace)
        // Every open is 25–50 min past the hour, so hourly timers are never fresh for 15 min.
        // The budget allows under two refreshes a day per app, and the policy spends them
        // ahead of the routine: nearly every open is fresh (0.98), in about one window per open.
        #expect(periodic.freshness15m == 0)
        #expect(bgpolicy.freshness15m >= 0.9, "\(bgpolicy)")
        #expect(bgpolicy.wastedFraction <= 0.5, "\(bgpolicy)")
        #expect(bgpolicy.wakeupsPerDay <= periodic.wakeupsPerDay)
        #expect(bgpolicy.refreshesPerDay <= 0.1 * periodic.refreshesPerDay, "\(bgpolicy)")
    }
}
