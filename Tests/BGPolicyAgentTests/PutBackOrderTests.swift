@testable import BGPolicyAgent
import BGPolicyCore
import BGPolicyDBus
import BGPolicyStore
import BGPolicyTestSupport
import Glibc
import Testing

/// A request put back after its `RunTask` failed is written on the executor at once. A
/// `CancelAll` of the app's other requests, its delete queued on the store writer behind a
/// write the disk held up, landed after it and deleted it from disk: memory kept it pending,
/// and the next start had lost it.
@Suite("A request put back is not deleted by a cancellation queued before it")
struct PutBackOrderTests {
    @Test func theQueuedCancelAllLeavesThePutBackRequest() async throws {
        let store = try TaskStore.inMemory()
        let harness = try await TestEngine(store: store)
        defer { harness.close() }
        let engine = harness.engine

        // The app's RunTask waits for the gate, then fails as the bus would (not the app's own answer).
        let app = try await GatedApp(on: harness.bus, answer: { _ in
            throw DBusError.remote(name: "org.freedesktop.DBus.Error.NoReply", message: "no reply")
        })
        defer { app.close() }
        let caller = app.connection.uniqueName
        var options = TaskEngine.RegisterOptions()
        options.appID = "org.example.Order"
        let (sent, other) = ("org.example.Order.sent", "org.example.Order.other")
        let appID = try await engine.register(caller: caller, pid: UInt32(getpid()), identifiers: [sent, other], options: options)
        var later = TaskEngine.SubmitOptions()
        later.earliestBegin = Int64(time(nil)) + 3600
        try await engine.submit(caller: caller, identifier: sent, kind: "refresh", options: later)
        let launched = try await engine.pendingRequests(caller: caller)
        try await engine.submit(caller: caller, identifier: other, kind: "processing", options: later)

        let delivery = Task {
            try await engine.deliver(Launch(appID: appID, requests: ArraySlice(launched), sliceLength: .seconds(30)), simulated: true)
        }
        try await app.waitForRunTask()

        // The disk holds the writer up; the app cancels what is pending (`other`), queued behind.
        let gate = Gate()
        await engine.writer.enqueue { gate.wait() }
        let cancelAll = Task { try await engine.cancelAll(caller: caller) }
        while try await engine.pendingRequests(caller: caller).contains(where: { $0.identifier == other }) { await Task.yield() }

        // RunTask fails: `sent` is pending again, in memory and (at once) on disk.
        app.open()
        _ = try? await delivery.value
        gate.open()
        try await cancelAll.value
        await engine.writer.run {}

        let inMemory = try await engine.pendingRequests(caller: caller).map(\.identifier)
        let stored = try store.pendingRequests().map(\.identifier)
        #expect(inMemory == [sent])
        #expect(stored == [sent], "memory holds \(inMemory)")
    }
}
