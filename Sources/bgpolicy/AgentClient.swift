import ArgumentParser
import BGPolicyCore
import BGPolicyDBus
import Glibc
import Synchronization

/// The CLI's one way to reach the agent: the session bus, with errors a person can act on.
struct AgentClient {
    let connection: DBusConnection
    /// Whether a call may start the agent by D-Bus activation (not for shell completion).
    var startsAgent = true
    /// How long a call waits for the agent's answer, unless the method says otherwise.
    var answerTimeout = Self.defaultAnswerTimeout

    /// Connects to the session bus, or fails with a message that says what to do.
    /// `startingAgent`: whether the calls may start the agent by D-Bus activation. The commands
    /// that change something may (the agent is needed for it); those that only look do not,
    /// so that `bgpolicy status` after `systemctl --user stop bgpolicyd` says it is not
    /// running rather than start it to say it runs.
    static func connect(startingAgent: Bool) async throws -> AgentClient {
        do {
            return AgentClient(connection: try await sessionBus(within: defaultAnswerTimeout), startsAgent: startingAgent)
        } catch let error as DBusError {
            throw unreachable(error)
        }
    }

    /// No session bus to connect to. When DBUS_SESSION_BUS_ADDRESS names one, the fault is most
    /// often the variable's (a typo, or an address left from an earlier login in a tmux or
    /// screen session), and libdbus's words ("Address does not contain a colon") do not say
    /// which address they are about.
    static func unreachable(_ error: DBusError) -> CLIError {
        guard let address = getenv("DBUS_SESSION_BUS_ADDRESS").map({ String(cString: $0) }), !address.isEmpty else {
            return CLIError(
                "bgpolicyd is not reachable: \(error.message)",
                hint: "Start a desktop session, or run the agent with 'make run' (which starts its own bus).")
        }
        return CLIError(
            "bgpolicyd is not reachable: \(error.message) (DBUS_SESSION_BUS_ADDRESS=\(address))",
            hint: "Check DBUS_SESSION_BUS_ADDRESS: one left from an earlier login (in tmux or screen) names a bus "
                + "that is gone; unset, bgpolicy uses $XDG_RUNTIME_DIR/bus.")
    }

    /// The session bus, or `CLIError` once `timeout` has passed without it. Connecting waits
    /// for the bus to answer `Hello`, and libdbus sets that wait no limit: a bus that takes the
    /// connection but never answers (a dbus-daemon stopped or stuck, a socket some other
    /// program listens on) would hold bgpolicy, and a shell's TAB, for good. The connection's
    /// thread left waiting ends with the process.
    static func sessionBus(within timeout: Duration) async throws -> DBusConnection {
        try await withCheckedThrowingContinuation { continuation in
            let first = FirstAnswer(continuation)
            let timer = Task {
                try await Task.sleep(for: timeout)
                let address = (try? DBusConnection.address(for: .session)) ?? "unknown"
                first.give(.failure(CLIError(
                    "the session bus did not answer within \(timeout.components.seconds) seconds (\(address)).",
                    hint: "Its dbus-daemon may be stopped or stuck; check DBUS_SESSION_BUS_ADDRESS, or log in again.")))
            }
            Task {
                do {
                    first.give(.success(try await DBusConnection.connect(to: .session)))
                } catch {
                    first.give(.failure(error))
                }
                timer.cancel()
            }
        }
    }

    /// `answerTimeout`, unless the caller sets another.
    static let defaultAnswerTimeout: Duration = .seconds(10)

    /// Calls a method of the agent's object and returns its reply body. `timeout`: longer for
    /// a method whose answer waits on an app (`SimulateLaunch`); else `answerTimeout`.
    func call(_ interface: String, _ member: String, _ body: [DBusValue] = [], timeout: Duration? = nil)
        async throws -> [DBusValue]
    {
        let timeout = timeout ?? answerTimeout
        var message = Message.methodCall(
            destination: BGPolicyNames.busName, path: try ObjectPath(BGPolicyNames.objectPath),
            interface: interface, member: member, body: body)
        message.noAutoStart = !startsAgent
        do {
            return try await connection.call(message, timeout: timeout).body
        } catch DBusError.remote(let name, let message) {
            switch name {
            case DBusError.serviceUnknown, DBusError.nameHasNoOwner, "org.freedesktop.DBus.Error.Spawn.ServiceNotFound":
                throw CLIError(
                    "bgpolicyd is not running on this session bus (nobody owns \(BGPolicyNames.busName)).",
                    hint: "Start it with 'systemctl --user start bgpolicyd' ('systemctl --user enable --now bgpolicyd' also starts it at every login), or from a source tree with 'make run'.")
            case DBusError.noReply where message.contains("disconnected"):
                // The bus's words when the agent leaves the bus before it answers.
                throw CLIError(
                    "bgpolicyd stopped before it answered (\(message)).",
                    hint: "Check its log with 'journalctl --user -u bgpolicyd', then try again.")
            case DBusError.noReply:
                throw CLIError(
                    "bgpolicyd did not answer within \(timeout.components.seconds) seconds.",
                    hint: "Check its log with 'journalctl --user -u bgpolicyd'.")
            // Under systemd, dbus-daemon has the user manager start the unit the activation
            // file names (SystemdService=dbus-org.bgpolicy.Agent1.service, an alias that
            // `systemctl --user enable bgpolicyd` makes), and passes its refusal on.
            case "org.freedesktop.systemd1.NoSuchUnit":
                throw CLIError(
                    "bgpolicyd is not running and is not enabled, so the bus cannot start it (\(message)).",
                    hint: "Enable and start it with 'systemctl --user enable --now bgpolicyd'.")
            case "org.freedesktop.systemd1.UnitMasked":
                throw CLIError(
                    "bgpolicyd is not running and is masked, so the bus cannot start it (\(message)).",
                    hint: "Unmask it with 'systemctl --user unmask bgpolicyd', then 'systemctl --user enable --now bgpolicyd'.")
            case _ where name.hasPrefix("org.freedesktop.DBus.Error.Spawn.") || name.hasPrefix("org.freedesktop.systemd1."):
                throw CLIError(
                    "the bus could not start bgpolicyd: \(message) (\(name)).",
                    hint: "Check 'journalctl --user -u bgpolicyd' and 'systemctl --user status bgpolicyd'.")
            case _ where name.hasPrefix(BGPolicyNames.errorPrefix):
                // The agent's own refusal: the command adds the hint that fits (ExitStatus).
                throw AgentRefusal(dbusName: name, message: message)
            default:
                throw CLIError(
                    "bgpolicyd refused: \(message) (\(name))",
                    hint: "Check its log with 'journalctl --user -u bgpolicyd'.")
            }
        }
    }

    func close() { connection.close() }
}

/// A failure reported to the person at the terminal: the problem, then what to do.
struct CLIError: Error, CustomStringConvertible {
    let message: String
    let hint: String?
    init(_ message: String, hint: String? = nil) {
        self.message = message
        self.hint = hint
    }
    var description: String { hint.map { "\(message)\n\($0)" } ?? message }
}

/// Resumes `sessionBus(within:)` with the first answer, the connection or the timeout; a
/// connection that comes after the timeout is closed.
private final class FirstAnswer: Sendable {
    private let waiter: Mutex<CheckedContinuation<DBusConnection, any Error>?>

    init(_ waiter: CheckedContinuation<DBusConnection, any Error>) { self.waiter = Mutex(waiter) }

    func give(_ answer: Result<DBusConnection, any Error>) {
        guard let waiter = waiter.withLock({ waiter in defer { waiter = nil }; return waiter }) else {
            if case .success(let late) = answer { late.close() }
            return
        }
        waiter.resume(with: answer)
    }
}
