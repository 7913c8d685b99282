@testable import BGPolicyAgent
import BGPolicyDBus
import Testing

/// Which failed `FreezeUnit` or `SetUnitProperties` calls of the CPU monitor were surely not
/// done (`TaskEngine.isRefusal`). Any other is taken as done and undone at the slice's end: a
/// freeze systemd made after the agent stopped waiting, and forgot, stayed for good.
@Suite("enforcement refusals")
struct EnforcementRefusalTests {
    @Test(arguments: [
        "org.freedesktop.systemd1.NoSuchUnit", "org.freedesktop.systemd1.UnitInactive",
        "org.freedesktop.DBus.Error.AccessDenied", "org.freedesktop.DBus.Error.ServiceUnknown",
        "org.freedesktop.DBus.Error.NotSupported",
    ])
    func refused(name: String) {
        #expect(TaskEngine.isRefusal(DBusError.remote(name: name, message: "no")))
    }

    @Test(arguments: [
        "org.freedesktop.DBus.Error.NoReply", "org.freedesktop.DBus.Error.Disconnected",
        "org.freedesktop.DBus.Error.Timeout", "org.freedesktop.DBus.Error.TimedOut",
    ])
    func perhapsDone(name: String) {
        #expect(!TaskEngine.isRefusal(DBusError.remote(name: name, message: "no")))
    }

    @Test func notSentOrNotKnown() {
        #expect(TaskEngine.isRefusal(DBusError.invalidValue("a CPU quota is at least 1 %, not 0 %")))
        #expect(!TaskEngine.isRefusal(DBusError.disconnected))
        #expect(!TaskEngine.isRefusal(CancellationError()))
    }
}
