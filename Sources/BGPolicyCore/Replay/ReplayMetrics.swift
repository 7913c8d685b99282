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

    public static func compute(trace: UsageTrace, refreshes: [ReplayRefresh],
                               warmUp: Double = warmUpSeconds) -> ReplayMetrics {
        let zero = ReplayMetrics(wakeupsPerDay: 0, refreshesPerDay: 0, freshness5m: 0, freshness15m: 0,
                                 medianStalenessSeconds: 0, wastedFraction: 0)
        guard let span = trace.span else { return zero }
        let scoreStart = span.start + warmUp
        let days = (span.end - scoreStart) / 86_400
        guard days > 0 else { return zero }
        func scored(_ t: Double) -> Bool { t >= scoreStart && t <= span.end }

        // In time order, then by app (so that the same refreshes in any order give the same
        // figures). A replay's come in time order; `periodic`'s (millions, on a large trace)
        // list each wake's apps sorted too, so they are read where they are, not copied.
        func precedes(_ a: ReplayRefresh, _ b: ReplayRefresh) -> Bool { (a.time, a.appID) < (b.time, b.appID) }
        let inOrder = zip(refreshes, refreshes.dropFirst()).allSatisfy { !precedes($1, $0) }
        let ordered = inOrder ? refreshes : refreshes.sorted(by: precedes)

        var wakeups = 0, scoredCount = 0
        var groupStart = -Double.infinity
        for refresh in ordered where scored(refresh.time) {
            scoredCount += 1
            if refresh.time > groupStart + wakeupMergeSeconds {
                wakeups += 1
                groupStart = refresh.time
            }
        }

        var refreshTimes: [String: [Double]] = [:]
        for refresh in ordered { refreshTimes[refresh.appID, default: []].append(refresh.time) }
        var openTimes: [String: [Double]] = [:]
        for event in trace.events where event.kind == .open { openTimes[event.appID, default: []].append(event.time) }

        var opens = 0, fresh5 = 0, fresh15 = 0
        var staleness: [Double] = []
        for event in trace.events where event.kind == .open && scored(event.time) {
            opens += 1
            let times = refreshTimes[event.appID] ?? []
            let after = upperBound(times, event.time)  // first refresh strictly after the open
            let last = after > 0 ? times[after - 1] : nil
            if let last, event.time - last <= 300 { fresh5 += 1 }
            if let last, event.time - last <= 900 { fresh15 += 1 }
            staleness.append(event.time - (last ?? span.start))
        }

        var wasted = 0
        for (app, times) in refreshTimes {
            let appOpens = openTimes[app] ?? []
            for (i, r) in times.enumerated() where scored(r) {
                let next = i + 1 < times.count ? times[i + 1] : Double.infinity
                let firstOpen = lowerBound(appOpens, r)
                if !(firstOpen < appOpens.count && appOpens[firstOpen] < next) { wasted += 1 }
            }
        }

        staleness.sort()
        let median: Double = if staleness.isEmpty {
            0
        } else if staleness.count % 2 == 1 {
            staleness[staleness.count / 2]
        } else {
            (staleness[staleness.count / 2 - 1] + staleness[staleness.count / 2]) / 2
        }
        return ReplayMetrics(
            wakeupsPerDay: Double(wakeups) / days,
            refreshesPerDay: Double(scoredCount) / days,
            freshness5m: opens == 0 ? 0 : Double(fresh5) / Double(opens),
            freshness15m: opens == 0 ? 0 : Double(fresh15) / Double(opens),
            medianStalenessSeconds: median,
            wastedFraction: scoredCount == 0 ? 0 : Double(wasted) / Double(scoredCount), scoredOpens: opens)
    }

    /// The index of the first element `>= value` in a sorted array.
    static func lowerBound(_ a: [Double], _ value: Double) -> Int {
        var lo = 0, hi = a.count
        while lo < hi {
            let mid = (lo + hi) / 2
            if a[mid] < value { lo = mid + 1 } else { hi = mid }
        }
        return lo
    }

    /// The index of the first element `> value` in a sorted array.
    static func upperBound(_ a: [Double], _ value: Double) -> Int {
        var lo = 0, hi = a.count
        while lo < hi {
            let mid = (lo + hi) / 2
            if a[mid] <= value { lo = mid + 1 } else { hi = mid }
        }
        return lo
    }
}
