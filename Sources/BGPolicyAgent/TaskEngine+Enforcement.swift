import BGPolicyCore
import BGPolicyDBus
import BGPolicyStore
import BGPolicySystem
import Glibc
import Logging

/// What the CPU monitor does to an app outlives neither its slice nor the agent. It is stored
/// before it is done (`cpu_enforcement`), not done if it cannot be stored, and forgotten when
/// undone. The agent's stop ends the slices
/// under way, so their enforcement is undone then. What a crash, or a bus gone at the stop,
/// left in place is undone at the next start: a process stopped with SIGSTOP must never stay
/// stopped because the agent that stopped it went away.
extension TaskEngine {
    /// Stores `enforcement` of `slice` before it is done, for the next agent to undo if this
    /// one ends first; nil when stored, else why it could not be (then it must not be done: a
    /// frozen unit or a stopped process that no agent knows to undo stays so for good).
    func remember(_ enforcement: Slice.Enforcement, slice: Slice) -> String? {
        let record = EnforcementRecord(
            sliceID: slice.id, appID: slice.appID.rawValue, action: enforcement, since: Self.wallNow())
        do {
            try store.recordEnforcement(record)
            // It replaces the slice's earlier record (a quota lifted when the app came into
            // use, whose lift failed): the undo at the slice's end undoes both, and a retry of
            // the earlier one would forget the new record.
            failedUndos[slice.id] = nil
            return nil
        } catch {
            logger.error(
                "Could not store the CPU enforcement, so it is not done: nothing would undo it if the agent ended first",
                metadata: ["app.id": "\(slice.appID)", "error": "\(error)"])
            return "the agent could not record it (\(error)), and nothing would undo it if the agent ended first"
        }
    }

    /// The quota `unit` has before the slice's throttle, stored with it for the undo to put
    /// back, so that a `CPUQuota=` of the user's own outlives the throttle. Read only while
    /// nothing of the slice's is on the unit: the quota of an earlier throttle of the slice whose
    /// lift failed is the agent's own, and that throttle's record knows the one before it. Nil
    /// when it cannot be read: the throttle is done all the same (the app burns a core now, a
    /// limit of the user's is rare), and its undo leaves the unit with no quota, as it did
    /// before the quota was stored.
    func quotaBeforeThrottle(of unit: String, slice: Slice) async -> UInt64? {
        if case .throttled(unit, let quotaBefore)? = failedUndos[slice.id]?.record.action {
            return quotaBefore
        }
        do {
            return try await systemd.cpuQuota(unit: unit)
        } catch {
            logger.warning(
                "Could not read the unit's CPU quota before throttling it; throttled all the same, and the undo will set no quota: set any CPUQuota= of your own on it again afterwards (systemctl --user set-property --runtime UNIT CPUQuota=…)",
                metadata: ["app.id": "\(slice.appID)", "unit": "\(unit)", "error": "\(error)"])
            return nil
        }
    }

    /// The slice's earlier enforcement whose undo failed (`failedUndos`, a quota lifted when the
    /// app came into use, say) if `action`, done now, would not undo it too: a freeze after a
    /// throttle, once `[cpu] action` changed. Its record would be replaced by the new one, and
    /// the thaw at the slice's end would leave the quota on the unit for good. So its undo is
    /// tried again first; nil when it succeeds, or when there is none, or the new enforcement is
    /// the same on the same unit (whose undo at the slice's end undoes both).
    func earlierUndoStillFailing(of slice: Slice, before action: CPUAction) async -> EnforcementRecord? {
        guard let (record, why, _) = failedUndos[slice.id] else { return nil }
        switch record.action {
        case .throttled(let unit, _) where action == .throttle && unit == slice.unit: return nil
        case .frozen(let unit) where action == .freeze && unit == slice.unit: return nil
        default: break
        }
        await undo(record, why: why, retrying: true)
        return failedUndos[slice.id]?.record
    }

    /// An enforcement in words, for history details.
    static func described(_ enforcement: Slice.Enforcement) -> String {
        switch enforcement {
        case .throttled(let unit, _): "throttle of \(unit)"
        case .frozen(let unit): "freeze of \(unit)"
        case .stopped(let pid, _): "SIGSTOP of process \(pid)"
        }
    }

    /// Forgets a stored enforcement that was not done after all (its systemd call failed).
    func forget(_ enforcement: Slice.Enforcement, slice: Slice) {
        do {
            try store.removeEnforcement(sliceID: slice.id)
        } catch {
            // The next start tries to undo it, finds nothing in place, and forgets it then.
            logger.warning("Could not forget a CPU enforcement that was not done", metadata: ["app.id": "\(slice.appID)", "error": "\(error)"])
        }
    }

    /// Undoes `record` and forgets it. One that cannot be undone now (a timeout, `UnitBusy`, the
    /// user manager not on the bus or re-executing) stays stored, is tried again while the agent
    /// runs (`retryFailedUndos`), and at the next start, `undoRetries` times in a row at most:
    /// then it is given up, logged at warning with what to run by hand, and forgotten. A unit
    /// that is gone, or (for a thaw) no longer active, needs nothing undone
    /// (`leavesNothingToUndo`). A process is continued only if it is the one stopped: same pid,
    /// same start. `retrying`: a retry's failure is logged, not added to the history again.
    func undo(_ record: EnforcementRecord, why: String, retrying: Bool = false) async {
        beginEnforcementCall(record.appID)
        defer { endEnforcementCall(record.appID) }
        var detail: String
        // Undone, found to need nothing, or given up: forgotten.
        var settled = true
        do {
            switch record.action {
            case .throttled(let unit, let quotaBefore):
                try await systemd.restoreCPUQuota(unit: unit, to: quotaBefore)
                detail = "the CPU quota on \(unit) was " + Self.restored(quotaBefore)
            case .frozen(let unit):
                try await systemd.thaw(unit: unit)
                detail = "\(unit) was thawed"
            case .stopped(let pid, let started):
                // Start times are in clock ticks (10 ms); the same process reads the same.
                if let now = inspector.startTime(pid: pid), abs(now - started) < 0.005 {
                    kill(pid_t(pid), SIGCONT)
                    detail = "process \(pid) was continued with SIGCONT"
                } else {
                    detail = "process \(pid) has exited; nothing to continue"
                }
            }
        } catch {
            if let nothing = Self.leavesNothingToUndo(record.action, error) {
                detail = nothing
            } else {
                // Counted from the first failure of this enforcement's undo in this run.
                let earlier = failedUndos[record.sliceID].flatMap { $0.record.action == record.action ? $0.failures : nil }
                let failures = (earlier ?? 0) + 1
                if failures > Self.undoRetries {
                    // Forgotten, so that no later start tries it again for good either.
                    let byHand = Self.undoneByHand(record.action)
                    detail = "could not undo the CPU enforcement in \(failures) tries (\(error)); "
                        + "the agent gave up: \(byHand)"
                    logger.warning(
                        "Gave up releasing CPU enforcement; it may still hold the app",
                        metadata: ["app.id": "\(record.appID)", "slice.id": "\(record.sliceID)", "error": "\(error)",
                                   "tries": "\(failures)", "undo.by.hand": "\(byHand)"])
                } else {
                    settled = false
                    let wait = retryUndoLater(record, why: why, failures: failures)
                    detail = "could not undo the CPU enforcement (\(error)); the agent tries again "
                        + (wait.map { "within \($0.components.seconds) s, less and less often (up to every 5 minutes) for about half an hour, and " } ?? "")
                        + "at its next start"
                    logger.error(
                        "Could not release CPU enforcement",
                        metadata: ["app.id": "\(record.appID)", "slice.id": "\(record.sliceID)", "error": "\(error)",
                                   "retry.seconds": "\(wait.map { "\($0.components.seconds)" } ?? "-")"])
                }
            }
        }
        if !settled && retrying { return }
        if settled {
            failedUndos[record.sliceID] = nil
            do {
                try store.removeEnforcement(sliceID: record.sliceID)
            } catch {
                logger.warning(
                    "Could not forget an undone CPU enforcement; the next start undoes it again, harmlessly",
                    metadata: ["slice.id": "\(record.sliceID)", "error": "\(error)"])
            }
        }
        appendHistory(HistoryEntry(
            time: Self.wallNow(), appID: AppID(rawValue: record.appID), event: .cpuReleased, detail: detail + " (\(why))"))
    }

    /// How many failures in a row of one undo are tried again: with the waits of
    /// `retryUndoLater` (5 s doubling up to 5 minutes), about half an hour, as
    /// `DaemonFollower.retries`. An undo that fails that long fails for a reason that lasts
    /// (`AccessDenied`, `NotSupported`, a parent slice frozen by the user): tried every 5
    /// minutes for good, and again at every start, it woke the machine 288 times a day, logged
    /// an error each time, and kept `ForgetApp` refusing the app.
    static let undoRetries = 12

    /// Why `error`, an undo's, means there is nothing to undo: the unit is gone (`NoSuchUnit`),
    /// or, for a thaw, no longer active (`UnitInactive`: its processes ended, SIGKILLed or
    /// OOM-killed while frozen, and a start makes a new cgroup, not frozen). Nil for any other.
    /// A quota is set on an inactive unit as on an active one (systemd keeps it for the next
    /// start), so `UnitInactive` says nothing of a lift.
    static func leavesNothingToUndo(_ action: Slice.Enforcement, _ error: any Error) -> String? {
        guard let error = error as? DBusError else { return nil }
        switch (action, error.name) {
        case (_, Self.noSuchUnit): return "its unit is gone; nothing to undo"
        case (.frozen(let unit), Self.unitInactive): return "\(unit) is no longer active (its processes have ended); nothing to thaw"
        default: return nil
        }
    }

    static let noSuchUnit = "org.freedesktop.systemd1.NoSuchUnit"
    static let unitInactive = "org.freedesktop.systemd1.UnitInactive"

    /// What the user can run to undo `action` once the agent has given it up.
    static func undoneByHand(_ action: Slice.Enforcement) -> String {
        switch action {
        case .throttled(let unit, let quotaBefore?) where quotaBefore != .max:
            return "set its quota back with 'systemctl --user set-property --runtime \(unit) CPUQuota=\(percent(quotaBefore))%'"
        case .throttled(let unit, _):
            return "lift its quota with 'systemctl --user set-property --runtime \(unit) CPUQuota='"
        case .frozen(let unit):
            return "thaw it with 'systemctl --user thaw \(unit)'"
        case .stopped(let pid, _):
            return "continue it with 'kill -CONT \(pid)'"
        }
    }

    /// Counts a systemd call of the CPU monitor on its way for the app (`enforcementCalls`).
    func beginEnforcementCall(_ appID: String) {
        enforcementCalls[appID, default: 0] += 1
    }

    func endEnforcementCall(_ appID: String) {
        let left = (enforcementCalls[appID] ?? 1) - 1
        enforcementCalls[appID] = left > 0 ? left : nil
        if enforcementCalls.isEmpty { endWaitForEnforcementCalls() }
    }

    /// Undoes `enforcement` in a task of its own, for a caller that cannot wait for the user
    /// manager (the charger back, the app come into use: a `didSet`). Counted among the calls on
    /// their way from now, not from when the task runs, so that a stop coming first waits for it.
    func releaseSoon(_ enforcement: Slice.Enforcement, slice: Slice, why: String) {
        beginEnforcementCall(slice.appID.rawValue)
        Task {
            await self.release(enforcement, slice: slice, why: why)
            self.endEnforcementCall(slice.appID.rawValue)
        }
    }

    /// How long the stop waits for the CPU monitor's systemd calls on their way. Each is bounded
    /// by the proxy's 5-s timeout (FreezeUnit answers only once the unit is frozen), and the
    /// longest chain of them is an enforcement's: its quota read (two calls: GetUnit, then
    /// Get), an earlier undo tried again, the throttle or freeze, and the undo of it once the
    /// slice has closed, 25 s; but an enforcement whose slice the stop has closed ends after
    /// its quota read, and others run beside it, not after it. 25 s covers that, and leaves most of systemd's default stop
    /// timeout (DefaultTimeoutStopSec, 90 s) to the rest of the stop, so that SIGKILL does not
    /// cut it short. What is still on its way then is stored (`remember`), and the next start
    /// undoes it.
    static let enforcementWaitAtStop = Duration.seconds(25)

    /// Returns once no systemd call of the CPU monitor is on its way (`enforcementCalls`), or
    /// after `limit`, whichever comes first.
    func waitForEnforcementCalls(atMost limit: Duration) async {
        guard !enforcementCalls.isEmpty else { return }
        logger.info(
            "Waiting for the CPU monitor's systemd calls on their way, to undo what they did before the agent exits",
            metadata: ["apps": "\(enforcementCalls.keys.sorted().joined(separator: ","))"])
        let timer = Task {
            do { try await AgentExecutor.sleep(for: limit) } catch { return }
            self.endWaitForEnforcementCalls()
        }
        await withCheckedContinuation { enforcementCallsSettled.append($0) }
        timer.cancel()
        if !enforcementCalls.isEmpty {
            logger.error(
                "The CPU monitor's systemd calls were still on their way when the agent stopped; the next start undoes what they did",
                metadata: ["apps": "\(enforcementCalls.keys.sorted().joined(separator: ","))",
                           "waited.seconds": "\(limit.components.seconds)"])
        }
    }

    private func endWaitForEnforcementCalls() {
        let waiting = enforcementCallsSettled
        enforcementCallsSettled = []
        for waiter in waiting { waiter.resume() }
    }

    /// How a throttle's undo left the unit's quota, for its `cpu-released` entry.
    static func restored(_ quotaBefore: UInt64?) -> String {
        guard let usec = quotaBefore, usec != .max else { return "lifted" }
        return "set back to the \(percent(usec)) % it had before the throttle"
    }

    /// A quota in percent of one CPU: `CPUQuotaPerSecUSec` is 10 000 µs per percent.
    static func percent(_ usec: UInt64) -> String {
        usec % 10_000 == 0 ? "\(usec / 10_000)" : "\(Double(usec) / 10_000)"
    }

    /// Keeps `record`, whose undo failed `failures` times in a row, for the retry, and starts
    /// the retry's timer if none runs; returns the timer's wait, nil when the agent is stopping
    /// (the record stays stored for the next start).
    @discardableResult
    func retryUndoLater(_ record: EnforcementRecord, why: String, failures: Int) -> Duration? {
        failedUndos[record.sliceID] = (record, why, failures)
        guard !stopping else { return nil }
        if undoRetryTimer == nil {
            undoRetryDelay = undoRetryDelay == .zero ? Self.firstUndoRetry : min(undoRetryDelay * 2, Self.lastUndoRetry)
            let delay = undoRetryDelay
            undoRetryTimer = Task {
                do { try await AgentExecutor.sleep(for: delay) } catch { return }
                await self.retryFailedUndos()
            }
        }
        return undoRetryDelay
    }

    static let firstUndoRetry = Duration.seconds(5)
    static let lastUndoRetry = Duration.seconds(300)

    /// Tries again each undo that failed (a frozen unit left frozen until the next start, else;
    /// the user manager may have been busy or re-executing a moment). A slice watched again may
    /// enforce again under the same record, and its close undoes that: its earlier record waits
    /// until the slice closes or is unwatched. When none is left, no timer runs, and the next
    /// failure starts again from 5 s.
    func retryFailedUndos() async {
        undoRetryTimer = nil
        guard !stopping else { return }
        for sliceID in failedUndos.keys.sorted() {
            guard let (record, why, _) = failedUndos[sliceID], slices[sliceID]?.monitor == nil else { continue }
            logger.info("Trying again to release CPU enforcement", metadata: ["app.id": "\(record.appID)", "slice.id": "\(sliceID)"])
            await undo(record, why: why, retrying: true)
        }
        if failedUndos.isEmpty {
            undoRetryDelay = .zero
        } else if let (record, why, failures) = failedUndos.first?.value {
            // All still waiting on a watched slice: the timer goes on.
            retryUndoLater(record, why: why, failures: failures)
        }
    }

    /// At start, after `load`: undoes what an earlier agent left in place.
    func undoLeftEnforcement() async {
        let left: [EnforcementRecord]
        do {
            left = try store.enforcementsLeft()
        } catch {
            logger.error("Could not read the CPU enforcement left by the last run", metadata: ["error": "\(error)"])
            return
        }
        for record in left where slices[record.sliceID] == nil {
            logger.warning(
                "Undoing CPU enforcement left in place when the agent last stopped",
                metadata: ["app.id": "\(record.appID)", "slice.id": "\(record.sliceID)"])
            await undo(record, why: "left in place when the agent last stopped")
        }
    }

    /// The agent is stopping: no more launches, and every slice under way ends now. Its apps
    /// are told to wrap up (`ExpireTask`), its tasks end as interrupted (they are not delivered
    /// again, as after a crash), and what the CPU monitor did is undone: what the slices hold,
    /// at their close, and what a systemd call still on its way does (a freeze or quota asked
    /// for, which `enforce` undoes when it comes back and finds its slice closed; a lift started
    /// when the app came into use or the charger came back), for which the stop waits, at most
    /// `enforcementWaitAtStop`. Returns once the store writer has run every write queued (a
    /// clock step's move of the content-available times, a withdrawal's second delete): no
    /// caller waits for those, and the process ends next.
    func stop() async {
        stopping = true
        scheduleEvaluation(at: nil, now: Self.wallNow())
        // What is still to undo stays stored for the next start.
        undoRetryTimer?.cancel()
        undoRetryTimer = nil
        storeUnsavedReturns()
        // The disk is still full, and its reserve spent: on disk these tasks are still running,
        // and the next start closes them as interrupted. Said for each, so that the user knows
        // which work to start again.
        for (taskID, unsaved) in unsavedReturns.sorted(by: { $0.key < $1.key }) {
            logger.error(
                "The disk is full: a request put back after a failed delivery could not be written before the stop, and is lost",
                metadata: [
                    "app.id": "\(unsaved.request.appID)", "task.identifier": "\(unsaved.request.identifier)",
                    "task.id": "\(taskID)",
                ])
        }
        for sliceID in slices.keys.sorted() {
            guard let slice = slices[sliceID] else { continue }
            for member in slice.sentOpenMembers { sendExpireExpectingNoReply(member.taskID, to: slice.connection) }
            await endSlice(
                sliceID, as: .interrupted,
                detail: "the agent stopped during the slice (ExpireTask sent); it will not be delivered again")
        }
        await waitForEnforcementCalls(atMost: Self.enforcementWaitAtStop)
        queueWaitingContentWakes()
        await writer.run {}
    }
}
