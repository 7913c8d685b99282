import BGPolicyCore
import BGPolicyDBus
import BGPolicyStore
import BGPolicySystem
import Glibc
import Logging

/// A grant of time to one app for one or more tasks (SPEC §1, Slice).
struct Slice {
    struct Member {
        let taskID: String
        /// The pending request it came from; for a content-available wake, a stand-in with an
        /// empty identifier that was never pending.
        let request: TaskRequest
        var kind: DeliveryKind
        /// A content-available wake, its payload passed in `RunTask`'s info; put back as it
        /// was (first received, times notified) if the delivery fails.
        var contentWake: ContentAvailableQueue<[String: Variant]>.Wake? = nil
        var payload: [String: Variant]? { contentWake?.payload }
        var done = false
        /// Its `RunTask` has been sent (it may still be on its way). A member not yet sent when
        /// its slice ends is put back (`returnUnsent`), not recorded as ended: the app never had it.
        var sent = false

        init(taskID: String, request: TaskRequest) {
            self.taskID = taskID
            self.request = request
            self.kind = DeliveryKind(request.kind)
        }

        init(taskID: String, contentWake wake: ContentAvailableQueue<[String: Variant]>.Wake, appID: AppID, at now: UnixTime) {
            self.taskID = taskID
            self.request = TaskRequest(appID: appID, identifier: "", kind: .refresh, submittedAt: now)
            self.kind = .contentAvailable
            self.contentWake = wake
        }
    }

    /// What the CPU monitor did to the app, undone when the slice closes; stored too
    /// (`cpu_enforcement`), so that it is undone even if the agent ends first.
    typealias Enforcement = EnforcementRecord.Action

    let id: String
    let appID: AppID
    /// The unique name, or the activatable well-known name, the tasks were delivered to.
    var connection: String
    var members: [Member]
    let startedAt: UnixTime
    let started: ContinuousClock.Instant
    let length: Duration
    var timers: [Task<Void, Never>] = []
    var monitorTask: Task<Void, Never>?
    var monitor: CPUUsageMonitor?
    var firstCPUSeconds: Double?
    var lastCPUPercent: Double?
    /// The app's process the CPU monitor watches, from the identity of the connection the slice
    /// was delivered to; nil when there is none, or once it is gone (`forgetGoneProcess`).
    var pid: UInt32?
    /// When that process started (`ProcessIdentity.startTime`), checked at every reading and
    /// before any signal: a pid that another process has now is not the app's. Nil when it
    /// could not be read: nothing tells them apart then, and no SIGSTOP is sent.
    var processStarted: Double?
    var cgroupPath: String?
    var unit: String?
    var backgroundOnly = false
    var enforcement: Enforcement?
    /// The violations already counted against the app for this slice: one per kind, however
    /// many of its tasks the history names (sharing a slice is the agent's choice).
    var violationsCounted: Set<HistoryEvent> = []
    /// Only `requires_external_power` processing: the CPU monitor leaves it alone while on AC.
    var externalPowerProcessing = false
    /// External-power processing while on AC (`externalPowerProcessing`, now): the CPU monitor
    /// leaves it alone. Follows the charger for the slice's life (`followExemptionsToPower`).
    var exempt = false
    /// A simulated launch (`bgpolicy simulate launch`), which ignores the rules: its processing
    /// tasks run on when the user comes back (`expireProcessingOnReturn`), and its tasks when
    /// the charger or the network they asked for goes (`expireOnConditionsLost`).
    var simulated = false

    var deadline: UnixTime { startedAt + length.seconds }
    var openMembers: [Member] { members.filter { !$0.done } }
    /// The open members whose `RunTask` was sent: those the app may be running, to be told
    /// to stop (`ExpireTask`).
    var sentOpenMembers: [Member] { members.filter { !$0.done && $0.sent } }
    var elapsed: Double { (ContinuousClock.now - started).seconds }
}

extension TaskEngine {
    // MARK: Evaluation

    /// Asks the policy what to run, once per turn of the executor however many changes
    /// arrived in it, so a burst of calls costs one decision. A change that concerns one app
    /// (its call, its slice's end) asks about that app only; a change of facts or of the global
    /// switch asks about every app.
    func requestEvaluation(for appID: AppID? = nil) {
        if let appID { dirtyApps.insert(appID) } else { fullEvaluationNeeded = true }
        guard !evaluationQueued else { return }
        evaluationQueued = true
        Task { self.evaluate() }
    }

    /// The facts for a decision at `now` about the `concerned` apps (all when `nil`); the
    /// refresh planner is first advanced to `now`.
    func context(now: UnixTime, concerning concerned: [AppID]? = nil) -> SchedulingContext {
        if refreshPlanner != nil {
            // Local hours follow daylight saving time (the zone itself is read at start).
            let offset = Self.localUTCOffset(at: now)
            if refreshPlanner?.utcOffsetSeconds != offset { refreshPlanner?.utcOffsetSeconds = offset }
            refreshPlanner?.advance(to: now)
        }
        return SchedulingContext(
            now: now, conditions: conditions, globalEnabled: globalEnabled, sleeping: sleeping,
            configuration: configuration, planning: planningFacts(concerning: concerned, at: now))
    }

    /// What the policy knows of the app at `now`, besides its record.
    func schedulingState(of appID: AppID, at now: UnixTime) -> AppSchedulingState? {
        let violations = recentViolations(of: appID, at: now)
        guard let runtime = apps[appID] else { return nil }
        let busy = delivering.contains(appID) || slices.values.contains { $0.appID == appID }
        return AppSchedulingState(
            record: usedNowIfInUse(runtime.record, at: now), reachable: !runtime.connections.isEmpty || runtime.record.busName != nil,
            lastDeliveryFailureAt: runtime.lastDeliveryFailureAt, failedDeliveries: runtime.failedDeliveries, busy: busy,
            violations: violations, configuration: configuration)
    }

    /// `record` as the rules see it: an app the user has open (`appsInUse`) is in use now,
    /// however long ago it was opened. Its record's last use is its last open, and an app kept
    /// open for over `[limits] inactive_after` (a mail client left open through a week of
    /// suspends) was held back as unused, and shown so.
    func usedNowIfInUse(_ record: AppRecord, at now: UnixTime) -> AppRecord {
        guard appsInUse.contains(record.appID), (record.lastUsedAt ?? -.infinity) < now else { return record }
        var record = record
        record.lastUsedAt = now
        return record
    }

    func evaluate() {
        evaluationQueued = false
        guard !stopping else { return }
        // Nothing starts on facts not yet read: an unknown battery holds nothing back, and a
        // start at 5 % would run work the critical-battery rule forbids. What asked for this
        // evaluation stays asked for (`conditionsSettled`).
        guard conditionsSettled else { return }
        if !unsavedReturns.isEmpty { storeUnsavedReturns() }
        let full = fullEvaluationNeeded
        let candidates = full ? Set(pending.keys) : dirtyApps
        fullEvaluationNeeded = false
        dirtyApps = []
        let now = Self.wallNow()
        keepReserveIfDue()
        var concerned = candidates
        for appID in deliverableContentWakeApps() where full || candidates.contains(appID) { concerned.insert(appID) }
        var work: [AppWork] = []
        work.reserveCapacity(concerned.count)
        for appID in concerned.sorted() {
            guard saving[appID] == nil, let state = schedulingState(of: appID, at: now) else { continue }
            let mine = RunWhenEligiblePolicy.launchOrder(pending[appID].map { Array($0.values) } ?? [])
            guard !mine.isEmpty || (contentWakes.wake(for: appID) != nil && contentWakeWrites[appID] == nil) else { continue }
            work.append(AppWork(app: state, requests: mine))
        }
        let facts = context(now: now, concerning: work.map(\.app.record.appID))
        let decision = policy.decide(work: work, context: facts)
        noteHolds(of: work, asked: full ? nil : candidates, decision: decision, context: facts)
        let refreshed = decision.refreshed.filter { !delivering.contains($0) }
        // The refresh planner's thresholds adapt while a refresh waits for its choice alone
        // (`RefreshPlanner.refreshesWaiting`): not through a week of power saver, say.
        refreshPlanner?.refreshesWaiting = !decision.refreshed.isEmpty
            || holdsTotal[.predictedUse, default: 0] + holdsTotal[.refreshInterval, default: 0] > 0
        if !refreshed.isEmpty {
            refreshPlanner?.recordWindow(
                at: now, refreshed: refreshed.map(\.rawValue), afterUse: decision.leftRefreshed?.appID.rawValue)
            // Before the launches: a restart, even a crash, must not refresh these again at once.
            savePlannerState()
            // A window for refreshes only that opened takes what a grid window would for the
            // rest of its minute (`PlanningFacts.refreshWindow`).
            if let window = decision.window, window.kind == .afterOpen || window.kind == .afterUse {
                refreshWindow = window
            }
        }
        for launch in decision.launches where !delivering.contains(launch.appID) {
            delivering.insert(launch.appID)
            Task {
                do {
                    try await self.deliver(
                        launch, simulated: false,
                        why: Self.why(
                            window: decision.window(of: launch.appID),
                            predicted: predicts && decision.refreshed.contains(launch.appID)),
                        plannedRefresh: refreshed.contains(launch.appID)
                            ? PlannedRefresh(at: now, wallClockOffset: wallClockOffset) : nil)
                } catch {
                    // Recorded in history and logged by deliver; the request stays pending.
                }
            }
        }
        if full {
            scheduleEvaluation(at: decision.nextEvaluation, now: now)
        } else if let next = decision.nextEvaluation, next < (evaluationTimerDue ?? .infinity) {
            // Only some apps were asked about: the others' next time still stands.
            scheduleEvaluation(at: next, now: now)
        }
        publishStatus(nextWindow: evaluationTimerDue)
    }

    /// Records what holds the pending requests of `work` after `decision`, for `GetStatus`:
    /// the apps `asked` about (all when nil) are counted afresh, the others keep their counts.
    func noteHolds(of work: [AppWork], asked: Set<AppID>?, decision: SchedulingDecision, context: SchedulingContext) {
        func forget(_ appID: AppID) {
            guard let old = holdsByApp.removeValue(forKey: appID) else { return }
            for (rule, count) in old { holdsTotal[rule, default: 0] -= count }
        }
        if let asked {
            for appID in asked { forget(appID) }
        } else {
            holdsByApp = [:]
            holdsTotal = [:]
        }
        var launches: [AppID: Launch] = [:]
        for launch in decision.launches { launches[launch.appID] = launch }
        for item in work where !item.requests.isEmpty {
            let appID = item.app.record.appID
            forget(appID)
            let held = policy.holds(item, launched: launches[appID], context: context)
            guard !held.isEmpty else { continue }
            holdsByApp[appID] = held
            for (rule, count) in held { holdsTotal[rule, default: 0] += count }
        }
        holdsTotal = holdsTotal.filter { $0.value > 0 }
    }

    /// One timer, for the next time a rule lifts by itself; none when nothing is due.
    func scheduleEvaluation(at due: UnixTime?, now: UnixTime) {
        guard due != evaluationTimerDue else { return }
        evaluationTimer?.cancel()
        evaluationTimer = nil
        evaluationTimerDue = due
        guard let due else { return }
        // The wall clock may jump; the timer runs on the monotonic clock and evaluation
        // reads the wall clock again when it fires.
        let delay = Self.timerDelay(until: due, now: now)
        evaluationTimer = Task {
            do { try await AgentExecutor.sleep(for: delay) } catch { return }
            // Replaced after its sleep ended but before it ran (the executor fires due timers
            // before the jobs queued with them): the replacement is the timer now. Checked on
            // the engine, where the replacement cancelled it.
            guard !Task.isCancelled else { return }
            self.evaluationTimerFired()
        }
    }

    /// How long the evaluation timer waits for `due` from `now`: at least 50 ms (a due time
    /// already past is evaluated at once, not in a loop), at most a day, and never short of
    /// `due`. Cut to whole milliseconds, the wait ended up to 1 ms before it: three timed lifts
    /// in five found their window not yet open and set the same timer again, two wake-ups
    /// where one was due. Rounded up, with a millisecond to spare.
    static func timerDelay(until due: UnixTime, now: UnixTime) -> Duration {
        let seconds = max(0.05, min(due - now, 86_400))
        return .milliseconds(Int64((seconds * 1000).rounded(.up)) + 1)
    }

    /// The wall clock was set (`WallClockWatch`). The evaluation timer runs on the monotonic
    /// clock, its delay worked out from the old wall time: it is dropped, and everything is
    /// evaluated again at the new time, which sets it anew. Work due by the new time starts
    /// now; work whose time moved away waits for it.
    func wallClockSet() {
        let offset = Self.wallMinusBootTime()
        let step = offset - wallClockOffset
        wallClockOffset = offset
        let now = Self.wallNow()
        logger.info(
            "The wall clock was set; planning again",
            metadata: ["step.seconds": "\(Int(step.rounded()))", "time": "\(Int64(now))"])
        // What measures how long ago something happened stays as long ago as it was: the
        // planner's last refreshes and wake-ups, the retry after a failed delivery, the
        // violations (their penalty, and when they stop counting), the content-available
        // buckets (their refill), and the windows open now. A
        // clock set back must not hold them longer, nor one set forward lift them early.
        refreshPlanner?.wallClockStepped(by: step, now: now)
        for appID in apps.keys {
            apps[appID]?.lastDeliveryFailureAt? += step
            apps[appID]?.violations.wallClockStepped(by: step)
        }
        contentWakes.wallClockStepped(by: step)
        // And the wakes on their way to their apps, which a failed delivery puts back as they
        // were taken (`putBack`), as their rows, moved below, still are.
        for (sliceID, slice) in slices {
            for (index, member) in slice.members.enumerated() where member.contentWake != nil {
                slices[sliceID]?.members[index].contentWake?.receivedAt += step
                slices[sliceID]?.members[index].contentWake?.firstReceivedAt += step
            }
        }
        moveStoredContentTimes(by: step)
        opportunity?.at += step
        appOpenedAt? += step
        appLeft?.at += step
        refreshWindow?.at += step
        savePlannerState()
        scheduleEvaluation(at: nil, now: now)
        requestEvaluation()
    }

    /// A refresh the planner recorded at `time`, for taking it back if it does not run. The wall
    /// clock may be set while it is delivered (an app's start can take seconds), and the planner
    /// then moves its record by the step (`wallClockStepped`): `time(wallClockOffset:)` is
    /// where the record is now.
    struct PlannedRefresh {
        let time: UnixTime
        /// `wallMinusBootTime()` as it stood when the refresh was recorded.
        let wallClockOffset: Double

        init(at time: UnixTime, wallClockOffset: Double) {
            self.time = time
            self.wallClockOffset = wallClockOffset
        }

        func time(wallClockOffset now: Double) -> UnixTime { time + (now - wallClockOffset) }
    }

    /// The wall clock less the time since boot (suspend included): it changes only when the
    /// wall clock is set, by the size of the step.
    static func wallMinusBootTime() -> Double {
        var boot = timespec()
        clock_gettime(CLOCK_BOOTTIME, &boot)
        return wallNow() - (Double(boot.tv_sec) + Double(boot.tv_nsec) / 1e9)
    }

    func evaluationTimerFired() {
        evaluationTimerDue = nil
        evaluationTimer = nil
        fullEvaluationNeeded = true
        evaluate()
    }

    // MARK: Delivery

    /// Starts one slice: records the tasks as running (so a crash can never deliver them twice),
    /// calls `RunTask` for each, and starts the slice's timers and CPU monitor. When the app
    /// cannot be reached, the requests go back to pending with the attempt recorded, and the
    /// error says why.
    /// Why a launch happened now, for its history entries: every decision carries its reason.
    static func why(window: WakeWindow?, predicted: Bool) -> String {
        var words: String
        switch window?.kind {
        case .planned?: words = "in the planned wake window"
        case .opportunistic(let reason)?: words = "in a wake window opened because \(reason.words)"
        case .afterOpen?: words = "in a refresh window opened because an app was opened"
        case .afterUse?: words = "in a refresh window opened because the user left the app"
        case nil: words = "when eligible"
        }
        if predicted { words += "; refresh ahead of the app's predicted use" }
        return words
    }

    /// `plannedRefresh`: when the refresh planner recorded this launch's refresh, if it did;
    /// a refresh that does not reach the app is taken back (`RefreshPlanner.refreshDidNotRun`).
    func deliver(
        _ launch: Launch, simulated: Bool, why: String = "", plannedRefresh: PlannedRefresh? = nil
    ) async throws(SchedulerError) {
        var launch = launch
        var refreshRan = false
        defer {
            if let plannedRefresh, !refreshRan {
                refreshPlanner?.refreshDidNotRun(
                    launch.appID.rawValue, recordedAt: plannedRefresh.time(wallClockOffset: wallClockOffset))
                savePlannerState()
            }
            delivering.remove(launch.appID)
            startingByActivation.remove(launch.appID)
            requestEvaluation(for: launch.appID)
        }
        let appID = launch.appID
        guard var runtime = apps[appID] else { throw .unknownApp(appID.rawValue) }
        // A delivery `evaluate` started just before the stop, and run only once the stop
        // suspended: the stop has taken its list of slices, so a slice begun now would never be
        // ended (no ExpireTask), and its running row would be closed as interrupted at the next
        // start, losing the request. It stays pending.
        if stopping {
            if simulated { throw SchedulerError(.unavailable, "the agent is stopping; call again once it is back") }
            return
        }
        // An app the bus must start waits for its turn (`StartTurns`); it may have connected
        // meanwhile, and then needs none.
        var waitedForTurn: Duration = .zero
        var turnHeld = false
        /// Hands the turn to the next app waiting, once: when the app has answered, when it
        /// needs no start after all, and however the delivery ends.
        func handOnTurn() {
            guard turnHeld else { return }
            turnHeld = false
            endStartTurn()
        }
        defer { handOnTurn() }
        if runtime.latestConnection == nil, runtime.record.busName != nil {
            let asked = ContinuousClock.now
            await takeStartTurn(for: appID)
            turnHeld = true
            waitedForTurn = ContinuousClock.now - asked
            guard let current = apps[appID] else { throw .unknownApp(appID.rawValue) }
            // The agent stopping: its slices are ended, and a running row written now would be
            // closed as interrupted at the next start, losing the request. It stays pending.
            if stopping { return }
            runtime = current
            // The facts may have changed while it waited, for seconds behind slow starts: the
            // switches, sleep, the battery, the user coming back (processing runs only while
            // idle). The rules are asked again; a simulated launch ignores them, as it does
            // every rule but reachability.
            if !simulated {
                let (still, wakeStill, changed) = stillRunnable(launch.requests, of: appID, contentAvailable: launch.contentAvailable)
                let heldWake = launch.contentAvailable && !wakeStill
                if still.count < launch.requests.count || heldWake {
                    logger.info(
                        "Launch held: \(changed.map(\.rawValue).sorted().joined(separator: ", ")) changed while the app waited for its turn to start",
                        metadata: ["app.id": "\(appID)", "held": "\(launch.requests.count - still.count)",
                                   "content_available": "\(heldWake ? "held" : launch.contentAvailable ? "goes" : "none")"])
                }
                // A held wake stays queued (it is taken only below), for the next window.
                if heldWake { launch.contentAvailable = false }
                if still.isEmpty && !launch.contentAvailable { return }
                launch.requests = still
            }
            if runtime.latestConnection != nil { handOnTurn() }
        }
        // Only what is still pending as decided: a request cancelled or replaced since the
        // decision (while the app waited for its turn, or before this task ran) stays as the app
        // left it. Filtered before the unreachable app's failure too, which puts back what it is
        // given: it put back a request the app had cancelled meanwhile, in memory and on disk.
        // Nor one whose own conditions went between the decision and now (the charger
        // unplugged as the window opened): no slice held it yet, so `expireOnConditionsLost`
        // passed it by, and it ran its whole slice on battery. It stays pending.
        let requests = launch.requests.filter {
            pending[appID]?[$0.identifier] == $0 && (simulated || Self.lostConditions(of: $0, in: conditions) == nil)
        }
        let target: String
        let activating: Bool
        if let latest = runtime.latestConnection {
            target = latest
            activating = false
        } else if let busName = runtime.record.busName {
            target = busName
            activating = true
            startingByActivation.insert(appID)
        } else {
            let reason = "\(appID) is not running and registered no bus_name to start it by D-Bus activation"
            recordDeliveryFailure(Array(requests), reason: reason, now: Self.wallNow())
            throw SchedulerError(.unavailable, reason + "; start the app, or register with a bus_name")
        }

        let now = Self.wallNow()
        let sliceID = Self.newID("s")
        var members = requests.map { Slice.Member(taskID: Self.newID("t"), request: $0) }
        // Not while the app's newest wake is being written (`storeContentWake`): delivered now,
        // its row's delete could land before the write, and a restart would deliver it again.
        // It waits for the next window, which the end of the write asks for.
        if launch.contentAvailable, contentWakeWrites[appID] == nil, let wake = contentWakes.take(appID) {
            members.append(Slice.Member(taskID: Self.newID("t"), contentWake: wake, appID: appID, at: now))
        }
        guard !members.isEmpty else {
            // A simulated launch's request went while it waited: say so rather than nothing.
            if simulated, let request = launch.requests.first {
                throw .unknownPending(request.identifier, app: appID, lister: "ListPending")
            }
            return
        }
        // As long as what goes needs, as the planner reckons it: the launch was decided for
        // more, maybe, and lost some since (held after the start turn, cancelled, replaced, a
        // wake not taken). A refresh left alone in a processing launch had its 10 minutes,
        // RunTask said so, and the app was held busy all that time for a refresh of 30 s.
        var length = RunWhenEligiblePolicy.sliceLength(for: ArraySlice(requests), configuration)
        if members.contains(where: { $0.kind == .contentAvailable }) {
            length = max(length, configuration.slices.contentAvailable)
        }
        var slice = Slice(
            id: sliceID, appID: appID, connection: target, members: members, startedAt: now,
            started: ContinuousClock.now, length: length)
        slice.backgroundOnly = runtime.record.backgroundOnly
        slice.simulated = simulated
        slice.externalPowerProcessing = !requests.isEmpty && !members.contains { $0.kind == .contentAvailable }
            && requests.allSatisfy { $0.kind == .processing && $0.requiresExternalPower }
        slice.exempt = slice.externalPowerProcessing && conditions.onBattery == false
        let records = members.map {
            RunningTaskRecord(
                taskID: $0.taskID, sliceID: sliceID, appID: appID, identifier: $0.request.identifier,
                kind: $0.kind, startedAt: now, deadline: slice.deadline)
        }
        do {
            try store.startTasks(records, history: [])
        } catch {
            for member in members where member.kind == .contentAvailable {
                putBack(member, sliceID: sliceID, reason: "the agent could not record the slice", now: now)
            }
            logger.error(
                "Could not record a slice; not delivering it, and trying again in 5 minutes",
                metadata: ["app.id": "\(appID)", "error": "\(error)"])
            // Not the app's failure, so no doubling; but without a wait every evaluation of the
            // window (each asked for by the one before) tried the write again, at once.
            // (Read first: `apps[appID]?.x = f(apps…)` reads inside its own write access.)
            let failures = max(apps[appID]?.failedDeliveries ?? 0, 1)
            apps[appID]?.lastDeliveryFailureAt = now
            apps[appID]?.failedDeliveries = failures
            throw .storage(error)
        }
        for member in members {
            pending[appID]?[member.request.identifier] = nil
            taskSlices[member.taskID] = sliceID
        }
        if let identity = activating ? nil : runtime.connections[target] {
            attach(identity, to: &slice)
        }
        slices[sliceID] = slice

        var delivered = 0
        // Members the slice no longer held when their turn came (`returnUnsent` put them back).
        var skipped = 0
        var attempted = 0
        var wakeRefused = false
        var answeredBy: String?  // the connection that answered RunTask (sent to a bus name)
        do {
            for member in members {
                // The slice may have ended while an earlier RunTask was awaited (sleep, a
                // switch, the app gone, the agent's stop): what it had not sent went back then.
                guard let live = slices[sliceID] else { break }
                guard let index = live.members.firstIndex(where: { $0.taskID == member.taskID && !$0.done }) else {
                    skipped += 1
                    attempted += 1
                    continue
                }
                slices[sliceID]?.members[index].sent = true
                attempted += 1
                let remaining = max(1, slice.length.seconds - slice.elapsed)
                var info = member.payload ?? [:]
                info["slice_id"] = Variant(sliceID)
                info["deadline"] = Variant(Int64(slice.deadline.rounded(.up)))
                // Until the app has answered once, the name may have no owner yet, and an
                // ExpireTask sent to it meanwhile is refused by the bus (`activationsAwaited`).
                let beforeTheStart = activating && answeredBy == nil
                if beforeTheStart { activationsAwaited[member.taskID] = false }
                let reply: Message
                do {
                    reply = try await connection.call(
                        .methodCall(
                            destination: target, path: Self.clientPath, interface: BGPolicyNames.clientInterface,
                            member: "RunTask",
                            body: [.string(member.taskID), .string(member.request.identifier),
                                   .string(member.kind.rawValue), .uint32(UInt32(remaining.rounded())),
                                   info.dbusValue]),
                        timeout: activating ? .seconds(25) : .seconds(10), replyBodyLimit: Self.appReplyBytes)
                } catch {
                    activationsAwaited[member.taskID] = nil
                    throw error
                }
                answeredBy = reply.sender ?? answeredBy
                // Ended meanwhile (switched off, sleep, the user back during processing): the
                // app, which has the task now, is told to stop at its own connection.
                if beforeTheStart, activationsAwaited.removeValue(forKey: member.taskID) == true, let sender = reply.sender {
                    sendExpireExpectingNoReply(member.taskID, to: sender)
                    logger.info(
                        "ExpireTask sent again, to the app that answered: its task ended while the bus started it, and the first went to a name with no owner yet",
                        metadata: ["app.id": "\(appID)", "task.id": "\(member.taskID)", "bus.unique": "\(sender)"])
                }
                delivered += 1
                if member.kind == .refresh { refreshRan = true }
                // The app has started and answered: the next app may start.
                handOnTurn()
                if member.kind == .contentAvailable { contentWakeDelivered(appID) }
                appendHistory(HistoryEntry(
                    time: Self.wallNow(), appID: appID, identifier: member.request.identifier, taskID: member.taskID,
                    event: .delivered, kind: member.kind,
                    detail: (simulated ? "simulated launch: " : "")
                        + "RunTask delivered to \(target) for \(Int(slice.length.seconds)) s"
                        + (activating ? " (started by D-Bus activation\(Self.turnWords(waitedForTurn)))" : "")
                        + (why.isEmpty ? "" : ", \(why)")
                        + (members.count > 1 ? ", sharing slice \(sliceID) with \(members.count - 1) more" : "")
                        + (slices[sliceID]?.exempt == true ? "; CPU monitor off (external-power processing on AC)" : "")))
            }
        } catch {
            var reason = Self.describe(deliveryError: error, target: target)
            // The one that failed and those after it, as far as the slice still holds them.
            let held = Set(slices[sliceID]?.openMembers.map(\.taskID) ?? [])
            let undelivered = members.dropFirst(max(0, attempted - 1)).filter { held.contains($0.taskID) }
            // No answer in time is not no call: an app whose main loop was busy reads RunTask
            // late, and starts the task the agent has put back; told nothing, it ran it with no
            // slice, its SetTaskCompleted was refused, and the work ran twice. Not after the
            // bus's own refusals (no such name, object or method): nobody got the call then.
            // One the slice no longer holds was told when it ended.
            if Self.isTimeout(error), attempted > 0, held.contains(members[attempted - 1].taskID) {
                sendExpireExpectingNoReply(members[attempted - 1].taskID, to: target)
                reason += " (ExpireTask sent, in case it reads the call late)"
            }
            // The wake goes last: when it is what failed, everything else was delivered.
            if undelivered.count == 1, let wake = undelivered.first, wake.kind == .contentAvailable,
                Self.isAppsOwnAnswer(error)
            {
                logger.warning(
                    "Content-available wake refused by the app; dropped",
                    metadata: ["app.id": "\(appID)", "target": "\(target)", "error": "\(reason)"])
                dropRefusedWake(wake, sliceID: sliceID, reason: reason)
                wakeRefused = true
            } else {
                logger.warning("Delivery failed", metadata: ["app.id": "\(appID)", "target": "\(target)", "error": "\(reason)"])
                unstart(undelivered, sliceID: sliceID, reason: reason)
                if delivered == 0 {
                    await closeSlice(sliceID)
                    throw SchedulerError(.unavailable, "could not reach \(appID): \(reason). The request stays pending")
                }
            }
            if slices[sliceID]?.openMembers.isEmpty == true {
                // Those delivered have completed already (or there were none but a refused
                // wake): the slice holds nothing more, and must not keep the app busy (and
                // watched) until its deadline.
                await closeSlice(sliceID)
            }
        }
        // A partial failure keeps the wait `unstart` set: the rest goes to the next window after it.
        // A refused wake is no failure to reach the app: it answered.
        if delivered + skipped == members.count || wakeRefused {
            apps[appID]?.lastDeliveryFailureAt = nil
            apps[appID]?.failedDeliveries = 0
        }

        guard var live = slices[sliceID] else { return }  // completed already
        if activating, !(await tieToOwner(sliceID: sliceID, name: target, answeredBy: answeredBy)) { return }
        live = slices[sliceID] ?? live
        guard slices[sliceID] != nil else { return }
        startTimers(sliceID: sliceID, slice: &live)
        slices[sliceID] = live
        logger.info(
            "Slice started",
            metadata: ["app.id": "\(appID)", "slice.id": "\(sliceID)", "tasks": "\(members.count)",
                       "seconds": "\(Int(slice.length.seconds))", "cpu.monitor": "\(live.monitor != nil)"])
        publishStatus(nextWindow: evaluationTimerDue)
    }

    /// Ties a slice delivered by D-Bus activation, tied until now to the bus name it was sent
    /// to, to the connection that answered RunTask (else the name's owner): from now on its
    /// leaving closes the slice, and ExpireTask goes to it. Returns false when the app has left
    /// the bus already: the slice is then closed as `vanished` (failed, not a violation). Until
    /// the tie, the app's unique name leaving (`connectionVanished`) matched no slice, so an app
    /// that crashed right after its answer had its slice run to the deadline and end `expired`,
    /// a violation.
    func tieToOwner(sliceID: String, name: String, answeredBy: String?) async -> Bool {
        let owner: String
        if let answeredBy {
            owner = answeredBy
        } else {
            do {
                guard let found = try await connection.nameOwner(of: name) else {
                    await endSlice(sliceID, as: .vanished, detail: Self.goneAfterAnswer(name))
                    return false
                }
                owner = found
            } catch {
                // The bus did not answer: the slice stays with the name (ExpireTask to it does
                // not start the app again), and ends at its deadline or by SetTaskCompleted.
                logger.warning(
                    "Could not learn who owns the name an app was started by; its slice stays tied to the name",
                    metadata: ["slice.id": "\(sliceID)", "bus.name": "\(name)", "error": "\(error)"])
                return slices[sliceID] != nil
            }
        }
        // Tied first, so that the owner leaving is seen from now on; whether it left before
        // (its leaving, seen already, matched nothing), the bus's answer for its credentials says.
        slices[sliceID]?.connection = owner
        let pid: UInt32?
        do {
            pid = try await connection.credentials(of: owner).pid
        } catch DBusError.remote(let errorName, _) where errorName == DBusError.nameHasNoOwner {
            await endSlice(sliceID, as: .vanished, detail: Self.goneAfterAnswer(name))
            return false
        } catch {
            pid = nil
        }
        guard var current = slices[sliceID] else { return false }
        if let pid {
            let identity = inspector.identify(pid: pid)
            if Self.mayAttach(owner: identity, of: name, to: current.appID) {
                attach(identity, to: &current)
            } else {
                logger.warning(
                    "The process owning the bus name the slice was delivered to is not the app's; the slice's CPU is not watched, and nothing of that process's is throttled, frozen or stopped",
                    metadata: ["app.id": "\(current.appID)", "slice.id": "\(sliceID)", "bus.name": "\(name)",
                               "owner": "\(owner)", "owner.pid": "\(pid)",
                               "owner.app_id": "\(identity.appID.map { "\($0)" } ?? "none (unverified)")"])
            }
        }
        slices[sliceID] = current
        return true
    }

    /// Whether the process that owns `busName`, to which a slice of `appID` was delivered by
    /// D-Bus activation, is the app's own, to be attached to the slice: its CPU judged as the
    /// app's, its unit throttled or frozen, itself stopped with SIGSTOP. The bus starts whatever
    /// program its activation files name for the name, and any program may own a name on the
    /// session bus; and a snap's `bus_name` is taken as given at `Register` (`mayUse`), so a
    /// snap could name the one another app owns, and have that app judged and frozen for its
    /// own work. So an owner with an app id (a Flatpak, a snap, an app unit) must be that app.
    /// One with none (unverified: a program on the host outside any app unit, as one the bus
    /// starts in a `dbus-…service` unit, or one the agent cannot see) is taken for the app only
    /// when the name is the app id or a name under it, those an app may give as its own: as an
    /// unverified app's own word is for its id. A snap's processes are always identified as it,
    /// so a snap never needs an unverified owner, and one owning another name is not taken.
    static func mayAttach(owner: ProcessIdentity, of busName: String, to appID: AppID) -> Bool {
        if let ownerID = owner.appID { return ownerID == appID }
        return mayUse(busName: busName, appID: appID, identity: .unverified)
    }

    static func goneAfterAnswer(_ name: String) -> String {
        "the app left the bus right after answering RunTask (started by D-Bus activation as \(name)); closed as failed, not a violation"
    }

    static let clientPath = try! ObjectPath(BGPolicyNames.clientObjectPath)

    /// Whether the agent is launching `appID` itself: a delivery that starts the app by D-Bus
    /// activation is on its way. Not any delivery: one to a running app's connection starts
    /// nothing, and a unit of the app appearing meanwhile is the user's doing (it was dropped,
    /// and the user's whole session in the app went unseen).
    func isLaunching(_ appID: AppID) -> Bool {
        startingByActivation.contains(appID)
    }

    /// Waits for a turn to start an app by D-Bus activation (`StartTurns`). A launch that must
    /// queue says so: the rules are asked again when its turn comes (`Launch held`).
    func takeStartTurn(for appID: AppID) async {
        await withCheckedContinuation { (turn: CheckedContinuation<Void, Never>) in
            if startTurns.ask(turn) { return turn.resume() }
            logger.debug(
                "Launch waits for its turn to start the app",
                metadata: ["app.id": "\(appID)", "starts.under_way": "\(startTurns.running)",
                           "starts.waiting": "\(startTurns.waiting)"])
        }
    }

    /// Ends a start under way, handing the turn to the next app waiting, if any.
    func endStartTurn() {
        startTurns.finish()?.resume()
    }

    /// How long a start waited for its turn, for the history, when it waited a noticeable time.
    static func turnWords(_ waited: Duration) -> String {
        let seconds = waited.seconds
        guard seconds >= 0.5 else { return "" }
        return ", after \(Int(seconds.rounded(.up))) s waiting for other apps to start"
    }

    /// Who the slice's process is, for the CPU monitor, and its first CPU reading.
    func attach(_ identity: ProcessIdentity, to slice: inout Slice) {
        guard identity.pid != 0 else { return }
        // The pid the bus gave when the app connected, maybe days ago. If that process has
        // exited (its connection kept by a child it handed it to) and the number gone to
        // another process, that one is not the app's: the monitor would measure a stranger's
        // CPU, and stop it with SIGSTOP.
        guard inspector.stillRuns(identity) else {
            logger.warning(
                "The process that registered the app has exited and its pid is another process's now; its slice's CPU is not watched",
                metadata: ["app.id": "\(slice.appID)", "pid": "\(identity.pid)", "slice.id": "\(slice.id)"])
            return
        }
        slice.pid = identity.pid
        slice.processStarted = identity.startTime
        slice.cgroupPath = identity.cgroupPath
        slice.unit = identity.unit
        guard !slice.exempt else { return }
        watchCPU(of: &slice)
    }

    /// The rules that may hold a launch already decided and not yet delivered without stopping
    /// it: those of the window the decision was made in (which may have closed since), and the
    /// app's delivery under way (this one).
    static let decidedLaunchRules: Set<BlockingRule> = [.nextWindow, .predictedUse, .refreshInterval, .appBusy]

    /// Of `requests`, decided for a launch, those the rules still let run now; whether the
    /// app's content-available wake, if the launch carries one, may still go; and the rules
    /// that hold the others.
    func stillRunnable(
        _ requests: ArraySlice<TaskRequest>, of appID: AppID, contentAvailable: Bool = false
    ) -> (ArraySlice<TaskRequest>, contentAvailable: Bool, Set<BlockingRule>) {
        let now = Self.wallNow()
        guard var state = schedulingState(of: appID, at: now) else { return ([], false, []) }
        state.busy = false
        let facts = context(now: now, concerning: [appID])
        var changed: Set<BlockingRule> = []
        let still = requests.filter { request in
            // The rules alone: the windows' and the planner's were decided with the launch, and
            // `explain` would plan the refresh's next window to name them (a day's look-ahead
            // over every app, at each launch's start turn).
            let rules = Set(policy.ruleReasons(for: request, app: state, context: facts, words: false).map(\.rule))
                .subtracting(Self.decidedLaunchRules)
            changed.formUnion(rules)
            return rules.isEmpty
        }
        var wakeStill = false
        if contentAvailable {
            let rules = Set(policy.contentReasons(app: state, context: facts, words: false).map(\.rule))
                .subtracting(Self.decidedLaunchRules)
            changed.formUnion(rules)
            wakeStill = rules.isEmpty
        }
        return (ArraySlice(still), wakeStill, changed)
    }

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

    /// Puts undelivered tasks back: pending again (written first, so a crash in between
    /// leaves the request pending rather than lost), then the running rows removed.
    func unstart(_ members: [Slice.Member], sliceID: String, reason: String) {
        let now = Self.wallNow()
        for member in members {
            returnToPending(member, sliceID: sliceID, reason: reason, sent: true, now: now)
        }
        if let appID = members.first?.request.appID {
            noteDeliveryFailure(of: appID, at: now)
        }
    }

    /// One task of `unstart` or `returnUnsent`. `sent`: its `RunTask` was sent and failed, an
    /// attempt that counts (`failedAttempt`); else it was never sent, and goes back as it was.
    func returnToPending(_ member: Slice.Member, sliceID: String, reason: String, sent: Bool, now: UnixTime) {
        let outcome = sent ? "RunTask failed" : "RunTask not sent"
        if member.kind == .contentAvailable {
            putBack(member, sliceID: sliceID, reason: reason, outcome: outcome, now: now)
            return
        }
        // The app submitted the identifier again while RunTask was on its way (an app
        // started for its work submits at start): the newer request stands, with its own
        // options and earliest_begin, and its write is done or queued. Put back, the old one
        // replaced it in memory and on disk.
        let newer = pending[member.request.appID]?[member.request.identifier]
        // The app registered again without the identifier while RunTask was on its way: its
        // requests went then, and this one goes too. Put back, it was delivered in every window
        // to an app that no longer knows it, each refusal doubling the wait of its other work.
        if newer == nil, apps[member.request.appID]?.record.identifiers.contains(member.request.identifier) != true {
            dropWithdrawn(member, sliceID: sliceID, reason: reason, outcome: outcome, now: now)
            return
        }
        let request = newer ?? (sent ? Self.failedAttempt(member.request, reason: reason, now: now) : member.request)
        // Asked before the write: a job queued before it may run during it, or right after,
        // and leave the writer idle by the time it is done.
        let writesQueued = !writer.isIdle
        do {
            try Self.spendingReserve(store: store, logger: logger, appID: request.appID, keeping: Self.putBackWords) { () throws(StoreError) in
                try storeReturn(
                    of: request, taskID: member.taskID, reason: reason, at: now, repending: newer == nil, outcome: outcome)
            }
            if newer == nil, writesQueued { saveAgainBehindQueuedWrites(request) }
        } catch {
            // On disk the task is still running, and a start would close it as interrupted
            // and never deliver it: written again at the next chance.
            unsavedReturns[member.taskID] = (request, reason, now)
            logger.error(
                "Could not put a request back on disk; it stays pending, and is written again at the next chance",
                metadata: ["app.id": "\(request.appID)", "error": "\(error)"])
        }
        pending[request.appID, default: [:]][request.identifier] = request
        taskSlices[member.taskID] = nil
        slices[sliceID]?.members.removeAll { $0.taskID == member.taskID }
    }

    /// A request put back by `returnToPending` is written on the executor, at once, with its
    /// task's end. A write queued on the store writer before it (a `CancelAll` of the app's
    /// other requests, the second delete of a registration's withdrawal) would land after it and
    /// delete it from disk while memory keeps it: the next start would have lost it. So it is
    /// written once more behind them, and ahead of any queued after (the app's own `Cancel`);
    /// the app is not evaluated until then, so that a delivery's delete of its row cannot come
    /// before this write either.
    func saveAgainBehindQueuedWrites(_ request: TaskRequest) {
        let appID = request.appID
        let store = store
        let logger = logger
        beginSaving(appID)
        writer.enqueue { [self] in
            do {
                try Self.spendingReserve(store: store, logger: logger, appID: appID, keeping: Self.putBackWords) { () throws(StoreError) in
                    try store.savePending(request)
                }
            } catch {
                logger.error(
                    "Could not write again a request put back after a failed delivery; the next start may not find it pending",
                    metadata: ["app.id": "\(appID)", "error": "\(error)"])
            }
            Task { await self.endSaving(appID) }
        }
    }

    /// A task of `returnToPending` whose identifier the app no longer registers: its running
    /// row goes, with a `delivery-failed` entry that says why it is not pending again. A failed
    /// write leaves the row, which the next start closes as interrupted: nothing comes back.
    func dropWithdrawn(_ member: Slice.Member, sliceID: String, reason: String, outcome: String, now: UnixTime) {
        let request = member.request
        do {
            try store.finishTask(
                taskID: member.taskID,
                history: HistoryEntry(
                    time: now, appID: request.appID, identifier: request.identifier, taskID: member.taskID,
                    event: .deliveryFailed, kind: DeliveryKind(request.kind),
                    detail: "\(outcome): \(reason); the app registered again without \(request.identifier), so the request is dropped"))
        } catch {
            logger.error(
                "Could not record a dropped request the app had withdrawn",
                metadata: ["app.id": "\(request.appID)", "task.identifier": "\(request.identifier)", "error": "\(error)"])
        }
        taskSlices[member.taskID] = nil
        slices[sliceID]?.members.removeAll { $0.taskID == member.taskID }
    }

    /// A content-available wake that did not reach the app waits for the next window again,
    /// unless a newer one arrived meanwhile (only the newest is kept).
    /// The request pending again (written first, so a crash in between leaves it pending
    /// rather than lost), then the task's running row gone, with its history.
    /// `repending: false`: a newer request for the identifier is pending, and stays as it is.
    func storeReturn(
        of request: TaskRequest, taskID: String, reason: String, at time: UnixTime, repending: Bool = true,
        outcome: String = "RunTask failed"
    ) throws(StoreError) {
        if repending { try store.savePending(request) }
        try store.finishTask(
            taskID: taskID,
            history: HistoryEntry(
                time: time, appID: request.appID, identifier: request.identifier, taskID: taskID,
                event: .deliveryFailed, kind: DeliveryKind(request.kind),
                detail: repending
                    ? "\(outcome): \(reason); the request stays pending"
                    : "\(outcome): \(reason); the app submitted it again meanwhile, and that request stays pending"))
    }

    /// Writes again what `unstart` could not (`unsavedReturns`): the request as memory holds
    /// it now, if it is still pending (it may have been replaced, attempted again, cancelled or
    /// delivered since), and the old task's end.
    func storeUnsavedReturns() {
        for (taskID, unsaved) in unsavedReturns.sorted(by: { $0.key < $1.key }) {
            let request = unsaved.request
            let current = pending[request.appID]?[request.identifier]
            do {
                if let current {
                    try Self.spendingReserve(store: store, logger: logger, appID: request.appID, keeping: Self.putBackWords) { () throws(StoreError) in
                        try storeReturn(of: current, taskID: taskID, reason: unsaved.reason, at: unsaved.at)
                    }
                } else {
                    try store.finishTask(
                        taskID: taskID,
                        history: HistoryEntry(
                            time: unsaved.at, appID: request.appID, identifier: request.identifier, taskID: taskID,
                            event: .deliveryFailed, kind: DeliveryKind(request.kind), detail: "RunTask failed: \(unsaved.reason)"))
                }
                unsavedReturns[taskID] = nil
                logger.info("A request put back in memory is on disk again", metadata: ["app.id": "\(request.appID)"])
            } catch {
                return  // The disk still refuses: the next chance.
            }
        }
    }

    /// `write`, which keeps what would otherwise be in memory only, tried once more when the
    /// disk is full, on the room the store keeps in reserve for it (`TaskStore.releaseReserve`).
    /// For a request put back after a failed delivery: a stop or a crash before the disk had
    /// room again would take the request's task for interrupted and lose the request. For a
    /// content-available wake the sender was told was accepted: a stop would lose it. The
    /// reserve is made again once there is room (`keepReserveIfDue`). `what` names it in the
    /// log. Static, for the store writer too (`saveAgainBehindQueuedWrites`, the wakes' writes).
    nonisolated static func spendingReserve(
        store: TaskStore, logger: Logger, appID: AppID, keeping what: String, _ write: () throws(StoreError) -> Void
    ) throws(StoreError) {
        do {
            try write()
        } catch .full(let message) {
            guard store.releaseReserve() else { throw .full(message) }
            logger.error(
                "The disk is full: the room kept in reserve was given back to keep \(what); free some space on the disk that holds the database",
                metadata: ["app.id": "\(appID)", "database": "\(store.path ?? "-")", "error": "\(message)"])
            try write()
        }
    }

    /// What `spendingReserve` keeps for `returnToPending`, in its log.
    static let putBackWords = "a request put back after a failed delivery"

    func putBack(_ member: Slice.Member, sliceID: String, reason: String, outcome: String = "RunTask failed", now: UnixTime) {
        let appID = member.request.appID
        if let wake = member.contentWake { contentWakes.putBack(appID, wake: wake) }
        do {
            try store.finishTask(
                taskID: member.taskID,
                history: HistoryEntry(
                    time: now, appID: appID, identifier: "", taskID: member.taskID, event: .deliveryFailed,
                    kind: .contentAvailable, detail: "\(outcome): \(reason); the wake waits for the next window"))
        } catch {
            logger.error("Could not record a failed content-available delivery", metadata: ["app.id": "\(appID)", "error": "\(error)"])
        }
        taskSlices[member.taskID] = nil
        slices[sliceID]?.members.removeAll { $0.taskID == member.taskID }
    }

    /// The app answered a content-available `RunTask` with an error of its own (it has no
    /// handler for wakes, or turned this one down): the wake is dropped, not put back. Another
    /// process sent it, so the app cannot withdraw it; kept, it would be refused in every
    /// window, and each refusal would lengthen the wait that holds the app's own work.
    func dropRefusedWake(_ member: Slice.Member, sliceID: String, reason: String) {
        let appID = member.request.appID
        do {
            try store.finishTask(
                taskID: member.taskID,
                history: HistoryEntry(
                    time: Self.wallNow(), appID: appID, identifier: "", taskID: member.taskID, event: .deliveryFailed,
                    kind: .contentAvailable, detail: "RunTask refused: \(reason); the wake is dropped"))
        } catch {
            logger.error("Could not record a refused content-available wake", metadata: ["app.id": "\(appID)", "error": "\(error)"])
        }
        contentWakeDelivered(appID)
        taskSlices[member.taskID] = nil
        slices[sliceID]?.members.removeAll { $0.taskID == member.taskID }
    }

    /// Whether a failed `RunTask` was answered by the app itself: an error of its own, or the
    /// standard ones a D-Bus library answers for it (no Client1 there, arguments it does not
    /// take). Not the errors the bus gives when it cannot reach the app, start it, or have it
    /// answer in time (`ServiceUnknown`, `NoReply`, `Spawn.*`, `LimitsExceeded`, …), which
    /// say nothing of what the app would answer; nor `org.bgpolicy.Error.Unavailable`, which
    /// the client library answers on a connection it is closing: "not now", not "no".
    static func isAppsOwnAnswer(_ error: any Error) -> Bool {
        guard case DBusError.remote(let name, _) = error else { return false }
        if name == BGPolicyErrorName.unavailable.dbusName { return false }
        let standard = "org.freedesktop.DBus.Error."
        guard name.hasPrefix(standard) else { return true }
        return ["UnknownMethod", "UnknownObject", "UnknownInterface", "InvalidArgs", "NotSupported"]
            .contains(name.dropFirst(standard.count))
    }

    /// Whether a call failed for want of an answer in time: the callee may have it all the same.
    static func isTimeout(_ error: any Error) -> Bool {
        guard case DBusError.remote(let name, _) = error else { return false }
        return name == "org.freedesktop.DBus.Error.NoReply" || name == "org.freedesktop.DBus.Error.Timeout"
    }

    func recordDeliveryFailure(_ requests: [TaskRequest], reason: String, now: UnixTime) {
        for failed in requests {
            let request = Self.failedAttempt(failed, reason: reason, now: now)
            do {
                try store.savePending(request)
            } catch {
                logger.error("Could not record a delivery attempt", metadata: ["app.id": "\(request.appID)", "error": "\(error)"])
            }
            pending[request.appID, default: [:]][request.identifier] = request
            appendHistory(HistoryEntry(
                time: now, appID: request.appID, identifier: request.identifier, event: .deliveryFailed,
                kind: DeliveryKind(request.kind), detail: "not delivered: \(reason); the request stays pending"))
        }
        if let appID = requests.first?.appID { noteDeliveryFailure(of: appID, at: now) }
    }

    /// One more delivery to the app failed: the next waits twice as long as the last did.
    func noteDeliveryFailure(of appID: AppID, at now: UnixTime) {
        guard apps[appID] != nil else { return }
        apps[appID]?.lastDeliveryFailureAt = now
        apps[appID]?.failedDeliveries += 1
    }

    /// The request as it stays pending after a delivery that did not reach the app.
    static func failedAttempt(_ request: TaskRequest, reason: String, now: UnixTime) -> TaskRequest {
        var request = request
        request.deliveryAttempts += 1
        request.lastAttemptAt = now
        request.lastAttemptError = reason
        return request
    }

    /// How much of an app's error message a delivery failure quotes whole.
    static let appMessageBytes = 1024
    /// The most of an app's answer to RunTask that is read: RunTask returns nothing, and an
    /// error needs only its name and a line (`DBusConnection.call(_:timeout:replyBodyLimit:)`).
    static let appReplyBytes = 64 * 1024

    static func describe(deliveryError error: any Error, target: String) -> String {
        switch error {
        case DBusError.remote(let name, let message):
            switch name {
            case "org.freedesktop.DBus.Error.ServiceUnknown", "org.freedesktop.DBus.Error.NameHasNoOwner":
                return "\(target) is not on the bus and cannot be started (\(message))"
            case "org.freedesktop.DBus.Error.NoReply", "org.freedesktop.DBus.Error.Timeout":
                return "\(target) did not answer RunTask in time"
            case "org.freedesktop.DBus.Error.UnknownObject", "org.freedesktop.DBus.Error.UnknownMethod",
                "org.freedesktop.DBus.Error.UnknownInterface":
                return "\(target) does not export org.bgpolicy.Client1 at /org/bgpolicy/Client1"
            default:
                // The app's own words, quoted briefly: this reason is stored with the request and
                // in history, and sent back in SimulateLaunch's error, ListPending, GetPending,
                // Explain and GetHistory, and logged. Whole, an app answering with a message of
                // megabytes made each of those replies and log lines that large, and with 70 MB
                // ListPending could not be answered at all (an array over D-Bus's 64 MiB).
                return "\(target) answered RunTask with \(name): "
                    + SchedulerError.shown(message, over: Self.appMessageBytes, keeping: Self.appMessageBytes / 2)
            }
        default:
            return "\(error)"
        }
    }

    // MARK: Timers

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

    // MARK: The CPU monitor

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

    // MARK: Simulation

    func simulateLaunch(app text: String, identifier: String) async throws(SchedulerError) {
        let appID = try SchedulerError.appID(text)
        guard apps[appID] != nil else { throw .unknownApp(text) }
        guard let request = pending[appID]?[identifier] else { throw .unknownPending(identifier, app: appID, lister: "ListPending") }
        if delivering.contains(appID) || saving[appID] != nil {
            throw SchedulerError(.unavailable, "a delivery to \(appID), or a change to its requests, is on its way; try again in a moment")
        }
        delivering.insert(appID)
        let length = request.kind == .refresh ? configuration.slices.refresh : configuration.slices.processing
        try await deliver(Launch(appID: appID, requests: [request], sliceLength: length), simulated: true)
        // Its work went: the evaluation timer may have been set for it (`endSaving`).
        requestEvaluation()
    }

    /// The unfinished task of `appID` with that identifier, and its slice.
    func runningTask(of appID: AppID, identifier: String) -> (Slice, Slice.Member)? {
        for slice in slices.values where slice.appID == appID {
            if let member = slice.openMembers.first(where: { $0.request.identifier == identifier }) {
                return (slice, member)
            }
        }
        return nil
    }

    func simulateExpiration(app text: String, identifier: String) throws(SchedulerError) {
        let appID = try SchedulerError.appID(text)
        guard apps[appID] != nil else { throw .unknownApp(text) }
        guard let (slice, member) = runningTask(of: appID, identifier: identifier) else {
            throw SchedulerError(.unknownTask, "\(appID) has no running task '\(SchedulerError.shown(identifier))'; 'bgpolicy simulate launch' starts one")
        }
        sendExpire(member.taskID, to: slice.connection)
        appendHistory(HistoryEntry(
            time: Self.wallNow(), appID: appID, identifier: identifier, taskID: member.taskID, event: .expirationWarned,
            kind: member.kind, detail: "ExpireTask sent: simulated expiration"))
    }

    // MARK: Background tasks (user-started work)

    func beginBackgroundTask(caller: String, name: String) throws(SchedulerError) -> (token: String, seconds: UInt32) {
        let appID = try app(of: caller)
        if name.utf8.count > 255 { throw .invalid("the background task name is at most 255 bytes long") }
        if let refusal = policy.backgroundTaskRefusal(context: context(now: Self.wallNow())) {
            throw SchedulerError(.unavailable, refusal.words)
        }
        // Each lasts a slice at most, but one app calling in a loop would otherwise hold
        // thousands, each with its timer and its history.
        let under = backgroundTasks.values.count(where: { $0.appID == appID })
        if under >= Self.maximumBackgroundTasks {
            throw SchedulerError(
                .limitsExceeded,
                "\(appID) already has \(under) background tasks under way (the limit is \(Self.maximumBackgroundTasks)): end one with EndBackgroundTask first")
        }
        let token = Self.newID("b")
        let length = configuration.slices.completion
        let warning = configuration.slices.expirationWarning
        var task = BackgroundTask(token: token, appID: appID, name: name, connection: caller, startedAt: Self.wallNow())
        task.timer = Task {
            do { try await AgentExecutor.sleep(for: max(.zero, length - warning)) } catch { return }
            self.warnBackgroundTask(token)
            do { try await AgentExecutor.sleep(for: warning) } catch { return }
            self.expireBackgroundTask(token)
        }
        backgroundTasks[token] = task
        appendHistory(HistoryEntry(
            time: task.startedAt, appID: appID, identifier: name, taskID: token, event: .backgroundTaskBegan,
            detail: "background task '\(name)' began: \(Int(length.seconds)) s to finish"))
        return (token, UInt32(length.seconds.rounded()))
    }

    /// Background tasks one app may have under way at once.
    static let maximumBackgroundTasks = 16

    func warnBackgroundTask(_ token: String) {
        guard let task = backgroundTasks[token] else { return }
        sendExpire(token, to: task.connection)
    }

    func expireBackgroundTask(_ token: String) {
        guard let task = backgroundTasks.removeValue(forKey: token) else { return }
        appendHistory(HistoryEntry(
            time: Self.wallNow(), appID: task.appID, identifier: task.name, taskID: token, event: .backgroundTaskExpired,
            result: .failed, detail: "background task '\(task.name)' was not ended in time: a violation",
            duration: Self.wallNow() - task.startedAt))
    }

    /// A background task under way as the machine goes to sleep: told to wrap up
    /// (`ExpireTask`, as slices are) and closed as `sleep-expired`, not a violation. It ran on
    /// after the resume with what was left of its 30 s, the app's work cut off mid-way
    /// without a word (a connection dropped by the sleep, a save half written).
    func expireBackgroundTaskForSleep(_ token: String) {
        guard let task = backgroundTasks.removeValue(forKey: token) else { return }
        task.timer?.cancel()
        sendExpireExpectingNoReply(token, to: task.connection)
        appendHistory(HistoryEntry(
            time: Self.wallNow(), appID: task.appID, identifier: task.name, taskID: token, event: .sleepExpired,
            result: .failed,
            detail: "background task '\(task.name)' expired because the machine went to sleep (ExpireTask sent); not a violation",
            duration: Self.wallNow() - task.startedAt))
    }

    func endBackgroundTask(caller: String, token: String) throws(SchedulerError) {
        let appID = try app(of: caller)
        guard let task = backgroundTasks[token], task.appID == appID else {
            throw SchedulerError(.unknownTask, "\(appID) has no background task '\(SchedulerError.shown(token))'; it may have expired already")
        }
        task.timer?.cancel()
        backgroundTasks[token] = nil
        appendHistory(HistoryEntry(
            time: Self.wallNow(), appID: appID, identifier: task.name, taskID: token, event: .backgroundTaskEnded,
            detail: "background task '\(task.name)' ended", duration: Self.wallNow() - task.startedAt))
    }
}
