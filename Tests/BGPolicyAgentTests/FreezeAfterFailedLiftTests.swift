@testable import BGPolicyAgent
import BGPolicyCore
import BGPolicyDBus
import BGPolicyStore
import BGPolicyTestSupport
import Glibc
import Synchronization
import Testing

/// A slice's throttle whose lift failed (the user manager busy when the app came into use) is
/// kept for the retry under the slice's record. When `[cpu] action` became `freeze` meanwhile,
/// the monitor's next enforcement on that slice replaced the record with the freeze's, and the
/// thaw at the slice's end left the throttle's quota on the unit for good. Now the lift is
/// tried again first, and nothing new is done while it still fails.
@Suite("A freeze does not replace a throttle whose lift failed")
struct FreezeAfterFailedLiftTests {
    @Test func theLiftComesFirst() async throws {
        let store = try TaskStore.inMemory()
        var configuration = PolicyConfiguration()
        configuration.cpu.action = .freeze
        let harness = try await TestEngine(store: store, configuration: configuration)
        defer { harness.close() }
        let engine = harness.engine

        // The user manager: busy (every SetUnitProperties refused) until the test says not.
        let busy = Mutex(true)
        let calls = Mutex([String]())
        let manager = try await FakeUserManager(on: harness.bus, handlers: [
            "SetUnitProperties": { _ in
                calls.withLock { $0.append("SetUnitProperties") }
                if busy.withLock({ $0 }) {
                    throw DBusError.remote(name: "org.freedesktop.systemd1.UnitBusy", message: "busy")
                }
                return []
            },
            "FreezeUnit": { _ in
                calls.withLock { $0.append("FreezeUnit") }
                return []
            },
            "ThawUnit": { _ in
                calls.withLock { $0.append("ThawUnit") }
                return []
            },
        ])
        defer { manager.close() }

        // An app not in use, with a slice whose throttle (the user's 50 % quota before it) could
        // not be lifted.
        let appID = try await harness.appThatLeft("org.example.Hot")
        let unit = "app-org.example.Hot.service"
        // Watched, as a slice the monitor acts on is.
        let slice = await harness.addSlice(
            "s-hot", of: appID, unit: unit,
            monitor: CPUUsageMonitor(window: .seconds(10), limit: configuration.cpu.limit, warningGrace: .seconds(5)))
        let throttle = EnforcementRecord(
            sliceID: slice.id, appID: appID.rawValue, action: .throttled(unit: unit, quotaBefore: 500_000),
            since: Double(time(nil)))
        try store.recordEnforcement(throttle)
        await engine.failedUndo(throttle, why: "the app is in use now")

        // Still busy: the lift is tried again and fails, so no freeze, and the throttle's record
        // stays for the retry.
        await engine.enforce(sliceID: slice.id, average: 400)
        #expect(calls.withLock { $0 } == ["SetUnitProperties"])
        #expect(try store.enforcementsLeft() == [throttle])
        #expect(await engine.slices[slice.id]?.enforcement == nil)

        // No longer busy: the quota is put back, then the unit is frozen under a new record.
        busy.withLock { $0 = false }
        calls.withLock { $0.removeAll() }
        await engine.enforce(sliceID: slice.id, average: 400)
        #expect(calls.withLock { $0 } == ["SetUnitProperties", "FreezeUnit"])
        #expect(try store.enforcementsLeft().map(\.action) == [.frozen(unit: unit)])
        #expect(await engine.failedUndos.isEmpty)
        #expect(await engine.slices[slice.id]?.enforcement == .frozen(unit: unit))
        let released = try store.history(since: 0, limit: 100).filter { $0.event == .cpuReleased }
        #expect(released.count == 1 && released[0].detail.contains("set back to the 50 %"), "\(released)")
    }
}

extension TaskEngine {
    fileprivate func failedUndo(_ record: EnforcementRecord, why: String) {
        failedUndos[record.sliceID] = (record, why, 1)
    }
}
