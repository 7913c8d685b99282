import BGPolicyCore
import BGPolicyDBus
import BGPolicyStore
import Logging
import Synchronization

/// The dictionaries `Scheduler1` and `Admin1` return (keys documented in AgentInterfaces).
extension TaskEngine {
    static func dictionary(_ request: TaskRequest) -> [String: Variant] {
        var d: [String: Variant] = [
            "identifier": Variant(request.identifier),
            "kind": Variant(request.kind.rawValue),
            "requires_network": Variant(request.requiresNetwork),
            "requires_external_power": Variant(request.requiresExternalPower),
            "submitted_at": Variant(Int64(request.submittedAt)),
            "delivery_attempts": Variant(UInt32(clamping: request.deliveryAttempts)),
        ]
        if let begin = request.earliestBegin { d["earliest_begin"] = Variant(Int64(begin)) }
        if let expected = request.expectedDuration { d["expected_duration"] = Variant(expected) }
        if let error = request.lastAttemptError { d["last_attempt_error"] = Variant(error) }
        return d
    }

    /// A pending request, or an app's undelivered content-available wake, which waits like one.
    enum PendingWork {
        case request(TaskRequest)
        case contentWake(ContentAvailableQueue<[String: Variant]>.Wake)
    }

    /// Every pending request and undelivered content-available wake with its explanation, app
    /// by app in app-id order, an app's requests by identifier, then its wake: what `ListPending`
    /// lists, and `GetStatus`'s `next_planned_window` is the earliest window of.
    func forEachPendingExplanation(_ body: (AppID, PendingWork, Explanation) -> Void) {
        let now = Self.wallNow()
        var context = context(now: now)
        // Every refresh's earliest window is read from one plan of them all, made once, as
        // `GetTimeline` draws it and `Explain` reads it (see `PlanningFacts.refreshPlan`).
        // Planned alone, each cost a look-ahead of its own (up to 3.7 ms with 1,000 apps
        // pending: 2 s on the engine's thread for them all), and could name another window.
        if pending.values.contains(where: { $0.values.contains { $0.kind == .refresh } }) {
            context.planning.refreshPlan = refreshPlan(context, through: nil)
        }
        for appID in Set(pending.keys).union(contentWakeApps()).sorted() {
            guard let state = schedulingState(of: appID, at: now) else { continue }
            for request in (pending[appID] ?? [:]).values.sorted(by: { $0.identifier < $1.identifier }) {
                body(appID, .request(request), policy.explain(request, app: state, context: context))
            }
            // A wake another process sent waits like work, for the same rules: it is listed too,
            // so that one held for days (the app unused, unreachable) says why.
            if let wake = contentWakes.wake(for: appID) {
                body(appID, .contentWake(wake), policy.explainContentWake(app: state, context: context))
            }
        }
    }

    func listPending() -> [[String: Variant]] {
        var out: [[String: Variant]] = []
        forEachPendingExplanation { appID, work, explanation in
            var d: [String: Variant]
            switch work {
            case .request(let request):
                d = Self.dictionary(request)
            case .contentWake(let wake):
                d = [
                    "identifier": Variant(""),
                    "kind": Variant(DeliveryKind.contentAvailable.rawValue),
                    "submitted_at": Variant(Int64(wake.firstReceivedAt)),
                    "notifications": Variant(UInt32(clamping: wake.notificationCount)),
                ]
            }
            d["app_id"] = Variant(appID.rawValue)
            d["blocking"] = Variant(explanation.blocking.map(\.rule.rawValue))
            d["reasons"] = Variant(explanation.blocking.map(\.words))
            if let earliest = explanation.earliestRun { d["earliest_window"] = Variant(Int64(earliest.rounded(.up))) }
            out.append(d)
        }
        return out
    }

    /// The earliest window any pending work can run in: the earliest of the `earliest_window`s
    /// `ListPending` gives (and `Explain`, and `GetTimeline` draws for refreshes). Nil when no
    /// work is pending, or none can be placed without news (a switch, the app's next use).
    func nextPlannedWindow() -> UnixTime? {
        var earliest: UnixTime?
        forEachPendingExplanation { _, _, explanation in
            guard let time = explanation.earliestRun else { return }
            earliest = min(earliest ?? time, time)
        }
        return earliest
    }

    /// How often at most `GetStatus`'s `next_planned_window` is worked out: it explains every
    /// pending request, as `ListPending` does, which the status is published far more often
    /// than (after every `Submit`), and which takes milliseconds with thousands pending.
    static let plannedWindowInterval: Duration = .seconds(1)

    /// `nextPlannedWindow`, worked out afresh when the last was a `plannedWindowInterval` ago or
    /// more; else the last one, and it is worked out again (and the status published) once the
    /// interval is up: a burst of changes costs one at its start and one at its end.
    func plannedWindowForStatus() -> UnixTime? {
        let now = ContinuousClock.now
        if let last = plannedWindowWorkedOutAt, now - last < Self.plannedWindowInterval {
            if plannedWindowRefresh == nil {
                let wait = last + Self.plannedWindowInterval - now
                plannedWindowRefresh = Task {
                    do { try await AgentExecutor.sleep(for: wait) } catch { return }
                    self.plannedWindowRefresh = nil
                    guard !self.stopping else { return }
                    self.publishStatus(nextWindow: self.evaluationTimerDue)
                }
            }
            return plannedWindowShown
        }
        plannedWindowWorkedOutAt = now
        plannedWindowShown = nextPlannedWindow()
        return plannedWindowShown
    }

    func listApps() -> [[String: Variant]] {
        let now = Self.wallNow()
        let context = context(now: now)
        return apps.keys.sorted().compactMap { appID -> [String: Variant]? in
            let violations = recentViolations(of: appID, at: now)
            guard let runtime = apps[appID] else { return nil }
            let record = runtime.record
            var d: [String: Variant] = [
                "app_id": Variant(appID.rawValue),
                "identifiers": Variant(record.identifiers),
                "identity": Variant(record.identity.rawValue),
                "verified": Variant(record.identity.isVerified),
                "enabled": Variant(record.enabled),
                "connected": Variant(!runtime.connections.isEmpty),
                "background_only": Variant(record.backgroundOnly),
                "registered_at": Variant(Int64(record.registeredAt)),
                "pending": Variant(UInt32(pending[appID]?.count ?? 0)),
                "running": Variant(UInt32(slices.values.filter { $0.appID == appID }.reduce(0) { $0 + $1.openMembers.count })),
                "violations": Variant(UInt32(clamping: violations.count)),
                "refresh_status": Variant(policy.refreshStatus(app: record, context: context).rawValue),
            ]
            if let busName = record.busName { d["bus_name"] = Variant(busName) }
            if let used = record.lastUsedAt { d["last_used_at"] = Variant(Int64(used)) }
            return d
        }
    }

    static func dictionary(_ entry: HistoryEntry) -> [String: Variant] {
        var d: [String: Variant] = [
            "id": Variant(entry.id ?? 0),
            "time": Variant(entry.time),
            "event": Variant(entry.event.rawValue),
            "detail": Variant(entry.detail),
        ]
        if let appID = entry.appID { d["app_id"] = Variant(appID.rawValue) }
        if let identifier = entry.identifier { d["identifier"] = Variant(identifier) }
        if let taskID = entry.taskID { d["task_id"] = Variant(taskID) }
        if let kind = entry.kind { d["kind"] = Variant(kind.rawValue) }
        if let result = entry.result { d["result"] = Variant(result.rawValue) }
        if let cpu = entry.cpuSeconds { d["cpu_seconds"] = Variant(cpu) }
        if let duration = entry.duration { d["duration"] = Variant(duration) }
        return d
    }

    /// Why a request has not run: from the policy when pending, from the slice when running;
    /// with what the usage log says of the app's opens (`usageFacts`) whatever the state.
    func explain(appID: AppID, identifier: String) -> [String: Variant] {
        var d: [String: Variant] = ["app_id": Variant(appID.rawValue), "identifier": Variant(identifier)]
        d.merge(usageFacts(of: appID)) { _, new in new }
        if let (slice, member) = runningTask(of: appID, identifier: identifier) {
            d["state"] = Variant("running")
            d["kind"] = Variant(member.kind.rawValue)
            d["runnable"] = Variant(false)
            d["blocking"] = Variant([String]())
            d["reasons"] = Variant([String]())
            d["summary"] = Variant(
                "Running now as task \(member.taskID) in slice \(slice.id), \(Int(max(0, slice.length.seconds - slice.elapsed))) s left.")
            return d
        }
        let now = Self.wallNow()
        guard let request = pending[appID]?[identifier], let state = schedulingState(of: appID, at: now) else {
            d["state"] = Variant("not-pending")
            d["runnable"] = Variant(false)
            d["blocking"] = Variant([String]())
            d["reasons"] = Variant([String]())
            let registered = apps[appID]?.record.identifiers ?? []
            if !identifier.isEmpty, !registered.contains(identifier) {
                // "Submit it first" would send the app to a Submit refused with NotPermitted.
                d["summary"] = Variant(
                    "\(appID) did not register the task identifier '\(SchedulerError.shown(identifier))', so it cannot be submitted; registered: "
                        + (registered.isEmpty ? "none" : registered.joined(separator: ", ")) + ".")
                return d
            }
            d["summary"] = Variant(
                "\(appID) has no pending request '\(SchedulerError.shown(identifier))': submit it first ('bgpolicy history \(appID)' shows what happened to earlier ones).")
            return d
        }
        var facts = context(now: now)
        if request.kind == .refresh {
            // The window the refresh goes in depends on the others pending (see
            // `PlanningFacts.refreshPlan`): read from the plan `GetTimeline` draws and
            // `ListPending` reads, made as far as the first window that takes the app.
            facts.planning.refreshPlan = refreshPlan(facts, through: now + 86_400, stoppingAfter: appID)
        }
        let explanation = policy.explain(request, app: state, context: facts)
        d["state"] = Variant("pending")
        d["kind"] = Variant(request.kind.rawValue)
        d["runnable"] = Variant(explanation.runnable)
        d["blocking"] = Variant(explanation.blocking.map(\.rule.rawValue))
        d["reasons"] = Variant(explanation.blocking.map(\.words))
        d["summary"] = Variant(explanation.summary)
        if let earliest = explanation.earliestRun { d["earliest_window"] = Variant(Int64(earliest.rounded(.up))) }
        return d
    }

    /// The opens of `appID` the usage log holds, for `Explain`: what the predictor learned
    /// from, so that "it is never refreshed" can be told apart from "the agent never sees it
    /// opened". `opens` (u) every open recorded up to now (`TaskStore.usageSummary`),
    /// `opens_last_24h` (u), and `last_open` (x) when there was one. Nothing when the log cannot be read: the explanation stands
    /// without it, and the journal says why.
    func usageFacts(of appID: AppID) -> [String: Variant] {
        let summary: UsageSummary
        do {
            summary = try store.usageSummary(appID: appID, now: Self.wallNow())
        } catch {
            logger.warning("Could not read the usage log for Explain", metadata: ["app.id": "\(appID)", "error": "\(error)"])
            return [:]
        }
        // Read from a file: a count or time out of range (a damaged row) must not trap.
        let total = summary.opensTotal.isFinite ? min(max(summary.opensTotal.rounded(), 0), Double(UInt32.max)) : 0
        var d: [String: Variant] = [
            "opens": Variant(UInt32(total)),
            "opens_last_24h": Variant(UInt32(clamping: summary.opensLast24h)),
        ]
        if let last = summary.lastOpen.flatMap({ Int64(exactly: $0.rounded(.down)) }) { d["last_open"] = Variant(last) }
        return d
    }

    /// Refreshes the part of `GetStatus` that the engine owns. `GetStatus` is answered on the
    /// connection's thread from this snapshot, without a hop to the engine.
    func publishStatus(nextWindow: UnixTime?) {
        var running: [[String: Variant]] = []
        for slice in slices.values.sorted(by: { $0.startedAt < $1.startedAt }) {
            var d: [String: Variant] = [
                "app_id": Variant(slice.appID.rawValue),
                "slice_id": Variant(slice.id),
                "task_ids": Variant(slice.openMembers.map(\.taskID)),
                "identifiers": Variant(slice.openMembers.map(\.request.identifier)),
                "started_at": Variant(Int64(slice.startedAt)),
                "deadline": Variant(Int64(slice.deadline.rounded(.up))),
            ]
            if let percent = slice.lastCPUPercent { d["cpu_percent"] = Variant(percent) }
            running.append(d)
        }
        var status: [String: Variant] = [
            "global_enabled": Variant(globalEnabled),
            "apps": Variant(UInt32(apps.count)),
            "pending": Variant(UInt32(pendingCount)),
            "running": Variant(running),
        ]
        if contentWakes.undeliveredCount > 0 { status["content_wakes"] = Variant(UInt32(contentWakes.undeliveredCount)) }
        if let nextWindow { status["next_window"] = Variant(Int64(nextWindow.rounded(.up))) }
        if let planned = plannedWindowForStatus() { status["next_planned_window"] = Variant(Int64(planned.rounded(.up))) }
        if !appsInUse.isEmpty {
            if inUseStatus == nil { inUseStatus = Variant(appsInUse.map(\.rawValue).sorted()) }
            status["in_use"] = inUseStatus
        }
        if predicts, let planner = refreshPlanner {
            let refresh: [String: Variant] = [
                "budget_left": Variant(planner.budgetLeft),
                "budget_per_day": Variant(planner.budgetPerDay),
                "wakeups_24h": Variant(UInt32(clamping: planner.wakeUps(inDayUpTo: Self.wallNow()))),
                "wakeups_target": Variant(planner.targetWakesPerDay),
                "wakeups_max": Variant(UInt32(clamping: planner.maxWakesPerDay)),
                "refresh_yield": Variant(planner.refreshYield),
                "refreshes_judged": Variant(planner.refreshesJudged),
            ]
            status["refresh"] = Variant(refresh)
        }
        let waiting = holdsTotal
        // Only when something waits: the reply of an idle agent stays as small as it was.
        if !waiting.isEmpty {
            status["waiting"] = Variant(Dictionary(uniqueKeysWithValues: waiting.map { ($0.key.rawValue, UInt32(clamping: $0.value)) }))
            status["waiting_summary"] = Variant(BlockingRule.summary(
                of: waiting, inactiveAfter: configuration.limits.inactiveAfter.seconds))
        }
        let entries = StatusEntry.encode(status)
        statusEntries.withLock { $0 = entries }
    }
}
