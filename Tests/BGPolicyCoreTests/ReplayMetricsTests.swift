@testable import BGPolicyCore
import Testing

/// A small trace whose figures are worked out by hand (Docs/Replay.md, "A worked example").
/// D is the start of the scored span (7 days after the first event at 0); the trace ends at
/// D + 1 day, so per-day figures divide by exactly 1.
enum SyntheticTrace {
    static let d: Double = 7 * 86_400
    static let text = """
        timestamp,app_id,event
        0,a,open
        60.5,a,close
        \(Int(d) + 1000),a,open
        \(Int(d) + 1100),a,close
        \(Int(d) + 4000),b,open
        \(Int(d) + 4100),b,close
        \(Int(d) + 7300),a,open
        \(Int(d) + 86_400),b,close

        """
    static var trace: UsageTrace { try! UsageTrace.parse(text) }
}

@Suite("ReplayMetrics")
struct ReplayMetricsTests {
    typealias Figures = (wakeups: Double, refreshes: Double, fresh5: Double, fresh15: Double, median: Double, wasted: Double)

    static func check(_ m: ReplayMetrics, _ f: Figures) {
        #expect(abs(m.wakeupsPerDay - f.wakeups) < 1e-9)
        #expect(abs(m.refreshesPerDay - f.refreshes) < 1e-9)
        #expect(abs(m.freshness5m - f.fresh5) < 1e-9)
        #expect(abs(m.freshness15m - f.fresh15) < 1e-9)
        #expect(abs(m.medianStalenessSeconds - f.median) < 1e-9)
        #expect(abs(m.wastedFraction - f.wasted) < 1e-9)
    }

    /// The baselines on the synthetic trace, worked out by hand:
    /// - periodic:1h wakes at every hour; D..D+24h holds 25 of them, each refreshing a and b.
    ///   Opens: a at D+1000 (last refresh D: 1000 s, stale for both windows), b at D+4000
    ///   (D+3600: 400 s, fresh for 15 min only), a at D+7300 (D+7200: 100 s, fresh). Of the 50
    ///   refreshes, three are followed by an open before the app's next one.
    /// - oracle:10m refreshes at open − 600: a at D+400 and D+6700, b at D+3400 (a's at −600
    ///   is before the trace). Every open is fresh for 15 min, none for 5; nothing is wasted.
    /// - oracle:0s refreshes at the instant of each open, which counts as before it.
    /// - periodic:1d wakes at D and D+1d (both multiples of a day since the epoch): a's and b's
    ///   refreshes at D are each followed by an open, the two at the end by none; staleness
    ///   1000, 4000, 7300.
    static let baselines: [(policy: String, figures: Figures)] = [
        ("periodic:60m", (25, 50, 1.0 / 3, 2.0 / 3, 400, 47.0 / 50)),
        ("periodic:1h", (25, 50, 1.0 / 3, 2.0 / 3, 400, 47.0 / 50)),
        ("oracle:10m", (3, 3, 0, 1, 600, 0)),
        ("oracle:0s", (3, 3, 1, 1, 0, 0)),
        ("periodic:1d", (2, 4, 0, 0, 4000, 0.5)),
    ]

    @Test(arguments: baselines)
    func baselineOnTheSyntheticTrace(_ example: (policy: String, figures: Figures)) throws {
        let choice = try ReplayPolicyChoice(parsing: example.policy)
        Self.check(choice.metrics(over: SyntheticTrace.trace), example.figures)
    }

    @Test func periodicRefreshesEveryAppOnOneAlignedTimer() throws {
        let refreshes = try ReplayPolicyChoice(parsing: "periodic:1h").refreshes(over: SyntheticTrace.trace)
        #expect(refreshes.allSatisfy { $0.time.truncatingRemainder(dividingBy: 3600) == 0 })
        #expect(refreshes.first == ReplayRefresh(time: 0, appID: "a"))
        // Both apps from the start, though b is first opened on day 8.
        #expect(refreshes.prefix(2).map(\.appID) == ["a", "b"])
        #expect(refreshes.count == 2 * (7 * 24 + 24 + 1))
    }

    @Test func theFiguresDoNotDependOnTheOrderTheRefreshesComeIn() throws {
        // In time order (a replay's), read where they are; in any other, sorted first.
        let d = SyntheticTrace.d
        let inOrder = try ReplayPolicyChoice(parsing: "periodic:1h").refreshes(over: SyntheticTrace.trace)
            + [ReplayRefresh(time: d + 7300, appID: "a"), ReplayRefresh(time: d + 7300, appID: "b")]
        let sorted = inOrder.sorted { ($0.time, $0.appID) < ($1.time, $1.appID) }
        let figures = ReplayMetrics.compute(trace: SyntheticTrace.trace, refreshes: sorted)
        #expect(figures.freshness15m > 0 && figures.wastedFraction > 0)
        #expect(ReplayMetrics.compute(trace: SyntheticTrace.trace, refreshes: sorted.reversed()) == figures)
        var swapped = sorted
        swapped.swapAt(0, swapped.count - 1)
        #expect(ReplayMetrics.compute(trace: SyntheticTrace.trace, refreshes: swapped) == figures)
    }

    @Test func refreshesWithin60SecondsOfTheFirstAreOneWakeup() {
        let d = SyntheticTrace.d
        let refreshes = [0, 30, 60, 61, 200, 200].enumerated().map { i, t in
            ReplayRefresh(time: d + Double(t), appID: i == 5 ? "b" : "a")
        }
        let m = ReplayMetrics.compute(trace: SyntheticTrace.trace, refreshes: refreshes)
        #expect(m.wakeupsPerDay == 3)
        #expect(m.refreshesPerDay == 6)
    }

    @Test func anOpenWithNoEarlierRefreshIsStaleSinceTheTraceBegan() {
        let d = SyntheticTrace.d
        let m = ReplayMetrics.compute(trace: SyntheticTrace.trace, refreshes: [])
        // Staleness d+1000, d+4000, d+7300: the median is b's.
        Self.check(m, (0, 0, 0, 0, d + 4000, 0))
        #expect(m.scoredOpens == 3)
        // A refresh after an open does not make it fresh.
        let late = ReplayMetrics.compute(trace: SyntheticTrace.trace, refreshes: [ReplayRefresh(time: d + 1001, appID: "a")])
        #expect(late.freshness15m == 0)
    }

    @Test func theLastRefreshIsWastedUnlessAnOpenFollowsBeforeTheEnd() {
        let d = SyntheticTrace.d
        // a: D+7300 is followed by the open at the same instant; D+8000 by nothing. b: D+5000
        // by nothing (b's open was before it).
        let refreshes = [ReplayRefresh(time: d + 7300, appID: "a"), ReplayRefresh(time: d + 8000, appID: "a"),
                         ReplayRefresh(time: d + 5000, appID: "b")]
        let m = ReplayMetrics.compute(trace: SyntheticTrace.trace, refreshes: refreshes)
        #expect(abs(m.wastedFraction - 2.0 / 3) < 1e-12)
        // The refresh at D+7300 is superseded by none before a's open at D+7300: fresh, 0 s.
        #expect(m.freshness5m == 1.0 / 3)
    }

    @Test func anEvenCountHasTheMeanOfTheMiddleTwoAsMedian() throws {
        let trace = try UsageTrace.parse("timestamp,app_id,event\n0,a,open\n\(7 * 86_400 + 100),a,open\n\(7 * 86_400 + 400),a,open\n")
        let m = ReplayMetrics.compute(trace: trace, refreshes: [ReplayRefresh(time: 7 * 86_400, appID: "a")])
        #expect(m.medianStalenessSeconds == 250)
        #expect(m.refreshesPerDay == 86_400.0 / 400)
    }

    @Test func aTraceNoLongerThanTheWarmUpScoresNothing() throws {
        let trace = try UsageTrace.parse("timestamp,app_id,event\n0,a,open\n\(7 * 86_400),a,open\n")
        let m = try ReplayPolicyChoice(parsing: "periodic:15m").metrics(over: trace)
        #expect(m.values.allSatisfy { $0 == 0 })
        // The open at exactly 7 days is in no span: none is scored (what replay's note reads).
        #expect(m.scoredOpens == 0)
    }

    @Test(arguments: ["bgpolicy", "periodic:15m", "periodic:1h", "oracle:10m"])
    func aReplayScoredAsItIsMadeHasTheFiguresOfItsRefreshesHeld(_ policy: String) throws {
        // metrics(over:) scores each refresh as the driver makes it; compute(trace:refreshes:)
        // scores the whole list, here in reverse (so sorted first). The routine trace has
        // opens at the instants of refreshes (oracle's), closes, and five weeks.
        let choice = try ReplayPolicyChoice(parsing: policy)
        let trace = PredictivePolicyTests.routine
        let held = choice.refreshes(over: trace)
        #expect(held.count > 30)
        let streamed = choice.metrics(over: trace)
        #expect(streamed == ReplayMetrics.compute(trace: trace, refreshes: held))
        #expect(streamed == ReplayMetrics.compute(trace: trace, refreshes: held.reversed()))
        #expect(streamed.scoredOpens > 0 && streamed.refreshesPerDay > 0)
    }

    /// A policy whose every wake refreshes the apps it is given, as given.
    struct Scripted: ReplayPolicy {
        var wakes: [(time: Double, apps: [String])]
        var resubmissions: [String] = []
        mutating func observe(_ event: UsageEvent) {}
        mutating func resubmitted(appID: String, at time: Double) {
            if wakes.contains(where: { $0.time == time }) { resubmissions.append(appID) }
        }
        mutating func nextWake(after time: Double) -> Double? { wakes.first { $0.time > time }?.time }
        mutating func wake(at time: Double) -> [String] { wakes.first { $0.time == time }?.apps ?? [] }
    }

    @Test func aWakeRefreshesEachAppOnceAndResubmitsThemSorted() {
        let d = SyntheticTrace.d
        var policy = Scripted(wakes: [(d, ["b", "a", "b", "c", "a"]), (d + 10, ["a", "b", "c"])])
        let refreshes = ReplayDriver.run(SyntheticTrace.trace, policy: &policy)
        // Made in the policy's order, each app once; resubmitted in sorted order.
        #expect(refreshes.map(\.appID) == ["b", "a", "c", "a", "b", "c"])
        #expect(refreshes.map(\.time) == [d, d, d, d + 10, d + 10, d + 10])
        #expect(policy.resubmissions == ["a", "b", "c", "a", "b", "c"])
    }

    @Test func sortedStringsStayASortedSet() {
        var set = SortedStrings()
        for s in ["m", "b", "z", "b", "a", "m"] { set.insert(s) }
        #expect(set.elements == ["a", "b", "m", "z"])
        set.remove("m")
        set.remove("q")
        #expect(set.elements == ["a", "b", "z"])
        #expect(set.contains("z") && set.contains("a") && !set.contains("m") && !set.contains("c"))
        // The order of Swift's String comparison, as Set.sorted() gives it.
        let names = ["org.gnome.Évolution", "org.gnome.Evolution", "Z", "a", "org.kde.kmail2", "org.gnome.Maps"]
        var more = SortedStrings()
        for n in names { more.insert(n) }
        #expect(more.elements == Set(names).sorted())
    }
}
