@testable import BackgroundTasks
import BGPolicyCore
import BGPolicyDBus
import Foundation
import Synchronization
import Testing

/// The scheduler with bgpolicyd itself (`RealAgent`) going away under it.
@Suite("BGTaskScheduler and an agent that crashes", .serialized, .timeLimit(.minutes(1)))
struct AgentCrashTests {
    static let app = "org.example.Crash"
    static let refresh = "org.example.Crash.refresh"

    /// An agent that stops cleanly sends `ExpireTask` for the slices it ends; one that is killed
    /// cannot, and records them `interrupted` at its next start. The library kept such a task
    /// running, its expiration handler never called, and a background task the same: the app
    /// worked on, unwarned, for an agent that had forgotten it.
    @Test("a task and a background task of an agent that was killed are expired; the next agent's are not")
    func killedAgentsTasksExpire() async throws {
        let agent = try await RealAgent()
        let scheduler = BGTaskScheduler(appID: Self.app, bus: agent.address)
        defer { scheduler.disconnect() }
        let (tasks, launched) = AsyncStream.makeStream(of: BGTask.self)
        scheduler.register(forTaskWithIdentifier: Self.refresh) { launched.yield($0) }
        try await scheduler.activate()
        var delivered = tasks.makeAsyncIterator()
        let later = BGAppRefreshTaskRequest(identifier: Self.refresh, earliestBeginDate: Date(timeIntervalSinceNow: 3600))

        try await scheduler.submit(later)
        try await agent.simulateLaunch(Self.app, Self.refresh)
        let task = try #require(await delivered.next())
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
        try await scheduler.submit(later)
        try await agent.simulateLaunch(Self.app, Self.refresh)
        let next = try #require(await delivered.next())
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
}
