import BGPolicyCore
public import BGPolicyDBus
#if canImport(FoundationEssentials)
public import FoundationEssentials
#else
public import Foundation
#endif
import Synchronization

/// What a delivered task is for: the kind of the request that caused it.
public enum BGTaskKind: String, Sendable, Hashable, CaseIterable {
    /// From a `BGAppRefreshTaskRequest`.
    case refresh
    /// From a `BGProcessingTaskRequest`.
    case processing
    /// Another process asked the agent to wake the app (SPEC §1, `NotifyContentAvailable`).
    case contentAvailable = "content-available"
    /// Background transfers finished (SPEC §3, `org.bgpolicy.Transfers1`).
    case transfers
}

/// How a finished task went, for the agent's history and its picture of the app.
public enum BGTaskResult: String, Sendable, Hashable, CaseIterable {
    /// The app fetched new content.
    case newData = "new-data"
    /// The app looked and there was nothing new.
    case noData = "no-data"
    /// The work failed.
    case failed

    var taskResult: TaskResult {
        switch self {
        case .newData: .newData
        case .noData: .noData
        case .failed: .failed
        }
    }
}

/// A task the agent has launched: the app does its work, then calls `setTaskCompleted(success:)`.
///
/// The scheduler hands one to the launch handler registered for its identifier. Set
/// `expirationHandler` first thing: the agent calls it shortly before the slice ends (or when the
/// app uses too much CPU), and the app must then stop and complete the task at once, or the
/// overrun counts against its future background time.
///
/// iOS has a subclass per kind; this is one final class with a `kind`, so the compiler can check
/// that it is `Sendable` (its mutable state sits behind a lock).
public final class BGTask: Sendable, CustomStringConvertible {
    /// The identifier of the request that launched this task.
    public let identifier: String
    /// What the task is for.
    public let kind: BGTaskKind
    /// The agent's id for this run of the task, unique across runs.
    public let taskID: String
    /// When the slice ends. The agent warns (calls `expirationHandler`) a few seconds before.
    public let deadline: Date
    /// For a content-available wake, the hint the notifier sent (`NotifyContentAvailable`'s
    /// payload: a mailbox, a cursor); empty for every other kind.
    public let payload: [String: Variant]

    /// The agent (its unique name) that launched the task: once another owns the agent's name,
    /// or none, the task has ended at the agent.
    let launcher: String

    typealias Reporter = @Sendable (_ taskID: String, _ success: Bool, _ result: TaskResult) async throws(CompletionFailure) -> Void

    /// A report of the task's end that failed, and whether the agent may still hold the task as
    /// running, so that the app may report again.
    struct CompletionFailure: Error {
        let error: BGTaskSchedulerError
        let taskMayStillRun: Bool

        init(_ error: BGTaskSchedulerError, taskMayStillRun: Bool? = nil) {
            self.error = error
            self.taskMayStillRun = taskMayStillRun ?? error.taskMayStillRun
        }
    }

    private struct State {
        /// Kept while a report is on its way: if it fails and the task runs again, a warning
        /// that came meanwhile still reaches it. Dropped once a report is final.
        var expirationHandler: (@Sendable () -> Void)?
        var expired = false
        /// An expiration handler has been called for the warning (or set after it, and so
        /// called): no other is, the warning is handled once. Not while no handler was set.
        var warned = false
        /// The newest report of the task's end: on its way, accepted, or refused for good.
        var completion: Task<Void, any Error>?
        /// That report failed and the agent still holds the task as running (it could not
        /// store the end, or did not answer): the next `setTaskCompleted` reports again.
        var mayReportAgain = false
        /// Counts reports, so that only the newest one's failure reopens the task.
        var reports = 0

        /// A report is on its way, or has been answered for good.
        var completed: Bool { completion != nil && !mayReportAgain }
    }

    private let state = Mutex(State())
    private let reporter: Reporter

    init(identifier: String, kind: BGTaskKind, taskID: String, deadline: Date, payload: [String: Variant] = [:],
         launcher: String = "", reporter: @escaping Reporter) {
        self.launcher = launcher
        self.identifier = identifier
        self.kind = kind
        self.taskID = taskID
        self.deadline = deadline
        self.payload = payload
        self.reporter = reporter
    }

    /// Called when the agent asks the app to stop. It must end the work quickly and call
    /// `setTaskCompleted(success:)`. It runs on its own task, not on any particular actor.
    ///
    /// It is also called when the agent that launched the task leaves the bus without saying
    /// so (it crashed, or was killed): the slice ended with it (`interrupted` in the history),
    /// and a `setTaskCompleted` now fails with `.agentNotRunning` or `.unknownTask`. And when
    /// the app calls `BGTaskScheduler.disconnect()`: the agent ends the task with the app's
    /// connection (`vanished`), and a `setTaskCompleted` fails with `.unknownTask`, without
    /// connecting again. And when the bus closes the app's connection (the session bus
    /// stopped or restarted), which ends the task at the agent as well.
    ///
    /// If the task has already expired when the handler is set and no handler has been called
    /// for that yet, it is called at once, so a warning that arrives before the launch handler
    /// sets it is not lost. A warning is handled once: a handler set after one has been called
    /// for it is kept but not called, so one that wraps the handler before it
    /// (`let previous = task.expirationHandler; task.expirationHandler = { …; previous?() }`)
    /// does not run that one again.
    public var expirationHandler: (@Sendable () -> Void)? {
        get { state.withLock { $0.expirationHandler } }
        set {
            let runNow: Bool = state.withLock { s in
                s.expirationHandler = newValue
                guard s.expired, !s.completed, !s.warned, newValue != nil else { return false }
                s.warned = true
                return true
            }
            if runNow, let newValue { Task { newValue() } }
        }
    }

    /// Whether the app has reported the task's end at least once, whatever came of it.
    var wasReported: Bool { state.withLock { $0.reports > 0 } }

    /// Whether the agent has asked this task to stop. Long work can poll this between steps.
    public var isExpired: Bool { state.withLock { $0.expired } }

    /// Whether `setTaskCompleted` has been called and its report is on its way, accepted, or
    /// refused for good. False again once a report failed that the agent can still take
    /// (`.failed`, for instance): the task is still running, and must be completed again.
    public var isCompleted: Bool { state.withLock { $0.completed } }

    /// Tells the agent the work is done, without saying whether there was new data.
    ///
    /// The report is sent in the background; the first call wins and later ones return the same
    /// task. Await the returned task's `value` to know the agent accepted it (it throws
    /// `BGTaskSchedulerError`, for instance `.unknownTask` when the slice had already ended).
    ///
    /// When the report fails but the task is still running at the agent (`.failed`, such as a
    /// full disk, or no answer in time, `.other`), the next call reports again, with its own
    /// arguments: call it again once there is room. Past its deadline the agent has ended the
    /// task either way (it took the report whose answer was lost, or closed the slice): the
    /// scheduler forgets it at a launch after that, and a report gets `.unknownTask`. After
    /// `.unknownTask`, `.notRegistered` or `.agentNotRunning` the task has ended at the agent,
    /// and later calls return the failed task;
    /// so it has when the agent no longer knew the app's connection and the scheduler's
    /// `Register` again was refused (`.accessDenied`: another process took the app id over);
    /// after `.unavailable` to the report itself (the agent is stopping, and closes the task as
    /// interrupted; an `.unavailable` to the `Register` sent before it leaves the task running,
    /// to be reported again); and
    /// whatever the error once the agent that launched the task has left the bus (it crashed,
    /// or stopped before it answered: `.other`). The task stays completed then, and its
    /// expiration handler does not run. The report never starts the agent (D-Bus activation):
    /// with none on the bus, as after the user stopped it, it fails `.agentNotRunning` at once,
    /// since a new agent would know nothing of the task.
    ///
    /// A warning that comes while the report is on its way makes the task expired; if the
    /// report then fails and the task still runs, the expiration handler runs.
    @discardableResult
    public func setTaskCompleted(success: Bool) -> Task<Void, any Error> {
        complete(success: success, result: .unspecified)
    }

    /// Tells the agent the work is done and what came of it; see `setTaskCompleted(success:)`.
    @discardableResult
    public func setTaskCompleted(success: Bool, result: BGTaskResult) -> Task<Void, any Error> {
        complete(success: success, result: result.taskResult)
    }

    private func complete(success: Bool, result: TaskResult) -> Task<Void, any Error> {
        state.withLock { s in
            if let existing = s.completion, !s.mayReportAgain { return existing }
            s.reports += 1
            let number = s.reports
            let report = Task { [reporter, taskID] in
                do throws(CompletionFailure) {
                    try await reporter(taskID, success, result)
                } catch {
                    self.reportFailed(number, taskMayStillRun: error.taskMayStillRun)
                    throw error.error
                }
                self.reportEnded(number)
            }
            s.completion = report
            s.mayReportAgain = false
            return report
        }
    }

    /// Report `number` failed. While the agent still holds the task, the next call reports
    /// again, and a warning that came while the report was on its way runs the handler now.
    private func reportFailed(_ number: Int, taskMayStillRun: Bool) {
        guard taskMayStillRun else { return reportEnded(number) }
        let handler: (@Sendable () -> Void)? = state.withLock { s in
            guard s.reports == number else { return nil }
            s.mayReportAgain = true
            guard s.expired, !s.warned, let handler = s.expirationHandler else { return nil }
            s.warned = true
            return handler
        }
        if let handler { Task { handler() } }
    }

    /// Report `number` was final: the task is over, and its handler is not needed any more.
    private func reportEnded(_ number: Int) {
        state.withLock { s in
            if s.reports == number { s.expirationHandler = nil }
        }
    }

    /// Marks the task expired and runs the expiration handler, unless a report of its end is on
    /// its way or final. One on its way that fails leaves the task expired, and runs the
    /// handler then (`reportFailed`).
    func expire() {
        let handler: (@Sendable () -> Void)? = state.withLock { s in
            guard !s.expired else { return nil }
            s.expired = true
            guard !s.completed, let handler = s.expirationHandler else { return nil }
            s.warned = true
            return handler
        }
        if let handler { Task { handler() } }
    }

    /// `BGTask(refresh org.example.App.refresh, task 42)`.
    public var description: String { "BGTask(\(kind.rawValue) \(identifier), task \(taskID))" }
}
