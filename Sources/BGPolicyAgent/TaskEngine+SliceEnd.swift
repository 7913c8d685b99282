import BGPolicyCore
import BGPolicyDBus
import BGPolicyStore
import BGPolicySystem
import Logging

/// A slice's timers (the expiration warning and the deadline), its end by expiry, sleep,
/// switch-off or lost conditions, and the tasks' completion.
extension TaskEngine {
    func startTimers(sliceID: String, slice: inout Slice) {
        let warning = configuration.slices.expirationWarning
        let untilWarning = slice.length - warning - .seconds(slice.elapsed)
        let untilDeadline = slice.length - .seconds(slice.elapsed)
        slice.timers.append(Task {
            do { try await AgentExecutor.sleep(for: max(.zero, untilWarning)) } catch { return }
            self.warnExpiring(sliceID: sliceID, reason: "the slice ends in \(Int(warning.seconds)) s")
        })
        slice.timers.append(Task {
            do { try await AgentExecutor.sleep(for: max(.zero, untilDeadline)) } catch { return }
            await self.expireAtDeadline(sliceID: sliceID)
        })
        startMonitoring(sliceID: sliceID, slice: &slice)
    }

    /// Reads the slice's CPU every `[cpu] sample_interval`, when it has a monitor.
    func startMonitoring(sliceID: String, slice: inout Slice) {
        guard slice.monitor != nil, slice.monitorTask == nil else { return }
        let interval = configuration.cpu.sampleInterval
        slice.monitorTask = Task {
            while true {
                do { try await AgentExecutor.sleep(for: interval) } catch { return }
                guard await self.sampleCPU(sliceID: sliceID) else { return }
            }
        }
    }

    /// Sends `ExpireTask` for every unfinished task of the slice. Not awaited by the app's
    /// answer: an app that does not answer must not hold the agent. Without `expectingReply`
    /// the call is queued before this returns (`sendExpireExpectingNoReply`), not from a task
    /// that runs later: before sleep it must be on its way before the inhibitor goes.
    func warnExpiring(sliceID: String, reason: String, event: HistoryEvent = .expirationWarned, expectingReply: Bool = true) {
        guard let slice = slices[sliceID] else { return }
        for member in slice.sentOpenMembers {
            if expectingReply {
                sendExpire(member.taskID, to: slice.connection)
            } else {
                sendExpireExpectingNoReply(member.taskID, to: slice.connection)
            }
            appendHistory(HistoryEntry(
                time: Self.wallNow(), appID: slice.appID, identifier: member.request.identifier, taskID: member.taskID,
                event: event, kind: member.kind, detail: "ExpireTask sent: \(reason)"))
        }
    }

    /// `ExpireTask` as a call that wants no answer, queued at once: for the agent's stop,
    /// which closes the connection right after (the close sends what was queued first), and
    /// before sleep, which flushes the connection before the inhibitor is released.
    func sendExpireExpectingNoReply(_ taskID: String, to destination: String) {
        var message = Message.methodCall(
            destination: destination, path: Self.clientPath, interface: BGPolicyNames.clientInterface,
            member: "ExpireTask", body: [.string(taskID)])
        message.noReplyExpected = true
        // An app that has exited is not started again only to be told to stop.
        message.noAutoStart = true
        do {
            try connection.send(message)
        } catch {
            logger.info("ExpireTask not sent", metadata: ["task.id": "\(taskID)", "error": "\(error)"])
        }
    }

    func sendExpire(_ taskID: String, to destination: String) {
        let connection = connection
        let logger = logger
        var message = Message.methodCall(
            destination: destination, path: Self.clientPath, interface: BGPolicyNames.clientInterface,
            member: "ExpireTask", body: [.string(taskID)])
        // An app that has exited (one the bus started, addressed by its bus name until its
        // owner is known) is not started again only to be told to stop.
        message.noAutoStart = true
        Task {
            do {
                // ExpireTask returns nothing: an answer with a body is not read, only measured.
                _ = try await connection.call(message, timeout: .seconds(5), replyBodyLimit: Self.appReplyBytes)
            } catch {
                logger.info("ExpireTask not answered", metadata: ["task.id": "\(taskID)", "error": "\(error)"])
            }
        }
    }

    func expireAtDeadline(sliceID: String) async {
        guard let slice = slices[sliceID] else { return }
        let seconds = Int(slice.length.seconds)
        await endSlice(sliceID, as: .expired,
                       detail: "did not call SetTaskCompleted within its \(seconds) s slice: a violation that lowers the app's future opportunities")
    }

    func expireForSleep(sliceID: String) async {
        warnExpiring(sliceID: sliceID, reason: "the machine is going to sleep", event: .expirationWarned, expectingReply: false)
        await endSlice(sliceID, as: .sleepExpired, detail: "expired because the machine went to sleep; not a violation")
    }

    /// The user switched background work off (`bgpolicy disable`) for the apps `switchedOff`
    /// selects: their running slices are told at once (`ExpireTask`) and closed, as before
    /// sleep. The user asked for it, so it is no violation of the app: run to its deadline, the
    /// slice ended `expired`, counted against the app the user had just switched off.
    func expireSwitchedOff(where switchedOff: (AppID) -> Bool, reason: String) async {
        for id in slices.keys.sorted() {
            guard let appID = slices[id]?.appID, switchedOff(appID) else { continue }
            warnExpiring(sliceID: id, reason: reason, event: .expirationWarned)
            await endSlice(id, as: .switchedOff, detail: "expired because \(reason); not a violation")
        }
    }

    /// Processing runs only while the session is idle (SPEC §2), and the user came back: the
    /// session unlocked, or input after a while without. Each processing task still running is
    /// told at once (`ExpireTask`) and closed as `user-returned`, not a violation, as sleep
    /// closes it; the app's other tasks in the slice run on to its deadline. Before, processing
    /// started in an idle moment ran its 10 minutes under the user, the CPU monitor allowing
    /// 80 % of a core meanwhile (none at all for external-power processing on AC).
    func expireProcessingOnReturn() async {
        guard conditions.isIdleForProcessing == false else { return }
        let reason = "the user came back (the session is no longer locked or idle), and processing runs only while it is"
        for id in slices.keys.sorted() {
            guard let slice = slices[id], !slice.simulated else { continue }
            let processing = slice.openMembers.filter { $0.kind == .processing }
            guard !processing.isEmpty else { continue }
            let now = Self.wallNow()
            for member in processing {
                guard member.sent else {
                    returnUnsent(member, in: id, reason: "the user came back before it was sent")
                    continue
                }
                expireNow(member, of: slice, as: .userReturned, because: reason, at: now)
            }
            if slices[id]?.openMembers.isEmpty ?? true { await closeSlice(id) }
        }
    }

    /// A task that asked for external power runs only on AC, and one that asked for the network
    /// only with full connectivity (SPEC §2), and the charger went, or connectivity dropped from
    /// full. Each task still running whose own conditions no longer hold is told at once
    /// (`ExpireTask`) and closed as `conditions-lost`, not a violation, as processing is when
    /// the user comes back; one not yet sent goes back to pending; the app's other tasks in the
    /// slice run on. The request is the app's to submit again, as after any expiry. A fact no
    /// longer known (UPower or NetworkManager gone) is no condition lost. Before, the conditions
    /// were asked only at the slice's start: a backup that asked for AC ran on, on battery, to
    /// its deadline.
    func expireOnConditionsLost() async {
        for id in slices.keys.sorted() {
            guard let slice = slices[id], !slice.simulated else { continue }
            let lost = slice.openMembers.compactMap { member in
                Self.lostConditions(of: member.request, in: conditions).map { (member, $0) }
            }
            guard !lost.isEmpty else { continue }
            let now = Self.wallNow()
            for (member, reason) in lost {
                guard member.sent else {
                    returnUnsent(member, in: id, reason: "\(reason) before it was sent")
                    continue
                }
                expireNow(member, of: slice, as: .conditionsLost, because: reason, at: now)
            }
            if slices[id]?.openMembers.isEmpty ?? true { await closeSlice(id) }
        }
    }

    /// Which of `request`'s own conditions no longer hold in `conditions`, in words; nil while
    /// they all hold, or are unknown: power unknown is not on battery, connectivity unknown not
    /// offline.
    static func lostConditions(of request: TaskRequest, in conditions: Conditions) -> String? {
        var lost: [String] = []
        if request.requiresExternalPower, conditions.onBattery == true {
            lost.append("the charger was unplugged (it requires external power)")
        }
        if request.requiresNetwork {
            switch conditions.connectivity {
            case .none: lost.append("the machine went offline (it requires the network)")
            case .portal: lost.append("the network went behind a captive portal (it requires the network)")
            case .limited: lost.append("the network's connectivity became limited (it requires the network)")
            case .full, .unknown: break
            }
        }
        return lost.isEmpty ? nil : lost.joined(separator: ", and ")
    }

    /// Tells a task of `slice` to stop now (`ExpireTask`, recorded as `expiration-warned`) and
    /// closes it as `event`, not a violation, `because` saying why; the slice's other tasks
    /// are left as they are.
    func expireNow(_ member: Slice.Member, of slice: Slice, as event: HistoryEvent, because reason: String, at now: UnixTime) {
        sendExpire(member.taskID, to: slice.connection)
        appendHistory(HistoryEntry(
            time: now, appID: slice.appID, identifier: member.request.identifier, taskID: member.taskID,
            event: .expirationWarned, kind: member.kind, detail: "ExpireTask sent: \(reason)"))
        // Never throws without `mustStore`.
        try? finish(member, in: slice.id, event: event, result: .failed,
                    detail: "expired because \(reason); not a violation", at: now)
    }

    /// Ends a slice before its tasks were all completed: each open task is recorded as `event`
    /// (failed) with `detail`, and the slice closes.
    func endSlice(_ sliceID: String, as event: HistoryEvent, detail: String) async {
        guard let slice = slices[sliceID] else { return }
        // One time for all: the store counts a violation once per slice (its time and kind).
        let now = Self.wallNow()
        for member in slice.openMembers {
            guard member.sent else {
                returnUnsent(member, in: sliceID, reason: "the slice ended before it was sent (\(event.rawValue))")
                continue
            }
            // Never throws without `mustStore`.
            try? finish(member, in: sliceID, event: event, result: .failed, detail: detail, at: now)
        }
        await closeSlice(sliceID)
    }

    /// A member of a slice still being delivered whose `RunTask` was never sent, when the slice
    /// ends (or, processing, when the user comes back): it goes back as it was, pending again
    /// (a wake queued again), its running row gone with a `delivery-failed` entry that says it
    /// was not sent. No attempt is counted against the app: it was not asked. Before, `deliver`
    /// went on and sent it after the slice had ended, with no deadline and no CPU monitor, and
    /// its history said it ended before it was delivered.
    func returnUnsent(_ member: Slice.Member, in sliceID: String, reason: String) {
        returnToPending(member, sliceID: sliceID, reason: reason, sent: false, now: Self.wallNow())
    }

    /// Records one task's end: the running row goes and its history entry is written together.
    /// When that write fails: with `mustStore` (the app's own `SetTaskCompleted`, which it can
    /// call again) it throws and nothing changes, store first and memory second; without (a
    /// deadline, an app gone, the agent's stop: the slice is ending whatever the disk says) it is
    /// logged and the task ends in memory, and the next start records its row as interrupted.
    func finish(_ member: Slice.Member, in sliceID: String, event: HistoryEvent, result: TaskResult, detail: String,
                mustStore: Bool = false, at time: UnixTime? = nil) throws(StoreError) {
        guard var slice = slices[sliceID] else { return }
        var cpuSeconds: Double?
        if let first = slice.firstCPUSeconds, let reading = cpuReading(of: slice) {
            cpuSeconds = max(0, reading.cpuSeconds - first)
        }
        let entry = HistoryEntry(
            time: time ?? Self.wallNow(), appID: slice.appID, identifier: member.request.identifier, taskID: member.taskID,
            event: event, kind: member.kind, result: result, detail: detail,
            cpuSeconds: cpuSeconds, duration: slice.elapsed)
        do {
            try store.finishTask(taskID: member.taskID, history: entry)
            noteHistoryWritten(count: 1, at: entry.time)
        } catch {
            logger.error("Could not record a task's end", metadata: ["task.id": "\(member.taskID)", "error": "\(error)"])
            if mustStore { throw error }
        }
        // Ended by the agent while the bus starts the app: `deliver` tells it once it answers.
        if event != .completed, activationsAwaited[member.taskID] != nil { activationsAwaited[member.taskID] = true }
        if let kind = event.violation, slice.violationsCounted.insert(event).inserted {
            noteViolation(of: slice.appID, at: entry.time, kind: kind)
        }
        if let index = slice.members.firstIndex(where: { $0.taskID == member.taskID }) {
            slice.members[index].done = true
        }
        slices[sliceID] = slice
        logger.info(
            "Task ended",
            metadata: ["app.id": "\(slice.appID)", "task.id": "\(member.taskID)", "event": "\(event.rawValue)",
                       "result": "\(result.rawValue)", "cpu.seconds": "\(cpuSeconds.map { String($0) } ?? "-")"])
    }

    func closeSlice(_ sliceID: String) async {
        guard let slice = slices.removeValue(forKey: sliceID) else { return }
        for timer in slice.timers { timer.cancel() }
        slice.monitorTask?.cancel()
        for member in slice.members { taskSlices[member.taskID] = nil }
        if let enforcement = slice.enforcement {
            await release(enforcement, slice: slice)
        }
        requestEvaluation(for: slice.appID)
    }

    // MARK: Completion

    func complete(caller: String, taskID: String, success: Bool, result text: String) async throws(SchedulerError) {
        let appID = try app(of: caller)
        guard let result = TaskResult(rawValue: text) else {
            throw .invalid("result '\(SchedulerError.shown(text))' is not one of: new-data, no-data, failed, or \"\" for none")
        }
        guard let sliceID = taskSlices[taskID], let slice = slices[sliceID], slice.appID == appID,
            let member = slice.members.first(where: { $0.taskID == taskID && !$0.done })
        else {
            throw SchedulerError(
                .unknownTask,
                "\(appID) has no running task '\(SchedulerError.shown(taskID))'; it may have ended already ('bgpolicy history \(appID)' shows how)")
        }
        let effective: TaskResult = success ? result : .failed
        do {
            try finish(member, in: sliceID, event: .completed, result: effective,
                       detail: success ? "completed" + (result == .unspecified ? "" : " with \(result.rawValue)") : "completed unsuccessfully",
                       mustStore: true)
        } catch {
            throw storeFailed(error, "a task's completion")
        }
        if member.kind == .refresh { noteRefreshResult(appID, effective) }
        if slices[sliceID]?.openMembers.isEmpty ?? true {
            await closeSlice(sliceID)
        }
    }
}
