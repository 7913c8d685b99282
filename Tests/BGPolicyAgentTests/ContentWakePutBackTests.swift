@testable import BGPolicyAgent
import BGPolicyCore
import BGPolicyDBus
import BGPolicyStore
import BGPolicyTestSupport
import Glibc
import Testing

/// A content-available wake whose `RunTask` failed on the bus (the app went without answering)
/// was put back as a new notification: first received now, notified once. `ListPending` then
/// showed it submitted at the failure, its count was lost, and memory disagreed with its
/// stored row, which still had both. It is now put back as it was taken.
@Suite("A wake whose delivery failed is put back as it was")
struct ContentWakePutBackTests {
    @Test func firstReceivedAndCountSurvive() async throws {
        let store = try TaskStore.inMemory()
        let harness = try await TestEngine(store: store)
        defer { harness.close() }
        let engine = harness.engine

        // The app's RunTask fails as a bus error, not an answer of the app's own.
        let app = try await GatedApp(on: harness.bus, holds: { _ in false }, answer: { _ in
            throw DBusError.remote(name: "org.freedesktop.DBus.Error.NoReply", message: "no reply")
        })
        defer { app.close() }
        let caller = app.connection.uniqueName
        var options = TaskEngine.RegisterOptions()
        options.appID = "org.example.Mail"
        let appID = try await engine.register(caller: caller, pid: UInt32(getpid()), identifiers: ["org.example.Mail.refresh"], options: options)

        // Two notifications, the second replacing the first; then its first is made older.
        let sender = harness.connection.uniqueName
        try await engine.notifyContentAvailable(caller: sender, app: appID.rawValue, payload: ["n": Variant(Int32(1))])
        try await engine.notifyContentAvailable(caller: sender, app: appID.rawValue, payload: ["n": Variant(Int32(2))])
        await engine.ageContentWake(of: appID, by: 600)
        let before = try #require(await engine.contentWakes.wake(for: appID))
        #expect(before.notificationCount == 2)

        await #expect(throws: SchedulerError.self) {
            try await engine.deliver(
                Launch(appID: appID, requests: [], sliceLength: .seconds(30), contentAvailable: true), simulated: false)
        }
        #expect(app.runTasks == 1)

        let after = try #require(await engine.contentWakes.wake(for: appID))
        #expect(after.firstReceivedAt == before.firstReceivedAt)
        #expect(after.receivedAt == before.receivedAt)
        #expect(after.notificationCount == 2)
        #expect(after.payload == ["n": Variant(Int32(2))])
        let stored = try #require(try store.contentWakes().first { $0.appID == appID })
        #expect(stored.notificationCount == 2)
    }
}

extension TaskEngine {
    fileprivate func ageContentWake(of appID: AppID, by seconds: Double) {
        guard var wake = contentWakes.wake(for: appID) else { return }
        wake.firstReceivedAt -= seconds
        contentWakes.restore(appID, wake: wake, bucket: contentWakes.bucket(for: appID))
    }
}
