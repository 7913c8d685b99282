@testable import BackgroundTasks
import BGPolicyCore
import BGPolicyDBus
import BGPolicyTestSupport
import Foundation
import Synchronization
import Testing

/// The scheduler on a private bus, with a test connection in the agent's place: what the app
/// sees of an agent that starts (D-Bus activation, or a restart) and calls it at once.
@Suite("BGTaskScheduler and an agent that starts", .timeLimit(.minutes(1)))
struct AgentStartTests {
    static let identifier = "org.example.App.refresh"

    /// The bus sends the app the agent's `NameOwnerChanged` before anything the agent sends
    /// after taking its name, so a `RunTask` right behind it comes from the owner the app has
    /// heard of. The library learned the owner on a task of its own, a moment after its
    /// connection's thread had read the signal, so such a call could be refused (`AccessDenied`).
    /// Each round starts a new "agent" that asks for the name and calls `RunTask` without
    /// waiting for anything in between.
    @Test("a RunTask that follows the agent's taking its name is run, round after round")
    func runTaskRightAfterTheNameIsTaken() async throws {
        let bus = try PrivateBus()
        let address = DBusConnection.Bus.address(bus.address)
        let launched = Mutex<[String]>([])
        let scheduler = BGTaskScheduler(appID: "org.example.App", bus: address)
        scheduler.register(forTaskWithIdentifier: Self.identifier) { task in
            launched.withLock { $0.append(task.taskID) }
        }
        // No agent yet: the call fails, and leaves the app connected and following the name.
        await #expect(throws: BGTaskSchedulerError.self) {
            try await scheduler.submit(BGAppRefreshTaskRequest(identifier: Self.identifier))
        }
        let app = try #require(scheduler.state.withLock { $0.link?.connection.uniqueName })

        let rounds = 200
        var refused: [String] = []
        // The bus's own view of the name, between rounds.
        let observer = try await DBusConnection.connect(to: address)
        defer { observer.close() }
        for round in 0..<rounds {
            let agent = try await DBusConnection.connect(to: address)
            defer { agent.close() }
            var take = Message.methodCall(
                destination: "org.freedesktop.DBus", path: try ObjectPath("/org/freedesktop/DBus"),
                interface: "org.freedesktop.DBus", member: "RequestName",
                body: [.string(BGPolicyNames.busName), .uint32(0)])
            take.noReplyExpected = true
            try agent.send(take)
            let runTask = Message.methodCall(
                destination: app, path: try ObjectPath(BGPolicyNames.clientObjectPath),
                interface: BGPolicyNames.clientInterface, member: "RunTask",
                body: [.string("t\(round)"), .string(Self.identifier), .string("refresh"), .uint32(30), [String: Variant]().dbusValue])
            do {
                _ = try await agent.call(runTask, timeout: .seconds(10))
            } catch {
                refused.append("round \(round): \(error)")
            }
            agent.close()
            // The name is free again before the next round's agent asks for it (else that
            // agent's request would wait in the queue, and its RunTask rightly be refused).
            var polls = 0
            while try await observer.nameOwner(of: BGPolicyNames.busName) != nil, polls < 10_000 {
                polls += 1
                try await Task.sleep(for: .milliseconds(1))
            }
        }
        #expect(refused.isEmpty, "\(refused.count) of \(rounds) refused; first: \(refused.first ?? "")")
        try await waitUntil("every launch handler to run") { launched.withLock { $0.count } == rounds }
        #expect(Set(launched.withLock { $0 }) == Set((0..<rounds).map { "t\($0)" }))

        // Anyone else is still refused, right after an agent took the name as before.
        let agent = try await DBusConnection.connect(to: address)
        let stranger = try await DBusConnection.connect(to: address)
        defer {
            agent.close()
            stranger.close()
        }
        #expect(try await agent.requestName(BGPolicyNames.busName) == .primaryOwner)
        let fromStranger = Message.methodCall(
            destination: app, path: try ObjectPath(BGPolicyNames.clientObjectPath),
            interface: BGPolicyNames.clientInterface, member: "RunTask",
            body: [.string("x"), .string(Self.identifier), .string("refresh"), .uint32(30), [String: Variant]().dbusValue])
        await #expect {
            _ = try await stranger.call(fromStranger, timeout: .seconds(10))
        } throws: { error in
            guard case DBusError.remote(let name, _) = error else { return false }
            return name == BGPolicyNames.errorPrefix + "AccessDenied"
        }
        scheduler.disconnect()
    }

    /// Polls `condition` every 10 ms for up to 10 s.
    func waitUntil(_ what: String, _ condition: () -> Bool) async throws {
        for _ in 0..<1000 {
            if condition() { return }
            try await Task.sleep(for: .milliseconds(10))
        }
        Issue.record("timed out waiting for \(what)")
        throw CancellationError()
    }
}
