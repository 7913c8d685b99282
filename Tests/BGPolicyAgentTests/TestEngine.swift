@testable import BGPolicyAgent
import BGPolicyCore
import BGPolicyDBus
import BGPolicyStore
import BGPolicySystem
import BGPolicyTestSupport
import Logging

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
