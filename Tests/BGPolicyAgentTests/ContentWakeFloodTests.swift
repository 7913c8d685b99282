@testable import BGPolicyAgent
import BGPolicyCore
import BGPolicyDBus
import BGPolicyStore
import BGPolicyTestSupport
import Glibc
import Synchronization
import Testing

/// Each `NotifyContentAvailable` queued a write of the app's wake, and the app counted as
/// having a change to its requests on its way while any was queued (`saving`): senders that
/// kept replacing a wake (a replacement spends no token) held every request of the app back,
/// for as long as they went on, one write each.
@Suite("Replacing a wake over and over neither holds the app's requests nor writes each time")
struct ContentWakeFloodTests {
    @Test func writesCoalesceAndRequestsGoOn() async throws {
        let store = try TaskStore.inMemory()
        let harness = try await TestEngine(store: store)
        defer { harness.close() }
        let engine = harness.engine
        let app = try await GatedApp(on: harness.bus, holds: { _ in false })
        defer { app.close() }
        let caller = app.connection.uniqueName
        let identifier = "org.example.Feeds.refresh"
        let appID = try await harness.registerWithARefreshLater("org.example.Feeds", caller: caller)

        // The disk holds the writer up: the first wake's write waits.
        let gate = Gate()
        await engine.writer.enqueue { gate.wait() }
        let sender = harness.connection.uniqueName
        let first = Task {
            try await engine.notifyContentAvailable(caller: sender, app: appID.rawValue, payload: ["n": Variant(Int32(0))])
        }
        while await engine.contentWakes.wake(for: appID) == nil { await Task.yield() }

        // Replacements meanwhile are answered without a write of their own each (queued, the
        // writes would wait for the gate, and so would these calls).
        let answered = Mutex(false)
        let replacements = Task {
            for n in 1...20 {
                try await engine.notifyContentAvailable(caller: sender, app: appID.rawValue, payload: ["n": Variant(Int32(n))])
            }
            answered.withLock { $0 = true }
        }
        let deadline = ContinuousClock.now + .seconds(5)
        while !answered.withLock({ $0 }), ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(5)) }
        #expect(answered.withLock { $0 }, "the replacements waited for writes of their own")
        #expect(await engine.writer.isIdle == false, "the first write still waits")
        // The app's request is not held by the wake's write.
        await #expect(throws: Never.self) { try await engine.simulateLaunch(app: appID.rawValue, identifier: identifier) }
        #expect(app.runTasks == 1)

        gate.open()
        try await first.value
        try await replacements.value
        let stored = try #require(try store.contentWakes().first { $0.appID == appID })
        let payload = TaskEngine.decodeContentPayload(stored.payload, encoding: stored.payloadEncoding)
        #expect(payload == ["n": Variant(Int32(20))], "the newest wake is the one stored")
        #expect(stored.notificationCount == 21)
    }
}
