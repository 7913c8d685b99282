@testable import BGPolicyAgent
import BGPolicyCore
import BGPolicyDBus
import BGPolicyStore
import BGPolicyTestSupport
import Glibc
import Testing

/// An app that registers again without an identifier while the `RunTask` of its request is on
/// its way, and whose `RunTask` then fails: the failure put the request back, for an identifier
/// the app had withdrawn. It was delivered in every window after, refused each time, and each
/// refusal doubled the wait of the app's other work.
@Suite("A failed delivery does not bring back a withdrawn identifier")
struct WithdrawnDuringDeliveryTests {
    struct Busy: DBusErrorConvertible {
        var dbusErrorName: String { "org.example.Error.Busy" }
        var dbusErrorMessage: String { "busy" }
    }

    @Test func theRequestIsDroppedNotPutBack() async throws {
        let store = try TaskStore.inMemory()
        let harness = try await TestEngine(store: store)
        defer { harness.close() }
        let engine = harness.engine

        // The app: its own connection; RunTask waits for the gate, then fails.
        let app = try await GatedApp(on: harness.bus, answer: { _ in throw Busy() })
        defer { app.close() }

        let caller = app.connection.uniqueName
        var options = TaskEngine.RegisterOptions()
        options.appID = "org.example.Fickle"
        let (old, kept) = ("org.example.Fickle.old", "org.example.Fickle.kept")
        let appID = try await engine.register(caller: caller, pid: UInt32(getpid()), identifiers: [old, kept], options: options)
        var later = TaskEngine.SubmitOptions()
        later.earliestBegin = Int64(time(nil)) + 3600
        try await engine.submit(caller: caller, identifier: old, kind: "refresh", options: later)
        let requests = try await engine.pendingRequests(caller: caller)

        let delivery = Task {
            try await engine.deliver(
                Launch(appID: appID, requests: ArraySlice(requests), sliceLength: .seconds(30)), simulated: true)
        }
        try await app.waitForRunTask()
        _ = try await engine.register(caller: caller, pid: UInt32(getpid()), identifiers: [kept], options: options)
        app.open()
        _ = try? await delivery.value

        let inMemory = try await engine.pendingRequests(caller: caller).map(\.identifier)
        let stored = try store.pendingRequests().map(\.identifier)
        #expect(inMemory == [], "memory holds \(inMemory)")
        #expect(stored == [], "the store holds \(stored)")
        #expect(try store.runningTasks().isEmpty)
        #expect(await engine.slices.isEmpty)
        let failed = try store.history(since: 0, limit: 100).filter { $0.identifier == old && $0.event == .deliveryFailed }
        #expect(failed.count == 1)
        #expect(failed.first?.detail.contains("registered again without \(old)") == true, "\(failed)")
    }
}
