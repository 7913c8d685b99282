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

    /// `refresh.min_interval`'s 15 min doubled per violation after the first, capped at 8 h,
    /// as `RunWhenEligiblePolicy.overrunPenalty` has it by default.
    static func penalty(_ count: Int) -> Double { min(900 * Double(1 << min(count - 1, 20)), 28_800) }

    @Test func thePenaltyShrinksWhenAnOlderViolationAgesOutDuringIt() {
        // Five overruns: one 7 days less an hour before the last four. The count's penalty
        // (4 h) would hold the app until last + 4 h, but an hour after the last the oldest stops
        // counting, and four earn 2 h: the hold ends at last + 2 h.
        let last = start + 10 * day
        let violations = RecentViolations([last - 7 * day + 3600, last - 3, last - 2, last - 1, last], now: last)
        #expect(violations.count == 5)
        #expect(violations.penaltyEnd(Self.penalty) == last + 7200)
    }

    @Test func aPenaltyThatWouldEndBeforeTheAgingEndsWhenTheOldestStopsCounting() {
        // Five overruns earn 4 h. The oldest stops counting 3 h after the last (the moment after
        // it is 7 days old), when four earn 2 h, already past: the hold ends then.
        let last = start + 10 * day
        let oldest = last - 7 * day + 3 * 3600
        let violations = RecentViolations([oldest, last - 3, last - 2, last - 1, last], now: last)
        #expect(violations.penaltyEnd(Self.penalty) == (oldest + 7 * day).nextUp)
        #expect(violations.penaltyEnd(Self.penalty)! < last + Self.penalty(5))
    }

    @Test func withoutAgingThePenaltyIsTheCounts() {
        let last = start + 10 * day
        #expect(RecentViolations([last], now: last).penaltyEnd(Self.penalty) == last + 900)
        #expect(RecentViolations([last - day, last - 1, last], now: last).penaltyEnd(Self.penalty) == last + 3600)
        #expect(RecentViolations().penaltyEnd(Self.penalty) == nil)
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

    @Test func onlyTheNewestUpToTheLimitAreKept() {
        // Eight overruns a minute apart, at most five kept: the newest five, and the penalty
        // theirs (one second per violation here), as a restart reading the five back has it.
        var violations = RecentViolations()
        let times = (0..<8).map { start + 60 * Double($0) }
        for time in times { violations.record(at: time, keepingAtMost: 5) }
        #expect(violations.count == 5)
        #expect(violations.times == Array(times.suffix(5)))
        let readBack = RecentViolations(times.suffix(5), now: times.last!)
        #expect(violations == readBack)
        #expect(violations.penaltyEnd { Double($0) } == times.last! + 5)
    }

    @Test func eachKindIsCountedAsTheyComeAgeOutAndAreCapped() {
        // CPU, overrun, CPU, a day apart, then two more overruns with at most four kept.
        var violations = RecentViolations()
        violations.record(at: start, kind: .cpu)
        violations.record(at: start + day, kind: .overrun)
        violations.record(at: start + 2 * day, kind: .cpu)
        #expect((violations.count(of: .overrun), violations.count(of: .cpu)) == (1, 2))
        // The first CPU one ages out.
        violations.advance(to: start + 7 * day + 1)
        #expect((violations.count(of: .overrun), violations.count(of: .cpu)) == (1, 1))
        #expect(violations.kinds == [.overrun, .cpu])
        // Two more overruns, four kept: the oldest overrun goes.
        violations.record(at: start + 8 * day, kind: .overrun, keepingAtMost: 3)
        violations.record(at: start + 8 * day + 1, kind: .overrun, keepingAtMost: 3)
        #expect(violations.kinds == [.cpu, .overrun, .overrun])
        #expect((violations.count(of: .overrun), violations.count(of: .cpu)) == (2, 1))
        // As a restart reads them back, by time and kind, in any order.
        let readBack = RecentViolations(
            [(time: start + 8 * day + 1, kind: .overrun), (start + 2 * day, .cpu), (start + 8 * day, .overrun)],
            now: start + 8 * day + 1)
        #expect(violations == readBack)
    }
}
