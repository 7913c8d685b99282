import BGPolicyCore
import BGPolicyDBus
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import Synchronization

/// `org.bgpolicy.Client1`: how the agent launches and warns the app.
///
/// Both methods answer on the connection's thread without suspending (the contract wants
/// `RunTask` answered at once); the app's handlers run on tasks of their own.
extension BGTaskScheduler {
    static let clientPath = try! ObjectPath(BGPolicyNames.clientObjectPath)

    /// How many unmatched `ExpireTask` ids are remembered.
    static let earlyExpirationLimit = 32

    /// How long past its deadline a task the app did not complete, once warned or reported, is
    /// kept (the deadline is in whole seconds): until the next `RunTask` after that, which
    /// forgets it.
    static let endedTaskGrace: TimeInterval = 10

    /// What the app's connection answers calls it cannot route with (a wrong signature, no
    /// such method or object, a call after the scheduler stopped serving): the agent's own
    /// names, as bgpolicyd answers them, so that every error the app sends the agent is an
    /// `org.bgpolicy.Error.*` (a `RunTask` of the wrong types is `InvalidArgument`, naming the
    /// signature it takes), never freedesktop's `InvalidArgs`.
    static let clientErrorNames = ObjectServer.ErrorNames(domain: BGPolicyNames.errorPrefix)

    /// `Client1` for `connection`, the one it is exported on: it answers only while that
    /// connection is the scheduler's link. A `disconnect()` takes the link under the lock and
    /// closes its connection after, and the connection's thread may handle a call meanwhile:
    /// the agent ends the work it grants on that connection with it, so a task started then
    /// would run with nothing to expire it, and its completion would connect again. Without a
    /// connection (a server without a bus, in tests), the owner stream's `agentOwner` stands in.
    func clientInterface(for connection: DBusConnection? = nil) -> ExportedInterface {
        // Not the connection itself: its object server holds this interface.
        let served = connection.map(ObjectIdentifier.init)
        return ExportedInterface(ClientInterface.description)
            .method("RunTask", immediate: { [weak self] call in
                guard let self else { throw ClientCallError(.unavailable, "the app is shutting down its scheduler") }
                try self.runTask(call, servedOn: served)
                return []
            })
            .method("ExpireTask", immediate: { [weak self] call in
                guard let self else { return [] }
                try self.expireTask(call, servedOn: served)
                return []
            })
    }

    /// Anyone on the session bus can call the app; only the agent may start or stop its work,
    /// and only on the connection the scheduler serves (`clientInterface(for:)`). Returns why
    /// `call` is refused, or nil. Checked under the lock that the work is started or stopped
    /// under, so that a `disconnect()` comes wholly before or after.
    ///
    /// The owner is the link's, as its connection's thread has read it: the bus sends the
    /// agent's `NameOwnerChanged` ahead of anything the agent sends after taking its name, so an
    /// agent that calls the moment it starts (as D-Bus activation by this app's own `Register`
    /// may) is known already. The owner stream is read by a task a moment later, too late for
    /// such a call.
    private static func refusal(of call: MethodCall, servedOn served: ObjectIdentifier?, in s: State) -> ClientCallError? {
        let owner: String?
        if let served {
            guard let link = s.link, ObjectIdentifier(link.connection) == served else {
                return ClientCallError(
                    .unavailable, "this app is disconnecting from bgpolicyd (BGTaskScheduler.disconnect()); the connection this call came on is closing")
            }
            owner = link.agent.owner
        } else {
            owner = s.agentOwner
        }
        guard let owner, call.sender == owner else {
            return ClientCallError(
                .accessDenied, "only bgpolicyd, the owner of \(BGPolicyNames.busName), may call \(BGPolicyNames.clientInterface)")
        }
        return nil
    }

    func runTask(_ call: MethodCall, servedOn served: ObjectIdentifier?) throws {
        // First, so that a stranger is refused as one whatever it sent.
        if let refusal = state.withLock({ Self.refusal(of: call, servedOn: served, in: $0) }) { throw refusal }
        let arguments = call.arguments
        let taskID = try arguments.decode(String.self, at: 0)
        let identifier = try arguments.decode(String.self, at: 1)
        let kindText = try arguments.decode(String.self, at: 2)
        let seconds = try arguments.decode(UInt32.self, at: 3)
        let info = try arguments.decode([String: Variant].self, at: 4)
        guard let kind = BGTaskKind(rawValue: kindText) else {
            throw ClientCallError(.invalidArgument, "this app does not know tasks of kind \"\(kindText)\"")
        }
        let deadline =
            try info.optional("deadline", as: Int64.self).map { Date(timeIntervalSince1970: TimeInterval($0)) }
            ?? Date(timeIntervalSinceNow: TimeInterval(seconds))

        enum Outcome {
            case start(BGTask, LaunchHandler)
            case alreadyRunning
            case noHandler
            case refused(ClientCallError)
        }
        // What the notifier sent a content-available wake, without the agent's own keys.
        let payload = kind == .contentAvailable ? info.filter { $0.key != "slice_id" && $0.key != "deadline" } : [:]
        let now = Date()
        let outcome: Outcome = state.withLock { s in
            // Again: a `disconnect()` may have come since.
            if let refusal = Self.refusal(of: call, servedOn: served, in: s) { return .refused(refusal) }
            // Tasks the app never completed ended at their deadline: the agent warned them, then
            // recorded them expired, and will not call about them again. So did those whose
            // report failed in a way that left them running here (no answer in time, `Failed`):
            // the agent either took the end, and never warns them, or ended them at their
            // deadline. Forgotten here, or each would keep its handlers (and what they hold) for
            // as long as the app runs. Only warned or reported ones: a wall clock that jumped
            // ahead must not lose a task its warning.
            s.running = s.running.filter {
                !($0.value.isExpired || $0.value.wasReported) || $0.value.deadline.addingTimeInterval(Self.endedTaskGrace) > now
            }
            guard s.running[taskID] == nil else { return .alreadyRunning }
            let found = kind == .contentAvailable ? s.contentAvailableHandler : s.handlers[identifier]
            guard let handler = found else { return .noHandler }
            let epoch = s.disconnects
            let task = BGTask(
                identifier: identifier, kind: kind, taskID: taskID, deadline: deadline, payload: payload, launcher: call.sender
            ) { [weak self] id, success, result throws(BGTask.CompletionFailure) in
                guard let self else {
                    throw BGTask.CompletionFailure(BGTaskSchedulerError(.other, "the scheduler that launched this task no longer exists"))
                }
                try await self.reportCompletion(taskID: id, success: success, result: result, epoch: epoch)
            }
            s.running[taskID] = task
            return .start(task, handler)
        }
        switch outcome {
        case .start(let task, let handler):
            Task { handler(task) }
        case .alreadyRunning:
            // A repeated delivery of a task that is running: it is already being worked on.
            break
        case .noHandler where kind == .contentAvailable:
            throw ClientCallError(.notPermitted, "this app has no content-available handler (registerContentAvailableHandler)")
        case .noHandler:
            throw ClientCallError(.notPermitted, "this app has no launch handler for \"\(identifier)\"")
        case .refused(let refusal):
            throw refusal
        }
    }

    func expireTask(_ call: MethodCall, servedOn served: ObjectIdentifier?) throws {
        if let refusal = state.withLock({ Self.refusal(of: call, servedOn: served, in: $0) }) { throw refusal }
        let id = try call.arguments.decode(String.self, at: 0)
        enum Target {
            case task(BGTask)
            case backgroundTask(BackgroundTaskEntry)
            case unknown
            case refused(ClientCallError)
        }
        let target: Target = state.withLock { s in
            if let refusal = Self.refusal(of: call, servedOn: served, in: s) { return .refused(refusal) }
            if let task = s.running[id] { return .task(task) }
            if var entry = s.backgroundTasks[id] {
                // Being ended: the handler runs only if that end fails (`endBackgroundTask`).
                guard entry.ending == 0 else {
                    entry.expired = true
                    s.backgroundTasks[id] = entry
                    return .unknown
                }
                s.backgroundTasks[id] = nil
                return .backgroundTask(entry)
            }
            s.earlyExpirations.append(id)
            if s.earlyExpirations.count > Self.earlyExpirationLimit { s.earlyExpirations.removeFirst() }
            return .unknown
        }
        switch target {
        case .task(let task):
            task.expire()
        case .backgroundTask(let entry):
            if let handler = entry.expirationHandler { Task { handler() } }
        case .unknown:
            // Finished already, or a background task whose token is still on its way: not an error.
            break
        case .refused(let refusal):
            throw refusal
        }
    }
}
