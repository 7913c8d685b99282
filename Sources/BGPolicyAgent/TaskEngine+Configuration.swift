import BGPolicyCore
import Logging

/// A configuration read again while the agent runs (`Admin1.Reload`, which `systemctl --user reload`
/// runs through `bgpolicy reload`; `SIGHUP`).
extension TaskEngine {
    /// Puts `new` in effect, and returns the knobs whose new value waits for the next start
    /// (`deferred`), and each knob that changed in effect, old and new value (`changes`, as
    /// `PolicyConfiguration.changes(from:)` words them): not a deferred one, which did not.
    ///
    /// Every decision reads the table when it is made, so each knob acts from its next use:
    /// the next window for the grids, battery, idle and refresh rules; the next `Submit` or
    /// `NotifyContentAvailable` for the limits; the next slice for the slice lengths and the
    /// CPU monitor. Slices under way keep the length and CPU rules they were granted with, and
    /// requests already pending stay when a per-app limit falls below their number. A raised
    /// `concurrent_starts` starts the apps waiting for a turn at once.
    ///
    /// `[refresh] strategy` waits for a restart: the two strategies keep different state (the
    /// planner learns from the usage log as the agent starts), so a switch while running would
    /// start the planner from less than a restart gives it.
    func reconfigure(_ new: PolicyConfiguration) -> (deferred: [String], changes: [String]) {
        let old = configuration
        var applied = new
        var deferred: [String] = []
        if new.refresh.strategy != configuration.refresh.strategy {
            applied.refresh.strategy = configuration.refresh.strategy
            deferred.append("[refresh] strategy")
        }
        configuration = applied
        contentWakes.perHour = applied.limits.contentAvailablePerHour
        for waiter in startTurns.setLimit(applied.slices.concurrentStarts) { waiter.resume() }
        refreshPlanner?.configure(applied)
        // Rules may now hold or block what they did not: the next window is planned anew.
        requestEvaluation()
        return (deferred, applied.changes(from: old))
    }
}

extension TaskEngine {
    /// The longest the engine waits at start for the battery and the power profile
    /// (`ConditionsHub.settling`) before it plans without them: a daemon that does not answer.
    static let settleTimeout: Duration = .seconds(3)

    /// The first facts are in (`ConditionsHub.onSettled`), or `settleTimeout` passed: from now
    /// on evaluations launch work, starting with one of everything. After a resume the wait is
    /// that resume's `generation` (`settleGeneration`): the end of an earlier one's changes
    /// nothing.
    func conditionsSettle(timedOut: Bool = false, generation: Int = 0) {
        guard !conditionsSettled, generation == settleGeneration else { return }
        conditionsSettled = true
        if timedOut {
            logger.info(
                generation == 0
                    ? "Starting work before the battery and power profile are known: their sources did not report within \(Int(Self.settleTimeout.components.seconds)) s"
                    : "Starting work after the resume before the battery and power profile were read again: their sources did not report within \(Int(Self.settleTimeout.components.seconds)) s")
        }
        takeConditions()
        requestEvaluation()
    }
}
