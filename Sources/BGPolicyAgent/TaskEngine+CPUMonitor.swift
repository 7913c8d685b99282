import BGPolicyCore
import BGPolicyDBus
import BGPolicyStore
import BGPolicySystem
import Glibc
import Logging

/// The CPU monitor of a slice: its readings, the warning and the enforcement, and how it
/// follows the user (off while the app is in use). What it does is undone as
/// `TaskEngine+Enforcement.swift` describes.
extension TaskEngine {
    /// Gives the slice its CPU monitor, from the process's CPU time now. None while its app is
    /// in use: the CPU limit is for background work, and the monitor comes when the user leaves
    /// the app (`cpuMonitorFollowsUse`). The slice's first reading, from which the CPU its tasks
    /// used is counted for their history, is taken either way.
    func watchCPU(of slice: inout Slice) {
        guard slice.pid != nil else { return }
        let reading = cpuReading(of: slice)
        if slice.firstCPUSeconds == nil { slice.firstCPUSeconds = reading?.cpuSeconds }
        guard !appsInUse.contains(slice.appID) else { return }
        let window = min(configuration.cpu.window, slice.length)
        var monitor = CPUUsageMonitor(
            window: window, limit: configuration.cpu.limit, warningGrace: configuration.slices.expirationWarning)
        if let reading {
            _ = monitor.record(at: slice.elapsed, cpuSeconds: reading.cpuSeconds)
        }
        slice.monitor = monitor
    }

    /// Why an enforcement is undone when the charger comes back during external-power
    /// processing, in its `cpu-released` entry.
    static let releasedOnAC =
        "the charger is back: processing that requires external power is not held to the CPU limit while on AC"

    /// The CPU monitor is off for external-power processing while on AC, and only then (SPEC
    /// §2), for as long as its slice runs. On battery such a slice closes at once, unwatched
    /// (`expireOnConditionsLost`: its tasks all asked for the charger), so what is left to
    /// follow is a slice that runs on without AC: a simulated launch, which ignores the rules,
    /// and any slice while the power is unknown (UPower gone, say), which is no charger lost.
    /// No longer known to be on AC, such a slice is watched like any other from now on. The
    /// charger back: it is exempt again, its monitor goes, warning phase and all, and what it
    /// did to the app (a quota, a freeze) is undone at once, as when an app comes into use
    /// (`stopWatchingInUse`), with a `cpu-released` entry that says why; a violation it counted
    /// meanwhile stays counted. Off AC again, the slice is watched from a new window.
    func followExemptionsToPower() {
        let onAC = conditions.onBattery == false
        for id in slices.keys.sorted() {
            guard var slice = slices[id], slice.externalPowerProcessing, slice.exempt != onAC else { continue }
            // Its tasks all asked for the charger: it closes now (`expireOnConditionsLost`), unwatched.
            if conditions.onBattery == true, !slice.simulated { continue }
            slice.exempt = onAC
            if !onAC {
                watchFromNow(id, &slice, why: "CPU monitor on: the charger went during a slice of external-power processing")
                continue
            }
            slices[id] = slice
            guard let (slice, _, enforcement) = takeMonitorOff(id) else { continue }
            logger.info(
                "CPU monitor off: the charger is back during a slice of external-power processing",
                metadata: ["app.id": "\(slice.appID)", "slice.id": "\(id)", "enforcement.lifted": "\(enforcement != nil)"])
            guard let enforcement else { continue }
            releaseSoon(enforcement, slice: slice, why: Self.releasedOnAC)
        }
    }

    /// Takes the CPU monitor off the slice: its sampling stops, and what it did (a throttle or
    /// a freeze) is taken from the slice before the caller undoes it, so that the slice's close
    /// does not undo it a second time; a systemd call of `enforce` on its way undoes what it
    /// did itself when it returns. Returns the slice as stored, whether it was watched, and the
    /// enforcement to release; nil when there is no such slice.
    func takeMonitorOff(_ sliceID: String) -> (slice: Slice, watched: Bool, enforcement: Slice.Enforcement?)? {
        guard var slice = slices[sliceID] else { return nil }
        let watched = slice.monitor != nil
        slice.monitorTask?.cancel()
        slice.monitorTask = nil
        slice.monitor = nil
        slice.lastCPUPercent = nil
        let enforcement = slice.enforcement
        slice.enforcement = nil
        slices[sliceID] = slice
        return (slice, watched, enforcement)
    }

    /// Gives the slice a CPU monitor from its CPU time now, starts its sampling, stores it, and
    /// logs `why`.
    func watchFromNow(_ sliceID: String, _ slice: inout Slice, why: Logger.Message) {
        watchCPU(of: &slice)
        startMonitoring(sliceID: sliceID, slice: &slice)
        slices[sliceID] = slice
        logger.info(why, metadata: ["app.id": "\(slice.appID)", "slice.id": "\(sliceID)"])
    }

    /// Whether the slice's process still runs: the pid is there, and its process started when
    /// the one attached did. The bus named the app's process by pid; once that process exits
    /// (its connection kept by a child it handed it to), the number may go to another process,
    /// whose CPU is not the app's, and which must never be stopped. True when the start was
    /// not read at the attach (nothing to tell them apart by, as `ProcessInspector.stillRuns`).
    func stillRuns(_ slice: Slice) -> Bool {
        guard let pid = slice.pid else { return false }
        guard let started = slice.processStarted else { return true }
        return inspector.startTime(pid: pid) == started
    }

    /// The CPU the slice's process (or its unit's cgroup) has used; nil when it has no process,
    /// or that process is gone (`stillRuns`).
    func cpuReading(of slice: Slice) -> CPUReading? {
        guard let pid = slice.pid, stillRuns(slice) else { return nil }
        return inspector.cpuUsage(pid: pid, cgroupPath: slice.cgroupPath)
    }

    /// The slice's process is gone: it exited, and its pid may be another process's now. As
    /// at the attach of a process found gone, the slice's CPU is no longer watched: its monitor
    /// goes, and its pid, so that nothing reads or signals whatever has the number next. (A
    /// process gone gave no reading before either; its pid given to another, the monitor
    /// measured that one, and stopped it with SIGSTOP.) What the monitor did to the app's unit
    /// stays the slice's, undone when it ends.
    func forgetGoneProcess(_ sliceID: String) {
        guard var slice = slices[sliceID], let pid = slice.pid else { return }
        let reused = inspector.startTime(pid: pid) != nil
        slice.monitorTask?.cancel()
        slice.monitorTask = nil
        slice.monitor = nil
        slice.lastCPUPercent = nil
        slice.pid = nil
        slices[sliceID] = slice
        logger.warning(
            reused
                ? "The slice's process has exited and its pid is another process's now; its CPU is no longer watched"
                : "The slice's process has exited; its CPU is no longer watched",
            metadata: ["app.id": "\(slice.appID)", "pid": "\(pid)", "slice.id": "\(sliceID)"])
    }

    /// Reads the slice's CPU use once; returns false when the slice is gone, or no longer
    /// watched because its process is.
    func sampleCPU(sliceID: String) async -> Bool {
        guard var slice = slices[sliceID], var monitor = slice.monitor, let pid = slice.pid else { return false }
        guard stillRuns(slice) else {
            forgetGoneProcess(sliceID)
            publishStatus(nextWindow: evaluationTimerDue)
            return false
        }
        guard let reading = inspector.cpuUsage(pid: pid, cgroupPath: slice.cgroupPath) else { return true }
        if slice.firstCPUSeconds == nil { slice.firstCPUSeconds = reading.cpuSeconds }
        let step = monitor.record(at: slice.elapsed, cpuSeconds: reading.cpuSeconds)
        slice.monitor = monitor
        slice.lastCPUPercent = monitor.averagePercent
        slices[sliceID] = slice
        let covered = Self.format(monitor.coveredSeconds)
        let limit = configuration.cpu.limit.value
        switch step {
        case .none:
            break
        case .warn(let average):
            logger.warning("App over the CPU limit; warned", metadata: ["app.id": "\(slice.appID)", "cpu.percent": "\(Int(average))"])
            warnExpiring(
                sliceID: sliceID,
                reason: "used \(Int(average.rounded())) % of one core over the last \(covered) s, above the \(limit) % limit",
                event: .cpuWarned)
        case .enforce(let average):
            await enforce(sliceID: sliceID, average: average)
        }
        publishStatus(nextWindow: evaluationTimerDue)
        return slices[sliceID] != nil
    }

    func enforce(sliceID: String, average: Double) async {
        guard let slice = slices[sliceID] else { return }
        beginEnforcementCall(slice.appID.rawValue)
        defer { endEnforcementCall(slice.appID.rawValue) }
        let percent = Int(average.rounded())
        let limit = configuration.cpu.limit.value
        var enforcement: Slice.Enforcement?
        var event = HistoryEvent.cpuObserved
        var detail: String
        let action = configuration.cpu.action
        // Each enforcement is stored before it is done (`remember`), and not done if it cannot be.
        var unrecorded: String?
        var stuck: EnforcementRecord?
        if action != .observe, failedUndos[sliceID] != nil {
            stuck = await earlierUndoStillFailing(of: slice, before: action)
            // Its lift may have been a systemd call: the slice may have ended meanwhile, or
            // stopped being watched (the user came to the app, the charger exempted it).
            guard let current = slices[sliceID], current.monitor != nil, !current.exempt else { return }
        }
        if let stuck {
            // Done now, the new enforcement's record would replace the earlier one, whose
            // undo would then never come: the quota of a throttle would outlive a freeze's thaw.
            unrecorded = "the CPU monitor's earlier \(Self.described(stuck.action)) could not be undone yet, and still holds"
            detail = "still at \(percent) % of one core after the warning; not \(action == .throttle ? "throttled" : "frozen"): "
                + "the CPU monitor's earlier \(Self.described(stuck.action)) of this slice could not be undone yet "
                + "(the agent tries again), and still holds the app"
        } else if action == .throttle, slice.unit != nil, let cgroup = slice.cgroupPath, inspector.cpuControllerAvailable(cgroupPath: cgroup) == false {
            // Recorded as what it is: systemd would accept the quota, and it would do nothing.
            detail = "still at \(percent) % of one core after the warning; not throttled: the cpu controller is not delegated to the "
                + "systemd user manager (systemd before 252 delegates only pids and memory to user@.service), so a CPU quota "
                + "would have no effect. Add Delegate=pids memory cpu to user@.service, or set [cpu] action = freeze"
        } else if action != .observe, let unit = slice.unit {
            let intended: Slice.Enforcement = action == .throttle
                ? .throttled(unit: unit, quotaBefore: await quotaBeforeThrottle(of: unit, slice: slice)) : .frozen(unit: unit)
            // The quota's read was a systemd call too: a slice closed meanwhile (the agent's stop
            // among the causes, which waits for this call) is not throttled only to be lifted at
            // once. One that stopped being watched meanwhile is throttled all the same, and lifted
            // when the call returns, as when the user comes to the app during the throttle's call.
            guard slices[sliceID] != nil else { return }
            if let refusal = remember(intended, slice: slice) {
                unrecorded = refusal
                detail = "still at \(percent) % of one core after the warning; \(unit) was not \(action == .throttle ? "throttled" : "frozen"): \(refusal)"
            } else {
                do {
                    if action == .throttle {
                        try await systemd.setCPUQuota(unit: unit, percent: configuration.cpu.throttleQuota.value)
                        event = .cpuThrottled
                        detail = "still at \(percent) % of one core after the warning: \(unit) throttled to \(configuration.cpu.throttleQuota.value) % until the slice ends"
                    } else {
                        try await systemd.freeze(unit: unit)
                        event = .cpuFrozen
                        detail = "still at \(percent) % of one core after the warning: \(unit) frozen until the slice ends"
                    }
                    enforcement = intended
                } catch where Self.isRefusal(error) {
                    forget(intended, slice: slice)
                    detail = "still at \(percent) % of one core after the warning; the systemd user manager refused to \(action.rawValue) \(unit) (\(error))"
                } catch {
                    // No answer (FreezeUnit answers only once the unit is frozen), or the bus
                    // went: the request may have reached systemd, which then did it. Taken as
                    // done, record and all, so that the slice's end (or the next start) undoes
                    // it; lifting a quota or thawing a unit that has none is harmless. Forgotten,
                    // a unit frozen after all stayed frozen, with nothing to say so.
                    enforcement = intended
                    event = action == .throttle ? .cpuThrottled : .cpuFrozen
                    detail = "still at \(percent) % of one core after the warning: \(unit) "
                        + (action == .throttle ? "throttled to \(configuration.cpu.throttleQuota.value) %" : "frozen")
                        + " until the slice ends, as far as the agent knows: the systemd user manager did not answer (\(error)), "
                        + "and may have done it"
                }
            }
        } else if action != .observe {
            detail = "still at \(percent) % of one core after the warning; the app has no systemd unit to \(action.rawValue)"
        } else {
            detail = "at \(percent) % of one core, above the \(limit) % limit; observed only (cpu action = observe)"
        }
        if enforcement == nil, unrecorded == nil, action != .observe, slice.backgroundOnly, let pid = slice.pid, pid > 1 {
            // The fallback for background-only processes: stopping a process with a window
            // would freeze what the user sees, so only those that declared they have none.
            // Only a process whose start is known, the one attached to the slice: checked again
            // just before the signal (the systemd calls above may have taken seconds), so that
            // a process that took its pid is never stopped, and stored, so that the next agent
            // can tell it from another if it has to continue it.
            if let started = slice.processStarted {
                let intended = Slice.Enforcement.stopped(pid: pid, processStarted: started)
                if let refusal = remember(intended, slice: slice) {
                    detail += "; not stopped with SIGSTOP: \(refusal)"
                } else if !stillRuns(slice) {
                    forget(intended, slice: slice)
                    detail += "; not stopped with SIGSTOP: process \(pid) has exited"
                } else if kill(pid_t(pid), SIGSTOP) == 0 {
                    enforcement = intended
                    event = .cpuStopped
                    detail += "; stopped with SIGSTOP (registered background-only) until the slice ends"
                } else {
                    forget(intended, slice: slice)
                }
            }
        }
        // The user came to the app, or the charger came back to external-power processing,
        // while the systemd call was on its way: `stopWatchingInUse` (or
        // `followExemptionsToPower`) found nothing to undo then, so it is undone below, once
        // recorded.
        let cameIntoUse = enforcement != nil && appsInUse.contains(slice.appID)
        let exemptAgain = enforcement != nil && !cameIntoUse && slices[sliceID]?.exempt == true
        slices[sliceID]?.enforcement = cameIntoUse || exemptAgain ? nil : enforcement
        logger.warning(
            "CPU limit enforced",
            metadata: ["app.id": "\(slice.appID)", "action": "\(event.rawValue)", "cpu.percent": "\(percent)"])
        // One time for all, and one violation for the slice, however many tasks share it.
        let now = Self.wallNow()
        let counted = slices[sliceID]?.violationsCounted.insert(event).inserted ?? true
        for (index, member) in slice.openMembers.enumerated() {
            appendHistory(
                HistoryEntry(
                    time: now, appID: slice.appID, identifier: member.request.identifier, taskID: member.taskID,
                    event: event, kind: member.kind, detail: detail),
                countingViolation: counted && index == 0)
        }
        if slices[sliceID] == nil, let enforcement {
            // The slice closed while the systemd call was on its way: undo at once.
            await release(enforcement, slice: slice)
        } else if cameIntoUse, let enforcement {
            await release(enforcement, slice: slice, why: Self.releasedForUse)
        } else if exemptAgain, let enforcement {
            await release(enforcement, slice: slice, why: Self.releasedOnAC)
        }
    }

    /// Whether a failed systemd call of `enforce` was surely not done: systemd's own error
    /// reply (`NoSuchUnit`, `AccessDenied`, …), the bus's (`ServiceUnknown`: no user manager),
    /// or a value found wrong before anything was sent. Not a timeout (`NoReply`) nor a lost
    /// connection: the request may have reached systemd.
    static func isRefusal(_ error: any Error) -> Bool {
        guard let error = error as? DBusError else { return false }
        switch error {
        case .remote(let name, _):
            return ![DBusError.noReply, "org.freedesktop.DBus.Error.Disconnected", "org.freedesktop.DBus.Error.Timeout",
                     "org.freedesktop.DBus.Error.TimedOut"].contains(name)
        case .invalidSignature, .invalidName, .invalidValue, .limitsExceeded, .typeMismatch, .usage:
            return true
        case .malformedMessage, .connectionFailed, .disconnected, .outOfMemory:
            return false
        }
    }

    /// Undoes what the CPU monitor did to the slice's app, and forgets its record; `why` ends
    /// the `cpu-released` entry's words.
    func release(_ enforcement: Slice.Enforcement, slice: Slice, why: String = "slice ended") async {
        await undo(EnforcementRecord(sliceID: slice.id, appID: slice.appID.rawValue, action: enforcement, since: slice.startedAt),
                   why: why)
    }

    // MARK: The CPU monitor and the user

    /// Why an enforcement is undone when its app comes into use, in its `cpu-released` entry.
    static let releasedForUse =
        "the app is in use now: the user opened it, or it came to the foreground, and the CPU limit is only for background work"

    /// The CPU limit is for work in the background (SPEC §2, as on iOS). The CPU an app burns
    /// while the user has it open, or while it says it is in the foreground, is the user's own
    /// use of it, and a quota or a freeze then would leave the user a sluggish or frozen window.
    /// So the monitor follows `appsInUse` (called by its `didSet`, whatever changed it: an app
    /// unit the user opened or closed, `ReportUsage`, a registration, the user manager's units
    /// at connect, an exit).
    ///
    /// An app that comes into use while a slice of it runs stops being watched: the slice's
    /// monitor goes, warning phase and all, and what the monitor did to the app (a quota, a
    /// freeze, a SIGSTOP) is undone at once, through `release` like the undo at the slice's end,
    /// with a `cpu-released` entry that says why. When the user leaves the app and the slice
    /// still runs, it gets a new monitor from its CPU time at that moment: a new window (as
    /// long as at the slice's start, judged once half of it is covered), and a new warning
    /// before any enforcement. What the app burned in the foreground is never counted, and a
    /// burn in the background after it still is. A slice that starts while its app is in use
    /// gets its monitor only when the user leaves the app (`watchCPU`).
    ///
    /// The violations (apps that burn CPU get fewer refreshes): a warning, or an enforcement
    /// done before the app came into use, was for CPU burned in the background, and what it
    /// counted stays counted; nothing burned in use is judged, so none of it is a violation,
    /// and neither is the lift. After the user leaves, the slice counts at most one violation
    /// of each kind, as before (`Slice.violationsCounted`). The task's `cpu_seconds` in its
    /// history is still all the CPU used in the slice: it measures, it does not judge.
    ///
    /// Use is tracked with either refresh strategy: with `[refresh] strategy = every-window`
    /// (whose planner keeps only the last refreshes) `appsInUse` follows the same opens and
    /// leaves, and nothing is learned.
    func cpuMonitorFollowsUse(from old: Set<AppID>) {
        for sliceID in slices.keys.sorted() {
            guard let appID = slices[sliceID]?.appID else { continue }
            switch (old.contains(appID), appsInUse.contains(appID)) {
            case (false, true): stopWatchingInUse(sliceID)
            case (true, false): watchAgainAfterUse(sliceID)
            default: break
            }
        }
    }

    /// The slice's app came into use: no monitor, and what the monitor did is undone
    /// (`takeMonitorOff`); a systemd call of `enforce` on its way now finds the app in use when
    /// it returns, and undoes what it did itself.
    func stopWatchingInUse(_ sliceID: String) {
        guard let (slice, watched, enforcement) = takeMonitorOff(sliceID), watched || enforcement != nil else { return }
        logger.info(
            "CPU monitor off: the app is in use, and the CPU limit is only for background work",
            metadata: ["app.id": "\(slice.appID)", "slice.id": "\(sliceID)", "enforcement.lifted": "\(enforcement != nil)"])
        guard let enforcement else { return }
        releaseSoon(enforcement, slice: slice, why: Self.releasedForUse)
    }

    /// The user left the slice's app: the slice is watched again, from a new window that starts
    /// now, so that the CPU it used in the foreground is not counted. An exempt slice
    /// (external-power processing on AC) stays unwatched.
    func watchAgainAfterUse(_ sliceID: String) {
        guard var slice = slices[sliceID], !slice.exempt, slice.pid != nil, slice.monitor == nil else { return }
        watchFromNow(
            sliceID, &slice,
            why: "CPU monitor on afresh: the user left the app during its slice; the CPU it used in the foreground is not counted")
    }
}
