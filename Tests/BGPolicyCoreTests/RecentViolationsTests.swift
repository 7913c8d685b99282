import BGPolicyCore
import Testing

@Suite("RecentViolations: a violation counts for 7 days, however long the agent runs")
struct RecentViolationsTests {
    let day = 86_400.0
    let start = 1_000_000_000.0

    @Test func violationsOfOneLongRunAgeOutAsTimePasses() {
        // Overruns on the 1st, the 15th and the 30th day of one run: one counts on the 30th.
        var violations = RecentViolations()
        for overrunDay in [1.0, 15, 30] {
            violations.advance(to: start + overrunDay * day - 60)
            violations.record(at: start + overrunDay * day)
            #expect(violations.count == 1)
        }
        #expect(violations.last == start + 30 * day)
        // A second within the week counts beside it; both go a week after each.
        violations.record(at: start + 33 * day)
        #expect(violations.count == 2)
        violations.advance(to: start + 37 * day)
        #expect(violations.times == [start + 30 * day, start + 33 * day])
        let changed = violations.advance(to: start + 37 * day + 1)
        #expect(changed)
        #expect(violations.times == [start + 33 * day])
        violations.advance(to: start + 40 * day + 1)
        #expect(violations.count == 0 && violations.last == nil)
    }

    @Test func aViolationExactlySevenDaysOldStillCountsAsTheStoreCountsIt() {
        var violations = RecentViolations([start], now: start + 7 * day)
        #expect(violations.count == 1)
        let changed = violations.advance(to: start + 7 * day)
        #expect(!changed)
        violations.advance(to: start + 7 * day + 0.5)
        #expect(violations.count == 0)
    }

    @Test func theTimesReadAtStartAreSortedAndThoseOlderThanAWeekDropped() {
        let now = start + 10 * day
        let violations = RecentViolations([start + 9 * day, start, start + 4 * day, start + 9 * day], now: now)
        // Two at one time are two (a slice that overran and was throttled): the store gives
        // one per distinct time and event.
        #expect(violations.times == [start + 4 * day, start + 9 * day, start + 9 * day])
        #expect(violations.last == start + 9 * day)
    }

    @Test func aClockSetBackWhileTheAgentWasStoppedCountsFromTheStart() {
        // Rows from a clock a year ahead, read when it is right again: they count for a week
        // from now, not until the clock comes back to them.
        let now = start
        var violations = RecentViolations([now + 365 * day, now + 365 * day + 60], now: now)
        #expect(violations.times == [now, now])
        violations.advance(to: now + 7 * day - 1)
        #expect(violations.count == 2)
        violations.advance(to: now + 7 * day + 1)
        #expect(violations.count == 0)
    }

    @Test func aClockSetBackUnheardCountsFromWhenItIsSeen() {
        var violations = RecentViolations()
        violations.record(at: start)
        // The clock goes back 30 days and nobody tells: the violation is taken as now then.
        let seen = start - 30 * day
        let changed = violations.advance(to: seen)
        #expect(changed)
        #expect(violations.times == [seen])
        violations.advance(to: seen + 8 * day)
        #expect(violations.count == 0)
        // A new violation also ends the ones that look later than it.
        violations.record(at: start)
        violations.record(at: start - 10 * day)
        #expect(violations.times == [start - 10 * day, start - 10 * day])
    }

    @Test func aStepTheAgentHearsMovesEveryViolationWithTheClock() {
        var violations = RecentViolations()
        violations.record(at: start)
        violations.record(at: start + day)
        // Set 2 days back, then 5 days on: each stays as long ago as it was.
        violations.wallClockStepped(by: -2 * day)
        #expect(violations.times == [start - 2 * day, start - day])
        let changed = violations.advance(to: start - day + 60)
        #expect(!changed)
        violations.wallClockStepped(by: 5 * day)
        #expect(violations.times == [start + 3 * day, start + 4 * day])
        violations.advance(to: start + 10 * day + 1)
        #expect(violations.times == [start + 4 * day])
    }
}
