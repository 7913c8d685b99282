import BGPolicyCore
import Glibc
import Logging

/// Evaluation: asking the policy what runs now, once per turn of the executor, and the one
/// timer that wakes the agent when the next decision is due (none when nothing is).
extension TaskEngine {
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
    ///
    /// A set that moved the clock by less than `smallestClockStepActedOn` (a clock set to what it
    /// read, an NTP client's small correction) changes nothing and is logged at debug level:
    /// timers a fraction of a second off do not matter, and moving every stored time would
    /// cost a write to the database and a line in the journal for each. Such steps add up,
    /// measured from the last step acted on, and are acted on together once they reach it.
    func wallClockSet() {
        let offset = Self.wallMinusBootTime()
        let step = offset - wallClockOffset
        let now = Self.wallNow()
        guard abs(step) >= Self.smallestClockStepActedOn else {
            logger.debug(
                "A set of the wall clock moved it by less than a second in all; nothing is planned again",
                metadata: ["step.seconds": "\(step)", "time": "\(Int64(now))"])
            return
        }
        wallClockOffset = offset
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

    /// The smallest step of the wall clock (in seconds, either way) that `wallClockSet` acts on.
    static let smallestClockStepActedOn = 1.0

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
}
