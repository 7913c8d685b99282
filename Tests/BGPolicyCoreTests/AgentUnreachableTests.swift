@testable import BGPolicyCore
import Testing

@Suite("AgentUnreachable")
struct AgentUnreachableTests {
    /// Each error the bus (or, under systemd, the user manager through it) answers with when
    /// the agent is not there, with what the advice must say.
    @Test(arguments: [
        ("org.freedesktop.DBus.Error.ServiceUnknown", AgentUnreachable.Cause.notRunning, "systemctl --user start bgpolicyd"),
        ("org.freedesktop.DBus.Error.NameHasNoOwner", .notRunning, "systemctl --user start bgpolicyd"),
        ("org.freedesktop.DBus.Error.Spawn.ServiceNotFound", .notRunning, "systemctl --user start bgpolicyd"),
        ("org.freedesktop.DBus.Error.Disconnected", .notRunning, "systemctl --user start bgpolicyd"),
        ("org.freedesktop.systemd1.NoSuchUnit", .notEnabled, "systemctl --user enable --now bgpolicyd"),
        ("org.freedesktop.systemd1.UnitMasked", .masked, "systemctl --user unmask bgpolicyd"),
        ("org.freedesktop.systemd1.ShuttingDown", .couldNotStart, "journalctl --user -u bgpolicyd"),
        ("org.freedesktop.DBus.Error.Spawn.ChildExited", .couldNotStart, "journalctl --user -u bgpolicyd"),
    ])
    func agentMissing(name: String, cause: AgentUnreachable.Cause, advice: String) throws {
        let reading = try #require(AgentUnreachable(dbusErrorName: name, message: "the bus's words"))
        #expect(reading.cause == cause)
        #expect(reading.agentIsMissing)
        #expect(reading.problem.contains("the bus's words"))
        #expect(reading.remedy.contains(advice), "\(reading.remedy)")
        // Clauses, for each caller to make its own sentences of.
        for clause in [reading.problem, reading.remedy] {
            #expect(clause.first?.isUppercase == false && clause.last != ".", "\(clause)")
        }
    }

    /// dbus-broker answers a failed activation with NameHasNoOwner and its reason in words;
    /// read as "not running", the advice to start the unit by hand fails for a masked one.
    @Test(arguments: [
        ("activation request failed: unknown unit", AgentUnreachable.Cause.notEnabled, "systemctl --user enable --now bgpolicyd"),
        ("activation request failed: unit is masked", .masked, "systemctl --user unmask bgpolicyd"),
        ("activation request failed: unit failed", .couldNotStart, "journalctl --user -u bgpolicyd"),
    ])
    func dbusBrokerActivationFailure(reason: String, cause: AgentUnreachable.Cause, advice: String) throws {
        let message = "Could not activate remote peer 'org.bgpolicy.Agent1': \(reason)"
        let reading = try #require(AgentUnreachable(dbusErrorName: "org.freedesktop.DBus.Error.NameHasNoOwner", message: message))
        #expect(reading.cause == cause)
        #expect(reading.remedy.contains(advice), "\(reading.remedy)")
    }

    @Test func anOtherwiseUnknownStartFailureIsNamed() throws {
        let reading = try #require(AgentUnreachable(dbusErrorName: "org.freedesktop.systemd1.ShuttingDown", message: "Refusing."))
        #expect(reading.problem == "the bus could not start bgpolicyd: Refusing. (org.freedesktop.systemd1.ShuttingDown)")
    }

    /// The bus's NoReply when the agent left it mid-call: not "missing", since the call may
    /// have taken effect; a NoReply that is a plain timeout is not read at all.
    @Test func goneBeforeAnswering() throws {
        let gone = try #require(AgentUnreachable(
            dbusErrorName: "org.freedesktop.DBus.Error.NoReply",
            message: "Message recipient disconnected from message bus without replying"))
        #expect(gone.cause == .stoppedBeforeAnswering)
        #expect(!gone.agentIsMissing)
        #expect(gone.problem.contains("whether the call took effect is not known"))
        #expect(AgentUnreachable(dbusErrorName: "org.freedesktop.DBus.Error.NoReply", message: "Did not receive a reply.") == nil)
    }

    /// The agent's own errors, and everyone else's, are the caller's to read.
    @Test(arguments: [
        "org.bgpolicy.Error.NotRegistered", "org.freedesktop.DBus.Error.AccessDenied",
        "org.freedesktop.DBus.Error.UnknownMethod", "org.freedesktop.DBus.Error.TimedOut", "com.example.Error",
    ])
    func notOurs(name: String) {
        #expect(AgentUnreachable(dbusErrorName: name, message: "x") == nil)
    }
}
