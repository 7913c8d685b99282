@testable import BGPolicyCore
import Testing

/// The user-level model (`ActivityEstimator`, through `UsagePredictor.probabilityOfAnyOpen`) and
/// the window decision of `RefreshPlanner` built on it.
@Suite("Planning: activity and windows")
struct PlanningActivityTests {
    static let day: Double = 86_400
    static let monday = UsagePredictorTests.monday

    /// Sessions at random times: each day four sessions start at random minutes between 08:00
    /// and 23:00; in a session an app is opened every `spacing` seconds, and the session goes on
    /// with probability 0.7 after each open (at most 8 opens); the first app of a session is
    /// Mail or Chat, the next ones mostly the app before. Deterministic (a fixed LCG).
    static func sessions(days: Int = 42, spacing: Double) -> UsageTrace {
        var state: UInt64 = 0x5eed
        func random() -> Double {
            state = state &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
            return Double(state >> 11) / Double(UInt64(1) << 53)
        }
        let apps = ["org.example.Mail", "org.example.Chat", "org.example.News", "org.example.Maps",
                    "org.example.Music", "org.example.Notes"]
        var opens: [(Double, String)] = []
        for d in 0..<days {
            for _ in 0..<4 {
                var t = monday + Double(d) * day + 8 * 3600 + (random() * 15 * 60).rounded(.down) * 60
                var app = apps[Int(random() * 2)]
                for _ in 0..<8 {
                    opens.append((t, app))
                    guard random() < 0.7 else { break }
                    t += spacing
                    if random() < 0.4 { app = apps[Int(random() * Double(apps.count))] }
                }
            }
        }
        opens.sort { ($0.0, $0.1) < ($1.0, $1.1) }
        var events: [UsageEvent] = []
        for (t, app) in opens {
            events.append(UsageEvent(time: t, appID: app, kind: .open))
            events.append(UsageEvent(time: t + 30, appID: app, kind: .close))
        }
        events.sort { $0.time < $1.time }
        return UsageTrace(events: events)
    }

    @Test func learnsTheQuarterHourOfARoutineNotJustTheHour() {
        // Something is opened at 08:50 every day for three weeks: the 08:45 slot, not the rest
        // of the hour, is where a window pays.
        var predictor = UsagePredictor()
        let opens = (0..<21).map { (Self.monday + Double($0) * Self.day + 8 * 3600 + 50 * 60, "org.example.News") }
        UsagePredictorTests.feed(&predictor, opens: opens, from: Self.monday, to: Self.monday + 21 * Self.day + 8 * 3600)
        let today = Self.monday + 21 * Self.day
        let quarter = predictor.probabilityOfAnyOpen(inSlotAt: today + 8 * 3600 + 45 * 60)
        let earlier = predictor.probabilityOfAnyOpen(inSlotAt: today + 8 * 3600 + 15 * 60)
        #expect(quarter > 3 * earlier, "08:45 \(quarter), 08:15 \(earlier)")
        #expect(quarter > 0.3, "08:45 \(quarter)")
    }

    @Test func learnsWhenTheNextOpenOfASessionComesWithoutBeingTold() {
        // Opens in a session come every 20 minutes here (every 10 in the next test): the model
        // learns that the slot holding "last open + 20 min" is the likely one.
        let trace = Self.sessions(days: 28, spacing: 1200)
        var predictor = UsagePredictor()
        let opens = trace.events.filter { $0.kind == .open }.map { ($0.time, $0.appID) }
        let end = Self.monday + 28 * Self.day
        UsagePredictorTests.feed(&predictor, opens: opens, from: Self.monday, to: end)
        // An open at 14:05: the 14:15 slot (age 10 min) holds 14:25; the 14:30 slot does not.
        predictor.recordOpen(of: "org.example.Mail", at: end + 14 * 3600 + 300)
        let next = predictor.probabilityOfAnyOpen(inSlotAt: end + 14 * 3600 + 900)
        let after = predictor.probabilityOfAnyOpen(inSlotAt: end + 14 * 3600 + 1800)
        #expect(next > 2 * after, "14:15 \(next), 14:30 \(after)")
    }

    @Test(arguments: [600.0, 1200.0])
    func sessionsAtRandomTimesAreServedFromRecency(spacing: Double) {
        // No time of day predicts these sessions; only that one open follows another does. The
        // budget (2.2 refreshes a day for each of six apps) allows about one refresh per open.
        let trace = Self.sessions(spacing: spacing)
        let bgpolicy = ReplayPolicyChoice.bgpolicy.metrics(over: trace)
        let periodic = ReplayPolicyChoice.periodic(seconds: 3600).metrics(over: trace)
        #expect(bgpolicy.freshness15m >= 1.1 * periodic.freshness15m, "\(bgpolicy) vs \(periodic)")
        #expect(bgpolicy.wakeupsPerDay <= periodic.wakeupsPerDay)
        #expect(bgpolicy.refreshesPerDay <= 0.1 * periodic.refreshesPerDay, "\(bgpolicy)")
        #expect(bgpolicy.wastedFraction <= 0.5, "\(bgpolicy)")
    }

    @Test func replaysAreDeterministic() {
        let trace = Self.sessions(days: 21, spacing: 1200)
        let first = ReplayPolicyChoice.bgpolicy.refreshes(over: trace)
        let second = ReplayPolicyChoice.bgpolicy.refreshes(over: trace)
        #expect(!first.isEmpty)
        #expect(first == second)
    }

    @Test func aWindowNeedsItsAppsToCarryTheLikelyOpens() {
        // A planner that has learned a routine opens a window before the routine's open when the
        // routine's app is a candidate, and not for an app that is never opened then.
        var planner = RefreshPlanner(registeredAppCount: 2)
        for d in 0..<21 {
            planner.recordOpen(of: "org.example.News", at: Self.monday + Double(d) * Self.day + 7 * 3600 + 25 * 60)
            planner.recordOpen(of: "org.example.Chat", at: Self.monday + Double(d) * Self.day + 20 * 3600 + 40 * 60)
        }
        let now = Self.monday + 21 * Self.day + 3600
        planner.advance(to: now)
        let news = planner.nextWindow(after: now, among: [.init(appID: "org.example.News")], horizon: 12 * 3600)
        let window = try! #require(news)
        #expect(window.apps == ["org.example.News"])
        // Within half an hour before the 07:25 open, never after it.
        let today = Self.monday + 21 * Self.day
        #expect(window.time >= today + 7 * 3600 && window.time <= today + 7 * 3600 + 25 * 60, "\(window.time - today)")
        // Chat alone: nothing worth a window until its own evening open.
        let chat = planner.nextWindow(after: now, among: [.init(appID: "org.example.Chat")], horizon: 12 * 3600)
        #expect(chat == nil)
    }
}
