@testable import BackgroundTasks
import BGPolicyCore
import BGPolicyDBus
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
