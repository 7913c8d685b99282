import BGPolicyCore
import BGPolicyDBus

/// Why a `BGTaskScheduler` call failed: a code to branch on and the agent's message for people.
///
/// Every error the scheduler throws is one of these. Codes mirror the agent's
/// `org.bgpolicy.Error.*` names, so a program can react to, say, `.tooManyPendingTaskRequests`
/// without parsing text; `message` is the agent's own sentence, meant to be logged or shown.
///
/// ```swift
/// do {
///     try await BGTaskScheduler.shared.submit(request)
/// } catch let error as BGTaskSchedulerError where error.code == .unavailable {
///     print("Background refresh is off: \(error.message)")
/// }
/// ```
public struct BGTaskSchedulerError: Error, Sendable, Hashable, CustomStringConvertible {
    /// The kinds of failure, one for each `org.bgpolicy.Error.*` the scheduler can see, plus
    /// "the agent is not there" and a catch-all.
    public enum Code: String, Sendable, Hashable, CaseIterable {
        /// No identifier is registered yet, the agent does not know this connection, or
        /// (`notifyContentAvailable`) the app to wake never registered
        /// (`org.bgpolicy.Error.NotRegistered`).
        case notRegistered
        /// The identifier was not registered with `register(forTaskWithIdentifier:launchHandler:)`
        /// (`org.bgpolicy.Error.NotPermitted`).
        case notPermitted
        /// The app already has its one refresh or ten processing requests pending
        /// (`org.bgpolicy.Error.TooManyPendingRequests`).
        case tooManyPendingTaskRequests
        /// The user switched background work off for this app or for all apps; the battery is
        /// critical or the machine is going to sleep (`beginBackgroundTask`); or the agent is
        /// stopping (`org.bgpolicy.Error.Unavailable`).
        case unavailable
        /// A request or option the agent does not accept, such as an `earliestBeginDate` more than
        /// a week ahead (`org.bgpolicy.Error.InvalidArgument`).
        case invalidArgument
        /// The agent would not let this process act as the app it claims to be
        /// (`org.bgpolicy.Error.AccessDenied`).
        case accessDenied
        /// No pending request, running task or background task has that identifier
        /// (`org.bgpolicy.Error.UnknownTask`).
        case unknownTask
        /// Over one of the agent's bounds: 16 background tasks under way, a content-available
        /// wake over the app's hourly limit on battery (the message says when the next is
        /// allowed), the registration of an app new to an agent that keeps as many apps as it
        /// may (`[limits] apps`), or a call too large (`org.bgpolicy.Error.LimitsExceeded`).
        case limitsExceeded
        /// The agent could not do it, such as storing the change on a full disk. Nothing changed,
        /// and the same call may succeed later (`org.bgpolicy.Error.Failed`).
        case failed
        /// bgpolicyd is not running on the session bus (and cannot be started: not installed,
        /// not enabled with `systemctl --user enable bgpolicyd`, or failing to start; the
        /// message says which and what to do), or the bus itself cannot be reached. For
        /// `setTaskCompleted` and `endBackgroundTask`, which do not start it, it is simply not
        /// running: the work ended with the agent that granted it.
        case agentNotRunning
        /// Anything else: a timeout, an agent too old to know the call, a malformed answer, a
        /// call whose task was cancelled.
        case other
    }

    /// What kind of failure this is.
    public var code: Code
    /// The agent's message (or ours, for failures found before asking it), for people.
    public var message: String
    /// The D-Bus error name the failure arrived as, when it came from the bus.
    public var dbusErrorName: String?

    /// Creates an error; the library creates these, apps normally only read them.
    public init(_ code: Code, _ message: String, dbusErrorName: String? = nil) {
        self.code = code
        self.message = message
        self.dbusErrorName = dbusErrorName
    }

    /// `code: message`, as it should appear in a log line.
    public var description: String { "\(code.rawValue): \(message)" }
}

extension BGTaskSchedulerError.Code {
    /// The code for a D-Bus error name. Names outside `org.bgpolicy.Error.*` that mean "nobody
    /// owns the agent's name" (or it could not be started) map to `.agentNotRunning`.
    init(dbusErrorName name: String) {
        if let known = BGPolicyErrorName(dbusName: name) {
            switch known {
            case .notRegistered: self = .notRegistered
            case .notPermitted: self = .notPermitted
            case .tooManyPendingRequests: self = .tooManyPendingTaskRequests
            case .unavailable: self = .unavailable
            case .invalidArgument: self = .invalidArgument
            case .accessDenied: self = .accessDenied
            case .unknownTask: self = .unknownTask
            case .limitsExceeded: self = .limitsExceeded
            case .failed: self = .failed
            case .unknownObject, .unknownInterface, .unknownMethod, .unknownProperty, .propertyReadOnly:
                self = .other
            }
            return
        }
        // The bus's or the user manager's word that the agent is not there and could not be
        // started (AgentUnreachable reads them for the command too).
        self = AgentUnreachable(dbusErrorName: name, message: "")?.agentIsMissing == true ? .agentNotRunning : .other
    }
}

extension BGTaskSchedulerError {
    /// Wraps whatever a D-Bus call threw, so apps only ever see one error type.
    init(_ error: any Error) {
        switch error {
        case let error as BGTaskSchedulerError:
            self = error
        case DBusError.remote(let name, let message):
            if let unreachable = AgentUnreachable(dbusErrorName: name, message: message) {
                // Not there (.agentNotRunning), or gone before it answered (.other: the
                // call's effect is not known); the same words and advice as `bgpolicy`'s.
                self.init(unreachable.agentIsMissing ? .agentNotRunning : .other,
                          "\(unreachable.problem); \(unreachable.remedy)", dbusErrorName: name)
                return
            }
            let code = Code(dbusErrorName: name)
            let timedOut = name == DBusError.noReply || name == DBusError.timedOut
            let text = timedOut ? "bgpolicyd did not answer in time (\(message))" : message
            self.init(code, text, dbusErrorName: name)
        case let error as DBusError:
            switch error {
            case .connectionFailed, .disconnected:
                self.init(.agentNotRunning, "the session bus cannot be reached: \(error.message)", dbusErrorName: error.name)
            default:
                self.init(.other, error.message, dbusErrorName: error.name)
            }
        case is CancellationError:
            self.init(.other, "the call was cancelled")
        default:
            self.init(.other, "\(error)")
        }
    }
}

extension BGTaskSchedulerError {
    /// After a failed `SetTaskCompleted`, whether the agent may still hold the task as running,
    /// so that the app may report its end again. The agent keeps it after `Failed` (it could
    /// not store the end; nothing changed) and `InvalidArgument` (refused before it looked the
    /// task up), and may after a timeout or a cancelled call (the outcome is unknown; a second
    /// report of a task that did end is `UnknownTask`). It has none after `UnknownTask`, nor
    /// after `NotRegistered` or `.agentNotRunning`: an agent that does not know the app, or
    /// that the app lost, has ended the app's tasks. Nor after `Unavailable`, which an agent
    /// answers `SetTaskCompleted` with only while it stops, closing every running slice as
    /// `interrupted` (an `Unavailable` to the `Register` sent before the report is read apart,
    /// in `BGTaskScheduler.reportCompletion`: the report was not sent, and the task runs on). (`BGTaskScheduler.reportCompletion` also takes any failure as final after
    /// a `NotRegistered`, and once the agent that launched the task has left the bus.)
    var taskMayStillRun: Bool {
        switch code {
        case .unknownTask, .notRegistered, .agentNotRunning, .unavailable: false
        default: true
        }
    }
}
