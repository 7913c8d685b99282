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

    static let notRegistered = SchedulerError(
        .notRegistered,
        "this connection has not registered: call Register(identifiers, options) first, once per connection")

    static func notPermitted(_ identifier: String, app: AppID, registered: [String]) -> SchedulerError {
        SchedulerError(
            .notPermitted,
            "\(app) did not register the task identifier '\(identifier)'; registered: "
                + (registered.isEmpty ? "none" : registered.joined(separator: ", "))
                + ". Add it to the identifiers passed to Register")
    }

    static func unknownPending(_ identifier: String, app: AppID) -> SchedulerError {
        SchedulerError(.unknownTask, "\(app) has no pending request '\(identifier)'; GetPending lists the pending ones")
    }

    static func unknownApp(_ app: String) -> SchedulerError {
        SchedulerError(.notRegistered, "no app '\(app)' has registered with the agent; 'bgpolicy apps' lists those that have")
    }

    static func invalid(_ message: String) -> SchedulerError { SchedulerError(.invalidArgument, message) }

    /// A store failure, worded for the caller: nothing was changed.
    static func storage(_ error: StoreError) -> SchedulerError {
        switch error {
        case .full:
            SchedulerError(.failed, "the agent's database is full (no space left on its disk); nothing was changed. Free some space and try again")
        default:
            SchedulerError(.failed, "the agent could not write its database (\(error)); nothing was changed. See 'journalctl --user -u bgpolicyd'")
        }
    }
}
