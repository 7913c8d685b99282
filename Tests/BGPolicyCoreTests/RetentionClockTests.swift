import BGPolicyCore
import Testing

@Suite("RetentionClock: a wall clock set ahead never makes rows old")
struct RetentionClockTests {
    let day = 86_400.0

    @Test func aClockThatRunsTrueCountsFromTheWallClock() {
        let clock = RetentionClock(wall: 1_000_000, newestRow: 999_990, boot: 50)
        // 3 days later on both clocks: the wall clock is the time (newest row 10 s before start).
        #expect(clock.now(wall: 999_990 + 3 * day, boot: 50 + 3 * day) == 999_990 + 3 * day)
    }

    @Test func aClockSetAheadWhileRunningCountsOnlyTheTimeThatPassed() {
        let start = 1_000_000.0
        let clock = RetentionClock(wall: start, newestRow: start - 5, boot: 100)
        // A minute after start, someone sets the clock a year ahead.
        let counted = clock.now(wall: start + 60 + 365 * day, boot: 160)
        #expect(counted == start - 5 + 60)
        // With retention of 8 weeks, the cut-off stays before every row of the last 8 weeks.
        #expect(counted - 56 * day < start - 55 * day)
    }

    @Test func aClockAlreadyAheadAtStartCountsFromTheNewestRow() {
        let truth = 1_000_000.0
        let clock = RetentionClock(wall: truth + 365 * day, newestRow: truth, boot: 10)
        #expect(clock.now(wall: truth + 365 * day + day, boot: 10 + day) == truth + day)
    }

    @Test func aClockSetBackCountsFromTheWallClock() {
        let clock = RetentionClock(wall: 1_000_000, newestRow: nil, boot: 0)
        #expect(clock.now(wall: 1_000_000 - 30 * day + 10, boot: 10) == 1_000_000 - 30 * day + 10)
    }

    @Test func noRowsCountFromTheWallClockAtStart() {
        let clock = RetentionClock(wall: 2_000, newestRow: nil, boot: 5)
        #expect(clock.trustedWall == 2_000)
        #expect(clock.now(wall: 2_100, boot: 105) == 2_100)
        // A boot-time clock that reads less (it never should) counts no time as passed.
        #expect(clock.now(wall: 2_100, boot: 1) == 2_000)
    }

    @Test func aStartInTheSameBootCarriesTheKeptClockOnWhateverTheRowsSay() {
        let truth = 1_000_000.0
        // The first start: the clock right. A minute later it is set a year ahead, and the
        // run writes rows then. The agent restarts an hour after its first start.
        let first = RetentionClock(wall: truth, newestRow: truth - 10, boot: 100)
        let bogusRow = truth + 365 * day
        let restarted = RetentionClock.resuming(
            (first, sameBoot: true), wall: truth + 365 * day + 3_600, newestRow: bogusRow, boot: 3_700)
        #expect(restarted.now(wall: truth + 365 * day + 3_600, boot: 3_700) == truth - 10 + 3_600)
        #expect(restarted.now(wall: truth + 365 * day + 7_200, boot: 7_300) == truth - 10 + 7_200)
        // Counted from the newest row instead, every real row would be a year old.
        let fresh = RetentionClock(wall: truth + 365 * day + 3_600, newestRow: bogusRow, boot: 3_700)
        #expect(fresh.now(wall: truth + 365 * day + 3_600, boot: 3_700) == bogusRow)
    }

    @Test func anotherBootOrNoKeptClockStartsAfresh() {
        let kept = RetentionClock(wall: 5_000, newestRow: nil, boot: 100)
        let expected = RetentionClock(wall: 9_000, newestRow: 8_000, boot: 20)
        #expect(RetentionClock.resuming((kept, sameBoot: false), wall: 9_000, newestRow: 8_000, boot: 20) == expected)
        #expect(RetentionClock.resuming(nil, wall: 9_000, newestRow: 8_000, boot: 20) == expected)
        // A kept clock from later on the boot-time clock than now cannot be of this boot.
        #expect(RetentionClock.resuming((kept, sameBoot: true), wall: 9_000, newestRow: 8_000, boot: 20) == expected)
    }

    @Test func inTheSameBootRowsOlderThanTheKeptClockStillCountFromThemselves() {
        // The kept clock says now, but the log's newest row is 10 weeks older (rows put there
        // between two starts, a log restored from a backup): the earlier reading prunes less.
        let now = 10_000_000.0
        let kept = RetentionClock(wall: now, newestRow: nil, boot: 100)
        let newest = now - 70 * day
        let restarted = RetentionClock.resuming((kept, sameBoot: true), wall: now + 60, newestRow: newest, boot: 160)
        #expect(restarted.now(wall: now + 60, boot: 160) == newest)
    }
}
