/// The time the usage log's and the history's retention count back from: the wall clock, but
/// never further ahead than the time since a moment the agent trusts, measured on the
/// boot-time clock (which counts suspend, and which no one sets).
///
/// A wall clock set far ahead (a bad RTC at boot, a mistyped date, an NTP server gone wrong)
/// would make every row older than 8 weeks, and the next prune would delete the whole usage
/// log and history. The trusted moment is the agent's start, at the wall clock then or at the
/// newest row if that is earlier (a clock already wrong at start). From there only the time
/// that really passed counts. A clock set back prunes less, by the wall clock. The cost: after
/// a time the agent did not run (the newest row older than its start), retention counts from
/// that row until the next start, so rows are kept that long more. Nothing is deleted early.
/// A start in the same boot as an earlier one carries that one's clock on
/// (`resuming(_:wall:newestRow:boot:)`): the agent stores it with the boot's id.
public struct RetentionClock: Sendable, Equatable {
    /// The trusted wall time, and the boot-time clock's reading then.
    public let trustedWall: UnixTime
    public let bootAtTrusted: Double

    /// - Parameters:
    ///   - wall: the wall clock at start.
    ///   - newestRow: the newest row's time in the tables it prunes, if any.
    ///   - boot: `CLOCK_BOOTTIME` at start, in seconds.
    public init(wall: UnixTime, newestRow: UnixTime?, boot: Double) {
        trustedWall = min(wall, newestRow ?? wall)
        bootAtTrusted = boot
    }

    /// The clock kept from an earlier start, as stored.
    public init(trustedWall: UnixTime, bootAtTrusted: Double) {
        self.trustedWall = trustedWall
        self.bootAtTrusted = bootAtTrusted
    }

    /// The clock for a start: from `wall` and `newestRow` as at any start, but in the same boot
    /// as an earlier start never later than the clock that one kept, carried on.
    ///
    /// The newest row is no help when the clock was already set ahead in an earlier run since
    /// boot: that run wrote rows at the wrong time (every open, every history entry), and a
    /// clock counted from them would take the real rows for weeks old and prune them all (a
    /// re-login, a crash, a restart with the clock still wrong). In the same boot the
    /// boot-time clock still counts from the moment that run trusted, so the clock it kept
    /// goes on, unless the rows say earlier still: of two readings, the earlier prunes less.
    /// Across a reboot the boot-time clock starts again, and then only the newest row is left
    /// to go by, as before.
    /// - Parameters:
    ///   - kept: the clock stored by an earlier start, and whether it was stored in this boot.
    public static func resuming(
        _ kept: (clock: RetentionClock, sameBoot: Bool)?, wall: UnixTime, newestRow: UnixTime?, boot: Double
    ) -> RetentionClock {
        let fresh = RetentionClock(wall: wall, newestRow: newestRow, boot: boot)
        guard let kept, kept.sameBoot, kept.clock.bootAtTrusted <= boot, kept.clock.trustedWall.isFinite else { return fresh }
        let carried = kept.clock.trustedWall + (boot - kept.clock.bootAtTrusted)
        return RetentionClock(trustedWall: min(carried, fresh.trustedWall), bootAtTrusted: boot)
    }

    /// The time to count retention back from, for a row written at `wall` (the wall clock
    /// now) with the boot-time clock at `boot`.
    public func now(wall: UnixTime, boot: Double) -> UnixTime {
        min(wall, trustedWall + max(0, boot - bootAtTrusted))
    }
}
