@testable import BackgroundTasks
import BGPolicyCore
import BGPolicyDBus
import BGPolicyTestSupport
import Foundation
import Synchronization
import Testing

/// The scheduler's calls to `Scheduler1` and what it makes of the answers, on a private bus
/// with a stand-in for bgpolicyd (`FakeAgent`) that answers from a script and records every call.
@Suite("BGTaskScheduler's calls to the agent", .timeLimit(.minutes(1)))
struct AgentCallTests {
    static let identifier = "org.example.App.refresh"

    /// One call the stand-in received.
    struct Call: Sendable {
        let member: String
        let sender: String
        let arguments: [DBusValue]
        /// It was sent with D-Bus's no-auto-start flag: it would not have started an agent.
        var noAutoStart = false
    }

    /// Owns `org.bgpolicy.Agent1` on `bus` and serves the `Scheduler1` methods the tests use.
    /// A method answers the errors `errors` holds for it, first to last, then succeeds; while
    /// `held` names it, it waits (recorded already) before answering.
    final class FakeAgent: Sendable {
        let connection: DBusConnection
        let calls = Mutex<[Call]>([])
        let errors = Mutex<[String: [BGPolicyErrorName]]>([:])
        let held = Mutex<Set<String>>([])
        let backgroundTasks = Mutex(0)
        let explanation = Mutex<[String: Variant]>([:])
        let serving = Mutex<Task<Void, Never>?>(nil)

        static let description = InterfaceDescription(
            name: BGPolicyNames.schedulerInterface, documentation: "a stand-in for the agent's Scheduler1",
            methods: [
                .init("Register", inputs: [.init("identifiers", .array(.string)), .init("options", .dictionary(key: .string, value: .variant))],
                      outputs: [.init("app_id", .string)], documentation: ""),
                .init("SetTaskCompleted", inputs: [.init("task_id", .string), .init("success", .boolean), .init("result", .string)],
                      documentation: ""),
                .init("Explain", inputs: [.init("identifier", .string)],
                      outputs: [.init("explanation", .dictionary(key: .string, value: .variant))], documentation: ""),
                .init("NotifyContentAvailable", inputs: [.init("app_id", .string), .init("payload", .dictionary(key: .string, value: .variant))],
                      documentation: ""),
                .init("Submit", inputs: [.init("identifier", .string), .init("kind", .string), .init("options", .dictionary(key: .string, value: .variant))],
                      documentation: ""),
                .init("BeginBackgroundTask", inputs: [.init("name", .string)],
                      outputs: [.init("token", .string), .init("seconds", .uint32)], documentation: ""),
                .init("EndBackgroundTask", inputs: [.init("token", .string)], documentation: ""),
            ])

        init(on bus: PrivateBus) async throws {
            connection = try await DBusConnection.connect(to: .address(bus.address))
            let interface = ExportedInterface(Self.description)
                .method("Register") { [weak self] call in
                    try await self?.answer(call, "Register")
                    return [.string("org.example.App")]
                }
                .method("Submit") { [weak self] call in
                    try await self?.answer(call, "Submit")
                    return []
                }
                .method("BeginBackgroundTask") { [weak self] call in
                    guard let self else { return [] }
                    try await answer(call, "BeginBackgroundTask")
                    let number = backgroundTasks.withLock { n in
                        n += 1
                        return n
                    }
                    return [.string("bg-\(number)"), .uint32(30)]
                }
                .method("EndBackgroundTask") { [weak self] call in
                    try await self?.answer(call, "EndBackgroundTask")
                    return []
                }
                .method("SetTaskCompleted") { [weak self] call in
                    try await self?.answer(call, "SetTaskCompleted")
                    return []
                }
                .method("Explain") { [weak self] call in
                    guard let self else { return [] }
                    try await answer(call, "Explain")
                    return [explanation.withLock { $0 }.dbusValue]
                }
                .method("NotifyContentAvailable") { [weak self] call in
                    try await self?.answer(call, "NotifyContentAvailable")
                    return []
                }
            try connection.objects.export([interface], at: BGTaskScheduler.agentPath)
            serving.withLock { $0 = Task { [objects = connection.objects] in await objects.serve() } }
            #expect(try await connection.requestName(BGPolicyNames.busName) == .primaryOwner)
        }

        func record(_ call: MethodCall, _ member: String) {
            calls.withLock {
                $0.append(Call(member: member, sender: call.sender, arguments: call.arguments, noAutoStart: call.message.noAutoStart))
            }
        }

        /// Records the call, waits while `member` is held, then throws the next error scripted
        /// for it, if any.
        func answer(_ call: MethodCall, _ member: String) async throws {
            record(call, member)
            while held.withLock({ $0.contains(member) }) { try await Task.sleep(for: .milliseconds(5)) }
            let error: BGPolicyErrorName? = errors.withLock { e in e[member]?.isEmpty == false ? e[member]?.removeFirst() : nil }
            if let error { throw ClientCallError(error, "the stand-in answers \(error.rawValue)") }
        }

        func calls(of member: String) -> [Call] { calls.withLock { $0.filter { $0.member == member } } }

        /// `task`'s completion, sent and held here unanswered until `held` lets it go.
        func completionHeld(of task: BGTask) async throws -> Task<Void, any Error> {
            held.withLock { _ = $0.insert("SetTaskCompleted") }
            let report = task.setTaskCompleted(success: true)
            try await waitUntil("SetTaskCompleted to reach the agent") { !calls(of: "SetTaskCompleted").isEmpty }
            return report
        }

        /// Calls the app's `Client1.RunTask`, as the agent launches a task.
        func runTask(_ taskID: String, in scheduler: BGTaskScheduler) async throws {
            try await call(
                "RunTask",
                [.string(taskID), .string(AgentCallTests.identifier), .string("refresh"), .uint32(30), [String: Variant]().dbusValue],
                in: scheduler)
        }

        /// Calls a method of the app's `Client1`.
        func call(_ member: String, _ arguments: [DBusValue], in scheduler: BGTaskScheduler) async throws {
            let app = try #require(scheduler.state.withLock { $0.link?.connection.uniqueName })
            _ = try await connection.call(
                destination: app, path: BGTaskScheduler.clientPath, interface: BGPolicyNames.clientInterface, member: member, arguments)
        }

        func close() {
            serving.withLock { $0?.cancel() }
            connection.close()
        }
    }

    /// A registered, activated scheduler on `bus`, and the tasks its launch handler is given.
    func activatedScheduler(on bus: PrivateBus) async throws -> (BGTaskScheduler, AsyncStream<BGTask>.Iterator) {
        let scheduler = BGTaskScheduler(appID: "org.example.App", bus: .address(bus.address))
        let (tasks, launched) = AsyncStream.makeStream(of: BGTask.self)
        scheduler.register(forTaskWithIdentifier: Self.identifier) { launched.yield($0) }
        try await scheduler.activate()
        return (scheduler, tasks.makeAsyncIterator())
    }

    /// A stand-in agent scripted to refuse the first `SetTaskCompleted` with `error`, and a
    /// registered, activated scheduler on the same private bus that it has run `taskID` in.
    /// `body` is given the agent, the scheduler and the task its launch handler was given; the
    /// two are closed after it.
    func withTaskRun(
        _ taskID: String, completionRefusedWith error: BGPolicyErrorName,
        _ body: (FakeAgent, BGTaskScheduler, BGTask) async throws -> Void
    ) async throws {
        let bus = try PrivateBus()
        let agent = try await FakeAgent(on: bus)
        defer { agent.close() }
        let (scheduler, tasksIterator) = try await activatedScheduler(on: bus)
        defer { scheduler.disconnect() }
        var tasks = tasksIterator

        agent.errors.withLock { $0["SetTaskCompleted"] = [error] }
        try await agent.runTask(taskID, in: scheduler)
        let task = try #require(await tasks.next())
        try await body(agent, scheduler, task)
    }

    /// DBusAPI.md: on `Failed` (the agent could not store the end, a full disk) "the task stays
    /// running … the app may call again". The library used to hand back the first, failed report
    /// forever and forget the task before the answer, so the app could never complete it.
    @Test("a completion the agent could not store is reported again, and only then forgotten")
    func completionRetriedAfterFailed() async throws {
        try await withTaskRun("task-1", completionRefusedWith: .failed) { agent, scheduler, task in
            let first = task.setTaskCompleted(success: true, result: .newData)
            let error = await #expect(throws: BGTaskSchedulerError.self) { try await first.value }
            #expect(error?.code == .failed)
            // The agent still runs it: so does the app, which must complete it again.
            #expect(!task.isCompleted)
            #expect(scheduler.state.withLock { $0.running["task-1"] } === task)
            // And the agent's warning before its deadline still reaches it.
            try await agent.call("ExpireTask", [.string("task-1")], in: scheduler)
            #expect(task.isExpired)

            let second = task.setTaskCompleted(success: true, result: .noData)
            #expect(second != first)
            #expect(task.isCompleted)
            try await second.value
            #expect(scheduler.state.withLock { $0.running.isEmpty })
            #expect(task.setTaskCompleted(success: false) == second, "an accepted completion is not sent again")
            let reports = agent.calls(of: "SetTaskCompleted").map(\.arguments)
            #expect(reports == [
                [.string("task-1"), .boolean(true), .string("new-data")], [.string("task-1"), .boolean(true), .string("no-data")],
            ])
        }
    }

    /// A report that needs a Register first (another identifier registered since), whose
    /// Register the agent answers `Unavailable` (the bus slow to say who called): the report
    /// was never sent, yet `Unavailable` counted as final, and the task was forgotten while
    /// the agent ran it to its deadline.
    @Test("a completion whose Register first is refused for now may be reported again")
    func completionAfterARefusedRegister() async throws {
        try await withTaskRun("task-7", completionRefusedWith: .failed) { agent, scheduler, task in
            agent.errors.withLock { $0["SetTaskCompleted"] = []; $0["Register"] = [.unavailable] }
            _ = scheduler.register(forTaskWithIdentifier: "org.example.App.cleanup") { _ in }
            let first = task.setTaskCompleted(success: true)
            let error = await #expect(throws: BGTaskSchedulerError.self) { try await first.value }
            #expect(error?.code == .unavailable)
            #expect(agent.calls(of: "SetTaskCompleted").isEmpty)
            #expect(!task.isCompleted)
            #expect(scheduler.state.withLock { $0.running["task-7"] } === task)

            let second = task.setTaskCompleted(success: true)
            try await second.value
            #expect(task.isCompleted)
            #expect(agent.calls(of: "SetTaskCompleted").count == 1)
        }
    }

    @Test("a completion of a task the agent has ended is not sent again")
    func completionNotRetriedAfterUnknownTask() async throws {
        try await withTaskRun("task-2", completionRefusedWith: .unknownTask) { agent, scheduler, task in
            let first = task.setTaskCompleted(success: true)
            let error = await #expect(throws: BGTaskSchedulerError.self) { try await first.value }
            #expect(error?.code == .unknownTask)
            #expect(task.isCompleted)
            #expect(scheduler.state.withLock { $0.running.isEmpty })
            #expect(task.setTaskCompleted(success: true) == first)
            #expect(agent.calls(of: "SetTaskCompleted").count == 1)
        }
    }

    @Test("explain returns the agent's Explain, typed, with the whole answer kept")
    func explain() async throws {
        let bus = try PrivateBus()
        let agent = try await FakeAgent(on: bus)
        defer { agent.close() }
        let (scheduler, _) = try await activatedScheduler(on: bus)
        defer { scheduler.disconnect() }

        let answer: [String: Variant] = [
            "app_id": Variant(.string("org.example.App")), "identifier": Variant(.string(Self.identifier)),
            "state": Variant(.string("pending")), "kind": Variant(.string("refresh")), "runnable": Variant(.boolean(false)),
            "blocking": Variant(["earliest-begin", "no-network"].dbusValue),
            "reasons": Variant(["it asked to wait until 10:15", "it needs a network"].dbusValue),
            "summary": Variant(.string("Waits for its earliest begin and a network.")),
            "earliest_window": Variant(.int64(1_700_000_900)), "a_later_key": Variant(.uint32(7)),
            "opens": Variant(.uint32(42)), "opens_last_24h": Variant(.uint32(5)), "last_open": Variant(.int64(1_699_990_000)),
        ]
        agent.explanation.withLock { $0 = answer }
        let why = try await scheduler.explain(taskRequestWithIdentifier: Self.identifier)
        #expect(why.appID == "org.example.App" && why.identifier == Self.identifier)
        #expect(why.state == .pending && why.kind == .refresh && !why.isRunnable)
        #expect(why.blocking == ["earliest-begin", "no-network"])
        #expect(why.reasons == ["it asked to wait until 10:15", "it needs a network"])
        #expect(why.summary == "Waits for its earliest begin and a network.")
        #expect(why.earliestWindow == Date(timeIntervalSince1970: 1_700_000_900))
        #expect(why.opens == 42 && why.opensInLast24Hours == 5 && why.lastOpen == Date(timeIntervalSince1970: 1_699_990_000))
        #expect(why.dictionary == answer)
        #expect(agent.calls(of: "Explain").map(\.arguments) == [[.string(Self.identifier)]])

        // Not pending: no kind, no window; a state this library does not know is nil.
        agent.explanation.withLock {
            $0 = ["state": Variant(.string("not-pending")), "runnable": Variant(.boolean(false)), "summary": Variant(.string("none"))]
        }
        let none = try await scheduler.explain(taskRequestWithIdentifier: Self.identifier)
        #expect(none.state == .notPending && none.kind == nil && none.earliestWindow == nil && none.blocking.isEmpty)
        #expect(none.opens == nil && none.opensInLast24Hours == nil && none.lastOpen == nil)
        agent.explanation.withLock { $0 = ["state": Variant(.string("dreaming"))] }
        #expect(try await scheduler.explain(taskRequestWithIdentifier: Self.identifier).state == nil)
        // A key of the wrong type is a malformed answer.
        agent.explanation.withLock { $0 = ["runnable": Variant(.string("yes"))] }
        let malformed = await #expect(throws: BGTaskSchedulerError.self) {
            _ = try await scheduler.explain(taskRequestWithIdentifier: Self.identifier)
        }
        #expect(malformed?.code == .other)
    }

    /// Every error the app sends the agent is one of the agent's own (SPEC §3). A `RunTask` or
    /// `ExpireTask` of the wrong types, refused by the object server before any handler, was
    /// freedesktop's `InvalidArgs`; the agent answers such calls `InvalidArgument`.
    @Test("Client1 calls of the wrong types are InvalidArgument, naming the types; strangers are still AccessDenied")
    func wrongTypes() async throws {
        let bus = try PrivateBus()
        let agent = try await FakeAgent(on: bus)
        defer { agent.close() }
        let (scheduler, _) = try await activatedScheduler(on: bus)
        defer { scheduler.disconnect() }

        func refusal(_ member: String, _ arguments: [DBusValue], from caller: DBusConnection) async -> (name: String, message: String)? {
            do {
                let app = try #require(scheduler.state.withLock { $0.link?.connection.uniqueName })
                _ = try await caller.call(
                    destination: app, path: BGTaskScheduler.clientPath, interface: BGPolicyNames.clientInterface, member: member, arguments)
            } catch DBusError.remote(let name, let message) {
                return (name, message)
            } catch {
                Issue.record("\(error)")
            }
            return nil
        }
        let runTask = try #require(await refusal("RunTask", [.string("task-1"), .uint32(30)], from: agent.connection))
        #expect(runTask.name == BGPolicyErrorName.invalidArgument.dbusName, "\(runTask)")
        #expect(runTask.message.contains("\"sssua{sv}\""), "\(runTask.message)")
        let expire = try #require(await refusal("ExpireTask", [.int32(1)], from: agent.connection))
        #expect(expire.name == BGPolicyErrorName.invalidArgument.dbusName, "\(expire)")
        #expect(expire.message.contains("\"s\""), "\(expire.message)")
        let unknown = try #require(await refusal("Teleport", [], from: agent.connection))
        #expect(unknown.name == BGPolicyErrorName.unknownMethod.dbusName, "\(unknown)")

        // Anyone but the agent, with the right types, is refused as before.
        let stranger = try await DBusConnection.connect(to: .address(bus.address))
        defer { stranger.close() }
        let denied = try #require(await refusal(
            "RunTask", [.string("task-2"), .string(Self.identifier), .string("refresh"), .uint32(30), [String: Variant]().dbusValue],
            from: stranger))
        #expect(denied.name == BGPolicyErrorName.accessDenied.dbusName, "\(denied)")
    }

    /// A sync or push service wakes another app without registering itself: the agent asks
    /// nothing of NotifyContentAvailable's caller (Docs/DBusAPI.md), and the library used to
    /// require a registered identifier for every call.
    @Test("notifyContentAvailable needs no registration, and passes the agent's refusal on")
    func notifyContentAvailable() async throws {
        let bus = try PrivateBus()
        let agent = try await FakeAgent(on: bus)
        defer { agent.close() }
        let notifier = BGTaskScheduler(bus: .address(bus.address))
        defer { notifier.disconnect() }

        let payload: [String: Variant] = ["mailbox": Variant(.string("INBOX"))]
        try await notifier.notifyContentAvailable(appID: "org.example.Mail", payload: payload)
        let calls = agent.calls(of: "NotifyContentAvailable")
        #expect(calls.map(\.arguments) == [[.string("org.example.Mail"), payload.dbusValue]])
        #expect(calls.first?.sender == notifier.state.withLock { $0.link?.connection.uniqueName })
        #expect(agent.calls(of: "Register").isEmpty, "a notifier is not registered as an app")
        #expect(!notifier.state.withLock { $0.wantsAgent }, "nor registered when the agent restarts")

        agent.errors.withLock { $0["NotifyContentAvailable"] = [.limitsExceeded] }
        let refused = await #expect(throws: BGTaskSchedulerError.self) {
            try await notifier.notifyContentAvailable(appID: "org.example.Mail")
        }
        #expect(refused?.code == .limitsExceeded)
        #expect(agent.calls(of: "NotifyContentAvailable").last?.arguments == [.string("org.example.Mail"), [String: Variant]().dbusValue])
    }

    // MARK: Background tasks

    /// The connection forgets a cancelled call's reply, but the agent has granted the
    /// background task all the same: the library dropped its token, and the task ran out 30 s
    /// later as an app's violation (`background-task-expired`).
    @Test("a background task begun by a call cancelled meanwhile is ended at once, and the call throws")
    func beginCancelled() async throws {
        let bus = try PrivateBus()
        let agent = try await FakeAgent(on: bus)
        defer { agent.close() }
        let (scheduler, _) = try await activatedScheduler(on: bus)
        defer { scheduler.disconnect() }

        agent.held.withLock { _ = $0.insert("BeginBackgroundTask") }
        let begin = Task { try await scheduler.beginBackgroundTask(name: "save", expirationHandler: nil) }
        try await waitUntil("BeginBackgroundTask to reach the agent") { !agent.calls(of: "BeginBackgroundTask").isEmpty }
        begin.cancel()
        agent.held.withLock { _ = $0.remove("BeginBackgroundTask") }
        let error = await #expect(throws: BGTaskSchedulerError.self) { _ = try await begin.value }
        #expect(error?.code == .other && error?.message == "the call was cancelled", "\(String(describing: error))")
        #expect(agent.calls(of: "EndBackgroundTask").map(\.arguments) == [[.string("bg-1")]])
        #expect(scheduler.state.withLock { $0.backgroundTasks.isEmpty })

        // One not yet sent is not sent at all.
        let never = Task {
            withUnsafeCurrentTask { $0?.cancel() }
            return try await scheduler.beginBackgroundTask(name: "never", expirationHandler: nil)
        }
        await #expect(throws: BGTaskSchedulerError.self) { _ = try await never.value }
        #expect(agent.calls(of: "BeginBackgroundTask").count == 1)
    }

    /// `endBackgroundTask` forgot the task before the agent answered: when the end failed, the
    /// agent's warning found nothing, and the handler never ran.
    @Test("a background task whose end failed is still warned; one ended meanwhile is not")
    func endFailed() async throws {
        let bus = try PrivateBus()
        let agent = try await FakeAgent(on: bus)
        defer { agent.close() }
        let (scheduler, _) = try await activatedScheduler(on: bus)
        defer { scheduler.disconnect() }
        let warned = Mutex<[String]>([])

        // Refused, then warned.
        let first = try await scheduler.beginBackgroundTask(name: "save") { warned.withLock { $0.append("bg-1") } }
        agent.errors.withLock { $0["EndBackgroundTask"] = [.limitsExceeded] }
        let refused = await #expect(throws: BGTaskSchedulerError.self) { try await scheduler.endBackgroundTask(first) }
        #expect(refused?.code == .limitsExceeded)
        try await agent.call("ExpireTask", [.string(first.rawValue)], in: scheduler)
        try await waitUntil("the first expiration handler to run") { warned.withLock { $0 } == ["bg-1"] }

        // Warned while its end is on its way, which fails: the handler runs then.
        let second = try await scheduler.beginBackgroundTask(name: "send") { warned.withLock { $0.append("bg-2") } }
        agent.errors.withLock { $0["EndBackgroundTask"] = [.failed] }
        agent.held.withLock { _ = $0.insert("EndBackgroundTask") }
        let ending = Task { try await scheduler.endBackgroundTask(second) }
        try await waitUntil("EndBackgroundTask to reach the agent") { agent.calls(of: "EndBackgroundTask").count == 2 }
        try await agent.call("ExpireTask", [.string(second.rawValue)], in: scheduler)
        agent.held.withLock { _ = $0.remove("EndBackgroundTask") }
        await #expect(throws: BGTaskSchedulerError.self) { try await ending.value }
        try await waitUntil("the second expiration handler to run") { warned.withLock { $0 } == ["bg-1", "bg-2"] }

        // Warned while its end is on its way, which the agent takes: no handler.
        let third = try await scheduler.beginBackgroundTask(name: "sync") { warned.withLock { $0.append("bg-3") } }
        agent.held.withLock { _ = $0.insert("EndBackgroundTask") }
        let ended = Task { try await scheduler.endBackgroundTask(third) }
        try await waitUntil("EndBackgroundTask to reach the agent") { agent.calls(of: "EndBackgroundTask").count == 3 }
        try await agent.call("ExpireTask", [.string(third.rawValue)], in: scheduler)
        agent.held.withLock { _ = $0.remove("EndBackgroundTask") }
        try await ended.value
        try await Task.sleep(for: .milliseconds(100))
        #expect(warned.withLock { $0 } == ["bg-1", "bg-2"])
        #expect(scheduler.state.withLock { $0.backgroundTasks.isEmpty })
    }

    /// The agent's name changed hands after the agent granted a background task, before the
    /// scheduler stored it: the sweep of the gone agent's work ran first and found nothing,
    /// and the entry stored after it was never expired nor removed.
    @Test("a background task granted by an agent that left before its answer was handled is expired")
    func grantedByAnAgentGone() async throws {
        let bus = try PrivateBus()
        let agent = try await FakeAgent(on: bus)
        defer { agent.close() }
        let (scheduler, _) = try await activatedScheduler(on: bus)
        defer { scheduler.disconnect() }
        let warned = Mutex(0)

        agent.held.withLock { _ = $0.insert("BeginBackgroundTask") }
        let begin = Task { try await scheduler.beginBackgroundTask(name: "save") { warned.withLock { $0 += 1 } } }
        try await waitUntil("BeginBackgroundTask to reach the agent") { !agent.calls(of: "BeginBackgroundTask").isEmpty }
        // The agent leaves its name (it is going away), and the scheduler sees it, before its
        // answer is read.
        _ = try await agent.connection.releaseName(BGPolicyNames.busName)
        try await waitUntil("the scheduler to see the agent gone") { scheduler.state.withLock { $0.agentOwner == nil } }
        agent.held.withLock { _ = $0.remove("BeginBackgroundTask") }
        let token = try await begin.value
        #expect(token.rawValue == "bg-1")
        try await waitUntil("the expiration handler to run") { warned.withLock { $0 } == 1 }
        #expect(scheduler.state.withLock { $0.backgroundTasks.isEmpty })
    }

    // MARK: The connection lost

    /// A call that found the connection closed before the owner stream did dropped the link
    /// without ending its work, and the stream's `linkLost` then found the link no longer the
    /// scheduler's: the work ended only once a new connection was opened, never if the bus
    /// did not come back. The link here has no owner stream, so the call comes first.
    @Test("a task and a background task of a connection a call finds closed are expired, though no new connection can be made")
    func closedLinkFoundByACall() async throws {
        let bus = try PrivateBus()
        let connection = try await DBusConnection.connect(to: .address(bus.address))
        let link = AgentLink(connection: connection, agent: try await connection.followOwner(of: BGPolicyNames.busName))
        defer { link.close() }
        let scheduler = BGTaskScheduler(appID: "org.example.App", bus: .address(bus.address))
        scheduler.register(forTaskWithIdentifier: Self.identifier) { _ in }
        let warned = Mutex<[String]>([])
        let task = BGTask(identifier: Self.identifier, kind: .refresh, taskID: "task-1", deadline: Date() + 30) { _, _, _ in }
        task.expirationHandler = { warned.withLock { $0.append("task") } }
        scheduler.state.withLock { s in
            s.link = link
            s.running["task-1"] = task
            s.backgroundTasks["bg-1"] = .init(expirationHandler: { warned.withLock { $0.append("background task") } })
        }

        bus.crash()
        try await waitUntil("the connection to close") { !connection.isConnected }
        let error = await #expect(throws: BGTaskSchedulerError.self) {
            try await scheduler.submit(BGAppRefreshTaskRequest(identifier: Self.identifier))
        }
        #expect(error?.code == .agentNotRunning)
        try await waitUntil("both expiration handlers to run") { warned.withLock { $0.count } == 2 }
        #expect(Set(warned.withLock { $0 }) == ["task", "background task"])
        #expect(task.isExpired)
        #expect(scheduler.state.withLock { $0.link == nil && $0.running.isEmpty && $0.backgroundTasks.isEmpty })
    }

    /// `disconnect()` takes the link under the lock and closes its connection after, and the
    /// connection's thread may handle a call in between. A `RunTask` then was checked against
    /// the owner stream's `agentOwner`, which a disconnect leaves, and was run: a task nothing
    /// would expire (the agent ends it with the connection), whose completion connected and
    /// registered again. The scheduler is held here in that state, the link taken as
    /// `disconnect()` takes it and its connection still open, for as long as the calls take.
    @Test("a RunTask or ExpireTask that comes while disconnect() closes the connection is refused, and starts nothing")
    func callsDuringDisconnect() async throws {
        let bus = try PrivateBus()
        let agent = try await FakeAgent(on: bus)
        defer { agent.close() }
        let (scheduler, _) = try await activatedScheduler(on: bus)
        let link = try #require(scheduler.state.withLock { $0.link })
        defer { link.close() }
        // `disconnect()`'s part under the lock; its `link.close()` is what the test holds back.
        let ended = scheduler.state.withLock { s in
            s.link = nil
            s.disconnects += 1
            s.forgetRegistration()
            return s.endAll()
        }
        #expect(ended.tasks.isEmpty)

        func refusal(_ member: String, _ arguments: [DBusValue]) async -> String? {
            do {
                _ = try await agent.connection.call(
                    destination: link.connection.uniqueName, path: BGTaskScheduler.clientPath,
                    interface: BGPolicyNames.clientInterface, member: member, arguments)
            } catch DBusError.remote(let name, _) {
                return name
            } catch {
                Issue.record("\(error)")
            }
            return nil
        }
        let runTask = await refusal(
            "RunTask", [.string("task-1"), .string(Self.identifier), .string("refresh"), .uint32(30), [String: Variant]().dbusValue])
        #expect(runTask == BGPolicyErrorName.unavailable.dbusName)
        #expect(scheduler.state.withLock { $0.running.isEmpty }, "a task started on a connection being closed")
        let expire = await refusal("ExpireTask", [.string("task-2")])
        #expect(expire == BGPolicyErrorName.unavailable.dbusName)
        #expect(scheduler.state.withLock { $0.earlyExpirations.isEmpty })
        #expect(agent.calls(of: "Register").count == 1)
    }

    // MARK: The bus name

    /// The name was checked before the call itself, so the first call, even `submit(_:)`,
    /// threw `.other` unsent, and the request was lost.
    @Test("a bus name another process owns fails activate() only; submit is sent")
    func busNameTaken() async throws {
        let bus = try PrivateBus()
        let agent = try await FakeAgent(on: bus)
        defer { agent.close() }
        let squatter = try await DBusConnection.connect(to: .address(bus.address))
        defer { squatter.close() }
        #expect(try await squatter.requestName("org.example.App") == .primaryOwner)

        let scheduler = BGTaskScheduler(appID: "org.example.App", busName: "org.example.App", bus: .address(bus.address))
        defer { scheduler.disconnect() }
        scheduler.register(forTaskWithIdentifier: Self.identifier) { _ in }
        try await scheduler.submit(BGAppRefreshTaskRequest(identifier: Self.identifier))
        #expect(agent.calls(of: "Submit").count == 1)
        let taken = await #expect(throws: BGTaskSchedulerError.self) { try await scheduler.activate() }
        #expect(taken?.code == .other && taken?.message.contains("another process owns org.example.App") == true)
        try await scheduler.submit(BGAppRefreshTaskRequest(identifier: Self.identifier))
        #expect(agent.calls(of: "Submit").count == 2)
    }

    // MARK: Completion

    /// An app id taken over: the agent answers `NotRegistered`, the scheduler registers
    /// again, and the agent refuses that (`AccessDenied`). The task was counted as "may still
    /// run", so it went back to running for good.
    @Test("a completion refused after the agent forgot the app ends the task")
    func completionAfterTakeover() async throws {
        try await withTaskRun("task-3", completionRefusedWith: .notRegistered) { agent, scheduler, task in
            agent.errors.withLock { $0["Register"] = [.accessDenied] }
            let first = task.setTaskCompleted(success: true)
            let error = await #expect(throws: BGTaskSchedulerError.self) { try await first.value }
            #expect(error?.code == .accessDenied)
            #expect(task.isCompleted)
            #expect(scheduler.state.withLock { $0.running.isEmpty })
            #expect(task.setTaskCompleted(success: true) == first)
            #expect(agent.calls(of: "SetTaskCompleted").count == 1)
        }
    }

    /// A report that failed with an error after which the agent may still run the task (no
    /// answer in time, `Failed`) kept it in `running`; only warned tasks were forgotten past
    /// their deadline, and the agent never warns a task whose end it took (the answer lost).
    /// The task stayed, with its handlers, for as long as the app ran.
    @Test("a task whose completion failed is forgotten once its slice is over, though never warned")
    func failedCompletionForgotten() async throws {
        let bus = try PrivateBus()
        let agent = try await FakeAgent(on: bus)
        defer { agent.close() }
        let (scheduler, tasksIterator) = try await activatedScheduler(on: bus)
        defer { scheduler.disconnect() }
        var tasks = tasksIterator

        let ended = Int64(Date().timeIntervalSince1970 - BGTaskScheduler.endedTaskGrace - 50)
        try await agent.call(
            "RunTask",
            [.string("task-1"), .string(Self.identifier), .string("refresh"), .uint32(30),
             ["deadline": Variant(.int64(ended))].dbusValue],
            in: scheduler)
        let task = try #require(await tasks.next())
        agent.errors.withLock { $0["SetTaskCompleted"] = [.failed] }
        await #expect(throws: BGTaskSchedulerError.self) { try await task.setTaskCompleted(success: true).value }
        #expect(!task.isCompleted && !task.isExpired)
        #expect(scheduler.state.withLock { $0.running["task-1"] } === task)

        try await agent.runTask("task-2", in: scheduler)
        let next = try #require(await tasks.next())
        #expect(scheduler.state.withLock { $0.running.keys.sorted() } == [next.taskID])

        // One never reported nor warned is kept: a wall clock that jumped ahead must not lose
        // a task its warning.
        try await agent.call(
            "RunTask",
            [.string("task-3"), .string(Self.identifier), .string("refresh"), .uint32(30),
             ["deadline": Variant(.int64(ended))].dbusValue],
            in: scheduler)
        _ = try #require(await tasks.next())
        try await agent.runTask("task-4", in: scheduler)
        _ = try #require(await tasks.next())
        #expect(scheduler.state.withLock { $0.running.keys.sorted() } == ["task-2", "task-3", "task-4"])
    }

    /// `expire()` returned early while a report was on its way, without marking the task: when
    /// the report then failed, the task ran again unwarned.
    @Test("a warning that comes while a completion is on its way reaches the task if the report fails")
    func expiredWhileReporting() async throws {
        try await withTaskRun("task-4", completionRefusedWith: .failed) { agent, scheduler, task in
            let warned = Mutex(0)
            task.expirationHandler = { warned.withLock { $0 += 1 } }
            let report = try await agent.completionHeld(of: task)
            try await agent.call("ExpireTask", [.string("task-4")], in: scheduler)
            agent.held.withLock { _ = $0.remove("SetTaskCompleted") }
            let error = await #expect(throws: BGTaskSchedulerError.self) { try await report.value }
            #expect(error?.code == .failed)
            #expect(!task.isCompleted)
            #expect(task.isExpired)
            try await waitUntil("the expiration handler to run") { warned.withLock { $0 } == 1 }
        }
    }

    /// The agent left the bus with a report on its way (a crash): the bus answers `NoReply`
    /// (`.other`), after which the task counted as "may still run". The sweep of the gone
    /// agent's work had expired it without its handler, the report being on its way; the
    /// failed report then reopened it and ran the handler of a task the app had completed, and
    /// `isCompleted` turned false.
    @Test("a completion the agent left the bus before answering is final: the task stays completed, its handler unrun")
    func completionLostWithTheAgent() async throws {
        let bus = try PrivateBus()
        let agent = try await FakeAgent(on: bus)
        defer { agent.close() }
        let (scheduler, tasksIterator) = try await activatedScheduler(on: bus)
        defer { scheduler.disconnect() }
        var tasks = tasksIterator
        try await agent.runTask("task-5", in: scheduler)
        let task = try #require(await tasks.next())
        let warned = Mutex(0)
        task.expirationHandler = { warned.withLock { $0 += 1 } }

        let report = try await agent.completionHeld(of: task)
        // Gone without a word, the call unanswered (still held).
        agent.connection.close()
        let error = await #expect(throws: BGTaskSchedulerError.self) { try await report.value }
        #expect(error?.code == .other, "\(String(describing: error))")
        try await waitUntil("the scheduler to see the agent gone") { scheduler.state.withLock { $0.agentOwner == nil } }
        try await Task.sleep(for: .milliseconds(200))
        #expect(task.isCompleted)
        #expect(warned.withLock { $0 } == 0, "the expiration handler of a completed task ran")
        #expect(scheduler.state.withLock { $0.running.isEmpty })
        #expect(task.setTaskCompleted(success: true) == report, "a report that is final is not sent again")
    }

    /// A stopping agent answers the calls it has not started `Unavailable`, and closes the
    /// running slices as `interrupted`, warning them with `ExpireTask` first. The library took
    /// `Unavailable` as "may still run": the warning that came while the report was on its way
    /// ran the handler of a task the app had completed, and the task was reported again.
    @Test("a completion a stopping agent answers Unavailable is final, though the task was warned meanwhile")
    func completionRefusedByAStoppingAgent() async throws {
        try await withTaskRun("task-6", completionRefusedWith: .unavailable) { agent, scheduler, task in
            let warned = Mutex(0)
            task.expirationHandler = { warned.withLock { $0 += 1 } }
            let report = try await agent.completionHeld(of: task)
            try await agent.call("ExpireTask", [.string("task-6")], in: scheduler)
            agent.held.withLock { _ = $0.remove("SetTaskCompleted") }
            let error = await #expect(throws: BGTaskSchedulerError.self) { try await report.value }
            #expect(error?.code == .unavailable)
            try await Task.sleep(for: .milliseconds(200))
            #expect(task.isCompleted && task.isExpired)
            #expect(warned.withLock { $0 } == 0, "the expiration handler of a completed task ran")
            #expect(scheduler.state.withLock { $0.running.isEmpty })
            #expect(task.setTaskCompleted(success: true) == report)
            #expect(agent.calls(of: "SetTaskCompleted").count == 1)
        }
    }

    /// A restarted agent is sent `Register` by the scheduler itself. It asked the bus to start
    /// the agent, so one the user stopped again before that `Register` reached the bus was
    /// started anew. Only the app's own calls that ask for work (`submit`) start it.
    @Test("the Register sent to an agent that restarted does not start one; a submit's does")
    func reregistrationDoesNotStartTheAgent() async throws {
        let bus = try PrivateBus()
        let first = try await FakeAgent(on: bus)
        let (scheduler, _) = try await activatedScheduler(on: bus)
        defer { scheduler.disconnect() }
        #expect(first.calls(of: "Register").map(\.noAutoStart) == [false])
        first.close()
        try await waitUntil("the scheduler to see the agent gone") { scheduler.state.withLock { $0.agentOwner == nil } }

        let second = try await FakeAgent(on: bus)
        defer { second.close() }
        try await waitUntil("the scheduler to register with the new agent") { !second.calls(of: "Register").isEmpty }
        #expect(second.calls(of: "Register").map(\.noAutoStart) == [true])
        try await waitUntil("the Register to be answered") { scheduler.state.withLock { $0.registeredGeneration != nil } }
        try await scheduler.submit(BGAppRefreshTaskRequest(identifier: Self.identifier))
        #expect(second.calls(of: "Submit").map(\.noAutoStart) == [false])
    }
}
