/// A moment at which the agent starts slices (SPEC §1, Wake window).
public struct WakeWindow: Sendable, Equatable {
    public enum Kind: Sendable, Equatable {
        /// On the grid: the agent's own timer.
        case planned
        /// The machine is awake and in use anyway.
        case opportunistic(OpportunityReason)
    }

    /// When the window opened: a grid point, or the moment of the opportunity.
    public var at: UnixTime
    public var kind: Kind

    public init(at: UnixTime, kind: Kind) {
        self.at = at
        self.kind = kind
    }
}

/// The planner (SPEC §2): it replaces "run when eligible" behind `SchedulingPolicy`.
///
/// - **Windows.** Work starts only in a wake window. Planned windows fall on the grid
///   (`[windows] grid_on_battery`, 15 min; `grid_on_ac`, 5 min; aligned to the Unix epoch) and
///   stay open `windowSpan` (60 s, the span within which refreshes count as one wake-up; a
///   quarter of the grid on a finer grid).
///   Opportunistic windows open when the user unlocks or becomes active, the charger is plugged
///   in, or an unmetered network appears (`PlanningFacts.opportunity`). Every eligible piece of
///   work of every app starts in the same window; a time rule (an `earliest_begin`, a penalty)
///   that lifts between two grid points lifts at the next one, so work due close together is
///   batched.
/// - **Eligibility.** Every rule of `RunWhenEligiblePolicy` applies unchanged: sleep, the
///   switches, the battery, power saver, 7 days without use, `earliest_begin`, processing only
///   while idle, network, external power, the overrun penalty, reachability, one slice at a time.
/// - **Refresh.** With `[refresh] strategy = predicted` (the default), an eligible refresh runs
///   only in a window where `RefreshPlanner` chooses its app: before predicted use, within the
///   budget, at most once per `min_interval` (longer for apps with a poor record). With
///   `every-window`, it runs in the next window like processing work.
/// - **Content-available wakes.** An app's undelivered wake goes out in the next window in which
///   the app-level rules allow it (the rules above that do not depend on a request).
///
/// Pure: the same facts give the same decision. The caller advances the refresh planner to
/// `now` before asking, and records the refreshes it launched afterwards.
public struct WindowPlanner: SchedulingPolicy {
    /// How long a window stays open after it opens: 60 s (the span within which refreshes
    /// count as one wake-up), or a quarter of the grid on a grid finer than 4 min.
    public static let windowSpan: Double = 60

    static func span(grid: Double) -> Double { min(windowSpan, grid / 4) }

    private let rules = RunWhenEligiblePolicy()

    public init() {}

    /// The grid spacing for the power source now: AC only when known to be on AC.
    public static func grid(_ context: SchedulingContext) -> Double {
        context.conditions.onBattery == false
            ? context.configuration.windows.gridOnAC.seconds : context.configuration.windows.gridOnBattery.seconds
    }

    /// The first grid point at or after `time`.
    public static func gridPoint(atOrAfter time: UnixTime, grid: Double) -> UnixTime {
        (time / grid).rounded(.up) * grid
    }

    /// The window open at `context.now`, if any: an opportunity wins over the grid, since it
    /// says why the machine is awake.
    public static func openWindow(_ context: SchedulingContext) -> WakeWindow? {
        guard !context.sleeping else { return nil }
        let now = context.now
        if let opportunity = context.planning.opportunity, now >= opportunity.at, now - opportunity.at < windowSpan {
            return WakeWindow(at: opportunity.at, kind: .opportunistic(opportunity.reason))
        }
        let grid = grid(context)
        let start = (now / grid).rounded(.down) * grid
        return now - start < span(grid: grid) ? WakeWindow(at: start, kind: .planned) : nil
    }

    /// The next planned window after the one open now (or after now when none is).
    static func nextPlannedWindow(_ context: SchedulingContext) -> UnixTime {
        let grid = grid(context)
        let start = (context.now / grid).rounded(.down) * grid
        return start + grid
    }

    public func decide(
        pending: [TaskRequest], apps: [AppID: AppSchedulingState], context: SchedulingContext
    ) -> SchedulingDecision {
        let window = Self.openWindow(context)
        let nextGrid = Self.nextPlannedWindow(context)
        let grid = Self.grid(context)
        let predicted = context.configuration.refresh.strategy == .predicted ? context.planning.refresh : nil
        var runnable: [AppID: [TaskRequest]] = [:]
        var refreshCandidates: [AppID: TaskRequest] = [:]
        var nextEvaluation: UnixTime?
        func wake(at time: UnixTime) { nextEvaluation = min(nextEvaluation ?? time, time) }
        var waitsForWindow = false

        for request in pending {
            guard let app = apps[request.appID] else { continue }
            let reasons = rules.blockingReasons(for: request, app: app, context: context)
            if !reasons.isEmpty {
                // A time rule lifts at the window on or after it: work due close together batches.
                if let lifts = Self.timeAllLift(reasons) { wake(at: Self.gridPoint(atOrAfter: lifts, grid: grid)) }
                continue
            }
            if request.kind == .refresh, predicted != nil {
                refreshCandidates[request.appID] = request
            } else if window != nil {
                runnable[request.appID, default: []].append(request)
            } else {
                waitsForWindow = true
            }
        }

        var contentApps: Set<AppID> = []
        for appID in context.planning.contentAvailable {
            guard let app = apps[appID], contentReasons(app: app, context: context).isEmpty else { continue }
            if window != nil { contentApps.insert(appID) } else { waitsForWindow = true }
        }

        var refreshed: [AppID] = []
        if let planner = predicted, !refreshCandidates.isEmpty {
            let candidates = refreshCandidates.keys.sorted().map {
                RefreshPlanner.Candidate(appID: $0.rawValue, weight: context.planning.refreshWeights[$0] ?? 1)
            }
            if window != nil {
                let byName = Dictionary(uniqueKeysWithValues: refreshCandidates.map { ($0.key.rawValue, $0) })
                for chosen in planner.choose(at: context.now, among: candidates) {
                    guard let (appID, request) = byName[chosen] else { continue }
                    runnable[appID, default: []].append(request)
                    refreshed.append(appID)
                }
            }
            if refreshed.count < candidates.count {
                let chosenSet = Set(refreshed.map(\.rawValue))
                let rest = candidates.filter { !chosenSet.contains($0.appID) }
                if let next = planner.nextWindow(after: context.now, among: rest) { wake(at: next.time) }
            }
        }
        if waitsForWindow { wake(at: nextGrid) }

        var launches: [Launch] = []
        for appID in Set(runnable.keys).union(contentApps).sorted() {
            let requests = (runnable[appID] ?? []).sorted { a, b in
                if (a.kind == .refresh) != (b.kind == .refresh) { return a.kind == .refresh }
                if a.submittedAt != b.submittedAt { return a.submittedAt < b.submittedAt }
                return a.identifier < b.identifier
            }
            var sliceLength = requests.map { RunWhenEligiblePolicy.slice(for: $0.kind, context.configuration) }.max()
                ?? .zero
            let content = contentApps.contains(appID)
            if content { sliceLength = max(sliceLength, context.configuration.slices.contentAvailable) }
            launches.append(Launch(appID: appID, requests: requests, sliceLength: sliceLength, contentAvailable: content))
        }
        return SchedulingDecision(
            launches: launches, nextEvaluation: nextEvaluation, window: window, refreshed: refreshed.sorted())
    }

    public func explain(_ request: TaskRequest, app: AppSchedulingState, context: SchedulingContext) -> Explanation {
        var reasons = rules.blockingReasons(for: request, app: app, context: context)
        let grid = Self.grid(context)
        let window = Self.openWindow(context)
        if !reasons.isEmpty {
            // The request runs no earlier than the window after its last time rule lifts.
            let earliest = Self.timeAllLift(reasons).map { Self.gridPoint(atOrAfter: $0, grid: grid) }
            return Explanation(
                blocking: reasons, earliestRun: earliest,
                summary: "Waits: " + reasons.map(\.words).joined(separator: "; ") + ".")
        }
        let predicted = context.configuration.refresh.strategy == .predicted ? context.planning.refresh : nil
        if request.kind == .refresh, let planner = predicted {
            let appID = request.appID.rawValue
            let candidate = RefreshPlanner.Candidate(appID: appID, weight: context.planning.refreshWeights[request.appID] ?? 1)
            if window != nil, planner.choose(at: context.now, among: [candidate]).contains(appID) {
                return Explanation(blocking: [], earliestRun: context.now, summary: "Runs in the wake window open now.")
            }
            switch planner.ineligibility(of: candidate, at: context.now) {
            case .inactive:
                reasons.append(BlockingReason(
                    rule: .predictedUse,
                    words: "no open of \(appID) is recorded in the last 7 days, so no use is predicted: "
                        + "refresh is planned once the app is opened"))
            case .tooSoon(let until):
                let at = Self.gridPoint(atOrAfter: until, grid: grid)
                reasons.append(BlockingReason(
                    rule: .refreshInterval,
                    words: "\(appID) was refreshed recently; the next refresh may come in "
                        + "\(RunWhenEligiblePolicy.durationWords(until - context.now))"
                        + ((context.planning.refreshWeights[request.appID] ?? 1) < 1
                            ? " (a longer gap than usual: its recent refreshes brought no data or overran)" : ""),
                    liftsAt: at))
                if let next = planner.nextWindow(after: max(context.now, at - 1), among: [candidate]) {
                    return waiting(reasons, at: next.time)
                }
                return waiting(reasons, at: nil)
            case nil:
                break
            }
            if reasons.isEmpty {
                if let next = planner.nextWindow(after: context.now, among: [candidate]) {
                    reasons.append(BlockingReason(
                        rule: .predictedUse,
                        words: "refresh runs in the wake window before \(appID) is likely to be opened; "
                            + "the planned window is in \(RunWhenEligiblePolicy.durationWords(next.time - context.now))",
                        liftsAt: next.time))
                    return waiting(reasons, at: next.time)
                }
                reasons.append(BlockingReason(
                    rule: .predictedUse,
                    words: "no open of \(appID) likely enough is predicted in the next 24 hours, "
                        + "or today's refresh budget is spent: it waits for the app's next use"))
            }
            return waiting(reasons, at: nil)
        }
        if window != nil {
            return Explanation(blocking: [], earliestRun: context.now, summary: "Runs in the wake window open now.")
        }
        let next = Self.nextPlannedWindow(context)
        let words = context.conditions.onBattery == false ? "on AC" : "on battery"
        reasons.append(BlockingReason(
            rule: .nextWindow,
            words: "work of all apps starts together in wake windows, every \(RunWhenEligiblePolicy.durationWords(grid)) "
                + "\(words): the next is in \(RunWhenEligiblePolicy.durationWords(next - context.now))",
            liftsAt: next))
        return waiting(reasons, at: next)
    }

    private func waiting(_ reasons: [BlockingReason], at time: UnixTime?) -> Explanation {
        Explanation(blocking: reasons, earliestRun: time, summary: "Waits: " + reasons.map(\.words).joined(separator: "; ") + ".")
    }

    public func refreshStatus(app: AppRecord, context: SchedulingContext) -> RefreshStatus {
        rules.refreshStatus(app: app, context: context)
    }

    public func backgroundTaskRefusal(context: SchedulingContext) -> BlockingReason? {
        rules.backgroundTaskRefusal(context: context)
    }

    /// The rules that hold back an app's content-available wake: those of a plain request with
    /// no conditions of its own (the switches, battery, power saver, use, conduct, reachability).
    public func contentReasons(app: AppSchedulingState, context: SchedulingContext) -> [BlockingReason] {
        let probe = TaskRequest(appID: app.record.appID, identifier: "", kind: .refresh, submittedAt: context.now)
        return rules.blockingReasons(for: probe, app: app, context: context)
    }

    /// When every reason has lifted, if each lifts by time alone.
    static func timeAllLift(_ reasons: [BlockingReason]) -> UnixTime? {
        var latest: UnixTime?
        for reason in reasons {
            guard let liftsAt = reason.liftsAt else { return nil }
            latest = max(latest ?? liftsAt, liftsAt)
        }
        return latest
    }
}
