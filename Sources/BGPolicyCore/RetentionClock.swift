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

    /// The time to count retention back from, for a row written at `wall` (the wall clock
    /// now) with the boot-time clock at `boot`.
    public func now(wall: UnixTime, boot: Double) -> UnixTime {
        min(wall, trustedWall + max(0, boot - bootAtTrusted))
    }
}
