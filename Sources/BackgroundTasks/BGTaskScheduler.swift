import BGPolicyCore
public import BGPolicyDBus
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import Synchronization

/// Schedules background work with bgpolicyd, the way `BGTaskScheduler` does on iOS.
///
/// Register a launch handler for every task identifier at start-up, before the first call that
/// talks to the agent; submit requests; the agent launches the handler when conditions suit, in a
/// time slice it grants, and the handler calls `setTaskCompleted(success:)` when done.
///
/// ```swift
/// import BackgroundTasks
/// import Foundation
///
/// let scheduler = BGTaskScheduler(appID: "org.example.News")
/// scheduler.register(forTaskWithIdentifier: "org.example.News.refresh") { task in
///     let work = Task {
///         let fresh = await fetchHeadlines()          // the app's own work
///         task.setTaskCompleted(success: true, result: fresh ? .newData : .noData)
///     }
///     task.expirationHandler = {
///         work.cancel()
///         task.setTaskCompleted(success: false, result: .failed)
///     }
/// }
/// try await scheduler.activate()
/// try await scheduler.submit(
///     BGAppRefreshTaskRequest(identifier: "org.example.News.refresh",
///                             earliestBeginDate: Date(timeIntervalSinceNow: 15 * 60)))
/// ```
///
/// The scheduler connects to the bus lazily, on the first call that needs the agent (or on
/// `activate()`): it exports `org.bgpolicy.Client1` at `/org/bgpolicy/Client1`, sends
/// `Register` with every registered identifier, and, when `busName` names one, takes that name.
/// Registering another identifier later re-sends `Register` before the next call; but each
/// `Register` replaces the app's list at the agent, which cancels the requests of identifiers
/// left out (`register(forTaskWithIdentifier:launchHandler:)`). Use one scheduler per app,
/// `.shared` (or one made with the app's `appID`): two would each send their own list. If the agent
/// restarts, the scheduler registers again by itself; the tasks and background tasks an agent
/// that left the bus without a word (it crashed) had started ended with it, and their
/// expiration handlers run. A new agent that refuses that `Register` for a reason that may pass
/// (`.failed`: it could not store it, as on a full disk; `.unavailable`; `.limitsExceeded`; no
/// answer in time) is sent it again 1 s later, then after 2 s, 4 s, … at most 5 minutes apart,
/// until it takes it, another agent replaces it, or the app calls `disconnect()`; nothing runs
/// between tries. A refusal that will not pass (`.accessDenied`, `.invalidArgument`) is not
/// retried: the app's next call sends `Register` again and throws what the agent answers.
///
/// The bus starts the agent for a call when it is not running (D-Bus activation), except for
/// the reports of the end of work an agent granted, `setTaskCompleted` and
/// `endBackgroundTask(_:)`, and the `Register` they may send first: that work ended with the
/// agent, and a new one knows nothing of it. With no agent on the bus they fail
/// `.agentNotRunning` at once, so the end that an expiration handler reports when the user
/// stops the agent (`systemctl --user stop bgpolicyd` warns running work first, as in the
/// example above) does not start it again. Nor does the `Register` the scheduler sends by
/// itself to an agent that restarted, should that agent have left again before it arrived.
///
/// Every method throws `BGTaskSchedulerError`; a call whose task is cancelled throws `.other`
/// ("the call was cancelled") at once, also while it waits for the connection or the
/// `Register` it shares with other calls, which go on for those.
///
/// One call needs no registration: `notifyContentAvailable(appID:payload:)`, with which a sync
/// or push service wakes another app. Such a service may make a scheduler for that alone.
public final class BGTaskScheduler: Sendable {
    /// The scheduler for the app's own id, as the agent derives it (Flatpak, snap or systemd
    /// unit). Apps that run outside all three create their own with an `appID`.
    public static let shared = BGTaskScheduler()

    /// The most identifiers one app may register; the agent refuses more.
    public static let maximumIdentifiers = 64

    /// The app id sent with `Register`, for processes the agent cannot identify; `nil` (or empty)
    /// lets the agent derive it.
    public let appID: String?
    /// A D-Bus-activatable well-known name at which the agent may start the app when it is not
    /// running; the scheduler takes it after exporting `org.bgpolicy.Client1`. `nil` sends none,
    /// and the agent keeps the name an earlier run gave; `""` withdraws it, so that the agent
    /// no longer starts the app by any name (for a version that dropped D-Bus activation).
    public let busName: String?
    /// The process has no UI, so the agent's CPU monitor may stop it when it has no systemd unit.
    public let backgroundOnly: Bool
    /// The bus the agent is on: the session bus, except in tests.
    public let bus: DBusConnection.Bus

    typealias LaunchHandler = @Sendable (BGTask) -> Void

    struct BackgroundTaskEntry {
        let expirationHandler: (@Sendable () -> Void)?
        /// The agent (its unique name) that granted it, when known.
        var grantedBy: String? = nil
        /// `endBackgroundTask` calls on their way: an `ExpireTask` meanwhile waits for their
        /// outcome, and runs the handler only if none ended it.
        var ending = 0
        /// The agent warned it while an end was on its way.
        var expired = false
    }

    struct State {
        /// Counts `disconnect()` calls: a connection opened across one is not kept.
        var disconnects = 0
        /// The agent must be sent `Register` again before the next call.
        mutating func forgetRegistration() {
            registeredGeneration = nil
            registeredWith = nil
        }

        /// `Register` of `generation` was answered by `sender`: it counts only if that agent
        /// still owns the name, `owner` (or its start has not been seen yet). An agent that
        /// restarted while Register was on its way has not heard it, and nothing else would tell
        /// this app to send it again. Returns whether it counts.
        ///
        /// `owner` is the link's follower's, read on the connection's thread: the owner stream
        /// (`agentOwner`) may not have seen the agent that answered yet, and a Register it
        /// answered would not count, and be sent again at once, until it had.
        mutating func registered(_ generation: Int, answeredBy sender: String?, owner: String?) -> Bool {
            guard owner == nil || sender == nil || owner == sender else { return false }
            registeredGeneration = generation
            registeredWith = sender
            return true
        }

        /// The agent's name changed hands; returns whether `Register` must be sent to the new
        /// owner. Not when the app's own Register started it (D-Bus activation) and it
        /// answered before the change was seen here: it knows the app already.
        mutating func agentChanged(to owner: String?) -> Bool {
            guard agentOwner != owner else { return false }
            agentOwner = owner
            guard owner == nil || owner != registeredWith else { return false }
            forgetRegistration()
            return owner != nil
        }

        var handlers: [String: LaunchHandler] = [:]
        /// What runs for a content-available wake (`registerContentAvailableHandler`).
        var contentAvailableHandler: LaunchHandler?
        /// Bumped by every register(); `Register` is sent again while the agent has an older list.
        var generation = 0
        var link: AgentLink?
        var connecting: Task<AgentLink, any Error>?
        /// The generation the agent has on the current link; `nil` until `Register` succeeds on it.
        var registeredGeneration: Int?
        /// The agent (its unique name) that answered that `Register`: a new owner of the
        /// agent's name has not heard it, even when the answer came after the change was seen.
        var registeredWith: String?
        /// The `Register` in flight, and whether it may start the agent (D-Bus activation).
        var registering: (attempt: Int, task: Task<Void, any Error>, startsAgent: Bool)?
        var registrationAttempts = 0
        var registeredAppID: String?
        /// Set by the first call that needed the agent: from then on, an agent that restarts is
        /// sent `Register` without waiting for the app's next call, so it can launch the app.
        var wantsAgent = false
        /// That `Register`, and its tries again while the agent refuses it (`reregister(on:)`).
        var reregistration: Task<Void, Never>?
        /// The unique name of the agent, as the owner stream last said: for registration.
        /// `Client1` checks its caller against the link's `agent`, which is never behind a call.
        var agentOwner: String?
        var running: [String: BGTask] = [:]
        var backgroundTasks: [String: BackgroundTaskEntry] = [:]
        /// `ExpireTask` calls for ids not (yet) known: a background task's warning can overtake
        /// the reply that tells us its token. Bounded; only the newest are kept.
        var earlyExpirations: [String] = []
        /// Background tasks that ended with a `disconnect()`: ending one does not connect
        /// again. Bounded as `earlyExpirations`.
        var endedBackgroundTasks: [String] = []

        /// Whether the task `taskID` still runs here under the agent that launched it, as the
        /// link's connection has read the agent's owner. Not once the work of an agent that
        /// left the bus has been swept (`agentOwnerChanged`), nor before that sweep once its
        /// launcher no longer owns the agent's name: the bus sends that change ahead of its
        /// `NoReply` to a call the agent left unanswered. Nor after a `disconnect()` or with a
        /// connection the bus closed, which end the tasks too.
        func runsUnderItsLauncher(_ taskID: String) -> Bool {
            guard let task = running[taskID], let link, link.connection.isConnected else { return false }
            return link.agent.owner == task.launcher
        }

        /// Takes every running task and background task, which the agent has ended with the
        /// connection they came on; `Ended.expire()` runs their handlers, outside the lock.
        mutating func endAll() -> Ended {
            defer {
                running = [:]
                backgroundTasks = [:]
            }
            return Ended(tasks: Array(running.values), backgroundTasks: Array(backgroundTasks.values))
        }
    }

    /// Tasks and background tasks the agent ended without telling the app (`ExpireTask`).
    struct Ended {
        var tasks: [BGTask] = []
        var backgroundTasks: [BackgroundTaskEntry] = []

        /// Runs their expiration handlers: the work must stop.
        func expire() {
            for task in tasks { task.expire() }
            for entry in backgroundTasks {
                if let handler = entry.expirationHandler { Task { handler() } }
            }
        }
    }

    let state = Mutex(State())

    /// A scheduler that connects to the agent when first needed.
    ///
    /// - Parameters:
    ///   - appID: the app id to register as, for processes outside Flatpak, snap and systemd app
    ///     units. A verified app that passes a different id is refused with `.accessDenied`.
    ///   - busName: a D-Bus-activatable name the agent may use to start the app for its tasks;
    ///     `nil` keeps the name an earlier run registered, `""` withdraws it.
    ///   - backgroundOnly: the process has no UI (a daemon or helper), so its registration is
    ///     not taken for the user opening the app (Docs/Policy.md §3).
    ///   - bus: where the agent is; the session bus unless testing.
    public init(appID: String? = nil, busName: String? = nil, backgroundOnly: Bool = false, bus: DBusConnection.Bus = .session) {
        self.appID = appID
        self.busName = busName
        self.backgroundOnly = backgroundOnly
        self.bus = bus
    }

    deinit {
        state.withLock { s in
            s.connecting?.cancel()
            s.reregistration?.cancel()
            s.link?.close()
        }
    }

    // MARK: Registration

    /// Registers the code to run when the agent launches the task `identifier`.
    ///
    /// Register every identifier before the first call that talks to the agent (`activate()`,
    /// `submit(_:)`, …), as on iOS, so the first `Register` carries them all. Every `Register`
    /// carries only the identifiers registered so far, and the agent takes an identifier left
    /// out as withdrawn: the requests kept from the app's last run for an identifier not yet
    /// registered are cancelled (history: "cancelled: the app registered again without …"). An
    /// identifier registered later is sent, with the others, before the next call, and can be
    /// submitted from then on. Two `BGTaskScheduler`s in one process each register their own
    /// list, each replacing the other's: use one, `.shared` (or one made with the app's
    /// `appID`). The handler runs on its own task each time the task is launched.
    ///
    /// - Returns: `false` when `identifier` is already registered, is not a task identifier
    ///   (letters, digits, `_`, `-` and `.`, at most 255 bytes, not beginning with `-`), or would be one more than
    ///   `maximumIdentifiers`.
    @discardableResult
    public func register(forTaskWithIdentifier identifier: String, launchHandler: @escaping @Sendable (BGTask) -> Void) -> Bool {
        guard TaskIdentifier.problem(with: identifier) == nil else { return false }
        return state.withLock { s in
            guard s.handlers[identifier] == nil, s.handlers.count < Self.maximumIdentifiers else { return false }
            s.handlers[identifier] = launchHandler
            s.generation += 1
            return true
        }
    }

    /// Registers the code to run when another process wakes the app because new content is
    /// waiting (`NotifyContentAvailable`, the counterpart of a silent push): the task's `kind`
    /// is `.contentAvailable`, its `identifier` empty, and its `payload` the hint the notifier
    /// sent. Complete it as any other task. Wakes are not requested, so no identifier is
    /// registered for them. Register the handler before the first call that talks to the
    /// agent: without it, the app answers a wake `NotPermitted`, and the agent drops a wake
    /// the app refuses (it is not delivered again). The app still registers at least one task identifier: the
    /// agent's `Register` takes 1 to 64, and without one every call but
    /// `notifyContentAvailable(appID:payload:)` throws `.notRegistered`.
    ///
    /// - Returns: `false` when a handler is registered already.
    @discardableResult
    public func registerContentAvailableHandler(_ launchHandler: @escaping @Sendable (BGTask) -> Void) -> Bool {
        state.withLock { s in
            guard s.contentAvailableHandler == nil else { return false }
            s.contentAvailableHandler = launchHandler
            return true
        }
    }

    /// The identifiers registered so far, sorted.
    public var registeredIdentifiers: [String] {
        state.withLock { $0.handlers.keys.sorted() }
    }

    /// Connects to the agent now instead of on first use: exports `org.bgpolicy.Client1`, sends
    /// `Register`, then takes `busName` if one was given.
    ///
    /// An app started by D-Bus activation calls this right after registering its handlers, so
    /// that the agent's waiting `RunTask` finds it ready.
    ///
    /// Only this call reports a `busName` another process owns (`.other`): the app still works
    /// while it runs, but the agent cannot start it by that name. Other calls go on without it.
    /// The name is asked for once per connection.
    ///
    /// - Returns: the app id the agent registered the app as.
    @discardableResult
    public func activate() async throws -> String {
        _ = try await ready(reportingTakenName: true)
        return state.withLock { $0.registeredAppID } ?? appID ?? ""
    }

    /// Closes the connection to the agent; the next call connects again.
    ///
    /// The agent ends the tasks and background tasks it granted on that connection (closed as
    /// failed), so their expiration handlers run, as when the agent warns them: the work must
    /// stop. Completing them afterwards (`setTaskCompleted`, `endBackgroundTask(_:)`) throws
    /// `.unknownTask` without connecting again. A `RunTask` or `ExpireTask` that reaches the
    /// connection while it closes is refused (`Unavailable`): the agent would end such a task
    /// with the connection, and nothing here would expire it.
    public func disconnect() {
        let (link, ended): (AgentLink?, Ended) = state.withLock { s in
            defer {
                s.link = nil
                // A connection being opened now is closed when it is ready (`openLink`),
                // rather than undoing this disconnect.
                s.connecting?.cancel()
                s.connecting = nil
                s.reregistration?.cancel()
                s.reregistration = nil
                s.disconnects += 1
                s.forgetRegistration()
            }
            s.endedBackgroundTasks += s.backgroundTasks.keys
            s.endedBackgroundTasks.removeFirst(max(0, s.endedBackgroundTasks.count - Self.earlyExpirationLimit))
            return (s.link, s.endAll())
        }
        link?.close()
        ended.expire()
    }

    // MARK: Requests

    /// Asks the agent to launch the task later. Submitting an identifier that is already pending
    /// replaces that request.
    ///
    /// Throws `.notPermitted` for an identifier without a launch handler (before asking the
    /// agent), `.tooManyPendingTaskRequests`, `.unavailable` when the user switched background
    /// work off, and `.invalidArgument` for a request the agent does not accept.
    public func submit(_ request: some BGTaskRequest) async throws {
        let arguments = try SubmitArguments(request)
        try checkRegistered(arguments.identifier)
        _ = try await callAgent("Submit", arguments.body)
    }

    /// Cancels the pending request for `identifier`. Throws `.unknownTask` when none is pending.
    public func cancel(taskRequestWithIdentifier identifier: String) async throws {
        _ = try await callAgent("Cancel", [.string(identifier)])
    }

    /// Cancels every pending request of the app.
    public func cancelAllTaskRequests() async throws {
        _ = try await callAgent("CancelAll")
    }

    /// The app's pending requests, as the agent has them. Kinds this library does not know are
    /// left out.
    public func pendingTaskRequests() async throws -> [any BGTaskRequest] {
        let reply = try await callAgent("GetPending")
        do throws(DBusError) {
            var requests: [any BGTaskRequest] = []
            for entry in try reply.decode([[String: Variant]].self, at: 0) {
                if let request = try PendingRequest.request(from: entry) { requests.append(request) }
            }
            return requests
        } catch {
            throw BGTaskSchedulerError(.other, "the agent's list of pending requests is malformed: \(error.message)")
        }
    }

    /// Why the request for `identifier` has not run yet, and the earliest it can: what blocks
    /// it (switches, battery, conditions it asked for, the planner's windows), in keys and in
    /// words. For a request that is running, or not pending at all, `state` says so.
    ///
    /// The agent's answer has more keys than the typed fields in later versions: they are in
    /// the explanation's `dictionary`.
    public func explain(taskRequestWithIdentifier identifier: String) async throws -> Explanation {
        let reply = try await callAgent("Explain", [.string(identifier)])
        do throws(DBusError) {
            return try Explanation(reply.decode([String: Variant].self, at: 0))
        } catch {
            throw BGTaskSchedulerError(.other, "the agent's explanation is malformed: \(error.message)")
        }
    }

    // MARK: Waking other apps

    /// Tells the agent there is new content for another app, `appID`, as a sync or push service
    /// does: the counterpart of a silent push. The agent wakes that app in its next wake window
    /// with a `.contentAvailable` task whose `payload` is this `payload` (its
    /// `registerContentAvailableHandler`).
    ///
    /// The caller need not register anything: a scheduler made only for this sends no
    /// `Register` and is not an app to the agent. The call returns once the wake is queued; only
    /// the newest undelivered wake is kept, so a second call before delivery replaces the payload.
    ///
    /// - Parameters:
    ///   - appID: the app to wake, which must have registered with the agent once.
    ///   - payload: a small hint (a mailbox, a cursor), at most 4096 bytes marshalled, without
    ///     file descriptors; `slice_id` and `deadline` are reserved keys.
    /// - Throws: `.notRegistered` for an app the agent does not know, `.invalidArgument` for an
    ///   `appID` that is no app id or a payload the agent refuses, and `.limitsExceeded` on
    ///   battery when the app has had its wakes for the hour (the message says when the next is
    ///   allowed; the content will still be there at the app's next refresh).
    public func notifyContentAvailable(appID: String, payload: [String: Variant] = [:]) async throws {
        let link = try await currentLink()
        do {
            _ = try await link.connection.call(
                destination: BGPolicyNames.busName, path: Self.agentPath, interface: BGPolicyNames.schedulerInterface,
                member: "NotifyContentAvailable", [.string(appID), payload.dbusValue])
        } catch {
            throw BGTaskSchedulerError(error)
        }
    }

    // MARK: The app's state

    /// Whether the agent will launch this app in the background now.
    public func refreshStatus() async throws -> BGRefreshStatus {
        let reply = try await callAgent("GetRefreshStatus")
        let text: String
        do {
            text = try reply.decode(String.self, at: 0)
        } catch {
            throw BGTaskSchedulerError(.other, "the agent's refresh status is malformed: \(error.message)")
        }
        guard let status = BGRefreshStatus(rawValue: text) else {
            throw BGTaskSchedulerError(.other, "the agent reported an unknown refresh status \"\(text)\"")
        }
        return status
    }

    /// Whether the user is using the app now, for apps whose launches the agent cannot observe.
    public enum UsageState: String, Sendable, Hashable, CaseIterable {
        /// The user brought the app to the front.
        case foreground
        /// The user left it.
        case background
    }

    /// Tells the agent the user brought the app to the front or left it. The agent learns from
    /// this when the user opens the app, so it can refresh just before.
    public func reportUsage(_ state: UsageState) async throws {
        _ = try await callAgent("ReportUsage", [.string(state.rawValue)])
    }

    // MARK: Finishing work the user started

    /// Asks for time to finish work the user started, such as saving or sending, when the app
    /// leaves the screen or is about to quit.
    ///
    /// Call `endBackgroundTask(_:)` as soon as the work is done. The expiration handler runs a
    /// few seconds before the time runs out (or at `disconnect()`, which ends it, and when the
    /// agent that granted it leaves the bus without a word or the bus closes the connection,
    /// which end it too); it must end the work and call `endBackgroundTask(_:)`. An agent gone
    /// before its answer is handled has ended the background task already: the call returns
    /// its token, and the handler runs at once.
    /// Throws `.unavailable` when the battery is critical or the machine is going to sleep,
    /// `.limitsExceeded` when the app has 16 under way, and `.invalidArgument` for a `name`
    /// over 255 bytes.
    ///
    /// A call whose task is cancelled once `BeginBackgroundTask` is sent still waits for the
    /// agent's answer: the agent grants the background task whether or not the app hears of
    /// it, and one whose token the app never learnt would run out as a violation. The granted
    /// task is then ended at once, and the call throws `.other` ("the call was cancelled").
    public func beginBackgroundTask(
        name: String, expirationHandler: (@Sendable () -> Void)?
    ) async throws -> BGBackgroundTaskIdentifier {
        var forgotten = false
        let (message, link) = try await callAgentForReply(
            "BeginBackgroundTask", [.string(name)], waitingOnceSent: true, agentForgotApp: &forgotten)
        let reply = message.body
        let identifier: BGBackgroundTaskIdentifier
        do {
            identifier = BGBackgroundTaskIdentifier(
                rawValue: try reply.decode(String.self, at: 0), timeAllowed: TimeInterval(try reply.decode(UInt32.self, at: 1)))
        } catch {
            throw BGTaskSchedulerError(.other, "the agent's answer to BeginBackgroundTask is malformed: \(error.message)")
        }
        if Task.isCancelled {
            // Nobody will end it: end it now, on a task the caller's cancellation does not reach.
            state.withLock { s in s.earlyExpirations.removeAll { $0 == identifier.rawValue } }
            _ = await Task {
                try await self.callAgent("EndBackgroundTask", [.string(identifier.rawValue)], startingAgent: false)
            }.result
            throw BGTaskSchedulerError(CancellationError())
        }
        let expiredAlready: Bool = state.withLock { s in
            if let index = s.earlyExpirations.firstIndex(of: identifier.rawValue) {
                s.earlyExpirations.remove(at: index)
                return true
            }
            // The agent that granted it is gone already (its name changed hands, or the
            // connection closed): what sweeps that agent's work (`agentOwnerChanged`, `linkLost`,
            // `disconnect()`) may have run before it was stored here, and would never find it.
            // The owner is the one the connection's thread has read, never behind the sweep.
            guard s.link === link, link.connection.isConnected, message.sender == nil || link.agent.owner == message.sender else {
                return true
            }
            s.backgroundTasks[identifier.rawValue] = BackgroundTaskEntry(expirationHandler: expirationHandler, grantedBy: message.sender)
            return false
        }
        if expiredAlready, let expirationHandler { Task { expirationHandler() } }
        return identifier
    }

    /// Ends a background task begun with `beginBackgroundTask(name:expirationHandler:)`.
    /// Throws `.unknownTask` when the agent has already ended it, and, without asking it, for
    /// one that a `disconnect()` ended.
    ///
    /// The call never starts the agent: with none on the bus (the user stopped it, and its
    /// warning made the app end the work), it throws `.agentNotRunning` at once. The
    /// background task ended with the agent that granted it, and a new one would know nothing
    /// of it.
    ///
    /// Until the agent confirms the end (or answers `.unknownTask`, or is not running), the
    /// background task is still the app's: when the call fails otherwise (no answer in time,
    /// cancelled, `.limitsExceeded`), the agent's warning still runs its expiration handler,
    /// then or when it comes, and the app may end it again.
    public func endBackgroundTask(_ identifier: BGBackgroundTaskIdentifier) async throws {
        let id = identifier.rawValue
        let endedByDisconnect: Bool = state.withLock { s in
            guard let index = s.endedBackgroundTasks.firstIndex(of: id) else {
                s.backgroundTasks[id]?.ending += 1
                return false
            }
            s.endedBackgroundTasks.remove(at: index)
            return true
        }
        if endedByDisconnect { throw Self.endedByDisconnect }
        do throws(BGTaskSchedulerError) {
            _ = try await callAgent("EndBackgroundTask", [.string(id)], startingAgent: false)
        } catch {
            let warned: BackgroundTaskEntry? = state.withLock { s in
                guard var entry = s.backgroundTasks[id] else { return nil }
                // Ended at the agent, or with the agent that granted it, which is gone.
                guard error.code != .unknownTask && error.code != .agentNotRunning else {
                    s.backgroundTasks[id] = nil
                    return nil
                }
                entry.ending -= 1
                // The agent's warning came while the end was on its way; it still runs.
                guard entry.ending == 0, entry.expired else {
                    s.backgroundTasks[id] = entry
                    return nil
                }
                return s.backgroundTasks.removeValue(forKey: id)
            }
            if let handler = warned?.expirationHandler { Task { handler() } }
            throw error
        }
        _ = state.withLock { $0.backgroundTasks.removeValue(forKey: id) }
    }

    // MARK: Talking to the agent

    static let agentPath = try! ObjectPath(BGPolicyNames.objectPath)

    /// Fails before any bus traffic when `identifier` has no launch handler.
    func checkRegistered(_ identifier: String) throws(BGTaskSchedulerError) {
        let (known, any) = state.withLock { s in (s.handlers[identifier] != nil, !s.handlers.isEmpty) }
        guard any else {
            throw BGTaskSchedulerError(
                .notRegistered, "register a launch handler for \"\(identifier)\" with register(forTaskWithIdentifier:launchHandler:) first")
        }
        guard known else {
            throw BGTaskSchedulerError(
                .notPermitted, "\"\(identifier)\" has no launch handler: register it with register(forTaskWithIdentifier:launchHandler:) before submitting")
        }
    }

    /// Calls a `Scheduler1` method, connecting and registering first when needed. An agent that
    /// restarted has forgotten this connection: on `NotRegistered` the scheduler registers
    /// again and retries once.
    ///
    /// The bus starts an agent that is not running (D-Bus activation) for the call, and for
    /// the `Register` before it, unless `startingAgent` is false: then neither starts it, and
    /// the call fails `.agentNotRunning` when it is not on the bus. That is for reports of the
    /// end of work an agent granted (`SetTaskCompleted`, `EndBackgroundTask`): the work ended
    /// with that agent, a new one knows nothing of it, and starting one only to be told so
    /// would undo the user's stop (`systemctl --user stop bgpolicyd` warns running work with
    /// `ExpireTask`, whose handlers report its end).
    func callAgent(
        _ member: String, _ body: [DBusValue] = [], startingAgent: Bool = true
    ) async throws(BGTaskSchedulerError) -> [DBusValue] {
        try await callAgentForReply(member, body, startingAgent: startingAgent).body
    }

    /// `callAgent`, returning the whole reply (its sender is the agent that answered).
    ///
    /// With `waitingOnceSent`, a caller cancelled once the call is sent still waits for the
    /// answer (the connection forgets a cancelled call's reply), for calls whose effect the app
    /// must learn of, such as a granted background task; the caller checks `Task.isCancelled`.
    func callAgentForReply(
        _ member: String, _ body: [DBusValue] = [], waitingOnceSent: Bool = false, startingAgent: Bool = true
    ) async throws(BGTaskSchedulerError) -> Message {
        var forgotten = false
        return try await callAgentForReply(
            member, body, waitingOnceSent: waitingOnceSent, startingAgent: startingAgent, agentForgotApp: &forgotten
        ).message
    }

    /// `callAgentForReply`, with the link the reply came on, setting `agentForgotApp` when the
    /// agent answered `NotRegistered` before the scheduler registered again and retried: it did
    /// not know this connection.
    func callAgentForReply(
        _ member: String, _ body: [DBusValue] = [], waitingOnceSent: Bool = false, startingAgent: Bool = true,
        agentForgotApp: inout Bool
    ) async throws(BGTaskSchedulerError) -> (message: Message, link: AgentLink) {
        var retried = false
        while true {
            let link = try await ready(startingAgent: startingAgent)
            do {
                var message = Message.methodCall(
                    destination: BGPolicyNames.busName, path: Self.agentPath, interface: BGPolicyNames.schedulerInterface,
                    member: member, body: body)
                message.noAutoStart = !startingAgent
                guard waitingOnceSent else { return (try await link.connection.call(message), link) }
                try Task.checkCancellation()
                return (try await Task { try await link.connection.call(message) }.value, link)
            } catch DBusError.remote(let name, _) where name == BGPolicyErrorName.notRegistered.dbusName && !retried {
                retried = true
                agentForgotApp = true
                state.withLock { s in
                    if s.link === link { s.forgetRegistration() }
                }
            } catch {
                throw BGTaskSchedulerError(error)
            }
        }
    }

    /// The connection, with the current identifier list registered and the bus name asked for
    /// (`activate()` reports a name another process owns: `reportingTakenName`). Without
    /// `startingAgent`, the `Register` does not start an agent that is not on the bus.
    func ready(reportingTakenName: Bool = false, startingAgent: Bool = true) async throws(BGTaskSchedulerError) -> AgentLink {
        let registered: Bool = state.withLock { s in
            s.wantsAgent = true
            return !s.handlers.isEmpty
        }
        // Every Scheduler1 call needs Register first, and Register needs an identifier.
        guard registered else { throw Self.nothingRegistered }
        let link = try await currentLink()
        try await prepare(link, reportingTakenName: reportingTakenName, startingAgent: startingAgent)
        return link
    }

    /// Registers the current identifier list on `link` and takes the bus name on it; fails when
    /// `link` is no longer the scheduler's. `startingAgent`: as for `ensureRegistered`.
    ///
    /// The name is asked for once per connection, by the first call to get here, which waits
    /// for the answer. Only `activate()` (`reportingTakenName`) reports a name another process
    /// owns, waiting for the request if another call made it: an app whose name is taken still
    /// works while it runs, and every other call goes on to be sent.
    private func prepare(
        _ link: AgentLink, reportingTakenName: Bool = false, startingAgent: Bool = true
    ) async throws(BGTaskSchedulerError) {
        try await ensureRegistered(on: link, startingAgent: startingAgent)
        guard let busName, !busName.isEmpty else { return }
        let (request, isNew) = link.nameRequest {
            Task {
                do {
                    switch try await link.connection.requestName(busName, flags: [.doNotQueue]) {
                    case .primaryOwner, .alreadyOwner: return false
                    case .exists, .inQueue: return true
                    }
                } catch {
                    // Not asked, or no answer: ask again at the next call, or the agent could
                    // never start this app by its name while this connection lives.
                    link.releaseNameRequest()
                    throw error
                }
            }
        }
        guard isNew || reportingTakenName else { return }
        let taken: Bool
        do {
            taken = try await request.valueUnlessCancelled()
        } catch {
            guard reportingTakenName else { return }
            throw BGTaskSchedulerError(error)
        }
        if taken && reportingTakenName {
            throw BGTaskSchedulerError(
                .other, "another process owns \(busName), so the agent cannot start this app by that name")
        }
    }

    private func currentLink() async throws(BGTaskSchedulerError) -> AgentLink {
        enum Step {
            case ready(AgentLink)
            case wait(Task<AgentLink, any Error>)
        }
        var stale: AgentLink?
        var ended = Ended()
        let step: Step = state.withLock { s in
            if let link = s.link {
                if link.connection.isConnected { return .ready(link) }
                stale = link
                s.link = nil
                s.forgetRegistration()
                // The bus closed the connection, and the agent ended the work it granted on it;
                // the owner stream's `linkLost` will not, the link being no longer the
                // scheduler's. Ended now, whether or not a new connection can be made.
                ended = s.endAll()
            }
            if let connecting = s.connecting { return .wait(connecting) }
            let connecting = Task { try await self.openLink() }
            s.connecting = connecting
            return .wait(connecting)
        }
        stale?.close()
        ended.expire()
        switch step {
        case .ready(let link):
            return link
        case .wait(let connecting):
            do {
                // Shared with other callers: a cancelled one stops waiting, the others do not.
                return try await connecting.valueUnlessCancelled()
            } catch {
                throw BGTaskSchedulerError(error)
            }
        }
    }

    /// Connects, exports `Client1`, and starts following who owns the agent's name.
    private func openLink() async throws -> AgentLink {
        let epoch = state.withLock { $0.disconnects }
        do {
            let connection = try await DBusConnection.connect(to: bus)
            do {
                connection.objects.errorNames = Self.clientErrorNames
                try connection.objects.export([clientInterface(for: connection)], at: Self.clientPath)
                // Who may call Client1, read on the connection's thread; the stream below
                // drives registration, on a task of its own.
                let follower = try await connection.followOwner(of: BGPolicyNames.busName)
                let owners = try await connection.watchNameOwner(BGPolicyNames.busName)
                let owner = try await connection.nameOwner(of: BGPolicyNames.busName)
                let link = AgentLink(connection: connection, agent: follower)
                let (kept, ended): (Bool, Ended) = state.withLock { s in
                    // `disconnect()` was called meanwhile: this connection is not kept.
                    guard s.disconnects == epoch else { return (false, Ended()) }
                    s.link = link
                    s.connecting = nil
                    s.agentOwner = owner
                    s.forgetRegistration()
                    s.registering = nil
                    s.reregistration?.cancel()
                    s.reregistration = nil
                    // What ran on a connection the bus lost, if neither `linkLost` nor
                    // `currentLink` has ended it yet.
                    return (true, s.endAll())
                }
                ended.expire()
                guard kept else {
                    throw BGTaskSchedulerError(.other, "the scheduler was disconnected while it connected")
                }
                link.start(
                    Task { [objects = connection.objects] in await objects.serve() },
                    Task { [weak self] in
                        do {
                            for try await owner in owners {
                                guard let self else { return }
                                self.agentOwnerChanged(to: owner, on: link)
                            }
                        } catch {
                            // The connection closed; the next call opens a new one.
                        }
                        self?.linkLost(link)
                    })
                return link
            } catch {
                connection.close()
                throw error
            }
        } catch {
            state.withLock { s in
                // (After a disconnect, `connecting` may be another call's by now.)
                if s.disconnects == epoch { s.connecting = nil }
            }
            throw error
        }
    }

    /// A new agent knows nothing of this connection: register again, so that it can launch the
    /// app, and again later while it refuses for a reason that may pass (`reregister(on:)`).
    ///
    /// The tasks and background tasks an agent that is gone started have ended with it. One
    /// that stops cleanly says so (`ExpireTask`); one that crashed cannot, so their expiration
    /// handlers run here. Whose they are is judged by the owner the connection's thread has
    /// read (`link.agent`), never behind the owner stream: a task the new agent launched
    /// before this stream caught up is its own, and goes on.
    private func agentOwnerChanged(to owner: String?, on link: AgentLink) {
        state.withLock { s in
            guard s.link === link else { return Ended() }
            // Read under the lock that RunTask adds its task under, after the owner it was
            // checked against: a task launched since is never judged by an older owner.
            let current = link.agent.owner
            if owner != s.agentOwner {
                // Tries to register with the agent before are over: it is gone.
                s.reregistration?.cancel()
                s.reregistration = nil
            }
            if s.agentChanged(to: owner) && s.wantsAgent && !s.handlers.isEmpty {
                // Started under the lock, so that it sees the registration forgotten.
                s.reregistration = Task { [weak self] in
                    var pause = Self.firstReregistrationPause
                    while await self?.reregister(on: link) == true {
                        do {
                            try await Task.sleep(for: pause)
                        } catch {
                            return
                        }
                        pause = min(pause * 2, Self.longestReregistrationPause)
                    }
                }
            }
            let ended = s.running.values.filter { $0.launcher != current }
            for task in ended { s.running.removeValue(forKey: task.taskID) }
            let endedIDs = s.backgroundTasks.filter { $0.value.grantedBy.map { $0 != current } ?? false }.keys
            return Ended(tasks: ended, backgroundTasks: endedIDs.compactMap { s.backgroundTasks.removeValue(forKey: $0) })
        }.expire()
    }

    /// The connection of `link` is gone without a `disconnect()`: the bus closed it (the
    /// session bus stopped or restarted). The agent ended the tasks and background tasks it
    /// granted on it with it, as it ends them at a `disconnect()`, so their expiration handlers
    /// run now; the next call connects again. Nothing when `link` is no longer the scheduler's
    /// (a `disconnect()`, or a call that found the connection closed first, `currentLink`, has
    /// ended its work already) or still connected (the owner stream ended for another reason).
    private func linkLost(_ link: AgentLink) {
        state.withLock { s in
            guard s.link === link, !link.connection.isConnected else { return Ended() }
            return s.endAll()
        }.expire()
    }

    /// The pause before `Register` is sent again to a new agent that refused it; it doubles
    /// with each refusal, up to `longestReregistrationPause`.
    static let firstReregistrationPause: Duration = .seconds(1)
    static let longestReregistrationPause: Duration = .seconds(5 * 60)

    /// Sends `Register` to an agent that has not heard it (it restarted). Returns whether to
    /// try again later: the agent refused for a reason that may pass (it could not store it, a
    /// full disk; it is starting or stopping; over a bound; no answer), and `link` is still the
    /// scheduler's. A refusal that will not pass waits for the app's next call, which says it.
    ///
    /// It does not start the agent (D-Bus activation): it is for the agent that took the name,
    /// and one that has left again since (the user stopped it) is not started for it. It fails
    /// `.agentNotRunning` then, and is not tried again.
    private func reregister(on link: AgentLink) async -> Bool {
        do {
            try await prepare(link, startingAgent: false)
            return false
        } catch {
            guard !Task.isCancelled, state.withLock({ $0.link === link }) else { return false }
            switch error.code {
            case .failed, .unavailable, .limitsExceeded: return true
            case .other: return error.dbusErrorName == DBusError.noReply || error.dbusErrorName == DBusError.timedOut
            default: return false
            }
        }
    }

    /// Sends `Register` until the agent has the current identifier list. One `Register` is in
    /// flight at a time, so the agent can never end up with an older list than the newest sent.
    ///
    /// Without `startingAgent` the `Register` does not start an agent that is not on the bus
    /// (D-Bus's no-auto-start flag), and fails `.agentNotRunning`. A caller that may start it,
    /// finding such a `Register` in flight and failed so, sends one of its own.
    private func ensureRegistered(on link: AgentLink, startingAgent: Bool) async throws(BGTaskSchedulerError) {
        enum Step {
            case done
            case wait(Task<Void, any Error>, startsAgent: Bool)
            case fail(BGTaskSchedulerError)
        }
        while true {
            let step: Step = state.withLock { s in
                guard s.link === link else {
                    return .fail(BGTaskSchedulerError(.agentNotRunning, "the connection to the session bus was closed"))
                }
                if s.registeredGeneration == s.generation { return .done }
                if let registering = s.registering { return .wait(registering.task, startsAgent: registering.startsAgent) }
                guard !s.handlers.isEmpty else { return .fail(Self.nothingRegistered) }
                s.registrationAttempts += 1
                let attempt = s.registrationAttempts
                let generation = s.generation
                var message = Message.methodCall(
                    destination: BGPolicyNames.busName, path: Self.agentPath, interface: BGPolicyNames.schedulerInterface,
                    member: "Register", body: registerBody(identifiers: s.handlers.keys.sorted()))
                message.noAutoStart = !startingAgent
                let task = Task { [message] in
                    do {
                        let reply = try await link.connection.call(message)
                        let registeredAs = try reply.body.decode(String.self, at: 0)
                        self.state.withLock { s in
                            if s.registering?.attempt == attempt { s.registering = nil }
                            if s.link === link {
                                s.registeredAppID = registeredAs
                                _ = s.registered(generation, answeredBy: reply.sender, owner: link.agent.owner)
                            }
                        }
                    } catch {
                        self.state.withLock { s in
                            if s.registering?.attempt == attempt { s.registering = nil }
                        }
                        throw error
                    }
                }
                s.registering = (attempt, task, startingAgent)
                return .wait(task, startsAgent: startingAgent)
            }
            switch step {
            case .done:
                return
            case .fail(let error):
                throw error
            case .wait(let task, let startsAgent):
                do {
                    // Shared with other callers: a cancelled one stops waiting (the agent may
                    // take up to 25 s to answer), and the Register goes on for the others.
                    try await task.valueUnlessCancelled()
                } catch {
                    let failure = BGTaskSchedulerError(error)
                    // Not sent to start the agent, and it was not there: this caller starts it.
                    if startingAgent && !startsAgent && failure.code == .agentNotRunning { continue }
                    throw failure
                }
            }
        }
    }

    static let nothingRegistered = BGTaskSchedulerError(
        .notRegistered, "register at least one task identifier with register(forTaskWithIdentifier:launchHandler:) first")

    /// The arguments of `Register`.
    func registerBody(identifiers: [String]) -> [DBusValue] {
        var options: [String: Variant] = [:]
        if let appID, !appID.isEmpty { options["app_id"] = Variant(.string(appID)) }
        // "" is sent too: it withdraws a name given before, which leaving the option out keeps.
        if let busName { options["bus_name"] = Variant(.string(busName)) }
        if backgroundOnly { options["background_only"] = Variant(.boolean(true)) }
        return [identifiers.dbusValue, options.dbusValue]
    }

    static let endedByDisconnect = BGTaskSchedulerError(
        .unknownTask, "the scheduler disconnected (disconnect()) while this ran, and the agent ended it with that connection")

    /// Sends `SetTaskCompleted` for a task the app finished. The task stays in `running` (an
    /// `ExpireTask` still finds it, a repeated `RunTask` does not start it twice) until the agent
    /// accepted the end or its answer says the task is gone: after `Failed` (a full disk) the
    /// agent still runs it, and the app may report again (`BGTask.setTaskCompleted`).
    ///
    /// An agent that answered `NotRegistered` did not know this connection, and has ended its
    /// tasks (it restarted, or another process took the app id over): whatever the `Register`
    /// and the report sent after it are answered (`AccessDenied` for an id taken over), the
    /// task is over. So it is, whatever the error, once the agent that launched it has left the
    /// bus (it crashed, or stopped before it answered): the task is no longer running here
    /// under it (`State.runsUnderItsLauncher`).
    ///
    /// Neither the report nor a `Register` before it starts the agent: with none on the bus
    /// the task ended with the one that launched it, and the report fails `.agentNotRunning`.
    ///
    /// `epoch` is the `disconnects` count the task was launched in: after a `disconnect()` the
    /// agent has ended it, and it is not worth a connection.
    func reportCompletion(
        taskID: String, success: Bool, result: TaskResult, epoch: Int
    ) async throws(BGTask.CompletionFailure) {
        guard state.withLock({ $0.disconnects }) == epoch else { throw BGTask.CompletionFailure(Self.endedByDisconnect) }
        // The Register the report may need first (the app registered another identifier since).
        // Answered `Unavailable` (the bus slow to say which process called), only it, not the
        // report, was refused for now, and the task still runs at the agent; `Unavailable` to
        // the report itself is final (`taskMayStillRun`). Any other failure is read as the
        // report's would be (not tried again: a submit may meanwhile have started an agent
        // that never knew the task).
        do throws(BGTaskSchedulerError) {
            _ = try await ready(startingAgent: false)
        } catch {
            throw state.withLock { s in
                let mayStillRun = (error.code == .unavailable || error.taskMayStillRun) && s.runsUnderItsLauncher(taskID)
                if !mayStillRun { s.running.removeValue(forKey: taskID) }
                return BGTask.CompletionFailure(error, taskMayStillRun: mayStillRun)
            }
        }
        var forgotten = false
        do throws(BGTaskSchedulerError) {
            _ = try await callAgentForReply(
                "SetTaskCompleted", [.string(taskID), .boolean(success), .string(result.rawValue)], startingAgent: false,
                agentForgotApp: &forgotten)
        } catch {
            throw state.withLock { s in
                let mayStillRun = error.taskMayStillRun && !forgotten && s.runsUnderItsLauncher(taskID)
                if !mayStillRun { s.running.removeValue(forKey: taskID) }
                return BGTask.CompletionFailure(error, taskMayStillRun: mayStillRun)
            }
        }
        _ = state.withLock { $0.running.removeValue(forKey: taskID) }
    }
}

/// One connection to the bus and what runs on it.
final class AgentLink: Sendable {
    let connection: DBusConnection
    /// The agent's unique name as the connection's thread has read it: the only caller
    /// `Client1` answers.
    let agent: NameOwnerFollower
    private struct State {
        var tasks: [Task<Void, Never>] = []
        /// The request for the app's bus name: whether another process owns it.
        var nameRequest: Task<Bool, any Error>?
        var closed = false
    }
    private let state = Mutex(State())

    init(connection: DBusConnection, agent: NameOwnerFollower) {
        self.connection = connection
        self.agent = agent
    }

    func start(_ tasks: Task<Void, Never>...) {
        let cancelNow: Bool = state.withLock { s in
            s.tasks += tasks
            return s.closed
        }
        if cancelNow { for task in tasks { task.cancel() } }
    }

    /// The request for the bus name on this connection: the one made before, or, the first
    /// time, the one `make` starts (`isNew`).
    func nameRequest(_ make: () -> Task<Bool, any Error>) -> (request: Task<Bool, any Error>, isNew: Bool) {
        state.withLock { s in
            if let request = s.nameRequest { return (request, false) }
            let request = make()
            s.nameRequest = request
            return (request, true)
        }
    }

    /// The request did not reach the bus (it failed or timed out): the next call asks again.
    func releaseNameRequest() {
        state.withLock { $0.nameRequest = nil }
    }

    func close() {
        let tasks: [Task<Void, Never>] = state.withLock { s in
            s.closed = true
            defer { s.tasks = [] }
            return s.tasks
        }
        for task in tasks { task.cancel() }
        agent.stop()
        connection.close()
    }
}
