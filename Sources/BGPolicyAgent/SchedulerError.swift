import BGPolicyCore
import BGPolicyDBus
import BGPolicyStore

/// An `org.bgpolicy.Error.*` reply from `Scheduler1` or `Admin1`, with a message that says
/// what happened and what to do.
struct SchedulerError: DBusErrorConvertible, CustomStringConvertible {
    let name: BGPolicyErrorName
    let message: String

    init(_ name: BGPolicyErrorName, _ message: String) {
        self.name = name
        self.message = message
    }

    var dbusErrorName: String { name.dbusName }
    var dbusErrorMessage: String { message }
    var description: String { "\(name.dbusName): \(message)" }

    /// Caller-supplied text as a message quotes it: whole when short, else its start and its
    /// length, so that a message stays short and readable whatever was sent (a 100-kB
    /// identifier is answered in a line).
    /// `over` and `keeping` set the bounds for longer text (an app's own error message).
    static func shown(_ text: String, over: Int = 80, keeping: Int = 48) -> String {
        guard text.utf8.count > over else { return text }
        return String(String.UnicodeScalarView(text.unicodeScalars.prefix(keeping))) + "… (\(text.utf8.count) bytes)"
    }

    static let notRegistered = SchedulerError(
        .notRegistered,
        "this connection has not registered: call Register(identifiers, options) first, once per connection")

    static func notPermitted(_ identifier: String, app: AppID, registered: [String]) -> SchedulerError {
        SchedulerError(
            .notPermitted,
            "\(app) did not register the task identifier '\(shown(identifier))'; registered: "
                + (registered.isEmpty ? "none" : registered.joined(separator: ", "))
                + ". Add it to the identifiers passed to Register")
    }

    /// `lister`: the method that lists the pending requests for the caller: `GetPending` for
    /// the app itself, `ListPending` (Admin1) for the admin side, whose caller is most often a
    /// person at `bgpolicy`: named by the command that reads it, `bgpolicy pending APP` (a D-Bus
    /// method means nothing there, and `bgpolicy` leaves out its own hint when the message
    /// names that command).
    static func unknownPending(_ identifier: String, app: AppID, lister: String = "GetPending") -> SchedulerError {
        let where_ = lister == "ListPending" ? "'bgpolicy pending \(app)'" : lister
        return SchedulerError(.unknownTask, "\(app) has no pending request '\(shown(identifier))'; \(where_) lists the pending ones")
    }

    static func unknownApp(_ app: String) -> SchedulerError {
        SchedulerError(.notRegistered, "no app '\(shown(app))' has registered with the agent; 'bgpolicy apps' lists those that have")
    }

    static func invalid(_ message: String) -> SchedulerError { SchedulerError(.invalidArgument, message) }

    /// The app id a caller named, or `InvalidArgument` with the rule it breaks: text that is no
    /// app id at all is a mistake in the call, not an app that has not registered, and
    /// `NotRegistered` would send the user looking for an app that cannot exist.
    static func appID(_ text: String) throws(SchedulerError) -> AppID {
        guard let appID = AppID(rawValue: text) else {
            throw .invalid("'\(shown(text))' is not an app id: \(AppID.problem(with: text) ?? "invalid")")
        }
        return appID
    }

    /// `Admin1.Reload` of a file that cannot be read or is not valid: `why` is the parser's
    /// message, as a start would give it and `GetStatus`'s `config_error` shows it (the file,
    /// the line, the key and what would be valid). The agent goes on with the configuration it
    /// had. InvalidArgument: the one thing wrong is the file the caller asked the agent to use.
    static func notReloaded(_ why: String) -> SchedulerError {
        SchedulerError(.invalidArgument, "not reloaded, the agent goes on with the configuration it had: \(why)")
    }

    /// A store failure, worded for the caller: nothing was changed.
    static func storage(_ error: StoreError) -> SchedulerError {
        switch error {
        case .full:
            SchedulerError(.failed, "the agent's database is full (no space left on its disk); nothing was changed. Free some space and try again")
        case .corrupt:
            SchedulerError(.failed, "the agent's database is damaged; nothing was changed. The agent restarts to recover it "
                + "(moving the file aside and keeping what is readable): try again in a few seconds")
        default:
            SchedulerError(.failed, "the agent could not write its database (\(error)); nothing was changed. See 'journalctl --user -u bgpolicyd'")
        }
    }
}
