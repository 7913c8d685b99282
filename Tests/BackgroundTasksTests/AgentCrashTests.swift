@testable import BackgroundTasks
import BGPolicyCore
import BGPolicyDBus
import BGPolicyTestSupport
import Foundation
import Synchronization
import Testing

/// The scheduler with bgpolicyd itself (`RealAgent`): going away under it, and ending the
/// slices of tasks the app does not complete.
@Suite("BGTaskScheduler with bgpolicyd itself", .serialized, .timeLimit(.minutes(1)))
struct AgentCrashTests {
    static let app = "org.example.Crash"
    static let refresh = "org.example.Crash.refresh"

    /// The app's scheduler on `agent`'s bus, activated, and the tasks its refresh handler is
    /// handed.
    static func activatedScheduler(on agent: RealAgent) async throws -> (BGTaskScheduler, AsyncStream<BGTask>.Iterator) {
        let scheduler = BGTaskScheduler(appID: app, bus: agent.address)
        let (tasks, launched) = AsyncStream.makeStream(of: BGTask.self)
        scheduler.register(forTaskWithIdentifier: refresh) { launched.yield($0) }
        try await scheduler.activate()
        return (scheduler, tasks.makeAsyncIterator())
    }

    /// Submits the refresh for an hour ahead, so that nothing but `SimulateLaunch` runs it,
    /// launches it now, and returns the task the app was handed.
    static func launchRefresh(
        _ scheduler: BGTaskScheduler, on agent: RealAgent, _ delivered: inout AsyncStream<BGTask>.Iterator
    ) async throws -> BGTask {
        try await scheduler.submit(BGAppRefreshTaskRequest(identifier: refresh, earliestBeginDate: Date(timeIntervalSinceNow: 3600)))
        try await agent.simulateLaunch(app, refresh)
        return try #require(await delivered.next())
    }

    /// An agent that stops cleanly sends `ExpireTask` for the slices it ends; one that is killed
    /// cannot, and records them `interrupted` at its next start. The library kept such a task
    /// running, its expiration handler never called, and a background task the same: the app
    /// worked on, unwarned, for an agent that had forgotten it.
    @Test("a task and a background task of an agent that was killed are expired; the next agent's are not")
    func killedAgentsTasksExpire() async throws {
        let agent = try await RealAgent()
        let (scheduler, tasks) = try await Self.activatedScheduler(on: agent)
        var delivered = tasks
        defer { scheduler.disconnect() }

        let task = try await Self.launchRefresh(scheduler, on: agent, &delivered)
        let warned = Mutex<[String]>([])
        task.expirationHandler = { warned.withLock { $0.append("task") } }
        _ = try await scheduler.beginBackgroundTask(name: "save") { warned.withLock { $0.append("background task") } }

        try await agent.kill()
        try await waitUntil("both expiration handlers to run") { warned.withLock { $0.count } == 2 }
        #expect(Set(warned.withLock { $0 }) == ["task", "background task"])
        #expect(task.isExpired)
        #expect(scheduler.state.withLock { $0.running.isEmpty && $0.backgroundTasks.isEmpty })
        let late = await #expect(throws: BGTaskSchedulerError.self) { try await task.setTaskCompleted(success: false).value }
        #expect(late?.code == .agentNotRunning)

        // The next agent: the app registers again by itself, and what it launches runs on.
        try await agent.start()
        try await waitUntil("the app to register again") {
            try await agent.app(Self.app)?["connected"] == Variant(.boolean(true))
        }
        let next = try await Self.launchRefresh(scheduler, on: agent, &delivered)
        next.expirationHandler = { warned.withLock { $0.append("next task") } }
        try await Task.sleep(for: .milliseconds(500))
        #expect(!next.isExpired && warned.withLock { $0.count } == 2)
        try await next.setTaskCompleted(success: true, result: .noData).value
        #expect(try await agent.history(of: Self.app).map(\.event).suffix(2) == ["delivered", "completed"])
    }

    /// The bus answers a call whose callee left without replying with `NoReply`, "Message
    /// recipient disconnected from message bus without replying". The library said "bgpolicyd
    /// did not answer in time", which sends a person looking for a slow agent.
    @Test("a call the agent stopped before answering says so")
    func agentGoneMidCall() async throws {
        let agent = try await RealAgent()
        let scheduler = BGTaskScheduler(appID: Self.app, bus: agent.address)
        defer { scheduler.disconnect() }
        scheduler.register(forTaskWithIdentifier: Self.refresh) { _ in }
        try await scheduler.activate()

        agent.signal(SIGSTOP)
        let call = Task { try await scheduler.submit(BGAppRefreshTaskRequest(identifier: Self.refresh)) }
        try await Task.sleep(for: .milliseconds(300))
        try await agent.kill()
        let error = await #expect(throws: BGTaskSchedulerError.self) { try await call.value }
        #expect(error?.code == .other)
        #expect(error?.message.hasPrefix("bgpolicyd stopped before it answered") == true, "\(error?.message ?? "")")
        #expect(error?.message.contains("journalctl --user -u bgpolicyd") == true)
    }

    /// Calls that need the agent share one `Register` in flight. Each waited for it whatever
    /// became of the caller: a cancelled task waited on, up to 25 s for an agent that does not
    /// answer. A cancelled one now returns at once, and the Register goes on for the others.
    @Test("a call cancelled while it waits for a shared Register returns at once; the others are registered")
    func cancelledWhileRegistering() async throws {
        let agent = try await RealAgent()
        let (scheduler, _) = try await Self.activatedScheduler(on: agent)
        defer { scheduler.disconnect() }
        // A second identifier: the next call sends Register again, to an agent that is stopped.
        scheduler.register(forTaskWithIdentifier: "org.example.Crash.clean") { _ in }
        let attempts = scheduler.state.withLock { $0.registrationAttempts }
        agent.signal(SIGSTOP)
        defer { agent.signal(SIGCONT) }

        let first = Task { try await scheduler.activate() }
        try await waitUntil("the Register to be sent") { scheduler.state.withLock { $0.registering != nil } }
        let second = Task {
            try await scheduler.submit(BGAppRefreshTaskRequest(identifier: Self.refresh, earliestBeginDate: Date(timeIntervalSinceNow: 3600)))
        }
        try await Task.sleep(for: .milliseconds(300))
        let firstEnded = Mutex<Result<String, any Error>?>(nil)
        let secondEnded = Mutex<Bool>(false)
        Task { let result = await first.result; firstEnded.withLock { $0 = result } }
        Task { _ = await second.result; secondEnded.withLock { $0 = true } }

        // The call that sent Register is cancelled: it returns, the Register stays in flight.
        first.cancel()
        try await waitUntil("the cancelled call to return", seconds: 2) { firstEnded.withLock { $0 != nil } }
        let error = try #require(firstEnded.withLock { r -> BGTaskSchedulerError? in
            guard case .failure(let error) = r else { return nil }
            return error as? BGTaskSchedulerError
        })
        #expect(error.code == .other && error.message == "the call was cancelled", "\(error)")
        #expect(!secondEnded.withLock { $0 } && scheduler.state.withLock { $0.registering != nil })

        // The agent answers: the other call is registered and submits, with the one Register.
        agent.signal(SIGCONT)
        try await second.value
        #expect(scheduler.state.withLock { $0.registrationAttempts } == attempts + 1)
        #expect(scheduler.state.withLock { $0.registeredGeneration == $0.generation })
        #expect(try await agent.pending(of: Self.app) == [Self.refresh])
    }

    /// The same for the connection the first calls share, on a bus slow to answer `Hello`.
    @Test("a call cancelled while the connection is being opened returns at once; the others connect")
    func cancelledWhileConnecting() async throws {
        let agent = try await RealAgent()
        let scheduler = BGTaskScheduler(appID: Self.app, bus: agent.address)
        defer { scheduler.disconnect() }
        scheduler.register(forTaskWithIdentifier: Self.refresh) { _ in }
        agent.bus.pause()
        defer { agent.bus.resume() }

        let first = Task { try await scheduler.activate() }
        let second = Task { try await scheduler.activate() }
        try await waitUntil("the connection to be under way") { scheduler.state.withLock { $0.connecting != nil } }
        try await Task.sleep(for: .milliseconds(300))
        let ended = Mutex<Result<String, any Error>?>(nil)
        Task { let result = await first.result; ended.withLock { $0 = result } }
        first.cancel()
        try await waitUntil("the cancelled call to return", seconds: 2) { ended.withLock { $0 != nil } }
        #expect(throws: BGTaskSchedulerError(.other, "the call was cancelled")) { try ended.withLock { $0 }?.get() }

        agent.bus.resume()
        #expect(try await second.value == Self.app)
        #expect(try await agent.app(Self.app)?["connected"] == Variant(.boolean(true)))
    }

    /// A task the app never completes ends at its deadline at the agent (`expired`). The
    /// scheduler kept it in `running` for good, with the handlers it holds: one more for every
    /// task an app forgot to complete, for as long as it runs.
    @Test("a task never completed is forgotten once its slice is over")
    func neverCompleted() async throws {
        let agent = try await RealAgent(config: RealAgent.immediateWindows + "[slices]\nrefresh = 2s\nexpiration_warning = 1s\n")
        let (scheduler, tasks) = try await Self.activatedScheduler(on: agent)
        var delivered = tasks
        defer { scheduler.disconnect() }

        let forgotten = try await Self.launchRefresh(scheduler, on: agent, &delivered)
        try await waitUntil("the agent to record it expired", seconds: 15) {
            try await agent.history(of: Self.app).last?.event == "expired"
        }
        try await Task.sleep(until: .now + .seconds(forgotten.deadline.addingTimeInterval(BGTaskScheduler.endedTaskGrace + 1).timeIntervalSinceNow))
        let next = try await Self.launchRefresh(scheduler, on: agent, &delivered)
        #expect(scheduler.state.withLock { $0.running.keys.sorted() } == [next.taskID])
        try await next.setTaskCompleted(success: true).value
        #expect(scheduler.state.withLock { $0.running.isEmpty })
    }
}
