@testable import BGPolicyAgent
import BGPolicyCore
import BGPolicyDBus
import BGPolicyStore
import BGPolicySystem
import BGPolicyTestSupport
import Logging
import Testing

/// Admin1 asks the bus which process called, to refuse callers in an app sandbox. When that
/// question failed (the bus slow to answer, the agent stopping), the caller got `AccessDenied`,
/// which a tool may take for good; it is `Unavailable` ("try again"), as `Register` answers, and
/// the failure is not remembered for the connection.
@Suite("Admin1 answers Unavailable when the bus cannot be asked about the caller")
struct AdminCredentialsTests {
    @Test func aFailedQuestionIsNotARefusal() async throws {
        let store = try TaskStore.inMemory()
        let harness = try await TestEngine(store: store)
        defer { harness.close() }

        // Admin1 asks the bus through the engine's connection: closed here. It is served on a
        // connection of its own.
        harness.connection.close()
        let server = try await DBusConnection.connect(to: .address(harness.bus.address))
        defer { server.close() }
        server.objects.errorNames = AgentService.errorNames
        let environment = AgentEnvironment(
            stateDirectory: "/nonexistent", configPath: "/nonexistent/bgpolicy.conf", configSource: nil,
            configuration: PolicyConfiguration(), configGiven: false)
        let admin = AdminInterface(
            environment: environment, configuration: LiveConfiguration(environment), reloads: ReloadRequests(),
            conditions: ConditionsHub(logger: Logger(label: "test"), udevPolling: UdevBatteryPolling(interval: .seconds(60))),
            engine: harness.engine)
        try server.objects.export([admin.exported()], at: ObjectPath(BGPolicyNames.objectPath))
        let serving = Task { await server.objects.serve() }
        defer { serving.cancel() }

        let tool = try await DBusConnection.connect(to: .address(harness.bus.address))
        defer { tool.close() }
        for _ in 0..<2 {
            let call = try Message.methodCall(
                destination: server.uniqueName, path: ObjectPath(BGPolicyNames.objectPath),
                interface: BGPolicyNames.adminInterface, member: "ListApps")
            let error = await #expect(throws: DBusError.self) { _ = try await tool.call(call) }
            guard case .remote(let name, let message)? = error else { Issue.record("\(String(describing: error))"); return }
            #expect(name == "org.bgpolicy.Error.Unavailable", "\(name): \(message)")
            #expect(message.contains("Try again"), "\(message)")
        }
    }
}
