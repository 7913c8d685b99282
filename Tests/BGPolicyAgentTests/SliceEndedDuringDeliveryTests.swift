@testable import BGPolicyAgent
import BGPolicyCore
import BGPolicyDBus
import BGPolicyStore
import BGPolicySystem
import BGPolicyTestSupport
import Glibc
import Testing

/// A slice that ends (here: the machine prepares for sleep) while its first `RunTask` is
/// awaited: `deliver` went on and sent `RunTask` for the next member after the slice had
/// ended, and recorded it delivered after its sleep-expired entry. The app then ran work with
/// no slice (no deadline, no CPU monitor), and its `SetTaskCompleted` was refused.
@Suite("A slice ended during its delivery sends no more")
struct SliceEndedDuringDeliveryTests {
    @Test func sleepDuringTheFirstRunTaskStopsTheRest() async throws {
        let store = try TaskStore.inMemory()
        let harness = try await TestEngine(store: store)
        defer { harness.close() }
        let engine = harness.engine

        // The app: its own connection, answering RunTask; the first answer waits for the gate.
        let app = try await GatedApp(on: harness.bus, holds: { $0 == 1 })
        defer { app.close() }

        let caller = app.connection.uniqueName
        var options = TaskEngine.RegisterOptions()
        options.appID = "org.example.Sleepy"
        let identifiers = ["org.example.Sleepy.one", "org.example.Sleepy.two"]
        let appID = try await engine.register(caller: caller, pid: UInt32(getpid()), identifiers: identifiers, options: options)
        for identifier in identifiers {
            var later = TaskEngine.SubmitOptions()
            later.earliestBegin = Int64(time(nil)) + 3600
            try await engine.submit(caller: caller, identifier: identifier, kind: "processing", options: later)
        }
        let requests = try await engine.pendingRequests(caller: caller)
        #expect(requests.count == 2)

        let delivery = Task {
            try await engine.deliver(
                Launch(appID: appID, requests: ArraySlice(requests), sliceLength: .seconds(600)), simulated: true)
        }
        try await app.waitForRunTask()
        await engine.sleepEvent(.preparing)
        app.open()
        _ = try? await delivery.value
        try await Task.sleep(for: .milliseconds(100))

        #expect(app.runTasks == 1, "RunTask was sent after the slice had ended")
        // The one never sent is pending again, in memory and on disk; no task runs.
        let inMemory = try await engine.pendingRequests(caller: caller).map(\.identifier)
        let stored = try store.pendingRequests().map(\.identifier)
        #expect(inMemory == ["org.example.Sleepy.two"])
        #expect(stored == inMemory, "the store holds \(stored), memory \(inMemory)")
        #expect(await engine.slices.isEmpty)
        let history = try store.history(since: 0, limit: 100)
        #expect(!history.contains { $0.identifier == "org.example.Sleepy.two" && $0.event == .delivered })
        #expect(!history.contains { $0.identifier == "org.example.Sleepy.two" && $0.event == .sleepExpired })
    }
}
