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
    }

    /// Owns `org.bgpolicy.Agent1` on `bus` and serves the `Scheduler1` methods the tests use.
    /// `SetTaskCompleted` answers the errors in `completionErrors`, first to last, then succeeds.
    final class FakeAgent: Sendable {
        let connection: DBusConnection
        let calls = Mutex<[Call]>([])
        let completionErrors = Mutex<[BGPolicyErrorName]>([])
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
            ])

        init(on bus: PrivateBus) async throws {
            connection = try await DBusConnection.connect(to: .address(bus.address))
            let interface = ExportedInterface(Self.description)
                .method("Register") { [weak self] call in
                    self?.record(call, "Register")
                    return [.string("org.example.App")]
                }
                .method("SetTaskCompleted") { [weak self] call in
                    guard let self else { return [] }
                    record(call, "SetTaskCompleted")
                    let error: BGPolicyErrorName? = completionErrors.withLock { $0.isEmpty ? nil : $0.removeFirst() }
                    if let error { throw ClientCallError(error, "the stand-in answers \(error.rawValue)") }
                    return []
                }
                .method("Explain") { [weak self] call in
                    guard let self else { return [] }
                    record(call, "Explain")
                    return [explanation.withLock { $0 }.dbusValue]
                }
                .method("NotifyContentAvailable") { [weak self] call in
                    self?.record(call, "NotifyContentAvailable")
                    return []
                }
            try connection.objects.export([interface], at: BGTaskScheduler.agentPath)
            serving.withLock { $0 = Task { [objects = connection.objects] in await objects.serve() } }
            #expect(try await connection.requestName(BGPolicyNames.busName) == .primaryOwner)
        }

        func record(_ call: MethodCall, _ member: String) {
            calls.withLock { $0.append(Call(member: member, sender: call.sender, arguments: call.arguments)) }
        }

        func calls(of member: String) -> [Call] { calls.withLock { $0.filter { $0.member == member } } }

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

    /// DBusAPI.md: on `Failed` (the agent could not store the end, a full disk) "the task stays
    /// running … the app may call again". The library used to hand back the first, failed report
    /// forever and forget the task before the answer, so the app could never complete it.
    @Test("a completion the agent could not store is reported again, and only then forgotten")
    func completionRetriedAfterFailed() async throws {
        let bus = try PrivateBus()
        let agent = try await FakeAgent(on: bus)
        defer { agent.close() }
        let (scheduler, tasksIterator) = try await activatedScheduler(on: bus)
        defer { scheduler.disconnect() }
        var tasks = tasksIterator

        agent.completionErrors.withLock { $0 = [.failed] }
        try await agent.runTask("task-1", in: scheduler)
        let task = try #require(await tasks.next())
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

    @Test("a completion of a task the agent has ended is not sent again")
    func completionNotRetriedAfterUnknownTask() async throws {
        let bus = try PrivateBus()
        let agent = try await FakeAgent(on: bus)
        defer { agent.close() }
        let (scheduler, tasksIterator) = try await activatedScheduler(on: bus)
        defer { scheduler.disconnect() }
        var tasks = tasksIterator

        agent.completionErrors.withLock { $0 = [.unknownTask] }
        try await agent.runTask("task-2", in: scheduler)
        let task = try #require(await tasks.next())
        let first = task.setTaskCompleted(success: true)
        let error = await #expect(throws: BGTaskSchedulerError.self) { try await first.value }
        #expect(error?.code == .unknownTask)
        #expect(task.isCompleted)
        #expect(scheduler.state.withLock { $0.running.isEmpty })
        #expect(task.setTaskCompleted(success: true) == first)
        #expect(agent.calls(of: "SetTaskCompleted").count == 1)
    }
}
