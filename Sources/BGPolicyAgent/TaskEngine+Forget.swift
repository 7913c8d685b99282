import BGPolicyCore
import BGPolicyDBus
import BGPolicyStore
import Logging

/// `Admin1.ForgetApp` (`bgpolicy forget APP`): the agent keeps nothing of an app the user asked
/// it to forget, an uninstalled one say. Its registration, pending work, queued wake, history,
/// usage log and what the planner learned of it go, in the store and in memory; it stops
/// counting toward the refresh pool; registered again, it starts as a new app does.
///
/// A running app is refused, not forgotten mid-flight: one with a connection on the bus, a slice
/// or a background task under way, or an app unit open. Its process would register again at
/// once (apps register at start) and so undo the forgetting while the user believes it done;
/// its slice's end, its CPU monitor's undo and its usage rows would be written for an app no
/// longer known; and ending its slice early would cost it the work the slice was for, a
/// violation in all but name. Quitting it first is what the user means anyway, and the message
/// says so. A delivery or a write of its requests on its way is a moment's wait (`Unavailable`).
extension TaskEngine {
    /// Forgets the app named `text` and returns what was forgotten (the `ForgetApp` reply).
    /// The store is written in one transaction before memory changes: a failure (a full disk)
    /// forgets nothing, in either.
    func forgetApp(_ text: String) async throws(SchedulerError) -> [String: Variant] {
        let appID = try SchedulerError.appID(text)
        guard apps[appID] != nil else { throw .unknownApp(text) }
        try refuseForgetting(appID)
        try await undoEnforcementLeft(of: appID)
        // Checked again: the undo waited on the user manager, and meanwhile the app may have
        // started, or another ForgetApp forgotten it. From here nothing waits.
        guard let runtime = apps[appID] else { throw .unknownApp(text) }
        try refuseForgetting(appID)

        // The planner as it will be, worked out on a copy: stored with the rest, and taken
        // only once the store has it.
        var planner = refreshPlanner
        let hadModel = planner?.predictor.lastOpen(of: appID.rawValue) != nil
        planner?.registeredAppCount = apps.count - 1
        planner?.forget(appID.rawValue)
        let forgotten: ForgottenRows
        do {
            forgotten = try store.forgetApp(appID, plannerSnapshot: planner?.snapshot())
        } catch {
            throw storeFailed(error, "forgetting an app")
        }
        let pendingCount = pending[appID]?.count ?? 0
        let violations = recentViolations(of: appID, at: Self.wallNow()).count
        refreshPlanner = planner
        dropFromMemory(appID)
        logger.info(
            "App forgotten",
            metadata: [
                "app.id": "\(appID)", "identifiers": "\(runtime.record.identifiers.count)", "pending": "\(pendingCount)",
                "history": "\(forgotten.history)", "usage.events": "\(forgotten.usageEvents)",
                "usage.aggregates": "\(forgotten.usageAggregates)", "content.wakes": "\(forgotten.contentWakes)",
                "cpu.enforcements": "\(forgotten.cpuEnforcements)", "session.units": "\(forgotten.sessionUnits)",
                "violations": "\(violations)", "model": "\(hadModel)", "rows": "\(forgotten.total)",
            ])
        // Its work went: the evaluation timer may have been set for it, and the status's counts
        // (apps, pending, what waits) change.
        requestEvaluation()
        return [
            "app_id": Variant(appID.rawValue),
            "identifiers": Variant(runtime.record.identifiers),
            "pending": Variant(UInt32(clamping: forgotten.pending)),
            "history": Variant(UInt32(clamping: forgotten.history)),
            "usage_events": Variant(UInt32(clamping: forgotten.usageEvents)),
            "usage_aggregates": Variant(UInt32(clamping: forgotten.usageAggregates)),
            "content_wakes": Variant(UInt32(clamping: forgotten.contentWakes)),
            "violations": Variant(UInt32(clamping: violations)),
            "learned_model": Variant(hadModel),
            "rows": Variant(UInt32(clamping: forgotten.total)),
        ]
    }

    /// Why `appID` cannot be forgotten now, if it cannot (see the extension's comment).
    func refuseForgetting(_ appID: AppID) throws(SchedulerError) {
        let runtime = apps[appID]
        let advice = "quit it first, then forget it (a running app registers again at once)"
        if let connections = runtime?.connections.keys.sorted(), !connections.isEmpty {
            throw SchedulerError(
                .notPermitted,
                "\(appID) is running (connected to the bus as \(connections.joined(separator: ", "))); \(advice)")
        }
        if let slice = slices.values.first(where: { $0.appID == appID }) {
            let identifiers = slice.openMembers.map { $0.request.identifier.isEmpty ? $0.kind.rawValue : $0.request.identifier }
            throw SchedulerError(
                .notPermitted,
                "\(appID) is running a background slice (\(identifiers.sorted().joined(separator: ", "))); wait for it to end, or quit the app, then forget it")
        }
        if let task = backgroundTasks.values.first(where: { $0.appID == appID }) {
            throw SchedulerError(
                .notPermitted, "\(appID) is running a background task ('\(SchedulerError.shown(task.name))'); \(advice)")
        }
        let units = sessionStartedUnits.followers.filter { AppIdentityParser.appID(fromUnitName: $0) == appID }
        if openedUnits.contains(appID) || !units.isEmpty {
            throw SchedulerError(
                .notPermitted,
                "\(appID) is open (an app unit of it runs\(units.isEmpty ? "" : ": \(units.sorted().joined(separator: ", "))")); \(advice)")
        }
        if delivering.contains(appID) || saving[appID] != nil || contentWakeWrites[appID] != nil {
            throw SchedulerError(
                .unavailable, "a delivery to \(appID), or a change to its requests, is on its way; try again in a moment")
        }
        // A slice's end lifting a CPU limit, say: forgotten meanwhile, the lift's history entry
        // was written for an app no longer known, and a failed lift was retried for it.
        if enforcementCalls[appID.rawValue] != nil {
            throw SchedulerError(
                .unavailable, "a CPU limit on \(appID) is being set or lifted; try again in a moment")
        }
    }

    /// Undoes what the CPU monitor left in place on `appID` when an earlier agent stopped (the
    /// start's undo could not reach the user manager): its record is the only thing that says
    /// a unit of the app is still throttled or frozen, so it is not forgotten while it holds.
    /// Throws `Unavailable` when some is still left.
    func undoEnforcementLeft(of appID: AppID) async throws(SchedulerError) {
        let left: [EnforcementRecord]
        do {
            left = try store.enforcementsLeft().filter { $0.appID == appID.rawValue && slices[$0.sliceID] == nil }
        } catch {
            throw storeFailed(error, "reading the CPU enforcement left in place")
        }
        guard !left.isEmpty else { return }
        for record in left { await undo(record, why: "before forgetting the app") }
        let still: Bool
        do {
            still = try store.enforcementsLeft().contains { $0.appID == appID.rawValue && slices[$0.sliceID] == nil }
        } catch {
            throw storeFailed(error, "reading the CPU enforcement left in place")
        }
        if still {
            throw SchedulerError(
                .unavailable,
                "the agent has yet to lift a CPU limit it left on \(appID) when it last stopped, and cannot now (see 'journalctl --user -u bgpolicyd'); nothing was forgotten. Try again once the systemd user manager answers")
        }
    }

    /// Everything the engine holds in memory about `appID`, dropped once the store forgot it.
    /// The app has no connection, slice, background task or delivery (`refuseForgetting`).
    func dropFromMemory(_ appID: AppID) {
        apps[appID] = nil
        pending[appID] = nil
        dirtyApps.remove(appID)
        if let old = holdsByApp.removeValue(forKey: appID) {
            for (rule, count) in old { holdsTotal[rule, default: 0] -= count }
            holdsTotal = holdsTotal.filter { $0.value > 0 }
        }
        contentWakes.remove(appID)
        failedUndos = failedUndos.filter { $0.value.record.appID != appID.rawValue }
        noDataStreak[appID] = nil
        unsavedReturns = unsavedReturns.filter { $0.value.request.appID != appID }
        appsInUse.remove(appID)
        selfReportedInUse.remove(appID)
        lastUsageReport[appID] = nil
        usageReportBudgets[appID] = nil
        inUseByLogAtStart.remove(appID)
        sessionStartedUnits.forget(appID)
        if appLeft?.appID == appID { appLeft = nil }
    }
}
