@testable import BGPolicyAgent
import BGPolicyCore
import BGPolicyDBus
import BGPolicyStore
import BGPolicyTestSupport
import Glibc
import Testing

/// `evaluate` starts each delivery as a task of its own. One started just before the stop ran
/// once the stop suspended (for the store writer, a CPU limit's lift): the stop had taken its
/// list of slices, so the new slice was never ended, no `ExpireTask` was sent, and its running
/// row was closed as interrupted at the next start: the request was lost. An app the bus had to
/// start was held back so already; one already connected was not.
@Suite("A delivery that begins once the stop has begun does not start")
struct DeliveryDuringStopTests {
    static let appID = AppID(rawValue: "org.example.Mail")!
    static let identifier = "org.example.Mail.refresh"

    @Test func aConnectedAppIsNotLaunchedDuringTheStop() async throws {
        let store = try TaskStore.inMemory()
        let harness = try await TestEngine(store: store)
        defer { harness.close() }
        let engine = harness.engine
        let app = try await GatedApp(on: harness.bus, holds: { _ in false })
        defer { app.close() }
        _ = try await harness.registerWithARefreshLater(Self.appID.rawValue, caller: app.connection.uniqueName)

        // As the stop finds it: begun, its slices listed, before the delivery's task runs.
        await engine.beginStoppingForTest()
        let error = await #expect(throws: SchedulerError.self) {
            try await engine.simulateLaunch(app: Self.appID.rawValue, identifier: Self.identifier)
        }
        #expect(error?.name == .unavailable, "\(String(describing: error))")
        try await Task.sleep(for: .milliseconds(200))
        #expect(app.runTasks == 0, "a RunTask was sent during the stop")
        #expect(await engine.slices.isEmpty)
        #expect(try store.pendingRequests().contains { $0.identifier == Self.identifier }, "the request was lost")
    }
}

extension TaskEngine {
    /// What the stop sets first, and nothing more: the engine as work finds it once the stop
    /// has begun.
    func beginStoppingForTest() {
        stopping = true
    }
}
