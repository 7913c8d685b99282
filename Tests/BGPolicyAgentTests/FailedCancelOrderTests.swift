@testable import BGPolicyAgent
import BGPolicyCore
import BGPolicyDBus
@testable import BGPolicyStore
import Glibc
import Testing

/// A Cancel whose write failed took back what the store held whenever memory had no request
/// for the identifier, as if nothing had happened since. But a Submit and a Cancel of the same
/// identifier, queued behind it, had emptied memory too: it took back the old request, their
/// writes then emptied the store, and the agent delivered a request the app had cancelled.
@Suite("A failed Cancel leaves a request alone that later calls changed")
struct FailedCancelOrderTests {
    @Test func theLaterCancelStands() async throws {
        let store = try TaskStore.inMemory()
        let harness = try await TestEngine(store: store)
        defer { harness.close() }
        let engine = harness.engine
        let caller = harness.connection.uniqueName
        let identifier = "org.example.Order.refresh"
        var options = TaskEngine.RegisterOptions()
        options.appID = "org.example.Order"
        _ = try await engine.register(caller: caller, pid: UInt32(getpid()), identifiers: [identifier], options: options)
        var later = TaskEngine.SubmitOptions()
        later.earliestBegin = Int64(time(nil)) + 3600
        try await engine.submit(caller: caller, identifier: identifier, kind: "refresh", options: later)

        // The writer is held; the first Cancel's write will meet a store that refuses writes.
        let first = Gate()
        await engine.writer.enqueue { first.wait() }
        await engine.writer.enqueue { _ = try? store.pragma("query_only = ON") }
        let cancel = Task { try await engine.cancel(caller: caller, identifier: identifier) }
        while try await !engine.pendingRequests(caller: caller).isEmpty { await Task.yield() }
        let second = Gate()
        await engine.writer.enqueue { _ = try? store.pragma("query_only = OFF") }
        await engine.writer.enqueue { second.wait() }

        // The app submits again and cancels again, their writes queued behind.
        later.earliestBegin = Int64(time(nil)) + 1800
        let submit = Task { try await engine.submit(caller: caller, identifier: identifier, kind: "refresh", options: later) }
        while try await engine.pendingRequests(caller: caller).isEmpty { await Task.yield() }
        let cancelAgain = Task { try await engine.cancel(caller: caller, identifier: identifier) }
        while try await !engine.pendingRequests(caller: caller).isEmpty { await Task.yield() }

        // The first Cancel fails, while the later writes still wait.
        first.open()
        await #expect(throws: SchedulerError.self) { try await cancel.value }
        second.open()
        try await submit.value
        try await cancelAgain.value

        let inMemory = try await engine.pendingRequests(caller: caller).map(\.identifier)
        let stored = try store.pendingRequests().map(\.identifier)
        #expect(stored == [])
        #expect(inMemory == [], "the store holds \(stored)")
    }
}
