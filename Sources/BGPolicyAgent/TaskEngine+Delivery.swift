import BGPolicyCore
import BGPolicyDBus
import BGPolicyStore
import BGPolicySystem
import Logging

/// Delivery: starting a slice (`RunTask` to the app, launched by D-Bus activation if need
/// be), tying it to the process that answers, and taking start turns.
extension TaskEngine {
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

    /// Starts one slice: records the tasks as running (so a crash can never deliver them twice),
    /// calls `RunTask` for each, and starts the slice's timers and CPU monitor. When the app
    /// cannot be reached, the requests go back to pending with the attempt recorded, and the
    /// error says why.
    ///
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
}
