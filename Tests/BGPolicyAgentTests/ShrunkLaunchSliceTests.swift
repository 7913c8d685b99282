@testable import BGPolicyAgent
import BGPolicyCore
import BGPolicyDBus
import BGPolicyStore
import BGPolicySystem
import BGPolicyTestSupport
import Glibc
import Testing

/// A launch decided for a refresh and a processing request shares the processing slice's
/// 10 minutes. When the processing request is gone by the delivery (cancelled, replaced, or
/// held by the rules after the app's start turn), the refresh goes alone: its slice was still
/// the launch's 600 s, RunTask said so, and the app was held busy for 10 minutes for a refresh
/// of 30 s.
@Suite("A launch that shrinks before its delivery gets the slice of what it delivers")
struct ShrunkLaunchSliceTests {
    @Test func aRefreshLeftAloneGetsARefreshSlice() async throws {
        let store = try TaskStore.inMemory()
        let harness = try await TestEngine(store: store)
        defer { harness.close() }
        let engine = harness.engine
        let app = try await GatedApp(on: harness.bus, holds: { _ in false })
        defer { app.close() }

        let caller = app.connection.uniqueName
        var options = TaskEngine.RegisterOptions()
        options.appID = "org.example.Shrunk"
        let refresh = "org.example.Shrunk.refresh", processing = "org.example.Shrunk.processing"
        let appID = try await engine.register(caller: caller, pid: UInt32(getpid()), identifiers: [refresh, processing], options: options)
        var later = TaskEngine.SubmitOptions()
        later.earliestBegin = Int64(time(nil)) + 3600
        try await engine.submit(caller: caller, identifier: refresh, kind: "refresh", options: later)
        try await engine.submit(caller: caller, identifier: processing, kind: "processing", options: later)
        let requests = try await engine.pendingRequests(caller: caller).sorted { $0.identifier < $1.identifier }
        #expect(requests.count == 2)

        // Decided for both, with the processing slice; the processing request goes before it runs.
        try await engine.cancel(caller: caller, identifier: processing)
        try await engine.deliver(
            Launch(appID: appID, requests: ArraySlice(requests), sliceLength: .seconds(600)), simulated: true)

        let slices = await engine.slices
        #expect(slices.count == 1)
        #expect(slices.values.first?.length == .seconds(30), "the slice is \(slices.values.first?.length ?? .zero)")
        #expect(slices.values.first?.members.map(\.request.identifier) == [refresh])
        #expect(app.runTaskSeconds.count == 1)
        #expect(app.runTaskSeconds.allSatisfy { $0 <= 30 }, "RunTask gave \(app.runTaskSeconds) s")
    }
}
