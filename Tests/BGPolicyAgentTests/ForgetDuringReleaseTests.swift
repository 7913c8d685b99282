@testable import BGPolicyAgent
import BGPolicyCore
import BGPolicyDBus
import BGPolicyStore
import BGPolicyTestSupport
import Glibc
import Synchronization
import Testing

/// `ForgetApp` while the CPU monitor's throttle of the app's slice was on its way and the slice
/// had ended meanwhile: the app had no slice, connection or delivery left, so it was forgotten,
/// lifting the stored limit first. Then the throttle's answer came, its undo followed, and that
/// wrote a `cpu-released` entry for an app the agent no longer knew. `ForgetApp` is now refused
/// with `Unavailable` until the CPU monitor's calls for the app have settled.
@Suite("An app is not forgotten while its CPU limit is being set or lifted")
struct ForgetDuringReleaseTests {
    @Test func forgetWaitsForTheThrottle() async throws {
        let store = try TaskStore.inMemory()
        let harness = try await TestEngine(store: store)
        defer { harness.close() }
        let engine = harness.engine

        // The user manager: its first SetUnitProperties waits for the gate.
        let calls = Mutex(0)
        let opened = Mutex(false)
        let manager = try await FakeUserManager(on: harness.bus, handlers: [
            "SetUnitProperties": { _ in
                let number = calls.withLock { count in
                    count += 1
                    return count
                }
                while number == 1, !opened.withLock({ $0 }) { try await Task.sleep(for: .milliseconds(5)) }
                return []
            },
        ])
        defer { manager.close() }

        // An app that registered and left, with a slice whose CPU use is over the limit.
        let appID = try await harness.appThatLeft("org.example.Hot")
        let slice = await harness.addSlice("s-hot", of: appID, unit: "app-org.example.Hot.service")

        // The throttle is on its way when the slice ends; then the user forgets the app.
        let sliceID = slice.id
        let throttle = Task { await engine.enforce(sliceID: sliceID, average: 400) }
        while calls.withLock({ $0 }) == 0 { try await Task.sleep(for: .milliseconds(5)) }
        await engine.closeSlice(sliceID)
        let forget = Task { try await engine.forgetApp(appID.rawValue) }
        try await Task.sleep(for: .milliseconds(200))
        opened.withLock { $0 = true }
        await throttle.value
        let refusal = await #expect(throws: SchedulerError.self) { _ = try await forget.value }
        #expect(refusal?.name == .unavailable, "\(String(describing: refusal))")

        // Once the throttle and its undo have settled: forgotten, with nothing of it left.
        while await !engine.enforcementCalls.isEmpty { try await Task.sleep(for: .milliseconds(5)) }
        _ = try await engine.forgetApp(appID.rawValue)
        #expect(await engine.apps[appID] == nil)
        let left = try store.history(since: 0, limit: 100).filter { $0.appID == appID }
        #expect(left.isEmpty, "\(left)")
        #expect(try store.enforcementsLeft().isEmpty)
    }
}
