@testable import BGPolicyAgent
import BGPolicyCore
import BGPolicyDBus
import BGPolicyStore
import BGPolicyTestSupport
import Testing

/// `Register` asks the bus which process called. When that question failed (the bus slow to
/// answer, the agent stopping), the answer was taken for "no process", and the app was refused
/// with `AccessDenied` as one the agent cannot see, which an app may take for good.
@Suite("Register answers Unavailable when the bus cannot be asked about the caller")
struct RegisterCredentialsTests {
    @Test func aFailedQuestionIsNotARefusal() async throws {
        let store = try TaskStore.inMemory()
        let harness = try await TestEngine(store: store)
        defer { harness.close() }

        // Scheduler1, served on a connection of its own, asks the bus through one that is closed.
        let closed = try await DBusConnection.connect(to: .address(harness.bus.address))
        closed.close()
        let server = try await DBusConnection.connect(to: .address(harness.bus.address))
        defer { server.close() }
        server.objects.errorNames = AgentService.errorNames
        try server.objects.export(
            [SchedulerInterface(engine: harness.engine, connection: closed).exported()], at: ObjectPath(BGPolicyNames.objectPath))
        let serving = Task { await server.objects.serve() }
        defer { serving.cancel() }

        let app = try await DBusConnection.connect(to: .address(harness.bus.address))
        defer { app.close() }
        let call = try Message.methodCall(
            destination: server.uniqueName, path: ObjectPath(BGPolicyNames.objectPath),
            interface: BGPolicyNames.schedulerInterface, member: "Register",
            body: [["org.example.App.refresh"].dbusValue, ["app_id": Variant(.string("org.example.App"))].dbusValue])
        let error = await #expect(throws: DBusError.self) { _ = try await app.call(call) }
        guard case .remote(let name, let message)? = error else { Issue.record("\(String(describing: error))"); return }
        #expect(name == "org.bgpolicy.Error.Unavailable", "\(name): \(message)")
        #expect(message.contains("try again"), "\(message)")
        #expect(await harness.engine.apps.isEmpty)
    }
}
