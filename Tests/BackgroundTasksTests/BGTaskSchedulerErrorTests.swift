@testable import BackgroundTasks
import BGPolicyCore
import BGPolicyDBus
import Testing

@Suite("D-Bus errors become BGTaskSchedulerError codes")
struct BGTaskSchedulerErrorTests {
    static let agentErrors: [(BGPolicyErrorName, BGTaskSchedulerError.Code)] = [
        (.notRegistered, .notRegistered), (.notPermitted, .notPermitted),
        (.tooManyPendingRequests, .tooManyPendingTaskRequests), (.unavailable, .unavailable),
        (.invalidArgument, .invalidArgument), (.accessDenied, .accessDenied), (.unknownTask, .unknownTask),
        (.limitsExceeded, .limitsExceeded), (.failed, .failed),
        (.unknownObject, .other), (.unknownInterface, .other), (.unknownMethod, .other), (.unknownProperty, .other),
        (.propertyReadOnly, .other),
    ]

    @Test("every org.bgpolicy.Error name has a code")
    func everyNameIsMapped() {
        #expect(Set(Self.agentErrors.map(\.0)) == Set(BGPolicyErrorName.allCases))
    }

    @Test("the agent's errors", arguments: agentErrors)
    func agentError(name: BGPolicyErrorName, code: BGTaskSchedulerError.Code) {
        let error = BGTaskSchedulerError(DBusError.remote(name: name.dbusName, message: "the agent's words"))
        #expect(error.code == code)
        #expect(error.message == "the agent's words")
        #expect(error.dbusErrorName == name.dbusName)
    }

    @Test("no agent on the bus", arguments: [
        DBusError.serviceUnknown, DBusError.nameHasNoOwner, "org.freedesktop.DBus.Error.Spawn.ServiceNotFound",
        "org.freedesktop.DBus.Error.Spawn.ChildExited",
    ])
    func agentNotRunning(name: String) {
        let error = BGTaskSchedulerError(DBusError.remote(name: name, message: "nobody home"))
        #expect(error.code == .agentNotRunning)
        #expect(error.message.contains("nobody home"))
    }

    /// Under systemd, dbus-daemon asks the user manager to start the agent's unit, and passes
    /// its refusal on: an installed agent the user has not enabled answers NoSuchUnit.
    @Test("the user manager cannot start the agent", arguments: [
        ("org.freedesktop.systemd1.NoSuchUnit", "systemctl --user enable --now bgpolicyd"),
        ("org.freedesktop.systemd1.UnitMasked", "systemctl --user unmask bgpolicyd"),
        ("org.freedesktop.systemd1.ShuttingDown", "journalctl --user -u bgpolicyd"),
        ("org.freedesktop.DBus.Error.Spawn.ChildExited", "journalctl --user -u bgpolicyd"),
    ])
    func agentCannotStart(name: String, hint: String) {
        let error = BGTaskSchedulerError(DBusError.remote(name: name, message: "Unit dbus-org.bgpolicy.Agent1.service not found."))
        #expect(error.code == .agentNotRunning)
        #expect(error.message.contains("Unit dbus-org.bgpolicy.Agent1.service not found.") && error.message.contains(hint), "\(error.message)")
    }

    @Test("other D-Bus errors", arguments: [
        DBusError.noReply, DBusError.unknownMethod, "org.freedesktop.DBus.Error.AccessDenied", "org.bgpolicy.Error.NoSuchThing",
        "com.example.Error",
    ])
    func otherRemote(name: String) {
        #expect(BGTaskSchedulerError(DBusError.remote(name: name, message: "")).code == .other)
    }

    @Test("local failures")
    func local() {
        #expect(BGTaskSchedulerError(DBusError.disconnected).code == .agentNotRunning)
        #expect(BGTaskSchedulerError(DBusError.connectionFailed(name: "x.y", message: "no bus")).code == .agentNotRunning)
        #expect(BGTaskSchedulerError(DBusError.typeMismatch(expected: "s", got: "u")).code == .other)
        #expect(BGTaskSchedulerError(CancellationError()).code == .other)
        let original = BGTaskSchedulerError(.unknownTask, "gone")
        #expect(BGTaskSchedulerError(original) == original)
    }

    @Test("the description names the code")
    func description() {
        #expect("\(BGTaskSchedulerError(.unavailable, "switched off"))" == "unavailable: switched off")
    }
}
