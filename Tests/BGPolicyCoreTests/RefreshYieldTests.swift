@testable import BGPolicyCore
import Testing

/// What the planner's refreshes have paid (`RefreshPlanner.refreshYield`), and the window after
/// use, which weighs its refresh against it: when the pool runs low in sessions, the app
/// threshold climbs past any forecast, and a refresh of the app just left that pays more than the
/// others still gets its token.
@Suite("RefreshPlanner's refresh yield and the window after use")
struct RefreshYieldTests {
    static let monday = WakeUpCountTests.monday
    static let mail = "org.example.Mail"
    static let news = "org.example.News"

    /// A planner that has watched, for two days, the user leave Mail every hour and come back
    /// within two minutes two times in three, to leave it again for the hour (so two closes in
    /// five are followed by a return within 15 min), and refreshed News every hour, with an open of News five
    /// minutes after each refresh when `newsOpenedAfterRefreshes`. Mail was left a moment ago.
    /// Then its thresholds are set (the window's, and the app threshold), with ten refreshes in
    /// the pool and no wake-ups in the day.
    static func planner(newsOpenedAfterRefreshes: Bool, windowThreshold: Double, appThreshold: Double)
        -> (planner: RefreshPlanner, now: Double)
    {
        var planner = RefreshPlanner(registeredAppCount: 10)
        planner.adaptsThresholds = false
        var time = monday
        planner.recordOpen(of: news, at: time)
        planner.recordClose(of: news, at: time + 30)
        for hour in 0..<48 {
            time = monday + Double(hour) * 3600 + 60
            planner.recordOpen(of: mail, at: time)
            planner.recordClose(of: mail, at: time + 60)
            if hour % 3 != 0 {
                planner.recordOpen(of: mail, at: time + 180)
                planner.recordClose(of: mail, at: time + 240)
            }
            planner.advance(to: time + 600)
            planner.recordWindow(at: time + 600, refreshed: [news])
            if newsOpenedAfterRefreshes {
                planner.recordOpen(of: news, at: time + 900)
                planner.recordClose(of: news, at: time + 960)
            }
        }
        let now = monday + 48 * 3600 + 60
        planner.recordOpen(of: mail, at: now - 120)
        planner.recordClose(of: mail, at: now - 1)
        planner.advance(to: now)
        // As a restart would restore them, with the rest as it is.
        var snapshot = planner.snapshot()!
        snapshot.windowThreshold = windowThreshold
        snapshot.appThreshold = appThreshold
        snapshot.tokens = 10
        snapshot.wakes = []
        planner.restore(snapshot, at: now)
        return (planner, now)
    }

    @Test func theYieldIsTheShareOfRefreshesFollowedByAnOpen() {
        let paying = Self.planner(newsOpenedAfterRefreshes: true, windowThreshold: 0.05, appThreshold: 2).planner
        let wasted = Self.planner(newsOpenedAfterRefreshes: false, windowThreshold: 0.05, appThreshold: 2).planner
        #expect(paying.refreshYield > 0.9, "\(paying.refreshYield)")
        #expect(wasted.refreshYield < 0.1, "\(wasted.refreshYield)")
        // Mail came back within 15 min after two closes in five.
        #expect((0.3...0.5).contains(paying.reuseProbability(of: Self.mail)), "\(paying.reuseProbability(of: Self.mail))")
        #expect(RefreshPlanner().refreshYield == 0.5)
    }

    /// Each row: whether News's refreshes paid, the window's threshold and the app threshold,
    /// and whether the window after Mail's use refreshes it (its chance of a return is about 0.4).
    @Test(arguments: [
        // The pool ran low and the app threshold is out of reach: the others paid little, so
        // Mail's refresh, which pays more, is worth the token.
        (false, 0.05, 2.0, true),
        // The others paid more than Mail's would: the token is kept for them.
        (true, 0.05, 2.0, false),
        // An app threshold within reach lets it through, whatever the others paid.
        (true, 0.05, 0.3, true),
        // The window's threshold (the wake-ups) still holds.
        (false, 0.8, 2.0, false),
    ] as [(Bool, Double, Double, Bool)])
    func theWindowAfterUseWeighsItsRefreshAgainstWhatOthersPaid(
        newsPaid: Bool, windowThreshold: Double, appThreshold: Double, chosen: Bool
    ) {
        let (planner, now) = Self.planner(
            newsOpenedAfterRefreshes: newsPaid, windowThreshold: windowThreshold, appThreshold: appThreshold)
        #expect(planner.choosesAfterUse(RefreshPlanner.Candidate(appID: Self.mail), at: now) == chosen)
    }

    /// A restart keeps what the refreshes paid, through the snapshot the agent stores; a value
    /// that could not have been learned (a damaged file) leaves one half, as on a first start.
    @Test func aRestartKeepsWhatTheRefreshesPaid() throws {
        let (planner, now) = Self.planner(newsOpenedAfterRefreshes: false, windowThreshold: 0.05, appThreshold: 2)
        let snapshot = try #require(planner.snapshot())
        #expect(snapshot.refreshesPaid.trials > 20, "48 refreshes, decayed")
        var restarted = RefreshPlanner(registeredAppCount: 10)
        restarted.advance(to: now)
        #expect(restarted.refreshYield == 0.5)
        restarted.restore(snapshot, at: now)
        #expect(restarted.refreshYield == planner.refreshYield)
        for damaged in [
            DecayingEvidence(trials: .nan, successes: 1), DecayingEvidence(trials: 2, successes: 3),
            DecayingEvidence(trials: 5, successes: -1), DecayingEvidence(trials: .infinity, successes: 1),
        ] {
            var fresh = RefreshPlanner(registeredAppCount: 10)
            fresh.advance(to: now)
            var stored = snapshot
            stored.refreshesPaid = damaged
            fresh.restore(stored, at: now)
            #expect(fresh.refreshYield == 0.5, "\(damaged)")
        }
    }

    /// A refresh after use is not counted (it would raise the bar for its own kind), and one
    /// that did not run teaches nothing.
    @Test func onlyTheRefreshesThatRanOutsideTheWindowAfterUseCount() {
        let made = Self.planner(newsOpenedAfterRefreshes: false, windowThreshold: 0.05, appThreshold: 2)
        var planner = made.planner
        let now = made.now
        let before = planner.refreshYield
        // Mail, refreshed after use, comes back: the yield does not move.
        planner.recordWindow(at: now, refreshed: [Self.mail], afterUse: Self.mail)
        planner.recordOpen(of: Self.mail, at: now + 120)
        planner.advance(to: now + 1800)
        #expect(planner.refreshYield == before)
        // A refresh of News that did not run is not a trial, though News is opened after it.
        planner.recordWindow(at: now + 1800, refreshed: [Self.news])
        planner.refreshDidNotRun(Self.news, recordedAt: now + 1800)
        planner.recordOpen(of: Self.news, at: now + 1900)
        planner.advance(to: now + 3600)
        #expect(planner.refreshYield == before)
        // One that ran and was followed by an open counts.
        planner.recordWindow(at: now + 3600, refreshed: [Self.news])
        planner.recordOpen(of: Self.news, at: now + 3700)
        #expect(planner.refreshYield > before)
    }

    /// Under every-window the planner keeps each app's last refresh, for its interval, and
    /// nothing else of it: the pool, the day's wake-ups and the yield stay as they were, so that
    /// every-window's refreshes, of every app in every window the interval allows, do not leave
    /// them spent and judged for a later switch to predicted. A refresh that did not run gives
    /// back the last one before it, and no token.
    @Test func underEveryWindowOnlyTheLastRefreshesAreKept() {
        let made = Self.planner(newsOpenedAfterRefreshes: false, windowThreshold: 0.05, appThreshold: 2)
        var planner = made.planner
        planner.keepsOnlyLastRefreshes = true
        let now = made.now + 3600
        planner.advance(to: now)
        let (budget, yield, judged, wakes) =
            (planner.budgetLeft, planner.refreshYield, planner.refreshesJudged, planner.wakeUps(inDayUpTo: now))
        let news = RefreshPlanner.Candidate(appID: Self.news, weight: 1)
        let before = planner.refreshIntervalEnd(of: news)
        planner.recordWindow(at: now, refreshed: [Self.mail, Self.news])
        planner.recordOpen(of: Self.news, at: now + 120)
        #expect(planner.refreshIntervalEnd(of: news) == now + planner.minRefreshIntervalSeconds)
        #expect(planner.budgetLeft == budget)
        #expect(planner.wakeUps(inDayUpTo: now + 1) == wakes)
        #expect(planner.refreshYield == yield && planner.refreshesJudged == judged)
        planner.refreshDidNotRun(Self.news, recordedAt: now)
        #expect(planner.refreshIntervalEnd(of: news) == before)
        #expect(planner.budgetLeft == budget)
        // The same window recorded by the predicted strategy's planner spends and counts.
        var predicted = made.planner
        predicted.advance(to: now)
        predicted.recordWindow(at: now, refreshed: [Self.mail, Self.news])
        #expect(predicted.budgetLeft == budget - 2)
        #expect(predicted.wakeUps(inDayUpTo: now + 1) == wakes + 1)
    }
}
