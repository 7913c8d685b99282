import Foundation
import BGPolicyTestSupport
import Testing

@testable import BGPolicyDBus

/// A reply too large for one D-Bus message is never sent: the bus would disconnect the
/// service that sent it (dbus-daemon does, for a message over its `max_message_size` or over
/// the specification's 128 MiB). The caller gets `LimitsExceeded`, saying how large the reply
/// was and what to do instead, and the service's connection goes on.
@Suite("Replies too large to send")
struct OversizedReplyTests {
    static let name = "org.bgpolicy.Test.Big1"
    static let path = ObjectPath(checked: "/org/bgpolicy/Test/Big")
    static let description = InterfaceDescription(
        name: name, documentation: "Replies of any size.",
        methods: [
            .init("List", inputs: [.init("count", .uint32), .init("bytes", .uint32)], outputs: [.init("items", .array(.dictionary(key: .string, value: .variant)))],
                  documentation: "count entries of bytes each."),
            .init("Status", inputs: [.init("count", .uint32), .init("bytes", .uint32)], outputs: [.init("items", .array(.dictionary(key: .string, value: .variant)))],
                  documentation: "List, answered on the connection's thread."),
            .init("Huge", outputs: [.init("items", .array(.string))], documentation: "An array over 64 MiB."),
            .init("Ping", outputs: [.init("n", .int32)], documentation: "Answers 7."),
        ])

    /// `count` dictionaries of one string of `bytes` each, as the agent's lists are.
    static func list(_ call: MethodCall) throws -> [DBusValue] {
        let count = try call.arguments.decode(UInt32.self, at: 0)
        let text = String(repeating: "x", count: Int(try call.arguments.decode(UInt32.self, at: 1)))
        let entry = DBusValue.dictionary(key: .string, value: .variant, [.init(key: .string("text"), value: .variant(.string(text)))])
        return [.array(element: entry.type, Array(repeating: entry, count: Int(count)))]
    }

    static func interface() -> ExportedInterface {
        // Four 17-MiB strings: the array's data is 68 MiB, over the 64 MiB D-Bus allows.
        let chunk = String(repeating: "x", count: 17 << 20)
        return ExportedInterface(description)
            .method("List") { call in try list(call) }
            .method("Status", immediate: { call in try list(call) })
            .method("Huge") { _ in [.array(element: .string, Array(repeating: .string(chunk), count: 4))] }
            .method("Ping") { _ in [.int32(7)] }
    }

    /// A private bus that takes messages of `maximumMessageSize` bytes at most.
    static func bus(maximumMessageSize: Int) throws -> (PrivateBus, String) {
        try configuredBus(named: "small", extra: "<limit name=\"max_message_size\">\(maximumMessageSize)</limit>")
    }

    /// The server answers a reply with an array over 64 MiB, which dbus-daemon would take for
    /// an invalid message and disconnect it for, with LimitsExceeded in its own domain, and
    /// answers the next call as before.
    @Test("an array over 64 MiB is answered LimitsExceeded, and the connection goes on")
    func arrayOverSpecification() async throws {
        let bus = try PrivateBus()
        let connections = try await connect(2, to: bus)
        let (server, client) = (connections[0], connections[1])
        defer { server.close(); client.close() }
        server.objects.errorNames = ObjectServer.ErrorNames(domain: "org.bgpolicy.Error.")
        try server.objects.export([Self.interface()], at: Self.path)
        let serving = startServing(server)
        defer { serving.cancel() }

        try await withTimeout(.seconds(30), "the calls") {
            let text = await expectRemoteError("org.bgpolicy.Error.LimitsExceeded") {
                _ = try await client.call(destination: server.uniqueName, path: Self.path, interface: Self.name, member: "Huge", timeout: .seconds(25))
            }
            let words = text ?? ""
            #expect(words.contains("\(Self.name).Huge"), "\(words)")
            #expect(words.contains("64 MiB (67108864 bytes) D-Bus allows an array"), "\(words)")
            #expect(words.contains("Ask for less in one call."), "\(words)")
            let ping = try await client.call(destination: server.uniqueName, path: Self.path, interface: Self.name, member: "Ping", timeout: .seconds(5))
            #expect(ping == [.int32(7)])
        }
        #expect(server.isConnected)
    }
}
