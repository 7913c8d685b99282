/// The figures a replay is judged by (issue 5), computed from a trace and the refreshes a policy
/// made over it. Every corner is defined here and in Docs/Replay.md:
///
/// - **Scored span.** From `start + warmUp` (7 days after the trace's first event) to the trace's
///   last event, both included. Opens are scored, and refreshes and wake-ups counted, only inside
///   it. Per-day figures divide by its length in days (86,400 s); a trace no longer than the
///   warm-up has an empty span, and every figure is then 0.
/// - **Wake-ups.** The scored refreshes in time order are cut into groups: a group starts at a
///   refresh, and takes every following refresh no more than 60 s after that first one; each group
///   is one wake-up (so any two refreshes of one wake-up are within 60 s of each other).
/// - **Freshness over W.** The fraction of scored opens of an app with a refresh of that app at a
///   time `r` with `open - W ≤ r ≤ open` (a refresh is complete at its instant; refreshes before
///   the scored span count).
/// - **Staleness.** For a scored open, `open - r` for the app's latest refresh `r ≤ open`; with no
///   earlier refresh, the time since the trace's first event (as if it had been fetched then).
///   The median of an even count is the mean of the two middle values.
/// - **Waste.** A scored refresh of an app at `r` is wasted unless the app is opened at some `o`
///   with `r ≤ o < r'`, where `r'` is the app's next refresh; the app's last refresh in the replay
///   has no `r'`, and is wasted unless the app is opened at or after `r` before the trace ends.
///   `wasted_fraction` is wasted scored refreshes over scored refreshes.
/// - With no scored opens, the freshness figures and the median are 0.
public struct ReplayMetrics: Sendable, Equatable {
    public var wakeupsPerDay: Double
    public var refreshesPerDay: Double
    public var freshness5m: Double
    public var freshness15m: Double
    public var medianStalenessSeconds: Double
    public var wastedFraction: Double
    /// How many opens were scored (not one of the figures: 0 says the others say nothing).
    public var scoredOpens: Int

    public init(wakeupsPerDay: Double, refreshesPerDay: Double, freshness5m: Double, freshness15m: Double,
                medianStalenessSeconds: Double, wastedFraction: Double, scoredOpens: Int = 0) {
        self.wakeupsPerDay = wakeupsPerDay
        self.refreshesPerDay = refreshesPerDay
        self.freshness5m = freshness5m
        self.freshness15m = freshness15m
        self.medianStalenessSeconds = medianStalenessSeconds
        self.wastedFraction = wastedFraction
        self.scoredOpens = scoredOpens
    }

    /// The keys of `--json`, in the order the table prints them.
    public static let keys = ["wakeups_per_day", "refreshes_per_day", "freshness_5m", "freshness_15m",
                              "median_staleness_s", "wasted_fraction"]

    /// The figures under `keys`, in that order.
    public var values: [Double] {
        [wakeupsPerDay, refreshesPerDay, freshness5m, freshness15m, medianStalenessSeconds, wastedFraction]
    }

    public static let warmUpSeconds: Double = 7 * 86_400
    public static let wakeupMergeSeconds: Double = 60

    /// The figures of `refreshes`, in any order, over `trace`: sorted first unless they are
    /// in time order already, then scored as `ReplayScorer` scores a replay's as they come.
    public static func compute(trace: UsageTrace, refreshes: [ReplayRefresh],
                               warmUp: Double = warmUpSeconds) -> ReplayMetrics {
        var scorer = ReplayScorer(trace: trace, warmUp: warmUp)
        if zip(refreshes, refreshes.dropFirst()).allSatisfy({ $0.time <= $1.time }) {
            for refresh in refreshes { scorer.add(refresh) }
        } else {
            for refresh in refreshes.sorted(by: { $0.time < $1.time }) { scorer.add(refresh) }
        }
        return scorer.finish()
    }
}
