@testable import BGPolicyAgent
import BGPolicyCore
import BGPolicyDBus
import BGPolicyStore
import Glibc
import Testing

/// A launch decided for an app that then became unreachable (its last connection left, no
/// bus_name), after the app cancelled a request of it: the failure put back the launch's
/// requests as decided, the cancelled one with them, in memory and on disk, to be delivered
/// at the app's next start.
@Suite("An unreachable app's failed delivery puts back only what is pending")
struct UnreachableDeliveryTests {
    @Test func aCancelledRequestStaysCancelled() async throws {
        let store = try TaskStore.inMemory()
        let harness = try await TestEngine(store: store)
        defer { harness.close() }
        let engine = harness.engine
        let caller = harness.connection.uniqueName
        let identifier = "org.example.Gone.refresh"
        var options = TaskEngine.RegisterOptions()
        options.appID = "org.example.Gone"
        let appID = try await engine.register(caller: caller, pid: UInt32(getpid()), identifiers: [identifier], options: options)
        var later = TaskEngine.SubmitOptions()
        later.earliestBegin = Int64(time(nil)) + 3600
        try await engine.submit(caller: caller, identifier: identifier, kind: "refresh", options: later)
        let launch = Launch(
            appID: appID, requests: ArraySlice(try await engine.pendingRequests(caller: caller)), sliceLength: .seconds(30))

        // Before the delivery runs: the app cancels, then leaves.
        try await engine.cancel(caller: caller, identifier: identifier)
        await engine.connectionVanished(caller)
        await #expect(throws: SchedulerError.self) { try await engine.deliver(launch, simulated: false) }

        let inMemory = await engine.pending[appID].map { Array($0.keys) } ?? []
        let stored = try store.pendingRequests().map(\.identifier)
        #expect(inMemory == [], "memory holds \(inMemory)")
        #expect(stored == [], "the store holds \(stored)")
        #expect(!(try store.history(since: 0, limit: 20)).contains { $0.event == .deliveryFailed })
    }
}
