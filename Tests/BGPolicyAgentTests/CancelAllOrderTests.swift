@testable import BGPolicyAgent
import BGPolicyCore
import BGPolicyDBus
import BGPolicyStore
import Glibc
import Testing

/// `CancelAll` and a `Submit` of the same app from another of its connections: the store must
/// end up holding what memory holds. CancelAll deleted on the executor at once, ahead of the
/// Submit's write still queued on the store writer; that write then stored the request
/// memory had dropped, and the next start delivered what the app had cancelled.
@Suite("CancelAll keeps the store's order")
struct CancelAllOrderTests {
    @Test func cancelAllWaitsForAWriteQueuedBeforeIt() async throws {
        let store = try TaskStore.inMemory()
        let harness = try await TestEngine(store: store)
        defer { harness.close() }
        let engine = harness.engine
        let caller = harness.connection.uniqueName
        let identifier = "org.example.Order.refresh"
        var options = TaskEngine.RegisterOptions()
        options.appID = "org.example.Order"
        _ = try await engine.register(caller: caller, pid: UInt32(getpid()), identifiers: [identifier], options: options)

        // The writer is held: the Submit's write waits behind this job.
        let gate = Gate()
        await engine.writer.enqueue { gate.wait() }
        let submit = Task {
            var later = TaskEngine.SubmitOptions()
            later.earliestBegin = Int64(time(nil)) + 3600
            try await engine.submit(caller: caller, identifier: identifier, kind: "refresh", options: later)
        }
        // The request is in memory, its write queued.
        while try await engine.pendingRequests(caller: caller).isEmpty { await Task.yield() }
        let cancelAll = Task { try await engine.cancelAll(caller: caller) }
        // CancelAll may not touch the store while the write before it waits.
        try await Task.sleep(for: .milliseconds(100))
        gate.open()
        try await submit.value
        try await cancelAll.value

        let inMemory = try await engine.pendingRequests(caller: caller).map(\.identifier)
        let stored = try store.pendingRequests().map(\.identifier)
        #expect(inMemory == [])
        #expect(stored == inMemory, "the store holds \(stored), memory \(inMemory)")
        #expect(try store.history(since: 0, limit: 10).contains { $0.event == .cancelled })
    }
}
