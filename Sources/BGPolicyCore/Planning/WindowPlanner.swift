/// A moment at which the agent starts slices (SPEC §1, Wake window).
public struct WakeWindow: Sendable, Equatable {
    public enum Kind: Sendable, Equatable {
        /// On the grid: the agent's own timer.
        case planned
        /// The machine is awake and in use anyway.
        case opportunistic(OpportunityReason)
        /// An app was just opened: a window for the refreshes the refresh planner chooses among
        /// the apps not in use (and, if it opens, what it takes alongside), and nothing else.
        case afterOpen
        /// The user just left an app: a window for that app's refresh, if the refresh planner
        /// chooses it (and then for what it takes alongside).
        case afterUse
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
///   in, or an unmetered network appears (`PlanningFacts.opportunity`). Two windows open for
///   refreshes only, for `windowSpan`: when the user opens an app (`PlanningFacts.appOpenedAt`),
///   for the refreshes the refresh planner chooses among the apps not in use, the apps the user
///   is likely to go on to (`afterOpenWindow`, `RefreshPlanner.chooseAfterOpen`); when the
///   user leaves an app (`PlanningFacts.appLeft`), for that app's refresh, if the planner
///   chooses it (`afterUseWindow`). Either, when it opens, also takes the refreshes of apps not
///   in use that a grid window would take then (`RefreshPlanner.chooseAlongside`): the machine
///   is awake for it anyway. Every eligible piece of
///   work of every app starts in the same window; a time rule (an `earliest_begin`, a penalty)
///   that lifts between two grid points lifts at the next one, so work due close together is
///   batched.
/// - **Eligibility.** Every rule of `RunWhenEligiblePolicy` applies unchanged: sleep, the
///   switches, the battery, power saver, 7 days without use, `earliest_begin`, processing only
///   while idle, network, external power, the overrun penalty, reachability, one slice at a time.
/// - **Refresh.** With `[refresh] strategy = predicted` (the default), an eligible refresh runs
///   only in a window where `RefreshPlanner` chooses its app: before predicted use, within the
///   budget, at most once per `min_interval` (longer for apps with a poor record). With
///   `every-window`, it runs in the next window like processing work, but still at most once
///   per `min_interval` (`refreshIntervals`): an app that resubmits after every refresh, as
///   apps do, was refreshed in every window, every 5 min on AC.
/// - **Content-available wakes.** An app's undelivered wake goes out in the next window in which
///   the app-level rules allow it (the rules above that do not depend on a request).
///
/// Pure: the same facts give the same decision. The caller advances the refresh planner to
/// `now` before asking, and afterwards records the refreshes it launched
/// (`SchedulingDecision.refreshed`, under either strategy) and tells it whether a refresh waits
/// for its choice (`RefreshPlanner.refreshesWaiting`).
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
        if now - start < span(grid: grid) { return WakeWindow(at: start, kind: .planned) }
        // The refresh planner's 15-min slots are windows too, so that a planned refresh runs
        // even on a grid that does not divide 15 min.
        if context.configuration.refresh.strategy == .predicted, let planner = context.planning.refresh {
            let slot = planner.slot(containing: now)
            if now - slot < span(grid: planner.slotSeconds) { return WakeWindow(at: slot, kind: .planned) }
        }
        return nil
    }

    /// Whether the windows for refreshes only can open now: under the predicted strategy, awake.
    /// The one after an open counts only when no other window is open (the grid's takes every
    /// app then); the one after use counts in any, as in replay.
    private static func refreshOnlyWindowsApply(_ context: SchedulingContext) -> Bool {
        !context.sleeping && context.configuration.refresh.strategy == .predicted && context.planning.refresh != nil
    }

    /// The window for refreshes only that opens when an app is opened (`PlanningFacts.appOpenedAt`)
    /// and stays open `windowSpan`.
    static func afterOpenWindow(_ context: SchedulingContext) -> WakeWindow? {
        guard refreshOnlyWindowsApply(context), let opened = context.planning.appOpenedAt,
            context.now >= opened, context.now - opened < windowSpan
        else { return nil }
        return WakeWindow(at: opened, kind: .afterOpen)
    }

    /// The window for one refresh that opens when the user leaves an app (`PlanningFacts.appLeft`)
    /// and stays open `windowSpan`: the app left, too.
    static func afterUseWindow(_ context: SchedulingContext) -> (window: WakeWindow, appID: AppID)? {
        guard refreshOnlyWindowsApply(context), let left = context.planning.appLeft,
            context.now >= left.at, context.now - left.at < windowSpan
        else { return nil }
        return (WakeWindow(at: left.at, kind: .afterUse), left.appID)
    }

    /// The window for refreshes only that opened (started refreshes) and is still open now
    /// (`PlanningFacts.refreshWindow`): it takes what a grid window would, for its span.
    static func openedRefreshWindow(_ context: SchedulingContext) -> WakeWindow? {
        guard refreshOnlyWindowsApply(context), let opened = context.planning.refreshWindow,
            context.now >= opened.at, context.now - opened.at < windowSpan
        else { return nil }
        return opened
    }

    /// Under `[refresh] strategy = every-window`, the refresh planner the caller keeps (nil
    /// under `predicted`, whose planner chooses refreshes itself): it predicts nothing there,
    /// but its record of each app's last refresh (`RefreshPlanner.recordWindow`) holds the
    /// app's next refresh for `min_interval`, as the choice under `predicted` is held.
    static func refreshIntervals(_ context: SchedulingContext) -> RefreshPlanner? {
        context.configuration.refresh.strategy == .everyWindow ? context.planning.refresh : nil
    }

    /// When the refresh interval of `candidate` ends, if it has not ended by `now`.
    static func intervalHolds(_ candidate: RefreshPlanner.Candidate, _ intervals: RefreshPlanner, at now: UnixTime) -> UnixTime? {
        intervals.refreshIntervalEnd(of: candidate).flatMap { $0 > now ? $0 : nil }
    }

    /// `refresh-interval`: `appID` was refreshed recently, and its next refresh may come at
    /// `until`, in the window at or after it (`liftsAt`). The same words under either strategy.
    static func intervalReason(_ appID: AppID, until: UnixTime, _ context: SchedulingContext) -> BlockingReason {
        BlockingReason(
            rule: .refreshInterval,
            words: "\(appID.rawValue) was refreshed recently; the next refresh may come in "
                + "\(RunWhenEligiblePolicy.durationWords(until - context.now))"
                + ((context.planning.refreshWeights[appID] ?? 1) < 1
                    ? " (a longer gap than usual: its recent refreshes brought no data, or it overran its time or used too much CPU)" : ""),
            liftsAt: gridPoint(atOrAfter: until, grid: grid(context)))
    }

    /// The next planned window after the one open now (or after now when none is).
    static func nextPlannedWindow(_ context: SchedulingContext) -> UnixTime {
        let grid = grid(context)
        let start = (context.now / grid).rounded(.down) * grid
        return start + grid
    }

    /// What may start for one app in the window being decided (see `decide`). A struct, not a
    /// tuple: tuples of these were copied through their generic value witnesses, a tenth of
    /// the decision's time for 1,000 apps.
    private struct Ready {
        var work: Int
        var requests: ArraySlice<TaskRequest>
        var refresh: Int?
        /// How many of `requests`, at their front, are refreshes that wait for `refresh`'s choice.
        var refreshes: Int
        var content: Bool
    }

    public func decide(work: [AppWork], context: SchedulingContext) -> SchedulingDecision {
        let window = Self.openWindow(context)
        let afterOpen = window == nil ? Self.afterOpenWindow(context) : nil
        // The app just left has its own say in any window, as in replay: a leave that falls in
        // a grid window is still a leave.
        let afterUse = Self.afterUseWindow(context)
        // A window for refreshes only that already opened: the apps not in use may go alongside.
        let opened = window == nil ? Self.openedRefreshWindow(context) : nil
        let inUse = context.planning.appsInUse
        let grid = Self.grid(context)
        let predicted = context.configuration.refresh.strategy == .predicted ? context.planning.refresh : nil
        let hasPredicted = predicted != nil
        let intervals = Self.refreshIntervals(context)
        // Read once: reading a field of `context.planning` in the loop copied all of it per app.
        let weights = context.planning.refreshWeights
        // Only apps in poor standing have a weight: most often none has, and then no id is hashed.
        func weight(of appID: AppID) -> Double { weights.isEmpty ? 1 : weights[appID] ?? 1 }
        let content = context.planning.contentAvailable
        var nextEvaluation: UnixTime?
        func wake(at time: UnixTime) { nextEvaluation = min(nextEvaluation ?? time, time) }
        var waitsForWindow = false
        // Per app, in the order of `work`: what may start in this window, and whether its
        // refresh waits for the refresh planner's choice.
        // `refresh`: the index of the app's refresh among `candidates`, if it has one.
        var ready: [Ready] = []
        var candidates: [RefreshPlanner.Candidate] = []
        // The app left's refresh, by its index among `candidates`; and, for the windows for
        // refreshes only, the candidates they may not take (apps in use, or not ready in it).
        var leftCandidate: Int?
        var notRefreshOnly: [Bool] = []

        // Each app's work is read in place, by index: the rules take the array and the index.
        for index in work.indices {
            let eligible = rules.runnableRequests(of: work, at: index, context: context)
            // Less the refreshes an every-window app's refresh interval holds (below).
            var runnable = eligible.runnable
            let lifts = eligible.lifts
            if let lifts {
                let appID = work[index].app.record.appID
                if let planner = predicted, !content.contains(appID), work[index].requests.allSatisfy({ $0.kind == .refresh }) {
                    // A refresh alone runs when the refresh planner chooses it: from its first
                    // window after the lift, not the grid's (a wake-up for nothing).
                    // (From the slot that starts at the lift, if one does; a lift a moment into
                    // a slot finds that slot's window, still open then, and wakes at the lift:
                    // its start, before the lift, would be evaluated again and again. None
                    // within the day after the lift: looked at again at its end, as below.)
                    let candidate = RefreshPlanner.Candidate(appID: appID.rawValue, weight: weight(of: appID))
                    switch planner.lookAhead(after: lifts - 1, among: [candidate], skip: nil) {
                    case .window(let time, _): wake(at: max(time, lifts))
                    case .beyond(let time): wake(at: time)
                    case .never: break
                    }
                } else {
                    // A time rule lifts at the window on or after it: work due close together batches.
                    wake(at: Self.gridPoint(atOrAfter: lifts, grid: grid))
                }
            }
            var requests = runnable
            var refresh: Int?
            // In launch order the refreshes come first; they wait for the refresh planner's
            // choice of the app, all of them (`[limits] pending_refresh` may allow several): one
            // left as plain work ran in every window, past the budget and the refresh interval.
            // The kind read in place: taking `first` copied the whole request.
            var refreshes = 0
            if hasPredicted || intervals != nil {
                while refreshes < runnable.count, runnable[runnable.startIndex + refreshes].kind == .refresh { refreshes += 1 }
            }
            if refreshes > 0, let intervals {
                // Under every-window the refreshes go in this window unless the app's refresh
                // interval holds them; then the rest goes without them, and the window after
                // the interval ends is looked at again.
                let appID = work[index].app.record.appID
                let candidate = RefreshPlanner.Candidate(appID: appID.rawValue, weight: weight(of: appID))
                if let end = Self.intervalHolds(candidate, intervals, at: context.now) {
                    runnable = runnable.dropFirst(refreshes)
                    requests = runnable
                    wake(at: Self.gridPoint(atOrAfter: end, grid: grid))
                }
                refreshes = 0
            } else if refreshes > 0 {
                refresh = candidates.count
                requests = runnable.dropFirst(refreshes)
                let appID = work[index].app.record.appID
                candidates.append(RefreshPlanner.Candidate(appID: appID.rawValue, weight: weight(of: appID)))
            }
            var wakes = false
            if !content.isEmpty && content.contains(work[index].app.record.appID) {
                let held = contentReasons(app: work[index].app, context: context, words: false)
                wakes = held.isEmpty
                // A wake held by rules that all lift by time (the wait after a failed delivery,
                // an overrun's penalty) is looked at again in the window after they lift: with
                // no request of the app pending, nothing else sets a timer for it.
                if !wakes, let lift = RunWhenEligiblePolicy.timeAllLift(held) {
                    wake(at: Self.gridPoint(atOrAfter: lift, grid: grid))
                }
            }
            // The app just left has its say in any window.
            let left = refresh != nil && afterUse?.appID == work[index].app.record.appID
            if left { leftCandidate = refresh }
            if window == nil {
                if !requests.isEmpty || wakes { waitsForWindow = true }
                // In a window for refreshes only, an app's refresh alone may go, if the
                // planner chooses it: the app just left's, and any app's not in use (after
                // an open, or alongside either window's refreshes).
                guard let refresh, afterOpen != nil || afterUse != nil || opened != nil else { continue }
                let open = !inUse.contains(work[index].app.record.appID)
                // Every candidate passes here when no window is open, in order.
                notRefreshOnly.append(!open)
                if left || open {
                    ready.append(Ready(work: index, requests: runnable.prefix(refreshes), refresh: refresh, refreshes: refreshes,
                                       content: false))
                }
                continue
            }
            if !requests.isEmpty || wakes || refresh != nil {
                ready.append(Ready(work: index, requests: runnable, refresh: refresh, refreshes: refreshes, content: wakes))
            }
        }

        var chosen = [Bool](repeating: false, count: candidates.count)
        var afterOpenChose = false
        var alongsideChose = false
        if let planner = predicted, !candidates.isEmpty {
            var count = 0
            let located = planner.locate(candidates)
            // The app left first, as in replay: if its own window takes it, the other window
            // chooses among the rest.
            var leftChosen = false
            if let index = leftCandidate, planner.choosesAfterUse(candidates[index], at: context.now) {
                chosen[index] = true
                count += 1
                leftChosen = true
            }
            if let window {
                var skip: [Bool]?
                if leftChosen, let index = leftCandidate {
                    skip = [Bool](repeating: false, count: candidates.count)
                    skip?[index] = true
                }
                // Each window spends only what the ones before it in this decision left: they
                // are recorded (`recordWindow`) only once launched, as replay records each
                // window before the next chooses.
                for index in planner.chooseIndices(
                    at: context.now, among: candidates, skip: skip, located: located,
                    opportunistic: window.kind != .planned, spent: count)
                {
                    chosen[index] = true
                    count += 1
                }
            } else if afterOpen != nil || afterUse != nil || opened != nil {
                // Not the apps in use, nor the app left (its own window had its say).
                var skip = notRefreshOnly
                if let index = leftCandidate { skip[index] = true }
                if afterOpen != nil {
                    for index in planner.chooseAfterOpenIndices(
                        at: context.now, among: candidates, skip: skip, located: located, spent: count)
                    {
                        chosen[index] = true
                        skip[index] = true
                        count += 1
                        afterOpenChose = true
                    }
                }
                // A window that opens, or opened in the last minute, takes what a grid window
                // would take among the rest too: the machine is awake for it anyway.
                if count > 0 || opened != nil {
                    for index in planner.chooseAlongsideIndices(
                        at: context.now, among: candidates, skip: skip, located: located, spent: count)
                    {
                        chosen[index] = true
                        count += 1
                        alongsideChose = true
                    }
                }
            }
            if count < candidates.count {
                // None planned within the day: looked at again at its end, since the time alone
                // may bring one (a `min_interval` over a day, the budget refilled, a day of the
                // week the user opens the app on), and with nothing else happening (a laptop
                // left on its charger) no evaluation would come. A wake-up a day at most, and
                // none when nothing can be chosen without news (`RefreshPlanner.LookAhead`).
                switch planner.lookAhead(
                    after: context.now, among: candidates, skip: count == 0 ? nil : chosen, located: located)
                {
                case .window(let time, _), .beyond(let time): wake(at: time)
                case .never: break
                }
            }
        }
        if waitsForWindow { wake(at: Self.nextPlannedWindow(context)) }

        var launches: [Launch] = []
        // The apps whose refreshes start: the caller records them (`RefreshPlanner.recordWindow`),
        // those the refresh planner chose, or under every-window every one.
        var refreshed: [AppID] = []
        // By index: iterating `ready` copied each entry, its requests retained and released.
        for i in ready.indices {
            // `requests` holds the refreshes first when there are any: they go only if chosen.
            let content = ready[i].content
            var dropped = 0
            if let refresh = ready[i].refresh {
                if chosen[refresh] { refreshed.append(work[ready[i].work].app.record.appID) } else { dropped = ready[i].refreshes }
            }
            let count = ready[i].requests.count - dropped
            guard count > 0 || content else { continue }
            let requests = ready[i].requests.dropFirst(dropped)
            if intervals != nil, requests.first?.kind == .refresh { refreshed.append(work[ready[i].work].app.record.appID) }
            var sliceLength = RunWhenEligiblePolicy.sliceLength(for: requests, context.configuration)
            if content { sliceLength = max(sliceLength, context.configuration.slices.contentAvailable) }
            launches.append(Launch(
                appID: work[ready[i].work].app.record.appID, requests: requests, sliceLength: sliceLength,
                contentAvailable: content))
        }
        // In windows for refreshes only, the app left's launch is in the window after use, any
        // other in the one after an open, or alongside in the one that opened.
        var leftRefreshed: AppLeft?
        if let index = leftCandidate, chosen[index], let afterUse {
            leftRefreshed = AppLeft(appID: afterUse.appID, at: afterUse.window.at)
        }
        let refreshOnly = afterOpenChose ? afterOpen : (leftRefreshed != nil ? afterUse?.window : (alongsideChose ? opened : nil))
        return SchedulingDecision(
            launches: launches, nextEvaluation: nextEvaluation, window: window ?? refreshOnly,
            refreshed: refreshed.sorted(), leftRefreshed: leftRefreshed)
    }

    public func explain(_ request: TaskRequest, app: AppSchedulingState, context: SchedulingContext) -> Explanation {
        var reasons = rules.blockingReasons(for: request, app: app, context: context)
        let grid = Self.grid(context)
        let window = Self.openWindow(context)
        let predicted = context.configuration.refresh.strategy == .predicted ? context.planning.refresh : nil
        // The request as the refresh planner weighs it (only asked of a refresh).
        let candidate = RefreshPlanner.Candidate(
            appID: request.appID.rawValue, weight: context.planning.refreshWeights[request.appID] ?? 1)
        // Under every-window, when the app's refresh interval ends, if it has not ended.
        let intervalEnd = request.kind == .refresh
            ? Self.refreshIntervals(context).flatMap { Self.intervalHolds(candidate, $0, at: context.now) } : nil
        /// The first planned window after `time` that refreshes the request: in the plan of every
        /// app's pending refresh when the engine gave one, else as if it were alone.
        func plannedWindow(_ planner: RefreshPlanner, after time: UnixTime) -> UnixTime? {
            guard let plan = context.planning.refreshPlan else {
                return planner.nextWindow(after: time, among: [candidate])?.time
            }
            return plan.firstWindow(refreshing: candidate.appID, after: time)
        }
        if !reasons.isEmpty {
            // The request runs no earlier than the window after its last time rule lifts; a
            // refresh, no earlier than the refresh planner's first window after it (`decide`).
            guard let lift = RunWhenEligiblePolicy.timeAllLift(reasons) else { return .waiting(reasons, earliestRun: nil) }
            guard request.kind == .refresh, let planner = predicted else {
                // (An every-window refresh, no earlier than its interval's end either.)
                return .waiting(reasons, earliestRun: Self.gridPoint(atOrAfter: max(lift, intervalEnd ?? lift), grid: grid))
            }
            // (From the slot that starts at the lift, if one does, as in `decide`.)
            if let next = plannedWindow(planner, after: lift - 1) {
                return .waiting(reasons, earliestRun: max(next, lift))
            }
            reasons.append(BlockingReason(
                rule: .predictedUse,
                words: "then no open of \(request.appID.rawValue) likely enough is predicted in the 24 hours after, "
                    + "or the refresh budget is spent: it waits for the app's next use"))
            return .waiting(reasons, earliestRun: nil)
        }
        if request.kind == .refresh, let planner = predicted {
            let appID = request.appID.rawValue
            let runsNow = if let left = Self.afterUseWindow(context), left.appID == request.appID,
                planner.choosesAfterUse(candidate, at: context.now)
            {
                true
            } else if let window {
                planner.choose(at: context.now, among: [candidate], opportunistic: window.kind != .planned).contains(appID)
            } else if !context.planning.appsInUse.contains(request.appID) {
                (Self.afterOpenWindow(context) != nil && planner.chooseAfterOpen(at: context.now, among: [candidate]).contains(appID))
                    || (Self.openedRefreshWindow(context) != nil
                        && planner.chooseAlongside(at: context.now, among: [candidate]).contains(appID))
            } else {
                false
            }
            if runsNow {
                return Explanation(blocking: [], earliestRun: context.now, summary: "Runs in the wake window open now.")
            }
            switch planner.ineligibility(of: candidate, at: context.now) {
            case .inactive(let lastUse):
                reasons.append(BlockingReason(
                    rule: .predictedUse,
                    words: Self.unusedWords(appID, plannerLastUse: lastUse, recordLastUse: app.record.lastUsedAt, context)))
            case .tooSoon(let until):
                let at = Self.gridPoint(atOrAfter: until, grid: grid)
                reasons.append(Self.intervalReason(request.appID, until: until, context))
                if let next = plannedWindow(planner, after: max(context.now, at - 1)) {
                    return .waiting(reasons, earliestRun: max(next, at))
                }
                return .waiting(reasons, earliestRun: nil)
            case nil:
                break
            }
            if reasons.isEmpty {
                if let next = plannedWindow(planner, after: context.now) {
                    reasons.append(BlockingReason(
                        rule: .predictedUse,
                        words: "refresh runs in the wake window before \(appID) is likely to be opened; "
                            + "the planned window is in \(RunWhenEligiblePolicy.durationWords(next - context.now))",
                        liftsAt: next))
                    return .waiting(reasons, earliestRun: next)
                }
                reasons.append(BlockingReason(
                    rule: .predictedUse,
                    words: "no open of \(appID) likely enough is predicted in the next 24 hours, "
                        + "or today's refresh budget is spent: it waits for the app's next use"))
            }
            return .waiting(reasons, earliestRun: nil)
        }
        if let intervalEnd {
            let reason = Self.intervalReason(request.appID, until: intervalEnd, context)
            return .waiting([reason], earliestRun: reason.liftsAt)
        }
        return Self.waitingForTheNextWindow(context)
    }

    /// Why the refresh planner predicts no use of `appID`: it has never seen the app opened
    /// (`plannerLastUse` nil), or its last use it saw was `[limits] inactive_after` ago or more.
    ///
    /// The planner's view decides here, not the record's: a refresh is timed before a predicted
    /// open, and with no open learned, or none recent, there is nothing to time it by. The record
    /// (`recordLastUse`) can be newer: an app found in use when the agent started, opened while
    /// the strategy was `every-window`, or used again by its own word while it was in use. Its
    /// newer use then lifts `app-inactive` (checked before this, on the record) but not this;
    /// the words say so, rather than call the app unused. An open the planner sees makes it
    /// eligible.
    static func unusedWords(
        _ appID: String, plannerLastUse: Double?, recordLastUse: UnixTime?, _ context: SchedulingContext
    ) -> String {
        let now = context.now
        let inactiveAfter = context.configuration.limits.inactiveAfter.seconds
        func ago(_ time: Double) -> String { RunWhenEligiblePolicy.durationWords(now - time, roundingUp: false) }
        let limit = "(the limit is \(RunWhenEligiblePolicy.durationWords(inactiveAfter, roundingUp: false)))"
        // A use on the record that the planner did not see, and that the record's rule counts.
        let unseen = recordLastUse.flatMap { $0 > (plannerLastUse ?? -.infinity) && now < $0 + inactiveAfter ? $0 : nil }
        let text =
            switch (plannerLastUse, unseen) {
            case (let last?, nil): "\(appID) has not been used for \(ago(last)) \(limit), so no use is predicted"
            case (let last?, _?): "the planner last saw \(appID) used \(ago(last)) ago \(limit), so no use is predicted"
            case (nil, _): "no open of \(appID) has been seen yet, so no use can be predicted"
            }
        guard let unseen else { return text + ": refresh is planned once the app is opened" }
        let when = now <= unseen ? "just now" : "\(ago(unseen)) ago"
        return text + " (its use \(when) was not an open the planner saw): refresh is planned once the app is opened"
    }

    /// What `explain` says of work no rule holds: it runs in the window open now, or waits for
    /// the next planned one.
    static func waitingForTheNextWindow(_ context: SchedulingContext) -> Explanation {
        if openWindow(context) != nil {
            return Explanation(blocking: [], earliestRun: context.now, summary: "Runs in the wake window open now.")
        }
        let next = nextPlannedWindow(context)
        let words = context.conditions.onBattery == false ? "on AC" : "on battery"
        let reason = BlockingReason(
            rule: .nextWindow,
            words: "work of all apps starts together in wake windows, every \(RunWhenEligiblePolicy.durationWords(grid(context))) "
                + "\(words): the next is in \(RunWhenEligiblePolicy.durationWords(next - context.now))",
            liftsAt: next)
        return .waiting([reason], earliestRun: next)
    }

    /// A wake waits for the rules that hold a plain request, then for the next window after
    /// they lift, as other work does (a wake is no refresh: the refresh planner does not place it).
    public func explainContentWake(app: AppSchedulingState, context: SchedulingContext) -> Explanation {
        let reasons = rules.contentReasons(app: app, context: context)
        guard reasons.isEmpty else {
            guard let lift = RunWhenEligiblePolicy.timeAllLift(reasons) else { return .waiting(reasons, earliestRun: nil) }
            return .waiting(reasons, earliestRun: Self.gridPoint(atOrAfter: lift, grid: Self.grid(context)))
        }
        return Self.waitingForTheNextWindow(context)
    }

    /// A request no rule blocks waits for the planner: a refresh for its predicted window or its
    /// refresh interval (under every-window, for its interval, else the next wake window), other
    /// work for the next wake window.
    public func holds(_ work: AppWork, launched: Launch?, context: SchedulingContext) -> [BlockingRule: Int] {
        let planner = context.configuration.refresh.strategy == .predicted ? context.planning.refresh : nil
        let intervals = Self.refreshIntervals(context)
        let windowOpen = Self.openWindow(context) != nil
        return rules.holds(work, launched: launched, context: context) { request in
            guard request.kind == .refresh, planner != nil || intervals != nil else { return windowOpen ? nil : .nextWindow }
            let candidate = RefreshPlanner.Candidate(
                appID: request.appID.rawValue, weight: context.planning.refreshWeights[request.appID] ?? 1)
            if let planner {
                if case .tooSoon = planner.ineligibility(of: candidate, at: context.now) { return .refreshInterval }
                return .predictedUse
            }
            if let intervals, Self.intervalHolds(candidate, intervals, at: context.now) != nil { return .refreshInterval }
            return windowOpen ? nil : .nextWindow
        }
    }

    public func refreshStatus(app: AppRecord, context: SchedulingContext) -> RefreshStatus {
        rules.refreshStatus(app: app, context: context)
    }

    public func backgroundTaskRefusal(context: SchedulingContext) -> BlockingReason? {
        rules.backgroundTaskRefusal(context: context)
    }

    /// The rules that hold back an app's content-available wake: those of a plain request with
    /// no conditions of its own (the switches, battery, power saver, use, conduct, reachability).
    public func ruleReasons(
        for request: TaskRequest, app: AppSchedulingState, context: SchedulingContext, words: Bool
    ) -> [BlockingReason] {
        rules.ruleReasons(for: request, app: app, context: context, words: words)
    }

    public func contentReasons(app: AppSchedulingState, context: SchedulingContext, words: Bool = true) -> [BlockingReason] {
        rules.contentReasons(app: app, context: context, words: words)
    }
}
