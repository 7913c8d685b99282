@testable import BGPolicyAgent
import BGPolicyCore
import BGPolicyDBus
import BGPolicyStore
import BGPolicyTestSupport
import Glibc
import Synchronization
import Testing

/// A failed undo of the CPU monitor was tried again every 5 minutes for good, and at every
/// start, even when it could never succeed: a unit frozen by the monitor whose process was then
/// SIGKILLed (or OOM-killed) stays loaded as failed, and `ThawUnit` answers `UnitInactive` every
/// time. That is nothing left to thaw now; and any other undo is given up after `undoRetries`
/// failures in a row, its record forgotten, so that the next start does not try it for good.
@Suite("A failed undo is not tried again for good")
struct UndoRetryLimitTests {
    static let unit = "app-org.example.Hot@1.service"

    /// How many `ThawUnit` calls the user manager has had.
    final class Thaws: Sendable {
        private let count = Mutex(0)
        func add() { count.withLock { $0 += 1 } }
        var value: Int { count.withLock { $0 } }
    }

    /// An engine with the app `org.example.Hot`, its slice `s-hot`'s freeze stored, and a user
    /// manager whose `ThawUnit` answers `thaw`, counted in `thaws`.
    static func frozenApp(
        thaws: Thaws, thaw: @escaping @Sendable () throws -> Void
    ) async throws -> (TestEngine, FakeUserManager, TaskStore, EnforcementRecord) {
        let store = try TaskStore.inMemory()
        var configuration = PolicyConfiguration()
        configuration.cpu.action = .freeze
        let harness = try await TestEngine(store: store, configuration: configuration)
        let manager = try await FakeUserManager(on: harness.bus, handlers: [
            "ThawUnit": { _ in
                thaws.add()
                try thaw()
                return []
            },
        ])
        let appID = try await harness.appThatLeft("org.example.Hot")
        let record = EnforcementRecord(
            sliceID: "s-hot", appID: appID.rawValue, action: .frozen(unit: unit), since: Double(time(nil)))
        try store.recordEnforcement(record)
        return (harness, manager, store, record)
    }

    @Test func aThawOfAUnitNoLongerActiveIsDone() async throws {
        let thaws = Thaws()
        let (harness, manager, store, record) = try await Self.frozenApp(thaws: thaws) {
            throw DBusError.remote(name: "org.freedesktop.systemd1.UnitInactive", message: "Unit is not active")
        }
        defer { manager.close(); harness.close() }
        let engine = harness.engine

        await engine.undo(record, why: "slice ended")
        #expect(thaws.value == 1)
        #expect(await engine.failedUndos.isEmpty)
        #expect(await engine.undoRetryTimer == nil, "nothing left to try again")
        #expect(try store.enforcementsLeft().isEmpty, "nothing left for the next start")
        let released = try store.history(since: 0, limit: 100).filter { $0.event == HistoryEvent.cpuReleased }
        #expect(released.map { $0.detail } == [
            "\(Self.unit) is no longer active (its processes have ended); nothing to thaw (slice ended)",
        ])

        // Nor is it refused at the next start, or by ForgetApp.
        await engine.undoLeftEnforcement()
        #expect(thaws.value == 1)
    }

    @Test func anUndoThatKeepsFailingIsGivenUp() async throws {
        let thaws = Thaws()
        let (harness, manager, store, record) = try await Self.frozenApp(thaws: thaws) {
            throw DBusError.remote(name: "org.freedesktop.DBus.Error.AccessDenied", message: "denied")
        }
        defer { manager.close(); harness.close() }
        let engine = harness.engine

        // The first try, then 12 retries (about half an hour on the timer, run here at once):
        // each failure keeps the record for the next.
        await engine.undo(record, why: "slice ended")
        for retry in 1...12 {
            #expect(await engine.failedUndos[record.sliceID] != nil, "retry \(retry)")
            #expect(try store.enforcementsLeft() == [record], "retry \(retry)")
            await engine.retryFailedUndosNow()
        }
        #expect(thaws.value == 13)
        // Given up: forgotten here and in the store, no timer, and said once in the history.
        #expect(await engine.failedUndos.isEmpty)
        #expect(await engine.undoRetryTimer == nil)
        #expect(try store.enforcementsLeft().isEmpty)
        let released = try store.history(since: 0, limit: 100).filter { $0.event == HistoryEvent.cpuReleased }
        #expect(released.count == 2, "\(released)")
        #expect(released.last?.detail.contains("the agent gave up: thaw it with 'systemctl --user thaw \(Self.unit)'") == true,
                "\(released)")
        await engine.undoLeftEnforcement()
        #expect(thaws.value == 13, "not tried again at the next start")
    }
}

extension TaskEngine {
    /// What the undo retry's timer does when it fires, without waiting for it.
    fileprivate func retryFailedUndosNow() async {
        undoRetryTimer?.cancel()
        await retryFailedUndos()
    }
}
