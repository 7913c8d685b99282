@testable import BackgroundTasks
import BGPolicyCore
import BGPolicyDBus
import Foundation
import Synchronization
import Testing

/// The scheduler's rules that need no agent: registration, checks before sending, and how it
/// answers org.bgpolicy.Client1 (driven through a detached object server, without a bus).
@Suite("BGTaskScheduler without an agent", .timeLimit(.minutes(1)))
struct BGTaskSchedulerTests {
    /// A bus address nothing listens on: any call that reached for the agent fails fast.
    static let nowhere = DBusConnection.Bus.address("unix:path=/nonexistent/bgpolicy-tests/bus")
    static let agent = ":1.7"

    func makeScheduler(appID: String? = "org.example.App", busName: String? = nil, backgroundOnly: Bool = false) -> BGTaskScheduler {
        BGTaskScheduler(appID: appID, busName: busName, backgroundOnly: backgroundOnly, bus: Self.nowhere)
    }

    // MARK: register()

    @Test("registering an identifier once succeeds, twice fails")
    func duplicate() {
        let scheduler = makeScheduler()
        #expect(scheduler.register(forTaskWithIdentifier: "org.example.App.refresh") { _ in })
        #expect(!scheduler.register(forTaskWithIdentifier: "org.example.App.refresh") { _ in })
        #expect(scheduler.register(forTaskWithIdentifier: "org.example.App.clean") { _ in })
        #expect(scheduler.registeredIdentifiers == ["org.example.App.clean", "org.example.App.refresh"])
    }

    @Test("invalid identifiers are refused", arguments: ["", "has space", "org.example/App", "é.x", String(repeating: "a", count: 256)])
    func invalid(identifier: String) {
        let scheduler = makeScheduler()
        #expect(!scheduler.register(forTaskWithIdentifier: identifier) { _ in })
        #expect(scheduler.registeredIdentifiers.isEmpty)
    }

    @Test("at most maximumIdentifiers")
    func limit() {
        let scheduler = makeScheduler()
        for n in 0..<BGTaskScheduler.maximumIdentifiers {
            #expect(scheduler.register(forTaskWithIdentifier: "org.example.App.task\(n)") { _ in })
        }
        #expect(!scheduler.register(forTaskWithIdentifier: "org.example.App.one-too-many") { _ in })
        #expect(scheduler.registeredIdentifiers.count == BGTaskScheduler.maximumIdentifiers)
    }

    @Test("registering changes the generation, so Register is sent again")
    func generation() {
        let scheduler = makeScheduler()
        scheduler.register(forTaskWithIdentifier: "org.example.App.refresh") { _ in }
        let first = scheduler.state.withLock { $0.generation }
        scheduler.register(forTaskWithIdentifier: "org.example.App.refresh") { _ in }
        #expect(scheduler.state.withLock { $0.generation } == first)
        scheduler.register(forTaskWithIdentifier: "org.example.App.clean") { _ in }
        #expect(scheduler.state.withLock { $0.generation } == first + 1)
    }

    // MARK: Checks before sending

    @Test("submitting before registering anything is NotRegistered")
    func submitUnregistered() async {
        let scheduler = makeScheduler()
        await #expect(throws: BGTaskSchedulerError(.notRegistered, "")) {
            try await Self.rethrowingCode { try await scheduler.submit(BGAppRefreshTaskRequest(identifier: "org.example.App.refresh")) }
        }
        await #expect(throws: BGTaskSchedulerError(.notRegistered, "")) {
            try await Self.rethrowingCode { try await scheduler.activate() }
        }
    }

    @Test("submitting an identifier without a launch handler is NotPermitted")
    func submitUnknownIdentifier() async {
        let scheduler = makeScheduler()
        scheduler.register(forTaskWithIdentifier: "org.example.App.refresh") { _ in }
        await #expect(throws: BGTaskSchedulerError(.notPermitted, "")) {
            try await Self.rethrowingCode { try await scheduler.submit(BGAppRefreshTaskRequest(identifier: "org.example.App.other")) }
        }
    }

    @Test("with identifiers registered, a call reaches for the bus")
    func reachesForTheBus() async {
        let scheduler = makeScheduler()
        scheduler.register(forTaskWithIdentifier: "org.example.App.refresh") { _ in }
        await #expect(throws: BGTaskSchedulerError(.agentNotRunning, "")) {
            try await Self.rethrowingCode { try await scheduler.submit(BGAppRefreshTaskRequest(identifier: "org.example.App.refresh")) }
        }
        // A failed connection is not kept: the next call tries again.
        #expect(scheduler.state.withLock { $0.connecting == nil && $0.link == nil })
    }

    @Test("Register's options")
    func registerOptions() {
        let identifiers = ["org.example.App.clean", "org.example.App.refresh"]
        let plain = makeScheduler(appID: nil).registerBody(identifiers: identifiers)
        #expect(plain.signatureText == "asa{sv}")
        #expect(plain[0] == identifiers.dbusValue)
        #expect(plain[1] == [String: Variant]().dbusValue)

        let empty = makeScheduler(appID: "").registerBody(identifiers: identifiers)
        #expect(empty[1] == [String: Variant]().dbusValue)

        let all = makeScheduler(appID: "org.example.App", busName: "org.example.App", backgroundOnly: true).registerBody(identifiers: identifiers)
        #expect(all[1] == [
            "app_id": Variant(.string("org.example.App")), "bus_name": Variant(.string("org.example.App")),
            "background_only": Variant(.boolean(true)),
        ].dbusValue)
    }

    /// The agent keeps the `bus_name` an app gave before when `Register` leaves the option out,
    /// and withdraws it only for `""`. The library left it out for `""` as for `nil`, so an
    /// app whose new version dropped D-Bus activation could never withdraw the old name, and
    /// the agent went on starting it by that name.
    @Test("a busName of \"\" is sent, to withdraw the name given before; nil sends none")
    func busNameWithdrawn() {
        let identifiers = ["org.example.App.refresh"]
        let withdrawn = makeScheduler(appID: nil, busName: "").registerBody(identifiers: identifiers)
        #expect(withdrawn[1] == ["bus_name": Variant(.string(""))].dbusValue)
        let kept = makeScheduler(appID: nil, busName: nil).registerBody(identifiers: identifiers)
        #expect(kept[1] == [String: Variant]().dbusValue)
    }

    /// Whether a `Register` counts follows who answered it: an agent restarted while it was on
    /// its way (owner :1.5 → :1.9, the answer from :1.5) has not heard it, so it is sent
    /// again; an agent the Register itself started (no owner seen yet, then :1.7 answering and
    /// its start seen after) is not sent a second one, which it would count as another open.
    @Test("a Register counts only for the agent that answered it")
    func registrationFollowsTheAgent() {
        var s = BGTaskScheduler.State()
        s.agentOwner = ":1.5"
        let restarted = s.agentChanged(to: ":1.9")
        let fromTheOldOne = s.registered(1, answeredBy: ":1.5", owner: s.agentOwner)
        #expect(restarted && !fromTheOldOne && s.registeredGeneration == nil)
        let fromTheNewOne = s.registered(1, answeredBy: ":1.9", owner: s.agentOwner)
        #expect(fromTheNewOne && s.registeredGeneration == 1 && s.registeredWith == ":1.9")

        var activated = BGTaskScheduler.State()
        let answered = activated.registered(1, answeredBy: ":1.7", owner: activated.agentOwner)
        let again = activated.agentChanged(to: ":1.7")
        #expect(answered && !again && activated.registeredGeneration == 1, "the agent that answered needs no second Register")
        // It goes, and a new one comes: that one is sent Register.
        let gone = activated.agentChanged(to: nil)
        let next = activated.agentChanged(to: ":1.8")
        #expect(!gone && next && activated.registeredGeneration == nil)
    }

    // MARK: org.bgpolicy.Client1

    /// A scheduler whose Client1 is served without a bus, with `agent` as the agent's name. The
    /// server holds the scheduler weakly, as a connection does: keep it alive for the whole test.
    func served(_ identifiers: [String] = ["org.example.App.refresh"]) throws -> (BGTaskScheduler, ObjectServer, AsyncStream<BGTask>) {
        let scheduler = makeScheduler()
        let (tasks, launched) = AsyncStream.makeStream(of: BGTask.self)
        for identifier in identifiers {
            scheduler.register(forTaskWithIdentifier: identifier) { task in launched.yield(task) }
        }
        scheduler.state.withLock { $0.agentOwner = Self.agent }
        let server = ObjectServer.detached()
        try server.export([scheduler.clientInterface()], at: BGTaskScheduler.clientPath)
        return (scheduler, server, tasks)
    }

    static func call(_ member: String, _ body: [DBusValue], from sender: String = agent) -> Message {
        var message = Message.methodCall(
            destination: nil, path: BGTaskScheduler.clientPath, interface: BGPolicyNames.clientInterface, member: member, body: body)
        message.sender = sender
        message.serial = 1
        return message
    }

    static func runTask(_ taskID: String, _ identifier: String = "org.example.App.refresh", kind: String = "refresh") -> [DBusValue] {
        [.string(taskID), .string(identifier), .string(kind), .uint32(30),
         ["slice_id": Variant(.string("slice-1")), "deadline": Variant(.int64(1_700_000_030))].dbusValue]
    }

    @Test("RunTask replies at once and runs the launch handler")
    func runTask() async throws {
        let (scheduler, server, tasks) = try served()
        let reply = try #require(await server.handle(Self.call("RunTask", Self.runTask("task-1"))))
        #expect(reply.kind == .methodReturn)
        var launched = tasks.makeAsyncIterator()
        let task = try #require(await launched.next())
        #expect(task.taskID == "task-1")
        #expect(task.identifier == "org.example.App.refresh")
        #expect(task.kind == .refresh)
        #expect(task.deadline.timeIntervalSince1970 == 1_700_000_030)
        #expect(scheduler.state.withLock { $0.running["task-1"] } === task)

        // The same task delivered again is not started twice.
        let again = try #require(await server.handle(Self.call("RunTask", Self.runTask("task-1"))))
        #expect(again.kind == .methodReturn)
        _ = try #require(await server.handle(Self.call("RunTask", Self.runTask("task-2"))))
        #expect(try #require(await launched.next()).taskID == "task-2")
    }

    @Test("RunTask is refused to anyone but the agent")
    func stranger() async throws {
        let (scheduler, server, _) = try served()
        let reply = try #require(await server.handle(Self.call("RunTask", Self.runTask("task-1"), from: ":1.99")))
        #expect(reply.errorName == BGPolicyErrorName.accessDenied.dbusName)
        let expire = try #require(await server.handle(Self.call("ExpireTask", [.string("task-1")], from: ":1.99")))
        #expect(expire.errorName == BGPolicyErrorName.accessDenied.dbusName)
        // Nor is anyone the agent while its name has no owner.
        scheduler.state.withLock { $0.agentOwner = nil }
        let orphan = try #require(await server.handle(Self.call("RunTask", Self.runTask("task-1"))))
        #expect(orphan.errorName == BGPolicyErrorName.accessDenied.dbusName)
        #expect(scheduler.state.withLock { $0.running.isEmpty })
    }

    @Test("RunTask for an identifier without a handler, or of an unknown kind, is refused")
    func refusedDeliveries() async throws {
        let (scheduler, server, _) = try served()
        let unknown = try #require(await server.handle(Self.call("RunTask", Self.runTask("task-1", "org.example.App.other"))))
        #expect(unknown.errorName == BGPolicyErrorName.notPermitted.dbusName)
        let kind = try #require(await server.handle(Self.call("RunTask", Self.runTask("task-2", kind: "teleport"))))
        #expect(kind.errorName == BGPolicyErrorName.invalidArgument.dbusName)
        let signature = try #require(await server.handle(Self.call("RunTask", [.string("task-3")])))
        #expect(signature.kind == .error)
        #expect(scheduler.state.withLock { $0.running.isEmpty })
    }

    /// A content-available wake comes with an empty identifier (nothing was requested) and the
    /// notifier's payload: it runs the content-available handler, which sees the payload
    /// without the agent's own keys. Without one, the wake is refused, saying what to register.
    @Test("a content-available wake runs the content-available handler with its payload")
    func contentAvailable() async throws {
        let (scheduler, server, _) = try served()
        let wake: [DBusValue] = [
            .string("task-9"), .string(""), .string("content-available"), .uint32(30),
            ["slice_id": Variant(.string("slice-1")), "deadline": Variant(.int64(1_700_000_030)),
             "mailbox": Variant(.string("INBOX"))].dbusValue,
        ]
        let refused = try #require(await server.handle(Self.call("RunTask", wake)))
        #expect(refused.errorName == BGPolicyErrorName.notPermitted.dbusName)
        #expect(refused.asError?.message.contains("registerContentAvailableHandler") == true, "\(refused.body)")

        let (woken, wakes) = AsyncStream.makeStream(of: BGTask.self)
        #expect(scheduler.registerContentAvailableHandler { wakes.yield($0) })
        #expect(!scheduler.registerContentAvailableHandler { _ in })
        let reply = try #require(await server.handle(Self.call("RunTask", wake)))
        #expect(reply.kind == .methodReturn)
        var iterator = woken.makeAsyncIterator()
        let task = try #require(await iterator.next())
        #expect(task.kind == .contentAvailable && task.identifier == "" && task.taskID == "task-9")
        #expect(task.payload == ["mailbox": Variant(.string("INBOX"))])
        #expect(task.deadline.timeIntervalSince1970 == 1_700_000_030)
        // A refresh keeps going to its own handler, with no payload.
        _ = try #require(await server.handle(Self.call("RunTask", Self.runTask("task-10"))))
        #expect(scheduler.state.withLock { $0.running["task-10"]?.payload.isEmpty } == true)
    }

    @Test("ExpireTask calls the expiration handler")
    func expire() async throws {
        let (scheduler, server, tasks) = try served()
        defer { withExtendedLifetime(scheduler) {} }
        _ = await server.handle(Self.call("RunTask", Self.runTask("task-1")))
        var launched = tasks.makeAsyncIterator()
        let task = try #require(await launched.next())
        let (expirations, expired) = AsyncStream.makeStream(of: Void.self)
        task.expirationHandler = { expired.yield() }
        #expect(!task.isExpired)
        let reply = try #require(await server.handle(Self.call("ExpireTask", [.string("task-1")])))
        #expect(reply.kind == .methodReturn)
        var iterator = expirations.makeAsyncIterator()
        #expect(await iterator.next() != nil)
        #expect(task.isExpired)
    }

    @Test("a handler set after the warning arrived runs at once")
    func lateHandler() async throws {
        let (scheduler, server, tasks) = try served()
        defer { withExtendedLifetime(scheduler) {} }
        _ = await server.handle(Self.call("RunTask", Self.runTask("task-1")))
        var launched = tasks.makeAsyncIterator()
        let task = try #require(await launched.next())
        _ = await server.handle(Self.call("ExpireTask", [.string("task-1")]))
        #expect(task.isExpired)
        let (expirations, expired) = AsyncStream.makeStream(of: Void.self)
        task.expirationHandler = { expired.yield() }
        var iterator = expirations.makeAsyncIterator()
        #expect(await iterator.next() != nil)
    }

    /// Setting the handler after the warning ran the new one at once even when one had run for
    /// the warning already: a handler extended by wrapping it (`let previous = …; … = {
    /// previous?() }`) ran the original again at every assignment.
    @Test("a handler set after one ran for the warning does not run; a warning is handled once")
    func handlerReplacedAfterWarning() async throws {
        let (scheduler, server, tasks) = try served()
        defer { withExtendedLifetime(scheduler) {} }
        _ = await server.handle(Self.call("RunTask", Self.runTask("task-1")))
        var launched = tasks.makeAsyncIterator()
        let task = try #require(await launched.next())
        let runs = Mutex(0)
        task.expirationHandler = { runs.withLock { $0 += 1 } }
        _ = await server.handle(Self.call("ExpireTask", [.string("task-1")]))
        #expect(task.isExpired)
        for _ in 0..<200 where runs.withLock({ $0 }) == 0 { try await Task.sleep(for: .milliseconds(5)) }
        #expect(runs.withLock { $0 } == 1)

        let original = task.expirationHandler
        task.expirationHandler = { original?() }
        let wrapped = task.expirationHandler
        task.expirationHandler = { wrapped?() }
        _ = await server.handle(Self.call("ExpireTask", [.string("task-1")]))
        try await Task.sleep(for: .milliseconds(200))
        #expect(runs.withLock { $0 } == 1, "the handler ran again for the same warning")
    }

    @Test("an unknown ExpireTask is answered quietly")
    func unknownExpiration() async throws {
        let (scheduler, server, _) = try served()
        let reply = try #require(await server.handle(Self.call("ExpireTask", [.string("nothing")])))
        #expect(reply.kind == .methodReturn)
        #expect(scheduler.state.withLock { $0.earlyExpirations } == ["nothing"])
        for n in 0..<(BGTaskScheduler.earlyExpirationLimit + 5) {
            _ = await server.handle(Self.call("ExpireTask", [.string("x\(n)")]))
        }
        #expect(scheduler.state.withLock { $0.earlyExpirations.count } == BGTaskScheduler.earlyExpirationLimit)
    }

    @Test("completing reports once, and a completed task is not expired")
    func complete() async throws {
        let (scheduler, server, tasks) = try served()
        _ = await server.handle(Self.call("RunTask", Self.runTask("task-1")))
        var launched = tasks.makeAsyncIterator()
        let task = try #require(await launched.next())
        task.expirationHandler = { Issue.record("a completed task was expired") }
        let first = task.setTaskCompleted(success: true, result: .newData)
        let second = task.setTaskCompleted(success: false)
        #expect(first == second)
        #expect(task.isCompleted)
        // Nothing answers at `nowhere`: the report fails, and says so.
        let error = await #expect(throws: BGTaskSchedulerError.self) { try await first.value }
        #expect(error?.code == .agentNotRunning)
        #expect(scheduler.state.withLock { $0.running.isEmpty })
        _ = await server.handle(Self.call("ExpireTask", [.string("task-1")]))
        #expect(!task.isExpired)
    }

    /// Compares errors by code only: the messages are for people.
    static func rethrowingCode(_ body: () async throws -> Void) async throws {
        do {
            try await body()
        } catch let error as BGTaskSchedulerError {
            throw BGTaskSchedulerError(error.code, "")
        }
    }
}
