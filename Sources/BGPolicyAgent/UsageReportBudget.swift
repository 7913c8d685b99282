import BGPolicyCore

/// How many changes of its usage state an app may have recorded through `ReportUsage`: a burst
/// of 60, then one a second. A person does not switch between apps faster than that for long,
/// and each change is a row of the usage log, kept for 8 weeks: an app alternating foreground
/// and background in a loop wrote about 600 rows a second through the bus, gigabytes a day. A
/// change over the budget is refused (`LimitsExceeded`), not dropped, so that the app knows
/// and can send it again. Measured on the monotonic clock: a step of the wall clock neither
/// lifts nor tightens it.
struct UsageReportBudget {
    static let burst = 60.0
    static let perSecond = 1.0

    private(set) var tokens = Self.burst
    private var updatedAt: ContinuousClock.Instant

    init(at now: ContinuousClock.Instant) {
        updatedAt = now
    }

    /// Whether a change may be recorded at `now` (refilled to then; nothing spent).
    mutating func allows(at now: ContinuousClock.Instant) -> Bool {
        if now > updatedAt {
            tokens = min(Self.burst, tokens + (now - updatedAt).seconds * Self.perSecond)
        }
        updatedAt = now
        return tokens >= 1
    }

    /// A change was recorded.
    mutating func spend() {
        tokens = max(0, tokens - 1)
    }
}
