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
