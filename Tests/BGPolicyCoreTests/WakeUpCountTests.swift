@testable import BGPolicyCore
import Testing

/// The refresh planner holds its wake-ups near `targetWakesPerDay` by counting every one, and
/// makes each serve more by adding to a window that opens anyway.
@Suite("Wake-up count")
struct WakeUpCountTests {
    /// Monday 2024-01-08 00:00:00 UTC.
    static let monday = 1_704_672_000.0
    static let mail = "org.example.Mail", news = "org.example.News"

    /// Two apps used every day for three weeks: Mail at 09:05, News at 19:35.
    static func planner() -> RefreshPlanner {
        var planner = RefreshPlanner(registeredAppCount: 2)
        for day in 0..<21 {
            planner.recordOpen(of: mail, at: monday + Double(day) * 86_400 + 9 * 3600 + 300)
            planner.recordOpen(of: news, at: monday + Double(day) * 86_400 + 19 * 3600 + 2100)
        }
        return planner
    }

    /// Eight slots after 10:00 on day 21, each with windows at the given offsets into the slot
    /// (one app each, alternating), then the slot after them begun.
    static func threshold(afterWindowsAt offsets: [Double]) -> Double {
        var planner = planner()
        let start = monday + 21 * 86_400 + 10 * 3600
        for slot in 0..<8 {
            for (k, offset) in offsets.enumerated() {
                let time = start + Double(slot) * 900 + offset
                planner.advance(to: time)
                planner.recordWindow(at: time, refreshed: [k % 2 == 0 ? mail : news])
            }
        }
        planner.advance(to: start + 8 * 900)
        return planner.windowThreshold
    }

    /// The threshold rises by a step for each wake-up, so three a slot raise it twice as many
    /// steps more than one a slot; refreshes within 60 s of a wake-up's first are that wake-up.
    @Test func everyWakeUpCountsTowardTheTarget() {
        let one = Self.threshold(afterWindowsAt: [0])
        let three = Self.threshold(afterWindowsAt: [0, 300, 600])
        let threeAtOnce = Self.threshold(afterWindowsAt: [0, 30, 59])
        let expected = one * ReplayMath.exp(RefreshPlanner.thresholdStep * 2 * 8)
        #expect(abs(three / expected - 1) < 1e-9, "one \(one), three \(three)")
        #expect(abs(threeAtOnce / one - 1) < 1e-9, "one \(one), three within a minute \(threeAtOnce)")
    }

    /// At 08:30 an open in the slot is too unlikely for a window of its own, but a window that
    /// opens anyway (after an open or after use) takes Mail, for its open at 09:05, as a grid
    /// window would: the window's worth is not weighed again. It is the same wake-up.
    @Test func aWindowThatOpensAnywayTakesWhatAGridWindowWould() {
        var planner = Self.planner()
        let at = Self.monday + 21 * 86_400 + 8 * 3600 + 1800
        planner.advance(to: at)
        let mail = RefreshPlanner.Candidate(appID: Self.mail)
        #expect(planner.choose(at: at, among: [mail], opportunistic: true).isEmpty)
        #expect(planner.chooseAlongside(at: at, among: [mail]) == [Self.mail])
        // Not when Mail is not eligible: refreshed 5 minutes ago.
        var refreshed = planner
        refreshed.recordWindow(at: at - 300, refreshed: [Self.mail])
        #expect(refreshed.chooseAlongside(at: at, among: [mail]).isEmpty)
        // A window of News' and Mail alongside it are one wake-up, counted once.
        var joined = planner
        joined.recordWindow(at: at, refreshed: [Self.news])
        joined.recordWindow(at: at, refreshed: [Self.mail])
        var alone = planner
        alone.recordWindow(at: at, refreshed: [Self.news])
        joined.advance(to: at + 900)
        alone.advance(to: at + 900)
        #expect(joined.windowThreshold == alone.windowThreshold)
    }

    /// Where the threshold starts: 0.4 where the wake-up target binds (ten apps' budget, 22
    /// refreshes a day, could fill more than 21 windows), 0.2 where the budget does (one app's
    /// 2.2 a day): there the threshold falls so slowly (its step times 2.2 a day) that from 0.4
    /// it would refuse for weeks the slots the budget is for. Restored values still win.
    @Test func theThresholdStartsLowWhereTheBudgetBinds() throws {
        for (apps, start) in [(1, 0.2), (9, 0.2), (10, 0.4), (87, 0.4)] {
            var planner = RefreshPlanner(registeredAppCount: apps)
            planner.advance(to: Self.monday)
            #expect(abs(planner.windowThreshold - start) < 1e-12, "\(apps) apps: \(planner.windowThreshold)")
        }
        var ten = RefreshPlanner(registeredAppCount: 10)
        ten.advance(to: Self.monday)
        ten.advance(to: Self.monday + 8 * 3600)
        let snapshot = try #require(ten.snapshot())
        var one = RefreshPlanner(registeredAppCount: 1)
        one.advance(to: Self.monday + 8 * 3600)
        one.restore(snapshot, at: Self.monday + 8 * 3600)
        #expect(one.windowThreshold == ten.windowThreshold)
    }

    /// The window threshold falls after each slot without a wake-up, so that the wake-ups keep
    /// up with the target, but not while the user is away: from 48 hours after the last open of
    /// any app it holds, until the next open. Two weeks away used to take it down some 6 log
    /// units, and the machine then woke at nearly every chance for days after the return, while
    /// it climbed back a step per wake-up.
    @Test func theThresholdDoesNotFallWhileTheUserIsAway() {
        var planner = Self.planner()
        // The last open: News on day 20 at 19:35.
        let last = Self.monday + 20 * 86_400 + 19 * 3600 + 2100
        planner.advance(to: last + 86_400)
        let dayAfter = planner.windowThreshold
        planner.advance(to: last + 2 * 86_400 + 900)
        let twoDaysAfter = planner.windowThreshold
        // With two apps the target is their budget, 4.4 wake-ups a day: about 8 % a day down.
        #expect(twoDaysAfter < dayAfter * 0.95, "still falling in the second day: \(dayAfter) → \(twoDaysAfter)")
        planner.advance(to: last + 6 * 86_400)
        #expect(planner.windowThreshold == twoDaysAfter)
        // The wall clock set forward a day, an hour after the last open: the open is still an
        // hour ago, so the threshold falls for two days more, not one.
        var stepped = Self.planner()
        stepped.advance(to: last + 3600)
        stepped.wallClockStepped(by: 86_400, now: last + 3600 + 86_400)
        stepped.advance(to: last + 86_400 + 3 * 86_400)
        var unstepped = Self.planner()
        unstepped.advance(to: last + 86_400 + 3 * 86_400)
        #expect(stepped.windowThreshold < unstepped.windowThreshold * 0.95,
                "stepped \(stepped.windowThreshold), not \(unstepped.windowThreshold)")
        // Back: the next open lets it fall again.
        planner.recordOpen(of: Self.mail, at: last + 6 * 86_400 + 60)
        planner.advance(to: last + 6 * 86_400 + 12 * 3600)
        #expect(planner.windowThreshold < twoDaysAfter * 0.97)
    }

    /// The wall clock set back a day: the planner goes on from the new time, closing slots,
    /// filling the pool and adapting its threshold as one that was not set back does over the
    /// same hours. The slot under way stayed where it was, and until the clock came back to it
    /// (a day later) no slot closed: the pool stayed nearly empty all day.
    @Test func aClockSetBackGoesOnFromTheNewTime() {
        let nine = Self.monday + 21 * 86_400 + 9 * 3600
        var unstepped = Self.planner()
        unstepped.advance(to: nine)
        unstepped.recordWindow(at: nine, refreshed: [Self.mail, Self.news])
        unstepped.recordWindow(at: nine + 120, refreshed: [Self.mail, Self.news])
        var stepped = unstepped
        stepped.wallClockStepped(by: -86_400, now: nine + 120 - 86_400)
        for hour in stride(from: 1.0, through: 20, by: 1) {
            unstepped.advance(to: nine + hour * 3600)
            stepped.advance(to: nine - 86_400 + hour * 3600)
        }
        #expect(unstepped.budgetLeft > 3, "\(unstepped.budgetLeft)")
        #expect(abs(stepped.budgetLeft - unstepped.budgetLeft) < 1e-9, "stepped \(stepped.budgetLeft), not \(unstepped.budgetLeft)")
        #expect(abs(stepped.windowThreshold / unstepped.windowThreshold - 1) < 1e-9,
                "stepped \(stepped.windowThreshold), not \(unstepped.windowThreshold)")
        // What the models measure from moved too: Mail's last open is as long ago as it was.
        #expect(stepped.predictor.lastOpen(of: Self.mail).map { $0 + 86_400 } == unstepped.predictor.lastOpen(of: Self.mail))
    }

    /// The wall clock set back 2 s (an NTP client's step) within the slot, after a window at
    /// 09:05:01: the slot under way stays, so nothing of it happens twice. It went back a slot
    /// for any step back, and the clock's next tick closed the slot under way a second time: the
    /// pool gained a slot's worth, the threshold adapted again, and Mail could get a second
    /// planned window in the slot.
    @Test func aSmallStepBackLeavesTheSlotAsItWas() {
        let nine = Self.monday + 21 * 86_400 + 9 * 3600
        var planner = Self.planner()
        planner.advance(to: nine + 300)
        let mail = RefreshPlanner.Candidate(appID: Self.mail)
        // Without a window in the slot, a planned window would take Mail now.
        #expect(planner.choose(at: nine + 299, among: [mail]) == [Self.mail])
        planner.recordWindow(at: nine + 301, refreshed: [Self.news])
        let budget = planner.budgetLeft, threshold = planner.windowThreshold
        planner.wallClockStepped(by: -2, now: nine + 299)
        planner.advance(to: nine + 299)
        #expect(planner.budgetLeft == budget)
        #expect(planner.windowThreshold == threshold)
        #expect(planner.choose(at: nine + 299, among: [mail]).isEmpty)
        #expect(planner.wakeUps(inDayUpTo: nine + 299) == 1)
        // The slot closes once, when the clock reaches its end.
        var unstepped = Self.planner()
        unstepped.advance(to: nine + 300)
        unstepped.recordWindow(at: nine + 301, refreshed: [Self.news])
        unstepped.advance(to: nine + 900)
        planner.advance(to: nine + 900)
        #expect(planner.budgetLeft == unstepped.budgetLeft)
        #expect(planner.windowThreshold == unstepped.windowThreshold)
    }

    /// Looking ahead a month (a plan, or a refresh held until then) ages the planner as
    /// `advance` does: a week's worth of slots one by one, and a jump over more. Aged slot by
    /// slot, the look-ahead from a time years away went over every slot up to it, and from
    /// past 2^63 s for ever.
    @Test func lookingFarAheadAgesThePlannerAsAdvanceDoes() throws {
        var planner = Self.planner()
        let nine = Self.monday + 21 * 86_400 + 9 * 3600
        planner.advance(to: nine)
        planner.recordWindow(at: nine, refreshed: [Self.mail])
        for days in [3.0, 30] {
            var advanced = planner, planned = planner
            advanced.advance(to: nine + days * 86_400)
            planned.planWindow(at: nine + days * 86_400, refreshing: [])
            let a = try #require(advanced.snapshot()), p = try #require(planned.snapshot())
            #expect(p.slotStart == a.slotStart)
            #expect(p.windowThreshold == a.windowThreshold, "\(days) days")
            #expect(p.appThreshold == a.appThreshold, "\(days) days")
            #expect(p.tokens == a.tokens)
        }
    }

    /// Nor, and neither does the app threshold, while no refresh waits for the planner's choice
    /// (`refreshesWaiting`: the caller's rules hold every request, say a week of power saver, or
    /// none is pending): the slots' want of wake-ups says nothing of either threshold then.
    /// Lowered, the window threshold fell by half in that week here (some 20 times with ten apps
    /// or more, whose target is 21 wake-ups a day), and the machine then woke at every chance
    /// for days while it climbed back a step per wake-up. Once a refresh waits again they adapt
    /// as before.
    @Test func theThresholdsHoldWhileNoRefreshWaits() throws {
        let start = Self.monday + 21 * 86_400 + 10 * 3600
        var waiting = Self.planner()
        waiting.advance(to: start)
        // The app threshold from mid-range: the pool full for three weeks took it to its floor.
        var snapshot = try #require(waiting.snapshot())
        snapshot.appThreshold = 0.01
        waiting.restore(snapshot, at: start)
        var held = waiting
        held.refreshesWaiting = false
        let before = try #require(held.snapshot())
        // A week of power saver, the user opening Mail and News each day as usual.
        for day in 0..<7 {
            let mail = start + Double(day) * 86_400 + 23 * 3600 + 300
            let news = start + Double(day) * 86_400 + 9 * 3600 + 2100
            for (time, app) in [(news, Self.news), (mail, Self.mail)] {
                waiting.recordOpen(of: app, at: time)
                held.recordOpen(of: app, at: time)
            }
        }
        let end = start + 7 * 86_400
        waiting.advance(to: end)
        held.advance(to: end)
        let after = try #require(held.snapshot()), lowered = try #require(waiting.snapshot())
        #expect(after.windowThreshold == before.windowThreshold)
        #expect(after.appThreshold == before.appThreshold)
        #expect(lowered.windowThreshold < before.windowThreshold * 0.7, "\(lowered.windowThreshold)")
        #expect(lowered.appThreshold < before.appThreshold / 10, "\(lowered.appThreshold)")
        // Back: they adapt again.
        held.refreshesWaiting = true
        held.advance(to: end + 86_400)
        #expect(held.windowThreshold < before.windowThreshold * 0.95)
    }

    /// The thresholds stay within a range: adapting (the app threshold fell 0.01 a slot while
    /// the pool stayed full, to 10^-11 in these three weeks, where the window threshold held
    /// the refreshes back) and restored from a damaged store (any positive number was taken).
    @Test func theThresholdsStayWithinTheirRange() throws {
        var planner = Self.planner()
        planner.advance(to: Self.monday + 28 * 86_400)
        let adapted = try #require(planner.snapshot())
        #expect(adapted.appThreshold >= 1e-6 * 0.999_999, "\(adapted.appThreshold)")
        #expect(adapted.windowThreshold >= 1e-4 * 0.999_999 && adapted.windowThreshold <= 1.000_001)
        for (window, app, expected) in [(1e-300, 1e-300, (1e-4, 1e-6)), (1e300, 1e300, (1.0, 10.0))] {
            var restored = planner
            var damaged = adapted
            damaged.windowThreshold = window
            damaged.appThreshold = app
            restored.restore(damaged, at: Self.monday + 28 * 86_400)
            let taken = try #require(restored.snapshot())
            #expect(abs(taken.windowThreshold / expected.0 - 1) < 1e-6, "\(taken.windowThreshold)")
            #expect(abs(taken.appThreshold / expected.1 - 1) < 1e-6, "\(taken.appThreshold)")
        }
    }

    /// Nor while the pool holds less than one refresh: no window could open then, whatever the
    /// threshold, and the threshold it fell to would wake the machine more once the pool refills.
    @Test func theThresholdDoesNotFallWhileThePoolIsEmpty() {
        var planner = Self.planner()
        // The pool holds a day's worth, 2.2 × 2 apps: two windows of both apps leave 0.4, and it
        // gains 4.4 / 96 a slot, so it holds less than one for the next 13 slots.
        let start = Self.monday + 21 * 86_400 + 10 * 3600
        planner.advance(to: start)
        #expect(planner.budgetLeft > 4.3)
        planner.recordWindow(at: start, refreshed: [Self.mail, Self.news])
        planner.recordWindow(at: start + 120, refreshed: [Self.mail, Self.news])
        planner.advance(to: start + 900)
        let afterWindows = planner.windowThreshold
        planner.advance(to: start + 12 * 900)
        #expect(planner.budgetLeft < 1)
        #expect(planner.windowThreshold == afterWindows)
        // Refilled, the slots without a wake-up lower it again.
        planner.advance(to: start + 24 * 900)
        #expect(planner.budgetLeft >= 1)
        #expect(planner.windowThreshold < afterWindows)
    }
}
