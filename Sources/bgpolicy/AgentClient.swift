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
            // No hint: the message says what to do (a desktop session, or 'dbus-run-session'),
            // and a second line saying it again, with 'make run' for developers, told a user of
            // an installed bgpolicy of a make target they do not have.
            return CLIError("bgpolicyd is not reachable: \(error.message)")
        }
        return CLIError(
            "bgpolicyd is not reachable: \(error.message) (DBUS_SESSION_BUS_ADDRESS=\(address))",
            hint: "Check DBUS_SESSION_BUS_ADDRESS: one left from an earlier login (in tmux or screen) names a bus "
                + "that is gone; unset, bgpolicy uses $XDG_RUNTIME_DIR/bus.")
    }

    /// The session bus, or `CLIError` once `timeout` has passed without it: a bus that takes
    /// the connection but never answers (a dbus-daemon stopped or stuck, a socket some other
    /// program listens on) must not hold bgpolicy, or a shell's TAB, for good. `connect`'s own
    /// timeout covers `Hello`, not the socket's `connect(2)`, which libdbus makes blocking: a
    /// stopped dbus-daemon whose backlog has filled holds it with no limit. So the wait is raced
    /// against a timer, which wins (`connect` is given a second more, so the message is always
    /// this one); the connection's thread left waiting ends with the process.
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
                    first.give(.success(try await DBusConnection.connect(to: .session, timeout: timeout + .seconds(1))))
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
            // Not there, and the bus could not start it (under systemd the user manager's
            // refusal, passed on), or gone before it answered: the library says the same.
            if let unreachable = AgentUnreachable(dbusErrorName: name, message: message) {
                let remedy = unreachable.remedy
                // The problem keeps its lower-case "bgpolicyd"; the hint is a sentence.
                throw CLIError(unreachable.problem + ".", hint: remedy.prefix(1).uppercased() + remedy.dropFirst() + ".")
            }
            switch name {
            case DBusError.noReply:
                throw CLIError(
                    "bgpolicyd did not answer within \(timeout.components.seconds) seconds.",
                    hint: "Check its log with 'journalctl --user -u bgpolicyd'.")
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
