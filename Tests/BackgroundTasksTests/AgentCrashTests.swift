@testable import BackgroundTasks
import BGPolicyCore
import BGPolicyDBus
import BGPolicyTestSupport
import Foundation
import Synchronization
import Testing

/// The scheduler with bgpolicyd itself (`RealAgent`): going away under it, ending the slices
/// of tasks the app does not complete, and what its `Register` leaves the agent with.
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

    /// A refresh launched and a background task begun, each with an expiration handler that
    /// notes which ran; then `end()` (the agent or the bus going away under the app) must run
    /// both, and leave the scheduler with nothing running.
    static func expectRunningWorkExpires(
        _ scheduler: BGTaskScheduler, on agent: RealAgent, _ delivered: inout AsyncStream<BGTask>.Iterator,
        when end: () async throws -> Void
    ) async throws -> (task: BGTask, warned: Warned) {
        let task = try await launchRefresh(scheduler, on: agent, &delivered)
        let warned = Warned()
        task.expirationHandler = { warned.note("task") }
        _ = try await scheduler.beginBackgroundTask(name: "save") { warned.note("background task") }

        try await end()
        try await waitUntil("both expiration handlers to run") { warned.all.count == 2 }
        #expect(Set(warned.all) == ["task", "background task"])
        #expect(task.isExpired)
        #expect(scheduler.state.withLock { $0.running.isEmpty && $0.backgroundTasks.isEmpty })
        return (task, warned)
    }

    /// Which expiration handlers ran, in order.
    final class Warned: Sendable {
        private let names = Mutex<[String]>([])
        func note(_ name: String) { names.withLock { $0.append(name) } }
        var all: [String] { names.withLock { $0 } }
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

        let (task, warned) = try await Self.expectRunningWorkExpires(scheduler, on: agent, &delivered) { try await agent.kill() }
        let late = await #expect(throws: BGTaskSchedulerError.self) { try await task.setTaskCompleted(success: false).value }
        #expect(late?.code == .agentNotRunning)

        // The next agent: the app registers again by itself, and what it launches runs on.
        try await agent.start()
        try await waitUntil("the app to register again") {
            try await agent.app(Self.app)?["connected"] == Variant(.boolean(true))
        }
        let next = try await Self.launchRefresh(scheduler, on: agent, &delivered)
        next.expirationHandler = { warned.note("next task") }
        try await Task.sleep(for: .milliseconds(500))
        #expect(!next.isExpired && warned.all.count == 2)
        try await next.setTaskCompleted(success: true, result: .noData).value
        #expect(try await agent.history(of: Self.app).map(\.event).suffix(2) == ["delivered", "completed"])
    }

    /// The app's connection to the bus lost (the session bus daemon died or restarted): the
    /// agent ended the app's tasks with it, as a `disconnect()` or an agent's crash ends them.
    /// The library kept them running, their expiration handlers never called, until a later
    /// connection dropped them without a word.
    @Test("a task and a background task of a connection the bus lost are expired")
    func lostConnectionsTasksExpire() async throws {
        let agent = try await RealAgent()
        let (scheduler, tasks) = try await Self.activatedScheduler(on: agent)
        var delivered = tasks
        defer { scheduler.disconnect() }

        _ = try await Self.expectRunningWorkExpires(scheduler, on: agent, &delivered) { agent.bus.crash() }
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
        // Time for the call to reach the bus, on a machine other suites load (at 300 ms it once
        // had not: sent after the kill, it started an agent afresh, which answered).
        try await Task.sleep(for: .seconds(1))
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

    /// An agent restarted on a full disk refuses the app's `Register` with `Failed` (it could
    /// not store it; nothing changed). The library sent it once, and the agent could not launch
    /// the app, nor learn from it, until the app's next call. It is sent again after 1 s, 2 s,
    /// …, so the app is registered soon after there is room; and no more once it disconnects.
    @Test("a Register a restarted agent refused for a full disk is sent again until it is taken, and not after a disconnect",
          .enabled("needs a tmpfs for the agent's state (root)") { FullDisk.canMount })
    func reregisteredAfterAFullDisk() async throws {
        let agent = try await RealAgent(start: false)
        let disk = try FullDisk(at: agent.directory.appendingPathComponent("state"))
        defer { disk.unmount() }
        try await agent.start()
        let (scheduler, _) = try await Self.activatedScheduler(on: agent)
        defer { scheduler.disconnect() }
        func connected() async throws -> Bool { try await agent.app(Self.app)?["connected"] == Variant(.boolean(true)) }

        /// Stops the agent cleanly (which leaves nothing to write at its start), fills the disk,
        /// starts it, and returns once the scheduler's Register was refused.
        func restartOnAFullDisk() async throws -> Int {
            try await agent.stop()
            let before = scheduler.state.withLock { $0.registrationAttempts }
            try disk.fill()
            try await agent.start()
            try await waitUntil("the Register to be refused") {
                scheduler.state.withLock { $0.registrationAttempts > before && $0.registering == nil && $0.registeredGeneration == nil }
            }
            #expect(agent.log.contains("full"), "\(agent.log.suffix(2000))")
            return scheduler.state.withLock { $0.registrationAttempts }
        }

        let refused = try await restartOnAFullDisk()
        #expect(try await !connected())
        try disk.free()
        try await waitUntil("the app to be registered again", seconds: 10) { try await connected() }
        let attempts = scheduler.state.withLock { $0.registrationAttempts }
        #expect(attempts - refused <= 2, "\(attempts - refused) more Registers: 1 s apart, then 2 s")
        try await Task.sleep(for: .milliseconds(1500))
        #expect(scheduler.state.withLock { $0.registrationAttempts } == attempts, "none once it is taken")

        // Refused again; the app disconnects: no more tries.
        let refusedAgain = try await restartOnAFullDisk()
        scheduler.disconnect()
        #expect(scheduler.state.withLock { $0.reregistration == nil })
        try await Task.sleep(for: .milliseconds(3500))
        #expect(scheduler.state.withLock { $0.registrationAttempts } == refusedAgain)
        try disk.free()
    }

    /// The agent closes the tasks and background tasks of a connection that leaves the bus
    /// (`vanished`). `disconnect()` dropped them in the app without a word: the work went on,
    /// unwarned, and completing it connected and registered again (an open, to the agent),
    /// only to be told the task was unknown.
    @Test("disconnect() runs the expiration handlers of running tasks and background tasks; completing them does not connect")
    func disconnectExpiresRunningWork() async throws {
        let agent = try await RealAgent()
        let (scheduler, tasks) = try await Self.activatedScheduler(on: agent)
        var delivered = tasks
        defer { scheduler.disconnect() }

        let task = try await Self.launchRefresh(scheduler, on: agent, &delivered)
        /// What the handlers' completions threw, by what they completed.
        final class Completions: Sendable {
            let errors = Mutex<[String: BGTaskSchedulerError]>([:])
            let token = Mutex<BGBackgroundTaskIdentifier?>(nil)
            func record(_ what: String, _ body: @escaping @Sendable () async throws -> Void) {
                Task {
                    do {
                        try await body()
                        Issue.record("\(what) was completed at the agent")
                    } catch {
                        errors.withLock { $0[what] = BGTaskSchedulerError(error) }
                    }
                }
            }
        }
        let completions = Completions()
        task.expirationHandler = {
            completions.record("task") { try await task.setTaskCompleted(success: false, result: .failed).value }
        }
        let identifier = try await scheduler.beginBackgroundTask(name: "save") {
            completions.record("background task") {
                try await scheduler.endBackgroundTask(try #require(completions.token.withLock { $0 }))
            }
        }
        completions.token.withLock { $0 = identifier }

        scheduler.disconnect()
        try await waitUntil("both expiration handlers to complete their work") { completions.errors.withLock { $0.count } == 2 }
        #expect(task.isExpired && task.isCompleted)
        for (what, error) in completions.errors.withLock({ $0 }) {
            #expect(error.code == .unknownTask, "\(what): \(error)")
        }
        #expect(scheduler.state.withLock { $0.link == nil && $0.connecting == nil }, "completing them connected again")
        try await waitUntil("the agent to close the slice and the background task") {
            try await agent.history(of: Self.app).map(\.event).suffix(2) == ["vanished", "background-task-ended"]
        }
        #expect(try await agent.app(Self.app)?["connected"] == Variant(.boolean(false)))
    }

    /// `systemctl --user stop bgpolicyd` warns the running work (`ExpireTask`), and the
    /// expiration handlers report its end. The library sent those reports, and the `Register`
    /// before them, for the bus to start the agent when it is not running: once the agent had
    /// left, the bus started a new one, undoing the user's stop, only for it to answer that it
    /// knew no such task.
    @Test("completing a task and ending a background task after the agent stopped do not start it again; submit does")
    func endsReportedAfterAStopDoNotStartTheAgent() async throws {
        let agent = try await RealAgent(activatable: true)
        let (scheduler, tasks) = try await Self.activatedScheduler(on: agent)
        var delivered = tasks
        defer { scheduler.disconnect() }

        let task = try await Self.launchRefresh(scheduler, on: agent, &delivered)
        let warned = Warned()
        task.expirationHandler = { warned.note("task") }
        let token = try await scheduler.beginBackgroundTask(name: "save") { warned.note("background task") }
        try await agent.stop()
        try await waitUntil("both expiration handlers to run") { warned.all.count == 2 }
        try await waitUntil("the scheduler to see the agent gone") { scheduler.state.withLock { $0.agentOwner == nil } }

        let start = ContinuousClock.now
        let completion = await #expect(throws: BGTaskSchedulerError.self) {
            try await task.setTaskCompleted(success: false, result: .failed).value
        }
        #expect(completion?.code == .agentNotRunning, "\(String(describing: completion))")
        let end = await #expect(throws: BGTaskSchedulerError.self) { try await scheduler.endBackgroundTask(token) }
        #expect(end?.code == .agentNotRunning, "\(String(describing: end))")
        #expect(ContinuousClock.now - start < .seconds(2), "the calls waited for an agent to start")
        #expect(agent.activations == 0, "the bus started the agent again")
        #expect(try await agent.owner() == nil)
        #expect(task.isCompleted)
        #expect(scheduler.state.withLock { $0.running.isEmpty && $0.backgroundTasks.isEmpty })

        // The bus can start it, and does for a call that asks the agent for new work.
        try await scheduler.submit(BGAppRefreshTaskRequest(identifier: Self.refresh, earliestBeginDate: Date(timeIntervalSinceNow: 3600)))
        #expect(agent.activations == 1)
        #expect(try await agent.pending(of: Self.app) == [Self.refresh])
        try await agent.stopActivated()
    }

    /// Calls share the `Register` in flight. One a completion sent, which may not start the
    /// agent, fails when it is not running; a submit that waited for it sends its own, which
    /// starts the agent, rather than fail with the completion.
    @Test("a submit that waits for a completion's Register starts the agent all the same")
    func submitBehindACompletionsRegisterStartsTheAgent() async throws {
        let agent = try await RealAgent(activatable: true)
        let (scheduler, tasks) = try await Self.activatedScheduler(on: agent)
        var delivered = tasks
        defer { scheduler.disconnect() }
        let task = try await Self.launchRefresh(scheduler, on: agent, &delivered)
        try await agent.stop()
        try await waitUntil("the scheduler to see the agent gone") { scheduler.state.withLock { $0.agentOwner == nil } }

        // The bus held, so that the submit finds the completion's Register still in flight.
        agent.bus.pause()
        let report = task.setTaskCompleted(success: true)
        try await waitUntil("the completion's Register to be sent") {
            scheduler.state.withLock { $0.registering.map { !$0.startsAgent } ?? false }
        }
        let submit = Task {
            try await scheduler.submit(BGAppRefreshTaskRequest(identifier: Self.refresh, earliestBeginDate: Date(timeIntervalSinceNow: 3600)))
        }
        try await Task.sleep(for: .milliseconds(200))
        agent.bus.resume()
        let error = await #expect(throws: BGTaskSchedulerError.self) { try await report.value }
        #expect(error?.code == .agentNotRunning, "\(String(describing: error))")
        try await submit.value
        #expect(agent.activations == 1)
        #expect(try await agent.pending(of: Self.app) == [Self.refresh])
        try await agent.stopActivated()
    }

    /// The agent keeps the `bus_name` an app gave when a later `Register` leaves the option out,
    /// and withdraws it for `""`. The library sent nothing for `busName: ""`, so an app could
    /// never withdraw its name: a version that dropped D-Bus activation was still started by
    /// the old one.
    @Test("busName \"\" withdraws the name an earlier run registered; nil keeps it")
    func busNameWithdrawn() async throws {
        let agent = try await RealAgent()
        /// The app's `bus_name` at the agent after a run with `busName`, which ends once the
        /// agent has seen it go (an unverified app id is held by one live connection at a time).
        func registered(busName: String?) async throws -> Variant? {
            let scheduler = BGTaskScheduler(appID: Self.app, busName: busName, bus: agent.address)
            scheduler.register(forTaskWithIdentifier: Self.refresh) { _ in }
            try await scheduler.activate()
            let name = try await agent.app(Self.app)?["bus_name"]
            scheduler.disconnect()
            try await waitUntil("the agent to see the app go") {
                try await agent.app(Self.app)?["connected"] == Variant(.boolean(false))
            }
            return name
        }
        #expect(try await registered(busName: Self.app) == Variant(.string(Self.app)))
        #expect(try await registered(busName: nil) == Variant(.string(Self.app)), "no busName keeps the earlier one")
        #expect(try await registered(busName: "") == nil, "\"\" withdraws it")
        #expect(try await registered(busName: nil) == nil)
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

/// A small tmpfs for the agent's state (`XDG_STATE_HOME`), full when a filler file takes every
/// free block: SQLite then sees ENOSPC, and the agent refuses what it cannot store (`Failed`).
struct FullDisk {
    let mountPoint: URL
    var filler: URL { mountPoint.appendingPathComponent("filler") }

    /// Whether this process may mount a tmpfs (it needs root, or CAP_SYS_ADMIN).
    static let canMount: Bool = {
        let probe = FileManager.default.temporaryDirectory.appendingPathComponent("bgpolicy-tmpfs-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: probe) }
        guard (try? FileManager.default.createDirectory(at: probe, withIntermediateDirectories: true)) != nil,
            (try? run("/usr/bin/mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", probe.path)) != nil
        else { return false }
        _ = try? run("/usr/bin/umount", "-l", probe.path)
        return true
    }()

    init(at mountPoint: URL) throws {
        self.mountPoint = mountPoint
        try FileManager.default.createDirectory(at: mountPoint, withIntermediateDirectories: true)
        try Self.run("/usr/bin/mount", "-t", "tmpfs", "-o", "size=4m,mode=0700", "tmpfs", mountPoint.path)
    }

    func fill() throws {
        let fd = open(filler.path, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
        guard fd >= 0 else { throw POSIXError(.init(rawValue: errno) ?? .EIO) }
        defer { close(fd) }
        for size in [1 << 20, 1 << 16, 1 << 12, 1] {
            let chunk = [UInt8](repeating: 0, count: size)
            while chunk.withUnsafeBytes({ write(fd, $0.baseAddress, size) }) == size {}
        }
    }

    func free() throws {
        try FileManager.default.removeItem(at: filler)
    }

    func unmount() {
        _ = try? Self.run("/usr/bin/umount", "-l", mountPoint.path)
    }

    @discardableResult
    static func run(_ arguments: String...) throws -> Int32 {
        let process = try ChildProcess(arguments[0], Array(arguments.dropFirst()))
        process.waitForExit()
        guard let code = process.exitCode, code == 0 else { throw CocoaError(.fileWriteUnknown) }
        return code
    }
}
