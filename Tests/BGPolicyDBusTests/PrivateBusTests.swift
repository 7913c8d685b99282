import BGPolicyTestSupport
import Glibc
import Testing

/// A test's private dbus-daemon leaves no socket file behind in /tmp once the test is done with
/// it, also after a crash, whose socket file stays until then, as a crashed daemon's does.
@Suite("A private bus's socket file")
struct PrivateBusTests {
    @Test("goes when the bus is released; a crashed bus keeps it until then")
    func socketFileGoes() throws {
        for crashes in [false, true] {
            var bus: PrivateBus? = try PrivateBus()
            let paths = PrivateBus.socketPaths(in: bus!.address)
            #expect(paths.count == 1, "\(bus!.address)")
            #expect(paths.allSatisfy { access($0, F_OK) == 0 })
            if crashes {
                bus!.crash()
                #expect(paths.allSatisfy { access($0, F_OK) == 0 }, "a crashed bus's socket is gone early")
            }
            bus = nil
            #expect(paths.allSatisfy { access($0, F_OK) != 0 }, "crashed: \(crashes)")
        }
    }

    @Test("is read from the address: unix:path= only, unescaped")
    func socketPathsFromAddress() {
        #expect(PrivateBus.socketPaths(in: "unix:path=/tmp/dbus-AbC,guid=0f") == ["/tmp/dbus-AbC"])
        #expect(PrivateBus.socketPaths(in: "unix:guid=0f,path=/tmp/a%2cb%25") == ["/tmp/a,b%"])
        #expect(PrivateBus.socketPaths(in: "unix:abstract=/tmp/dbus-x,guid=0f;tcp:host=localhost,port=1") == [])
        #expect(PrivateBus.socketPaths(in: "tcp:host=localhost,port=1;unix:path=/tmp/s") == ["/tmp/s"])
    }
}
