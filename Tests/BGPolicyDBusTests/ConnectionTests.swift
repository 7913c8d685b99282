import Foundation
import Testing
@testable import BGPolicyDBus

@Suite("Connection on a private bus")
struct ConnectionTests {
    @Test("connects, learns its unique name, and calls the bus daemon")
    func connectAndGetId() async throws {
        let bus = try PrivateBus()
        let connection = try await DBusConnection.connect(to: .address(bus.address))
        #expect(connection.uniqueName.hasPrefix(":"))
        let id = try await connection.busID()
        #expect(id.count == 32)
        connection.close()
    }

    @Test("exports an object and calls it from a second connection")
    func exportAndCall() async throws {
        let bus = try PrivateBus()
        let server = try await DBusConnection.connect(to: .address(bus.address))
        let client = try await DBusConnection.connect(to: .address(bus.address))
        let description = InterfaceDescription(
            name: "org.bgpolicy.Test1", documentation: "test",
            methods: [.init("Add", inputs: [.init("a", .int32), .init("b", .int32)], outputs: [.init("sum", .int64)], documentation: "adds")])
        let interface = ExportedInterface(description).method("Add") { call in
            let a = try call.arguments.decode(Int32.self, at: 0)
            let b = try call.arguments.decode(Int32.self, at: 1)
            return [.int64(Int64(a) + Int64(b))]
        }
        try server.objects.export([interface], at: ObjectPath("/org/bgpolicy/Test"))
        let serving = Task { await server.objects.serve() }
        defer { serving.cancel() }
        let reply = try await client.call(
            destination: server.uniqueName, path: ObjectPath("/org/bgpolicy/Test"), interface: "org.bgpolicy.Test1", member: "Add",
            [.int32(40), .int32(2)])
        #expect(reply == [.int64(42)])

        await #expect(throws: DBusError.self) {
            _ = try await client.call(
                destination: server.uniqueName, path: ObjectPath("/org/bgpolicy/Test"), interface: "org.bgpolicy.Test1", member: "Add",
                [.string("x")])
        }
        do {
            _ = try await client.call(destination: server.uniqueName, path: ObjectPath("/nope"), interface: nil, member: "Add")
            Issue.record("expected an error")
        } catch DBusError.remote(let name, let message) {
            #expect(name == "org.freedesktop.DBus.Error.UnknownObject")
            #expect(message.contains("/nope"))
        }
        // Peer is answered by libdbus itself.
        _ = try await client.call(destination: server.uniqueName, path: .root, interface: "org.freedesktop.DBus.Peer", member: "Ping")
        server.close()
        client.close()
    }
}
