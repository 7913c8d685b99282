@testable import BGPolicyAgent
import BGPolicyCore
import BGPolicyDBus
import BGPolicyStore
import BGPolicySystem
import BGPolicyTestSupport
import Glibc
import Logging
import Synchronization

/// The engine itself, on a private bus and a store the test gives: for what only the engine
/// decides (the order of its store writes, what it learns at start), without an agent process.
struct TestEngine {
    let bus: PrivateBus
    let connection: DBusConnection
    let engine: TaskEngine

    init(store: TaskStore, configuration: PolicyConfiguration = PolicyConfiguration()) async throws {
        bus = try PrivateBus()
        connection = try await DBusConnection.connect(to: .address(bus.address))
        engine = TaskEngine(
            store: store, policy: WindowPlanner(), configuration: configuration,
            connection: connection, inspector: .fromEnvironment(), logger: Logger(label: "test"))
        try await engine.load()
    }

    func close() {
        connection.close()
    }
}

/// A one-shot gate for a thread (the store writer's, held by a job that waits on it): `wait()`
/// blocks until `open()`.
final class Gate: Sendable {
    private let opened = Mutex(false)

    func wait() {
        while !opened.withLock({ $0 }) { usleep(1_000) }
    }

    func open() {
        opened.withLock { $0 = true }
    }
}
