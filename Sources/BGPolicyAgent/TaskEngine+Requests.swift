import BGPolicyCore
import BGPolicyStore

/// Requests: submitting, cancelling and listing an app's pending work, its usage reports,
/// and the user's switches (per app and for all apps).
extension TaskEngine {
    struct SubmitOptions {
        var earliestBegin: Int64?
        var requiresNetwork = false
        var requiresExternalPower = false
        var expectedDuration: UInt32?
    }

    func submit(caller: String, identifier: String, kind kindText: String, options: SubmitOptions) async throws(SchedulerError) {
        let appID = try app(of: caller)
        guard let runtime = apps[appID] else { throw .notRegistered }
        guard runtime.record.identifiers.contains(identifier) else {
            throw .notPermitted(identifier, app: appID, registered: runtime.record.identifiers)
        }
        guard let kind = TaskKind(rawValue: kindText) else {
            throw .invalid("kind '\(SchedulerError.shown(kindText))' is not one of: refresh, processing")
        }
        let now = Self.wallNow()
        if let begin = options.earliestBegin {
            if begin < 0 { throw .invalid("earliest_begin is Unix seconds and cannot be negative; got \(begin)") }
            let limit = configuration.limits.earliestBeginMax.seconds
            if UnixTime(begin) > now + limit {
                // Exact, so that a value just past the limit does not read as within it.
                let past = RunWhenEligiblePolicy.durationWords(UnixTime(begin) - now - limit)
                throw .invalid(
                    "earliest_begin \(begin) is \(past) past the limit of \(RunWhenEligiblePolicy.durationWords(limit)) ahead "
                        + "(the latest allowed now is \(Int64((now + limit).rounded(.down)))); submit again closer to the time")
            }
        }
        if !globalEnabled {
            throw SchedulerError(.unavailable, "background work is switched off for all apps ('bgpolicy enable --all' turns it on)")
        }
        if !runtime.record.enabled {
            throw SchedulerError(.unavailable, "the user switched background work off for \(appID) ('bgpolicy enable \(appID)' turns it on)")
        }
        let mine = pending[appID] ?? [:]
        let sameKind = mine.values.filter { $0.kind == kind && $0.identifier != identifier }
        let limit = kind == .refresh ? configuration.limits.pendingRefresh : configuration.limits.pendingProcessing
        if sameKind.count >= limit {
            throw SchedulerError(
                .tooManyPendingRequests,
                "\(appID) already has \(sameKind.count) pending \(kind.rawValue) request\(sameKind.count == 1 ? "" : "s") (the limit is \(limit)): "
                    + sameKind.map(\.identifier).sorted().joined(separator: ", ")
                    + ". Resubmit one of those identifiers to replace it, or cancel one first")
        }
        let request = TaskRequest(
            appID: appID, identifier: identifier, kind: kind, earliestBegin: options.earliestBegin.map(UnixTime.init),
            requiresNetwork: options.requiresNetwork, requiresExternalPower: options.requiresExternalPower,
            expectedDuration: options.expectedDuration, submittedAt: now)
        let previous = mine[identifier]
        let entry = HistoryEntry(
            time: now, appID: appID, identifier: identifier, event: previous != nil ? .replaced : .submitted,
            kind: DeliveryKind(kind), detail: previous != nil ? "resubmitted: replaced the pending request" : "submitted")
        // Held in memory while it is written, so that the limits count it; not evaluated
        // until it is on disk, and put back as it was if the write fails.
        pending[appID, default: [:]][identifier] = request
        beginSaving(appID)
        let change = beginPendingChange(appID, [identifier])
        // A replaced request that now waits longer (a later earliest_begin) may have been what
        // the evaluation timer was set for: every app is evaluated, which can move the timer
        // later, as an evaluation of this app alone cannot. Not for the same request sent
        // again, as apps do after every run: with 11,000 pending, a full evaluation made each
        // such Submit take 21 ms instead of 0.4 (`make bench`).
        let waitsLonger = previous.map { Self.mayWaitLonger(request, than: $0) } ?? false
        defer { endSaving(appID, removedWork: waitsLonger && evaluationTimerDue != nil) }
        let store = store
        do {
            try await writer.run { () throws(StoreError) in try store.savePending(request, history: entry) }
        } catch {
            if endPendingChange(appID, identifier, change), pending[appID]?[identifier] == request {
                restorePending(appID, identifier, else: previous)
            }
            throw storeFailed(error, "a request")
        }
        endPendingChange(appID, identifier, change)
        noteHistoryWritten(count: 1, at: now)
    }

    func cancel(caller: String, identifier: String) async throws(SchedulerError) {
        let appID = try app(of: caller)
        guard let removed = pending[appID]?[identifier] else { throw .unknownPending(identifier, app: appID) }
        pending[appID]?[identifier] = nil
        beginSaving(appID)
        defer { endSaving(appID, removedWork: true) }
        let change = beginPendingChange(appID, [identifier])
        let store = store
        let entry = HistoryEntry(
            time: Self.wallNow(), appID: appID, identifier: identifier, event: .cancelled, detail: "cancelled by the app")
        do {
            try await writer.run { () throws(StoreError) in
                try store.deletePending(appID: appID, identifier: identifier, history: entry)
            }
        } catch {
            if endPendingChange(appID, identifier, change), pending[appID]?[identifier] == nil {
                restorePending(appID, identifier, else: removed)
            }
            throw storeFailed(error, "a cancellation")
        }
        endPendingChange(appID, identifier, change)
        noteHistoryWritten(count: 1, at: entry.time)
    }

    /// Numbers a Submit, Cancel or CancelAll of the app's `identifiers` as the newest change of
    /// each while its write is on its way.
    func beginPendingChange(_ appID: AppID, _ identifiers: some Sequence<String>) -> UInt64 {
        pendingChangeCount += 1
        for identifier in identifiers { pendingChanges[PendingKey(appID: appID, identifier: identifier)] = pendingChangeCount }
        return pendingChangeCount
    }

    /// Whether `change` is still the newest of the request, whose write has ended: then it is
    /// forgotten. False when a later call changed the request meanwhile (a Cancel A, a Submit A,
    /// a Cancel A queued behind it: memory has no A, as the third made it), and then the
    /// later call's write, behind this one, makes the store agree with memory: a failed write
    /// then leaves memory alone.
    @discardableResult
    func endPendingChange(_ appID: AppID, _ identifier: String, _ change: UInt64) -> Bool {
        let key = PendingKey(appID: appID, identifier: identifier)
        guard pendingChanges[key] == change else { return false }
        pendingChanges[key] = nil
        return true
    }

    /// After a failed write of the request of `identifier` (a Submit, a Cancel), while memory
    /// still holds what that write would have made: memory takes back what the store holds.
    /// Not `fallback`, what memory held before the call: with two Submits of one identifier
    /// under way, the second's is the first's request, which a failed write never stored. Only
    /// when the store cannot be read either, `fallback`.
    func restorePending(_ appID: AppID, _ identifier: String, else fallback: TaskRequest?) {
        let stored: TaskRequest?
        do {
            stored = try store.pendingRequest(appID: appID, identifier: identifier)
        } catch {
            stored = fallback
        }
        pending[appID, default: [:]][identifier] = stored
    }

    func beginSaving(_ appID: AppID) {
        saving[appID, default: 0] += 1
    }

    /// `removedWork`: the change took work away (a Cancel), so everything is evaluated again:
    /// an evaluation of the app alone can bring the timer forward but never take it back, and
    /// the timer may have been set for the work that went.
    /// Whether `new`, replacing `old`, may be held longer than it: a later `earliest_begin`, a
    /// condition it did not have, another kind.
    static func mayWaitLonger(_ new: TaskRequest, than old: TaskRequest) -> Bool {
        (new.earliestBegin ?? -.infinity) > (old.earliestBegin ?? -.infinity)
            || (new.requiresNetwork && !old.requiresNetwork)
            || (new.requiresExternalPower && !old.requiresExternalPower)
            || new.kind != old.kind
    }

    func endSaving(_ appID: AppID, removedWork: Bool = false) {
        let left = (saving[appID] ?? 1) - 1
        saving[appID] = left > 0 ? left : nil
        if removedWork { requestEvaluation() } else { requestEvaluation(for: appID) }
    }

    /// Written through the writer, after every write queued before it, as `cancel` is. It
    /// deleted on the executor at once: a Submit of the app's other connection, in memory and
    /// its write queued, was deleted before it was written, then written: memory had no
    /// request, the store had it, and the next start delivered what the app had cancelled.
    func cancelAll(caller: String) async throws(SchedulerError) {
        let appID = try app(of: caller)
        guard let removed = pending[appID], !removed.isEmpty else { return }
        pending[appID] = nil
        beginSaving(appID)
        defer { endSaving(appID, removedWork: true) }
        let change = beginPendingChange(appID, removed.keys)
        let store = store
        let entry = HistoryEntry(
            time: Self.wallNow(), appID: appID, event: .cancelled,
            detail: "all \(removed.count) pending requests cancelled by the app")
        do {
            try await writer.run { () throws(StoreError) in try store.deleteAllPending(appID: appID, history: entry) }
        } catch {
            // Memory takes back what the store holds of those it dropped; a request submitted
            // since is the newer, and stays.
            for (identifier, request) in removed {
                guard endPendingChange(appID, identifier, change), pending[appID]?[identifier] == nil else { continue }
                restorePending(appID, identifier, else: request)
            }
            if pending[appID]?.isEmpty == true { pending[appID] = nil }
            throw storeFailed(error, "a cancellation of all requests")
        }
        for identifier in removed.keys { endPendingChange(appID, identifier, change) }
        noteHistoryWritten(count: 1, at: entry.time)
    }

    func pendingRequests(caller: String) throws(SchedulerError) -> [TaskRequest] {
        let appID = try app(of: caller)
        return (pending[appID] ?? [:]).values.sorted { $0.identifier < $1.identifier }
    }

    func reportUsage(caller: String, state text: String) throws(SchedulerError) {
        let appID = try app(of: caller)
        guard let state = UsageState(rawValue: text) else {
            throw .invalid("usage state '\(SchedulerError.shown(text))' is not one of: foreground, background")
        }
        // The state the app last reported, again: nothing changed. Not a second open for the
        // predictor, nor a row: an app that reports in a loop must not fill the usage log.
        if lastUsageReport[appID] == state { return }
        let instant = ContinuousClock.now
        var budget = usageReportBudgets[appID] ?? UsageReportBudget(at: instant)
        defer { usageReportBudgets[appID] = budget }
        guard budget.allows(at: instant) else {
            throw SchedulerError(
                .limitsExceeded,
                "\(appID) reported more changes of its usage state than a person makes (\(Int(UsageReportBudget.burst)) at once, "
                    + "then one a second); this one was not recorded. Send it again in a second, and report only "
                    + "when the user brings the app up or leaves it")
        }
        guard usageReportBudgetAll.allows(at: instant) else {
            throw SchedulerError(
                .limitsExceeded,
                "the apps together reported more changes of their usage state than a person makes "
                    + "(\(Int(UsageReportBudget.allAppsBurst)) at once, then \(Int(UsageReportBudget.allAppsPerSecond)) a second); "
                    + "this one was not recorded. Send it again in a second")
        }
        let now = Self.wallNow()
        do {
            // An app unit of it runs: the unit's appearance was its open, so the report changes
            // only what differs from the agent's view (`reportWhileUnitRuns`).
            if openedUnits.contains(appID) {
                try reportWhileUnitRuns(appID, state, at: now)
                budget.spend()
                usageReportBudgetAll.spend()
                return
            }
            // In use by its own word already (its registration counted as the open, or another
            // connection of it reported): the same use, not a second open, as for a unit.
            if state == .foreground, isInUseByItsWord(appID) {
                try noteLastUse(of: appID, at: now)
                budget.spend()
                usageReportBudgetAll.spend()
                lastUsageReport[appID] = state
                return
            }
            // Remembered once the row is in: a report the disk refused is recorded when sent again.
            try appendUsage(appID, state, at: now)
            budget.spend()
            usageReportBudgetAll.spend()
            if state == .foreground {
                selfReportedInUse.insert(appID)
                lastUsageReport[appID] = state
                try noteUse(of: appID, at: now)
            } else {
                noteLeft(appID, at: now)
                lastUsageReport[appID] = state
            }
        } catch {
            throw storeFailed(error, "a usage report")
        }
    }

    func refreshStatus(caller: String) throws(SchedulerError) -> RefreshStatus {
        let appID = try app(of: caller)
        guard let record = apps[appID]?.record else { throw .notRegistered }
        return policy.refreshStatus(app: record, context: context(now: Self.wallNow()))
    }

    // MARK: Switches

    func setAppEnabled(_ text: String, enabled: Bool) async throws(SchedulerError) {
        let appID = try SchedulerError.appID(text)
        guard var record = apps[appID]?.record else { throw .unknownApp(text) }
        guard record.enabled != enabled else { return }
        record.enabled = enabled
        do {
            try store.saveApp(record)
        } catch {
            throw storeFailed(error, "an app's switch")
        }
        apps[appID]?.record = record
        appendHistory(HistoryEntry(
            time: Self.wallNow(), appID: appID, event: enabled ? .appEnabled : .appDisabled,
            detail: enabled ? "background work switched on by the user" : "background work switched off by the user"))
        // Switched off, its work is held: the timer may have been for it (`endSaving`).
        if enabled { requestEvaluation(for: appID) } else { requestEvaluation() }
        if !enabled { await expireSwitchedOff(where: { $0 == appID }, reason: "the user switched the app's background work off") }
    }

    func setGlobalEnabled(_ enabled: Bool) async throws(SchedulerError) {
        guard globalEnabled != enabled else { return }
        do {
            try store.setGlobalEnabled(enabled)
        } catch {
            throw storeFailed(error, "the global switch")
        }
        globalEnabled = enabled
        appendHistory(HistoryEntry(
            time: Self.wallNow(), appID: nil, event: enabled ? .globalEnabled : .globalDisabled,
            detail: enabled ? "background work switched on for all apps" : "background work switched off for all apps"))
        requestEvaluation()
        if !enabled { await expireSwitchedOff(where: { _ in true }, reason: "the user switched background work off for all apps") }
    }
}
