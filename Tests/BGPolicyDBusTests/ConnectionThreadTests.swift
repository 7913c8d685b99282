import Glibc
import Logging
import BGPolicyTestSupport
import Testing

@testable import BGPolicyDBus

@Suite("A connection whose thread cannot start")
struct ConnectionThreadTests {
    @Test("connect throws connectionFailed, rather than returning a connection whose calls hang")
    func threadCannotStart() async throws {
        let bus = try PrivateBus()
        do {
            let connection = try await withTimeout(.seconds(5), "connect") {
                try await DBusConnection.connect(to: .address(bus.address), logger: Logger(label: "test"), spawn: { _, _ in EAGAIN })
            }
            Issue.record("connect returned \(connection.uniqueName)")
        } catch DBusError.connectionFailed(_, let message) {
            #expect(message.contains("could not start the D-Bus thread"), "\(message)")
        }
        // An ordinary connect still works.
        let connection = try await DBusConnection.connect(to: .address(bus.address))
        #expect(connection.uniqueName.hasPrefix(":"))
        connection.close()
    }
}
