import BGPolicyCore
import BGPolicyDBus
import BGPolicyStore
import Glibc
import Logging

/// What the engine feeds the planner: opens for the predictor, opportunities, and each app's
/// standing from the results of its refreshes.
extension TaskEngine {
    /// Whether the refresh planner predicts (`[refresh] strategy = predicted`, fixed for the
    /// agent's life). Under every-window it keeps only each app's last refresh, for its
    /// interval: it learns no use, plans no refresh and reports no budget.
    var predicts: Bool { configuration.refresh.strategy == .predicted }

    /// The usage log the planner learns from at start: at most this many events (opens and
    /// closes), the newest.
    static let warmEventsLimit = 500_000

    /// Replays the usage log (8 weeks, the raw retention) into the refresh planner, so a
    /// restart keeps what was learned: opens for the predictor, closes for how soon the user
    /// comes back to each app. Apps' standing comes back from their recent history.
    func warmPlanner(now: UnixTime) throws(StoreError) {
        let since = now - TaskStore.usageRetention
        let logged = try store.usageEvents(since: since, limit: Self.warmEventsLimit).filter { $0.time <= now }
        if predicts, var planner = refreshPlanner {
            planner.registeredAppCount = apps.count
            // In the log's order. Registrations that counted as opens are in the log; a database
            // written before they were has only each app's last one, in its record: it counts
            // for an app with no open logged. (Not whenever it is newer than the app's last
            // logged open: a second unit of an app in use keeps the record's last use, and is
            // no open.)
            var events = logged.enumerated().map { (time: $1.time, order: $0, appID: $1.appID, opened: $1.state == .foreground) }
            let openLogged = Set(events.lazy.filter(\.opened).map(\.appID))
            // A leave keeps its time as the app's last use (`noteLeft`): a last use no later
            // than the app's last logged close is that close, not an open. Taken for one, it
            // sorted after the close of the same time, and a restart held the app in use.
            var lastClose: [AppID: UnixTime] = [:]
            for event in events where !event.opened { lastClose[event.appID] = max(lastClose[event.appID] ?? event.time, event.time) }
            for (appID, runtime) in apps {
                if let used = runtime.record.lastUsedAt, used > since, used <= now, !openLogged.contains(appID),
                   used > lastClose[appID] ?? -.infinity {
                    events.append((used, events.count, appID, true))
                }
            }
            events.sort { ($0.time, $0.order) < ($1.time, $1.order) }
            planner.adaptsThresholds = false
            let inUse = planner.learn(
                events.map { UsageEvent(time: $0.time, appID: $0.appID.rawValue, kind: $0.opened ? .open : .close) },
                localOffset: { Self.localUTCOffset(at: $0) })
            appsInUse = Set(inUse.compactMap(AppID.init(rawValue:)))
            inUseByLogAtStart = appsInUse
            planner.utcOffsetSeconds = Self.localUTCOffset(at: now)
            planner.advance(to: now)
            planner.adaptsThresholds = true
            refreshPlanner = planner
        } else {
            // Without the planner nothing is learned, but which apps the user has open still
            // matters: the CPU monitor leaves them alone (`cpuMonitorFollowsUse`).
            var inUse: Set<AppID> = []
            for event in logged {
                if event.state == .foreground { inUse.insert(event.appID) } else { inUse.remove(event.appID) }
            }
            appsInUse = inUse
            inUseByLogAtStart = inUse
        }
        for (appID, result) in try store.refreshResults(since: now - Self.violationMemory) {
            noteRefreshResult(appID, result)
        }
        if !logged.isEmpty {
            logger.info("Usage learned from the log", metadata: ["events": "\(logged.count)", "apps": "\(apps.count)"])
        }
    }

    /// Takes back what the refresh planner stored before the agent last stopped
    /// (`RefreshPlanner.Snapshot`: the last refreshes, the day's wake-ups, the budget, the
    /// thresholds), once it has learned from the usage log. Without it (a first start, a
    /// store that cannot be read) the planner starts from its defaults.
    func restorePlannerState(now: UnixTime) {
        guard refreshPlanner != nil else { return }
        do {
            guard let snapshot = try store.plannerSnapshot() else { return }
            refreshPlanner?.restore(snapshot, at: now)
            logger.info(
                "Refresh planner state restored",
                metadata: ["wakes.day": "\(snapshot.wakes.count)", "refreshes.day": "\(snapshot.lastRefresh.count)"])
        } catch {
            logger.warning(
                "Could not read the refresh planner's stored state; its budget and thresholds start afresh",
                metadata: ["error": "\(error)"])
        }
    }

    /// Stores what the refresh planner must not forget across a restart: after every window
    /// that refreshed, a refresh taken back, and at stop (`advancing`: the planner first catches
    /// up to now, since the agent may have slept through slots with nothing due). A failure
    /// (a full disk) is logged and nothing more: the planner goes on from memory, and only a
    /// restart before the next save would forget the latest refreshes.
    func savePlannerState(advancing: Bool = false) {
        if advancing { refreshPlanner?.advance(to: Self.wallNow()) }
        guard let snapshot = refreshPlanner?.snapshot() else { return }
        do {
            try store.savePlannerSnapshot(snapshot)
        } catch {
            logger.warning(
                "Could not store the refresh planner's state; a restart now would forget the latest refreshes",
                metadata: ["error": "\(error)"])
        }
    }

    /// Usage housekeeping: raw events older than 8 weeks fold into the per-hour aggregates
    /// (kept) and go, and when some went the WAL is checkpointed to give the space back. At
    /// start, and after every 1,000 appends; `now` is `retentionNow`, never a clock set ahead. Nothing to prune, no checkpoint: a start is not
    /// delayed by copying the WAL (SQLite checkpoints it by itself as it grows).
    func pruneUsage(now: UnixTime) throws(StoreError) {
        let removed = try store.pruneUsage(olderThan: now - TaskStore.usageRetention)
        guard removed > 0 else { return }
        try store.compact()
        logger.info("Old usage folded into the hourly aggregates", metadata: ["rows": "\(removed)"])
    }

    /// Appends one usage row, and every 1,000 rows prunes the log. Every source of usage
    /// (the app units, `ReportUsage`) goes through here.
    func appendUsage(_ appID: AppID, _ state: UsageState, at time: UnixTime) throws(StoreError) {
        try store.appendUsage(appID: appID, state: state, at: time)
        usageAppends += 1
        if usageAppends % 1000 == 0 {
            do {
                try pruneUsage(now: retentionNow(wall: time))
            } catch {
                // The row is in; the prune is tried again 1,000 rows later.
                logger.warning("Could not prune old usage; will try again later", metadata: ["error": "\(error)"])
            }
        }
    }

    /// The user opened the app: it is in use, the predictor learns it, and its work may be due.
    /// Use is tracked with either strategy (the CPU monitor follows it); only the planner learns.
    func noteOpen(_ appID: AppID, at time: UnixTime) {
        guard appsInUse.insert(appID).inserted || predicts else { return }
        // Without the planner no evaluation follows to publish it (`GetStatus`'s `in_use`).
        guard predicts else { return publishStatus(nextWindow: evaluationTimerDue) }
        refreshPlanner?.recordOpen(of: appID.rawValue, at: time)
        // The user is at work: a refresh window opens for the apps likely to be opened next.
        appOpenedAt = time
        requestEvaluation()
    }

    /// The user left the app (its unit went away, or it reported itself in the background): the
    /// planner learns whether the user comes back to it soon, and a window opens for a minute
    /// for the app's own refresh, if the planner chooses it (`WindowPlanner.afterUseWindow`),
    /// and then for the other apps' the planner takes alongside it: every app is asked.
    /// Only an app the user opened counts: the end of a launch the agent made is not the user
    /// leaving anything. The app was in use until now, so its record keeps the leave as its
    /// last use (`[limits] inactive_after` counts from it): an app kept open longer than that
    /// is not unused the moment it is closed.
    func noteLeft(_ appID: AppID, at time: UnixTime) {
        selfReportedInUse.remove(appID)
        lastUsageReport[appID] = nil
        inUseByLogAtStart.remove(appID)
        guard appsInUse.remove(appID) != nil else { return }
        do {
            try noteLastUse(of: appID, at: time)
        } catch {
            // This run still knows it (the next save of the record stores it); a restart before
            // then would take the app's last open for its last use.
            apps[appID]?.record.lastUsedAt = time
            requestEvaluation(for: appID)
            logger.warning("Could not record the app's last use as it was left", metadata: ["app.id": "\(appID)", "error": "\(error)"])
        }
        guard predicts else { return publishStatus(nextWindow: evaluationTimerDue) }
        refreshPlanner?.recordClose(of: appID.rawValue, at: time)
        appLeft = AppLeft(appID: appID, at: time)
        requestEvaluation()
    }

    /// A registration that means the user opened the app (`RegistrationMeaning.opened`). The
    /// predictor counts it as an open, and the usage log gets it (as it gets the close, when the
    /// app's last connection goes: `lastConnectionClosed`), unless one was just recorded (the
    /// app's unit appeared, or it reported itself in the foreground) or a unit of the app runs:
    /// the unit's appearance was the open, and this is a process of the same use.
    ///
    /// For an app the user manager does not see (a session without app scopes, an app id of its
    /// own word), registrations are its only opens: kept in the record alone (`last_used_at`),
    /// as they were, a restart learned one open per app and every logged close, and forgot its
    /// habits. The record's `last_used_at` still stands in for a database written before.
    func noteRegistrationAsOpen(_ appID: AppID, at time: UnixTime) {
        // Nor is a registration of an app already in use by its own word: the same process
        // registering again (a new identifier list), or a second one of the app. The log pairs
        // each open with one leave, the app's last connection closing.
        let alreadyInUse = isInUseByItsWord(appID)
        selfReportedInUse.insert(appID)
        guard !alreadyInUse, !openedUnits.contains(appID) else { return }
        if let last = refreshPlanner?.predictor.lastOpen(of: appID.rawValue), time - last < 60 { return }
        appendUsageOrWarn(appID, .foreground, at: time, metadata: ["app.id": "\(appID)", "source": "registration"])
        noteOpen(appID, at: time)
    }

    /// A registration by a process that was running before the agent started
    /// (`RegistrationMeaning.alreadyRunning`). The app is as the usage log left it when the agent
    /// stopped: in use (by its own word, so its exit is a leave) if the log has it opened and not
    /// left, else not (the user left it before). No open is learned, nor a window opened, since
    /// when the user opened it is not known; as for an app whose unit runs at connect
    /// (`appUnitsRunning`), a trial of `FollowEstimator` under way ends without a verdict. The
    /// log's view is the one from start, since the user manager's listing at connect may have
    /// dropped the app from `appsInUse` before it registered again.
    func noteRegistrationOfRunningApp(_ appID: AppID) {
        guard inUseByLogAtStart.contains(appID) else { return }
        selfReportedInUse.insert(appID)
        guard appsInUse.insert(appID).inserted, predicts else { return }
        refreshPlanner?.recordOpenedUnseen(appID.rawValue)
    }

    /// The planner's facts at `now`. The planner itself must already be advanced to `now`.
    /// The weights are worked out for `concerned` apps only (every app when `nil`): an
    /// evaluation after one app's Submit needs that app's, not a thousand.
    func planningFacts(concerning concerned: [AppID]? = nil, at now: UnixTime) -> PlanningFacts {
        var weights: [AppID: Double] = [:]
        for appID in concerned ?? Array(apps.keys) {
            guard apps[appID] != nil else { continue }
            let violations = recentViolations(of: appID, at: now).count
            let weight = Self.refreshWeight(noDataStreak: noDataStreak[appID] ?? 0, violations: violations)
            if weight < 1 { weights[appID] = weight }
        }
        refreshPlanner?.registeredAppCount = apps.count
        return PlanningFacts(
            refresh: refreshPlanner, opportunity: opportunity, refreshWeights: weights,
            contentAvailable: Set(deliverableContentWakeApps()), appOpenedAt: appOpenedAt, appLeft: appLeft,
            refreshWindow: refreshWindow, appsInUse: appsInUse)
    }

    /// An app's standing when refreshes are shared out: halved for every two `no-data` answers
    /// in a row after the first, and for every violation (overrun, CPU) in the last 7 days;
    /// never below `RefreshPlanner.minimumWeight`. A `new-data` answer restores the first part.
    static func refreshWeight(noDataStreak: Int, violations: Int) -> Double {
        let exponent = Double(max(noDataStreak - 1, 0)) / 2 + Double(max(violations, 0))
        return max(RefreshPlanner.minimumWeight, Double.pow2(-min(exponent, 10)))
    }

    /// A refresh ended with `result`: its run of `no-data` answers grows or ends.
    func noteRefreshResult(_ appID: AppID, _ result: TaskResult) {
        switch result {
        case .noData: noDataStreak[appID, default: 0] += 1
        case .newData: noDataStreak[appID] = 0
        case .failed, .unspecified: break
        }
    }

    /// Which change of conditions opens an opportunistic window: the machine is in use anyway.
    static func opportunity(from old: Conditions, to new: Conditions) -> OpportunityReason? {
        if old.locked == true, new.locked == false { return .unlocked }
        if old.idle == true, new.idle == false, new.locked != true { return .userActive }
        if old.onBattery == true, new.onBattery == false { return .chargerPlugged }
        let unmeteredNow = new.connectivity == .full && new.metered == false
        let unmeteredBefore = old.connectivity == .full && old.metered == false
        // Only from a network known to be absent, partial or metered: NetworkManager's facts
        // arriving (at start, when it comes back) one after the other, connectivity before
        // metered, are no network appearing.
        let knownOtherBefore = old.connectivity != .unknown && (old.connectivity != .full || old.metered != nil)
        if unmeteredNow, !unmeteredBefore, knownOtherBefore { return .unmeteredNetwork }
        return nil
    }

    /// The local time's offset from UTC at `at` (now by default), in seconds: the predictor's
    /// hours are local hours. Asked before each decision, so daylight saving time is followed,
    /// and so is a change of zone: `tzset` first, which makes glibc read /etc/localtime again
    /// when the file changed (it compares the file's inode and modification time, one `stat`;
    /// `localtime_r` alone never looks again). With `TZ` set in the environment the zone is
    /// `TZ`'s, fixed for the agent's life.
    static func localUTCOffset(at: UnixTime? = nil) -> Double {
        tzset()
        var now = at.map { time_t($0.rounded(.down)) } ?? time(nil)
        var local = tm()
        guard localtime_r(&now, &local) != nil else { return 0 }
        return Double(local.tm_gmtoff)
    }
}

extension Double {
    /// 2 to the power `exponent`, exactly for integers and by `exp` in between.
    fileprivate static func pow2(_ exponent: Double) -> Double {
        Glibc.exp2(exponent)
    }
}

extension TaskEngine {
    static let timelineSlots = 96

    /// The rules the timeline's plan does not apply again: the refresh planner's own, which
    /// the plan is, and a slice of the app running now, which ends within minutes.
    static let rulesTheTimelinePlans: Set<BlockingRule> = [.nextWindow, .predictedUse, .refreshInterval, .appBusy]

    /// The pending refreshes the planner may plan, in app-id order, and when those held by a
    /// rule come free. Each as the rules stand now (besides `rulesTheTimelinePlans`): one held
    /// by a rule that lifts at a known time (its earliest_begin, an overrun penalty, a retry
    /// after a failed delivery) is planned from then on; one held by a rule that lifts only when
    /// something changes (a switch, power saver, a low battery, an app that cannot be reached,
    /// sleep) is not planned at all.
    func plannedRefreshes(_ context: SchedulingContext) -> (candidates: [RefreshPlanner.Candidate], notBefore: [String: UnixTime]) {
        let weights = context.planning.refreshWeights
        var notBefore: [String: UnixTime] = [:]
        var candidates: [RefreshPlanner.Candidate] = []
        for appID in pending.keys.sorted() {
            guard let requests = pending[appID], requests.values.contains(where: { $0.kind == .refresh }),
                let state = schedulingState(of: appID, at: context.now)
            else { continue }
            // The app is planned from when the first of its refreshes comes free (with
            // `[limits] pending_refresh` above 1 it may have several, held until different
            // times): not from whichever the table gave first.
            var freeAt: UnixTime?
            for refresh in requests.values where refresh.kind == .refresh {
                // The rules alone: the planner's own are what is being planned (and its
                // look-ahead per app, which `explain` runs, cost a timeline's worth for each).
                let held = policy.ruleReasons(for: refresh, app: state, context: context, words: false)
                    .filter { !Self.rulesTheTimelinePlans.contains($0.rule) }
                guard !held.isEmpty else {
                    freeAt = -.infinity
                    break
                }
                if let lifts = RunWhenEligiblePolicy.timeAllLift(held) { freeAt = min(freeAt ?? lifts, lifts) }
            }
            guard let freeAt else { continue }
            if freeAt > context.now { notBefore[appID.rawValue] = freeAt }
            candidates.append(RefreshPlanner.Candidate(appID: appID.rawValue, weight: weights[appID] ?? 1))
        }
        return (candidates, notBefore)
    }

    /// The refresh plan from `context.now` (`RefreshPlan`) of every pending refresh the planner
    /// may plan (`plannedRefreshes`), made through `end`, or up to the first window that
    /// refreshes `appID` when given; with `end` nil, as far as each of them needs
    /// (`RefreshPlan.extendForEveryRefresh`). Nil without a refresh planner.
    func refreshPlan(_ context: SchedulingContext, through end: UnixTime?, stoppingAfter appID: AppID? = nil) -> RefreshPlan? {
        guard predicts, let planner = context.planning.refresh else { return nil }
        let (candidates, notBefore) = plannedRefreshes(context)
        var plan = RefreshPlan(planner, from: context.now, among: candidates, notBefore: notBefore)
        if let end {
            plan.extend(through: end, stoppingAfter: appID?.rawValue)
        } else {
            plan.extendForEveryRefresh()
        }
        return plan
    }

    /// `GetTimeline`: the next 24 hours as the planner sees them now (see `AgentInterfaces`).
    /// The refresh plan assumes each app resubmits after every refresh, as apps do, and that
    /// nothing else happens: no open, no change of conditions.
    func timeline(of only: AppID?) -> [String: Variant] {
        let now = Self.wallNow()
        let context = context(now: now)
        let slotSeconds = 900.0
        let start = (now / slotSeconds).rounded(.down) * slotSeconds
        let end = start + Double(Self.timelineSlots) * slotSeconds
        let shown = only.map { [$0] } ?? apps.keys.sorted()
        let inactiveAfter = configuration.limits.inactiveAfter.seconds

        var planned: [AppID: [UnixTime]] = [:]
        var windows = Set<UnixTime>()
        if let plan = refreshPlan(context, through: end) {
            for (app, times) in plan.refreshes {
                if let appID = AppID(rawValue: app) { planned[appID] = times }
            }
            windows.formUnion(plan.windows.lazy.map(\.time))
        }
        if let due = evaluationTimerDue, due < end { windows.insert(due) }

        let rows: [[String: Variant]] = shown.map { appID in
            let record = apps[appID].map { usedNowIfInUse($0.record, at: now) }
            let lastUsed = max(record?.lastUsedAt ?? record?.registeredAt ?? now, record?.registeredAt ?? now)
            // None under `every-window`, whose planner predicts nothing: not zero.
            let probabilities = refreshPlanner.flatMap { planner in predicts ? planner : nil }.map { planner in
                (0..<Self.timelineSlots).map { index in
                    planner.predictor.probability(of: appID.rawValue, inSlotAt: start + Double(index) * slotSeconds)
                }
            } ?? []
            return [
                "app_id": Variant(appID.rawValue),
                "probabilities": Variant(probabilities),
                "refreshes": Variant((planned[appID] ?? []).map { Int64($0.rounded()) }),
                "pending": Variant((pending[appID] ?? [:]).keys.sorted()),
                "inactive": Variant(now >= lastUsed + inactiveAfter),
            ]
        }
        return [
            "now": Variant(Int64(now.rounded(.down))),
            "start": Variant(Int64(start)),
            "slot_seconds": Variant(UInt32(slotSeconds)),
            "slots": Variant(UInt32(Self.timelineSlots)),
            "grid_seconds": Variant(UInt32(WindowPlanner.grid(context))),
            "windows": Variant(windows.sorted().map { Int64($0.rounded()) }),
            "apps": Variant(rows),
            "strategy": Variant(configuration.refresh.strategy.rawValue),
            "inactive_after_seconds": Variant(Int64(inactiveAfter.rounded(.down))),
        ]
    }
}
