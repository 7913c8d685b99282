import Foundation
import Glibc
import BGPolicyTestSupport
import Testing

@testable import BGPolicyDBus

/// A connection that cannot pass file descriptors (TCP) says so for a message that carries
/// one, wherever it is in the body: not "disconnected".
@Suite("File descriptors on a connection that cannot pass them")
struct FileDescriptorTransportTests {
    /// A bus on TCP, which cannot pass descriptors (anonymous authentication: TCP has no
    /// credentials to offer).
    static func tcpBus() throws -> (PrivateBus, String) {
        try configuredBus(
            named: "tcp", listen: "tcp:host=127.0.0.1,bind=127.0.0.1,port=0", auth: "ANONYMOUS", extra: "<allow_anonymous/>")
    }

    @Test("a descriptor in a variant is refused as such, before it is sent", arguments: [true, false])
    func descriptorInVariant(inVariant: Bool) async throws {
        let (bus, directory) = try Self.tcpBus()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let connection = try await DBusConnection.connect(to: .address(bus.address))
        defer { connection.close() }
        let fd = UnixFD(taking: open("/dev/null", O_RDONLY))
        let value: DBusValue = inVariant ? .variant(.unixFD(fd)) : .unixFD(fd)
        let call = Message.methodCall(
            destination: "org.bgpolicy.Test.Nobody", path: ObjectPath(checked: "/"), interface: "org.bgpolicy.Test1",
            member: "Take", body: [value])
        do {
            _ = try await connection.call(call, timeout: .seconds(5))
            Issue.record("the call succeeded")
        } catch let error as DBusError {
            guard case .invalidValue(let why) = error else {
                Issue.record("expected invalidValue, got \(error)")
                return
            }
            #expect(why.contains("cannot pass file descriptors"))
        }
        // The connection is still there.
        #expect(connection.isConnected)
        #expect(try await connection.busID().count == 32)
    }
}
