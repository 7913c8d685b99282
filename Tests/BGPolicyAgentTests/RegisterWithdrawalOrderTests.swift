@testable import BGPolicyAgent
import BGPolicyCore
import BGPolicyDBus
import BGPolicyStore
import Glibc
import Testing

/// `Register` without an identifier while a `Submit` of it, from the app's other connection,
/// waits to be written: the store must end up holding what memory holds. The registration
/// deleted the withdrawn request on the executor at once, ahead of the Submit's write still
/// queued on the store writer; that write then stored the request memory had dropped, and the
/// next start delivered work the app had withdrawn.
@Suite("Register's withdrawal keeps the store's order")
struct RegisterWithdrawalOrderTests {
    @Test func withdrawalWaitsForAWriteQueuedBeforeIt() async throws {
        let store = try TaskStore.inMemory()
        let harness = try await TestEngine(store: store)
        defer { harness.close() }
        let engine = harness.engine
        let caller = harness.connection.uniqueName
        let kept = "org.example.Withdraw.a"
        let withdrawn = "org.example.Withdraw.b"
        var options = TaskEngine.RegisterOptions()
        options.appID = "org.example.Withdraw"
        _ = try await engine.register(caller: caller, pid: UInt32(getpid()), identifiers: [kept, withdrawn], options: options)

        // The writer is held: the Submit's write waits behind this job.
        let gate = Gate()
        await engine.writer.enqueue { gate.wait() }
        let submit = Task {
            var later = TaskEngine.SubmitOptions()
            later.earliestBegin = Int64(time(nil)) + 3600
            try await engine.submit(caller: caller, identifier: withdrawn, kind: "refresh", options: later)
        }
        // The request is in memory, its write queued.
        while try await engine.pendingRequests(caller: caller).isEmpty { await Task.yield() }
        let register = Task {
            try await engine.register(caller: caller, pid: UInt32(getpid()), identifiers: [kept], options: options)
        }
        try await Task.sleep(for: .milliseconds(100))
        gate.open()
        try await submit.value
        _ = try await register.value
        // The writer's queue drained.
        try await engine.writer.run { () throws(StoreError) in }

        let inMemory = try await engine.pendingRequests(caller: caller).map(\.identifier)
        let stored = try store.pendingRequests().map(\.identifier)
        #expect(inMemory == [])
        #expect(stored == inMemory, "the store holds \(stored), memory \(inMemory)")
        #expect(try store.history(since: 0, limit: 10).contains { $0.event == .cancelled && $0.identifier == withdrawn })
    }
}
