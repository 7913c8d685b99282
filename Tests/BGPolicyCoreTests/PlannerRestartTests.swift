@testable import BGPolicyCore
import Testing

/// The agent restarts at every login, on updates, and after a crash. The planner learns its
/// models again from the usage log, and takes back the rest from a `RefreshPlanner.Snapshot`:
/// a restart must not refresh an app again at once, reset the bound on wake-ups, refill the
/// budget, or start the thresholds over. Nor must a step of the wall clock move how long ago
/// the last refreshes and wake-ups were.
@Suite("RefreshPlanner across restarts and clock steps")
struct PlannerRestartTests {
    static let monday = WakeUpCountTests.monday
    static let mail = WakeUpCountTests.mail, news = WakeUpCountTests.news
    /// Day 21 at 09:00: Mail's habitual open comes at 09:05, so a window refreshes it.
    static let nine = monday + 21 * 86_400 + 9 * 3600
    static let candidates = [RefreshPlanner.Candidate(appID: mail), RefreshPlanner.Candidate(appID: news)]

    /// The agent's start: the same three weeks of opens learned again, advanced to `now`, and
    /// `snapshot` restored if given.
    static func restarted(at now: Double, from snapshot: RefreshPlanner.Snapshot?) -> RefreshPlanner {
        var planner = WakeUpCountTests.planner()
        planner.adaptsThresholds = false
        planner.advance(to: now)
        planner.adaptsThresholds = true
        if let snapshot { planner.restore(snapshot, at: now) }
        return planner
    }

    /// Mail first. (News goes too: nothing was refreshed in the three weeks learned, so the pool
    /// is full and the app threshold low, and a window may take two refreshes.)
    @Test func theWindowAtNineRefreshesMail() {
        var planner = WakeUpCountTests.planner()
        planner.advance(to: Self.nine)
        #expect(planner.choose(at: Self.nine, among: Self.candidates).first == Self.mail)
    }

    /// Mail was refreshed at 09:00; the agent restarts at 09:05. Its next refresh may come at
    /// 09:15, as without the restart; a planner that forgot would refresh it at once.
    @Test func aRefreshIntervalOutlivesARestart() throws {
        var before = WakeUpCountTests.planner()
        before.advance(to: Self.nine)
        before.recordWindow(at: Self.nine, refreshed: [Self.mail])
        let snapshot = try #require(before.snapshot())
        #expect(snapshot.lastRefresh == [Self.mail: Self.nine])
        #expect(snapshot.wakes == [Self.nine])

        let at = Self.nine + 300
        let after = Self.restarted(at: at, from: snapshot)
        let mail = RefreshPlanner.Candidate(appID: Self.mail)
        #expect(after.ineligibility(of: mail, at: at) == .tooSoon(until: Self.nine + 900))
        #expect(after.choose(at: at, among: [mail], opportunistic: true).isEmpty)
        // Forgotten, it would go again.
        #expect(Self.restarted(at: at, from: nil).ineligibility(of: mail, at: at) == nil)
    }

    /// A refresh is kept as long as an interval can look back to it: a day, or more with a
    /// longer `[refresh] min_interval` (6 h, 48 h for an app in the worst standing).
    @Test func aRefreshIsKeptAsLongAsItsIntervalCanHoldTheNext() throws {
        var planner = WakeUpCountTests.planner()
        planner.advance(to: Self.nine)
        planner.recordWindow(at: Self.nine, refreshed: [Self.mail])
        planner.advance(to: Self.nine + 30 * 3600)
        #expect(try #require(planner.snapshot()).lastRefresh.isEmpty)
        planner.minRefreshIntervalSeconds = 6 * 3600
        #expect(try #require(planner.snapshot()).lastRefresh == [Self.mail: Self.nine])
    }

    /// Three wake-ups the evening before (20:00, 21:30, 23:00), with the bound at three: after
    /// a restart no window opens until the first of them is a day old.
    @Test func theBoundOnWakeUpsOutlivesARestart() throws {
        var before = WakeUpCountTests.planner()
        before.maxWakesPerDay = 3
        for hours in [20.0, 21.5, 23.0] {
            let time = Self.monday + 20 * 86_400 + hours * 3600
            before.advance(to: time)
            before.recordWindow(at: time, refreshed: [Self.news])
        }
        before.advance(to: Self.nine)
        let snapshot = try #require(before.snapshot())

        var after = Self.restarted(at: Self.nine, from: snapshot)
        after.maxWakesPerDay = 3
        #expect(after.wakeUps(inDayUpTo: Self.nine) == 3)
        #expect(after.choose(at: Self.nine, among: Self.candidates).isEmpty)
        var forgot = Self.restarted(at: Self.nine, from: nil)
        forgot.maxWakesPerDay = 3
        #expect(forgot.choose(at: Self.nine, among: Self.candidates).first == Self.mail)
        // At 20:00 the wake-up of 20:00 the evening before is a day old, and goes.
        let evening = Self.nine + 11 * 3600
        after.advance(to: evening)
        after.recordWindow(at: evening, refreshed: [Self.news])
        #expect(after.snapshot()?.wakes.count == 3)
    }

    /// The pool is what was left, with what accrued while the agent was stopped (at most a
    /// day's worth), not refilled by the restart; the thresholds are as they were.
    @Test func theBudgetAndTheThresholdsOutliveARestart() throws {
        var before = WakeUpCountTests.planner()
        before.advance(to: Self.nine)
        // Spend the pool down to two refreshes.
        let full = try #require(before.snapshot()).tokens
        #expect(full == 2.2 * 2 && before.budgetPerDay == full && before.budgetLeft == full)
        before.recordWindow(at: Self.nine, refreshed: [Self.mail, Self.news])
        let snapshot = try #require(before.snapshot())
        #expect(abs(snapshot.tokens - (full - 2)) < 1e-9)

        // The same slot: nothing accrued.
        let same = try #require(Self.restarted(at: Self.nine + 600, from: snapshot).snapshot())
        #expect(abs(same.tokens - snapshot.tokens) < 1e-9)
        #expect(abs(same.windowThreshold / snapshot.windowThreshold - 1) < 1e-12)
        #expect(abs(same.appThreshold / snapshot.appThreshold - 1) < 1e-12)
        // An hour later: an hour's accrual (4.4 a day), as a planner that ran throughout has it.
        var ranOn = before
        ranOn.advance(to: Self.nine + 3600)
        let hour = try #require(Self.restarted(at: Self.nine + 3600, from: snapshot).snapshot())
        #expect(abs(hour.tokens - (snapshot.tokens + 4.4 / 24)) < 1e-9)
        #expect(abs(hour.tokens - (ranOn.snapshot()?.tokens ?? 0)) < 1e-9)
        // The thresholds do not adapt to the hour the agent was not running; one that ran on did.
        #expect(abs(hour.windowThreshold / snapshot.windowThreshold - 1) < 1e-12)
        #expect(ranOn.snapshot()?.windowThreshold != snapshot.windowThreshold)
        // Two days later: a day's worth at most.
        let later = try #require(Self.restarted(at: Self.nine + 2 * 86_400, from: snapshot).snapshot())
        #expect(abs(later.tokens - full) < 1e-9)
    }

    /// A restart within the slot of a wake-up: the slot had its window (a grid window does not
    /// open again in it), and its wake-up counts toward the threshold when the slot closes.
    @Test func theSlotUnderWayKeepsItsWakeUp() throws {
        var before = WakeUpCountTests.planner()
        before.advance(to: Self.nine)
        before.recordWindow(at: Self.nine + 10, refreshed: [Self.news])
        let snapshot = try #require(before.snapshot())
        var after = Self.restarted(at: Self.nine + 120, from: snapshot)
        #expect(after.choose(at: Self.nine + 120, among: Self.candidates).isEmpty)
        #expect(after.choose(at: Self.nine + 120, among: Self.candidates, opportunistic: true) == [Self.mail])
        before.advance(to: Self.nine + 900)
        after.advance(to: Self.nine + 900)
        #expect(abs(after.windowThreshold / before.windowThreshold - 1) < 1e-12)
    }

    /// What a damaged file could hold: a threshold that is not a positive number leaves the
    /// starting one, a negative pool counts as empty, and times after now (the clock was set
    /// back) count as now.
    @Test func implausibleValuesAreTakenSafely() throws {
        let fresh = try #require(Self.restarted(at: Self.nine, from: nil).snapshot())
        let damaged = RefreshPlanner.Snapshot(
            slotStart: Self.nine, windowThreshold: .nan, appThreshold: -1, tokens: -5,
            wakes: [Self.nine + 7200, .infinity], lastRefresh: [Self.mail: Self.nine + 7200])
        let after = Self.restarted(at: Self.nine, from: damaged)
        let restored = try #require(after.snapshot())
        #expect(restored.windowThreshold == fresh.windowThreshold)
        #expect(restored.appThreshold == fresh.appThreshold)
        #expect(restored.tokens == 0)
        #expect(restored.wakes == [Self.nine])
        #expect(after.ineligibility(of: RefreshPlanner.Candidate(appID: Self.mail), at: Self.nine)
            == .tooSoon(until: Self.nine + 900))
    }

    /// Five minutes after Mail's refresh the clock is set back an hour, or forward: its next
    /// refresh may still come ten minutes later, and the wake-up is still five minutes old.
    /// Not moved, a clock set back would hold it 70 minutes, and one set forward free it.
    @Test func aClockStepMovesTheLastRefreshesWithIt() {
        var planner = WakeUpCountTests.planner()
        planner.advance(to: Self.nine)
        planner.recordWindow(at: Self.nine, refreshed: [Self.mail])
        let mail = RefreshPlanner.Candidate(appID: Self.mail)
        for step in [-3600.0, 3600] {
            var stepped = planner
            let now = Self.nine + 300 + step
            stepped.wallClockStepped(by: step, now: now)
            #expect(stepped.ineligibility(of: mail, at: now) == .tooSoon(until: Self.nine + 900 + step))
            #expect(stepped.wakeUps(inDayUpTo: now) == 1)
            #expect(stepped.wakeUps(inDayUpTo: now + 86_400 - 301) == 1)
            #expect(stepped.wakeUps(inDayUpTo: now + 86_400 - 299) == 0)
        }
        #expect(planner.ineligibility(of: mail, at: Self.nine + 300 - 3600) == .tooSoon(until: Self.nine + 900))
        #expect(planner.ineligibility(of: mail, at: Self.nine + 300 + 3600) == nil)
    }

    /// Mail's refresh is recorded at 09:00 and its delivery fails after the clock was set twice
    /// (back an hour, then forward 20 min and a fraction): the agent names the refresh in the
    /// clock's present scale (the recorded time plus the steps, summed in its own order), and the
    /// planner takes it back. Named by the time it was recorded, it would stay.
    @Test func aRefreshThatDidNotRunIsTakenBackAfterAClockStep() {
        var planner = WakeUpCountTests.planner()
        planner.advance(to: Self.nine)
        planner.recordWindow(at: Self.nine, refreshed: [Self.mail])
        let mail = RefreshPlanner.Candidate(appID: Self.mail)
        let steps = [-3600.0, 1200.1]
        var clock = Self.nine + 60
        for step in steps {
            clock += step
            planner.wallClockStepped(by: step, now: clock)
        }
        let shift = (Self.nine + steps[0] + steps[1]) - Self.nine
        let now = Self.nine + 60 + shift
        var unmoved = planner
        unmoved.refreshDidNotRun(Self.mail, recordedAt: Self.nine)
        guard case .tooSoon(let until)? = unmoved.ineligibility(of: mail, at: now) else {
            Issue.record("Mail's refresh, named by the time it was recorded, should still hold it")
            return
        }
        #expect(abs(until - (Self.nine + 900 + shift)) < 0.001)
        planner.refreshDidNotRun(Self.mail, recordedAt: Self.nine + shift)
        #expect(planner.ineligibility(of: mail, at: now) == nil)
        #expect(planner.budgetLeft == unmoved.budgetLeft + 1)
    }
}
