import BGPolicyCore
import BGPolicyDBus

/// `org.bgpolicy.Client1`, which every app exports at `/org/bgpolicy/Client1` so the agent can
/// launch and warn it (SPEC §3). Described here so that the library's introspection data says
/// what the contract says.
enum ClientInterface {
    static let description = InterfaceDescription(
        name: BGPolicyNames.clientInterface,
        documentation: """
            org.bgpolicy.Client1:
            @short_description: Exported by apps at /org/bgpolicy/Client1; called by bgpolicyd.

            Only the owner of org.bgpolicy.Agent1 may call it; others get
            org.bgpolicy.Error.AccessDenied. A call that reaches a connection the app is closing
            (BGTaskScheduler.disconnect()) gets org.bgpolicy.Error.Unavailable: the agent ends
            the work it granted there with the connection. A call with arguments of the wrong types gets
            org.bgpolicy.Error.InvalidArgument, naming the types the method takes.
            """,
        methods: [
            .init(
                "RunTask",
                inputs: [
                    .init("task_id", .string, "The agent's id for this run; pass it to Scheduler1.SetTaskCompleted."),
                    .init("identifier", .string, "The identifier of the request being delivered."),
                    .init("kind", .string, "refresh, processing or content-available; transfers is reserved, and not sent yet."),
                    .init("seconds", .uint32, "The time granted, from now."),
                    .init(
                        "info", .dictionary(key: .string, value: .variant),
                        "\"slice_id\" (s) the slice this task runs in; \"deadline\" (x) when it ends, in Unix seconds."),
                ],
                documentation: """
                    RunTask:
                    Starts a task. The app replies at once, does the work asynchronously, then calls
                    org.bgpolicy.Scheduler1.SetTaskCompleted with the same task_id.
                    """),
            .init(
                "ExpireTask",
                inputs: [.init("task_id", .string, "A RunTask task_id or a BeginBackgroundTask token.")],
                documentation: """
                    ExpireTask:
                    The slice or background task ends in a few seconds (or the app used too much CPU):
                    stop the work and complete it now.
                    """),
        ])
}

/// An error the app sends back to the agent from a Client1 call, in the agent's own domain.
struct ClientCallError: DBusErrorConvertible {
    let name: BGPolicyErrorName
    let message: String

    init(_ name: BGPolicyErrorName, _ message: String) {
        self.name = name
        self.message = message
    }

    var dbusErrorName: String { name.dbusName }
    var dbusErrorMessage: String { message }
}
