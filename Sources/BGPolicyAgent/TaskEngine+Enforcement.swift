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
            return nil
        } catch {
            logger.error(
                "Could not store the CPU enforcement, so it is not done: nothing would undo it if the agent ended first",
                metadata: ["app.id": "\(slice.appID)", "error": "\(error)"])
            return "the agent could not record it (\(error)), and nothing would undo it if the agent ended first"
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

    /// Undoes `record` and forgets it. One that cannot be undone now (the user manager is not
    /// on the bus) stays stored, and the next start tries again; a unit or process that is gone
    /// needs nothing undone. A process is continued only if it is the one stopped: same pid,
    /// same start.
    func undo(_ record: EnforcementRecord, why: String) async {
        var detail: String
        var undone = true
        do {
            switch record.action {
            case .throttled(let unit):
                try await systemd.clearCPUQuota(unit: unit)
                detail = "the CPU quota on \(unit) was lifted"
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
            if let error = error as? DBusError, error.name == Self.noSuchUnit {
                detail = "its unit is gone; nothing to undo"
            } else {
                undone = false
                detail = "could not undo the CPU enforcement (\(error)); the agent tries again at its next start"
                logger.error(
                    "Could not release CPU enforcement",
                    metadata: ["app.id": "\(record.appID)", "slice.id": "\(record.sliceID)", "error": "\(error)"])
            }
        }
        if undone {
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

    static let noSuchUnit = "org.freedesktop.systemd1.NoSuchUnit"

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
    /// again, as after a crash), and what the CPU monitor did is undone.
    func stop() async {
        stopping = true
        scheduleEvaluation(at: nil, now: Self.wallNow())
        storeUnsavedReturns()
        for sliceID in slices.keys.sorted() {
            guard let slice = slices[sliceID] else { continue }
            for member in slice.openMembers { sendExpireExpectingNoReply(member.taskID, to: slice.connection) }
            await endSlice(
                sliceID, as: .interrupted,
                detail: "the agent stopped during the slice (ExpireTask sent); it will not be delivered again")
        }
    }
}
