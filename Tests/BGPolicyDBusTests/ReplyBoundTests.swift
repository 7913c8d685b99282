import Foundation
import BGPolicyTestSupport
import Testing

@testable import BGPolicyDBus

/// `ObjectServer.Limits.maximumReplyBytes`, on a bus that takes no more: what the bus would
/// disconnect the server for is refused before it is sent.
@Suite("The bound on a reply's size")
struct ReplyBoundTests {
    @Test("a reply over maximumReplyBytes is refused with its size and the method's advice, the server kept on the bus",
          arguments: ["List", "Status"])
    func overTheBound(member: String) async throws {
        let (bus, directory) = try OversizedReplyTests.bus(maximumMessageSize: 1 << 20)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let connections = try await connect(2, to: bus)
        let (server, client) = (connections[0], connections[1])
        defer { server.close(); client.close() }
        server.objects.limits.maximumReplyBytes = 1 << 20
        let interface = OversizedReplyTests.interface()
            .whenReplyTooLarge("List", advise: "List fewer.")
            .whenReplyTooLarge("Status", advise: "Ask for less status.")
        try server.objects.export([interface], at: OversizedReplyTests.path)
        let serving = startServing(server)
        defer { serving.cancel() }
        @Sendable func call(_ member: String, _ body: [DBusValue] = []) async throws -> [DBusValue] {
            try await client.call(
                destination: server.uniqueName, path: OversizedReplyTests.path, interface: OversizedReplyTests.name, member: member, body,
                timeout: .seconds(10))
        }

        try await withTimeout(.seconds(30), "the calls") {
            // Under the bound: sent, and the bus takes it.
            let fits = try await call(member, [.uint32(100), .uint32(8 << 10)])
            guard case .array(_, let items)? = fits.first else { throw DBusError.usage("not an array: \(fits)") }
            #expect(items.count == 100)
            // 400 entries of 8 KiB, over 3 MiB: refused once 1 MiB is passed, about the 128th.
            let text = await expectRemoteError(ObjectServer.ErrorNames().limitsExceeded) {
                _ = try await call(member, [.uint32(400), .uint32(8 << 10)])
            }
            let words = text ?? ""
            #expect(words.hasPrefix("the reply to \(OversizedReplyTests.name).\(member) is too large to send in one D-Bus message: "), "\(words)")
            #expect(words.contains("an array of 400 elements would take about 3.1 MiB (more than 1 MiB by its 128th)"), "\(words)")
            #expect(words.contains("over the 1 MiB (1048576 bytes) this connection sends in one message"), "\(words)")
            #expect(words.hasSuffix(member == "List" ? "List fewer." : "Ask for less status."), "\(words)")
            // The bus did not disconnect the server: it answers, and is still on the bus.
            #expect(try await call("Ping") == [.int32(7)])
            #expect(try await call(member, [.uint32(1), .uint32(8)]).count == 1)
        }
        #expect(server.isConnected)
        #expect(try await server.busID().count == 32)
    }

    @Test("advice for a method that is not described is refused at export")
    func adviceForNoMethod() throws {
        let server = ObjectServer.detached()
        #expect(throws: DBusError.usage("\(OversizedReplyTests.name).Nope has advice for a reply too large but is not described")) {
            try server.export([OversizedReplyTests.interface().whenReplyTooLarge("Nope", advise: "x")], at: OversizedReplyTests.path)
        }
    }
}
