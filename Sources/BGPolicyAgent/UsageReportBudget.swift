import BGPolicyCore

/// How many changes of its usage state an app may have recorded through `ReportUsage`: a burst
/// of 60, then one a second. A person does not switch between apps faster than that for long,
/// and each change is a row of the usage log, kept for 8 weeks: an app alternating foreground
/// and background in a loop wrote about 600 rows a second through the bus, gigabytes a day. A
/// change over the budget is refused (`LimitsExceeded`), not dropped, so that the app knows
/// and can send it again. Measured on the monotonic clock: a step of the wall clock neither
/// lifts nor tightens it.
///
/// All apps together have a budget too (`allApps`): a process that registers thousands of
/// unverified app ids (up to `[limits] apps`), each within its own budget, wrote thousands of
/// rows a second between them, kept for 8 weeks. Two changes a second all day is more than a
/// person makes; the burst covers a session bringing many apps up at once.
struct UsageReportBudget {
    /// One app's: a burst of 60, then one a second.
    static let burst = 60.0
    static let perSecond = 1.0
    /// Every app's together: a burst of 3,600, then two a second.
    static let allAppsBurst = 3600.0
    static let allAppsPerSecond = 2.0

    let burst: Double
    let perSecond: Double
    private(set) var tokens: Double
    private var updatedAt: ContinuousClock.Instant

    init(at now: ContinuousClock.Instant, burst: Double = Self.burst, perSecond: Double = Self.perSecond) {
        self.burst = burst
        self.perSecond = perSecond
        tokens = burst
        updatedAt = now
    }

    /// The budget of all apps together.
    static func allApps(at now: ContinuousClock.Instant) -> UsageReportBudget {
        UsageReportBudget(at: now, burst: allAppsBurst, perSecond: allAppsPerSecond)
    }

    /// Whether a change may be recorded at `now` (refilled to then; nothing spent).
    mutating func allows(at now: ContinuousClock.Instant) -> Bool {
        if now > updatedAt {
            tokens = min(burst, tokens + (now - updatedAt).seconds * perSecond)
        }
        updatedAt = now
        return tokens >= 1
    }

    /// A change was recorded.
    mutating func spend() {
        tokens = max(0, tokens - 1)
    }
}
