/// Scores a replay's refreshes as they are made, in time order, by the rules of `ReplayMetrics`,
/// holding only what the figures need: each app's latest refresh, and one staleness per scored
/// open. So a baseline that refreshes every app of a large trace every few minutes (`periodic`,
/// millions of refreshes) is scored in the memory of the trace, not of its refreshes.
///
/// The trace's opens are walked alongside: before a refresh at `t`, every open before `t`, so
/// that a refresh at the instant of an open comes first (as `ReplayDriver` has it), and the rest
/// by `finish()`.
public struct ReplayScorer {
    private struct App {
        /// The app's latest refresh so far.
        var last: Double?
        /// That refresh is scored and no open of the app has followed it yet: wasted if the
        /// app's next refresh, or the end of the trace, comes first.
        var awaitingOpen = false

        mutating func refreshed(at time: Double, scored: Bool, wasted: inout Int) {
            if awaitingOpen { wasted += 1 }
            last = time
            awaitingOpen = scored
        }
    }

    private let events: [UsageEvent]
    private var nextEvent = 0
    private let start: Double, scoreStart: Double, end: Double
    private var latest = -Double.infinity

    private var apps: [String: App] = [:]
    private var wakeups = 0, scoredRefreshes = 0, wasted = 0
    private var groupStart = -Double.infinity
    private var opens = 0, fresh5 = 0, fresh15 = 0
    private var staleness: [Double] = []

    public init(trace: UsageTrace, warmUp: Double = ReplayMetrics.warmUpSeconds) {
        events = trace.events
        let span = trace.span ?? (start: 0, end: -Double.infinity)
        start = span.start
        scoreStart = span.start + warmUp
        end = span.end
    }

    private func scored(_ time: Double) -> Bool { time >= scoreStart && time <= end }

    /// A refresh was made. Refreshes must come in time order (the same instant in any order).
    public mutating func add(_ refresh: ReplayRefresh) {
        precondition(refresh.time >= latest, "refreshes are scored in time order")
        latest = refresh.time
        walkOpens(before: refresh.time)
        let isScored = scored(refresh.time)
        if isScored {
            scoredRefreshes += 1
            if refresh.time > groupStart + ReplayMetrics.wakeupMergeSeconds {
                wakeups += 1
                groupStart = refresh.time
            }
        }
        apps[refresh.appID, default: App()].refreshed(at: refresh.time, scored: isScored, wasted: &wasted)
    }

    /// The figures, once every refresh has been added.
    public consuming func finish() -> ReplayMetrics {
        walkOpens(before: .infinity)
        wasted += apps.values.count(where: \.awaitingOpen)
        let days = (end - scoreStart) / 86_400
        guard days > 0 else {
            return ReplayMetrics(wakeupsPerDay: 0, refreshesPerDay: 0, freshness5m: 0, freshness15m: 0,
                                 medianStalenessSeconds: 0, wastedFraction: 0)
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
            refreshesPerDay: Double(scoredRefreshes) / days,
            freshness5m: opens == 0 ? 0 : Double(fresh5) / Double(opens),
            freshness15m: opens == 0 ? 0 : Double(fresh15) / Double(opens),
            medianStalenessSeconds: median,
            wastedFraction: scoredRefreshes == 0 ? 0 : Double(wasted) / Double(scoredRefreshes),
            scoredOpens: opens)
    }

    /// Scores the opens before `time`: each is fresh over W if its app's latest refresh is at
    /// most W before it, and serves that refresh.
    private mutating func walkOpens(before time: Double) {
        while nextEvent < events.count, events[nextEvent].time < time {
            let event = events[nextEvent]
            nextEvent += 1
            guard event.kind == .open else { continue }
            let last = apps[event.appID]?.last
            if scored(event.time) {
                opens += 1
                if let last, event.time - last <= 300 { fresh5 += 1 }
                if let last, event.time - last <= 900 { fresh15 += 1 }
                staleness.append(event.time - (last ?? start))
            }
            if last != nil { apps[event.appID]?.awaitingOpen = false }
        }
    }
}
