public import BGPolicyDBus
import BGPolicyCore

extension AgentInterfaces {
    static let asv = DBusType.dictionary(key: .string, value: .variant)
    static let aasv = DBusType.array(.dictionary(key: .string, value: .variant))

    public static let scheduler = InterfaceDescription(
        name: BGPolicyNames.schedulerInterface,
        documentation: """
            org.bgpolicy.Scheduler1:
            @short_description: Background time for apps: register, submit, complete.

            An app registers the task identifiers it will ever submit, submits requests, and
            exports org.bgpolicy.Client1 at /org/bgpolicy/Client1 so the agent can hand it time
            with RunTask. The agent knows the app by its connection: a Flatpak, snap or systemd
            app unit (app-*.scope, app-*.service) is identified by the agent itself; any other
            process names itself with the app_id option of Register. A connection sees and
            touches only its own app's requests. Errors: org.bgpolicy.Error.NotRegistered,
            NotPermitted, TooManyPendingRequests, Unavailable, InvalidArgument, AccessDenied,
            UnknownTask, LimitsExceeded (a call's arguments over 64 KiB in the wire format;
            more than 256 calls, or 4 MiB of arguments, waiting from one caller, or 8,192 calls
            or 64 MiB from all callers together; a Register of
            a new app id when the agent keeps [limits] apps already; 16 background tasks under
            way for the app; content-available wakes over the hour's allowance; usage changes faster than 60 at once, then one a second, or
            all apps' faster than 3,600 at once, then two a second), Failed (the database refused a write: nothing was changed),
            and for a call the agent cannot route UnknownObject, UnknownInterface,
            UnknownMethod, UnknownProperty or PropertyReadOnly, each with a message that
            says what to do.
            """,
        methods: [
            .init(
                "Register",
                inputs: [
                    .init("identifiers", .array(.string), "Every task identifier the app will submit, 1 to 64 of them, such as org.example.App.refresh. Replaces the list given before: a pending request of an identifier left out is cancelled."),
                    .init("options", asv, """
                        "app_id" (s) the app's id, only for processes the agent cannot identify;
                        "bus_name" (s) a well-known, D-Bus-activatable name at which the agent may start
                        the app when it is not running: the app id or a name under it
                        (org.example.App.Service), else AccessDenied; "" withdraws it, and leaving it
                        out keeps the one given before; "background_only" (b) the process shows no
                        window, so the CPU monitor may stop it with SIGSTOP when it has no systemd unit.
                        Unknown keys are refused.
                        """),
                ],
                outputs: [.init("app_id", .string, "The app id the agent knows this connection by.")],
                documentation: """
                    Register:
                    Binds this connection to an app. Call it once at start-up, before Submit. An id
                    the caller names itself is unverified: one live connection at a time may hold
                    it, and never one that an identified app uses (AccessDenied); when the app
                    itself registers, connections that claimed its id unverified lose it
                    (NotRegistered from then on). A registration
                    counts as the user opening the app, and the app is in use until its last
                    connection closes, unless the agent launched it, it runs in a unit the
                    session's XDG autostart started, or it is background_only (none of these is
                    an open, or in use), or the process started over 5 s before the agent (the
                    agent restarted: not opened again, and in use only if it was when the agent
                    stopped). Nor is it a new open while the app is in use already (an app unit of
                    it runs, or another of its connections registered), or within a minute of the
                    last open. A new app id when the agent keeps [limits] apps (4096) apps already
                    is LimitsExceeded: bgpolicy forget makes room. AccessDenied too for a connection
                    already registered as another app (one connection per app), and for an
                    identified caller naming another app id. Unavailable when the bus could not
                    be asked which process called (slow to answer, or the agent stopping): try
                    again.
                    """),
            .init(
                "Submit",
                inputs: [
                    .init("identifier", .string, "A registered task identifier. Submitting it again replaces its pending request."),
                    .init("kind", .string, "\"refresh\" (a 30 s slice, to keep content fresh) or \"processing\" (a 10 min slice, only while the machine is idle)."),
                    .init("options", asv, """
                        "earliest_begin" (x) not before this Unix time, at most 7 days ahead;
                        "requires_network" (b) only with full connectivity; "requires_external_power" (b)
                        only on AC, and a slice of processing tasks that all require it (no content-available
                        wake with them) is not watched by the CPU monitor while on AC. Either condition
                        gone while the task runs, it gets ExpireTask at once (conditions-lost, no violation);
                        "expected_duration" (u) seconds the work is expected to take. Unknown keys are refused.
                        """),
                ],
                documentation: """
                    Submit:
                    Asks for background time. An app may have 1 refresh and 10 processing requests
                    pending (TooManyPendingRequests beyond). Unavailable when the user switched the
                    app, or all background work, off. The agent delivers the request with
                    Client1.RunTask when its conditions are met.
                    """),
            .init(
                "Cancel", inputs: [.init("identifier", .string, "The pending request to cancel.")],
                documentation: "Cancel:\nRemoves a pending request. UnknownTask if the app has none with that identifier."),
            .init("CancelAll", documentation: "CancelAll:\nRemoves every pending request of the caller's app."),
            .init(
                "GetPending",
                outputs: [.init("requests", aasv, """
                    The caller's own pending requests. Keys: "identifier" (s), "kind" (s),
                    "earliest_begin" (x, when set), "requires_network" (b), "requires_external_power" (b),
                    "expected_duration" (u, when set), "submitted_at" (x), "delivery_attempts" (u) failed
                    attempts to reach the app, "last_attempt_error" (s, when one failed).
                    """)],
                documentation: "GetPending:\nLists the caller's pending requests."),
            .init(
                "Explain",
                inputs: [.init("identifier", .string, "One of the caller's task identifiers.")],
                outputs: [.init("explanation", asv, "The same keys as org.bgpolicy.Admin1.Explain.")],
                documentation: "Explain:\nWhy this request has not run yet, and the earliest time it can."),
            .init(
                "SetTaskCompleted",
                inputs: [
                    .init("task_id", .string, "The task_id RunTask gave."),
                    .init("success", .boolean, "Whether the work succeeded; false records the result as failed."),
                    .init("result", .string, "\"new-data\", \"no-data\", \"failed\" or \"\". The agent uses it to judge how often refreshing pays off."),
                ],
                documentation: """
                    SetTaskCompleted:
                    Ends a task. When every task of a slice is completed the slice closes. A task not
                    completed by its deadline is recorded as a violation, which delays the app's
                    future slices. UnknownTask if the caller's app has no such running task; Failed
                    if the agent could not store the end (a full disk): the task stays running, and
                    the app may call again.
                    """),
            .init(
                "BeginBackgroundTask",
                inputs: [.init("name", .string, "What the work is, for history and logs.")],
                outputs: [
                    .init("token", .string, "Pass it to EndBackgroundTask; ExpireTask names it."),
                    .init("seconds", .uint32, "How long the app has (30 by default)."),
                ],
                documentation: """
                    BeginBackgroundTask:
                    Time to finish work the user started, such as sending a message after the window
                    closed. Client1.ExpireTask(token) comes 5 s before the end, or at once when the
                    machine prepares for sleep, which ends it (sleep-expired, no violation).
                    Unavailable when
                    the battery is critical or the machine is going to sleep; InvalidArgument for
                    a name over 255 bytes; LimitsExceeded when the app has 16 under way.
                    """),
            .init(
                "EndBackgroundTask", inputs: [.init("token", .string, "The token BeginBackgroundTask returned.")],
                documentation: "EndBackgroundTask:\nEnds user-started work. UnknownTask for an unknown or expired token."),
            .init(
                "ReportUsage",
                inputs: [.init("state", .string, "\"foreground\" when the user brings the app up, \"background\" when they leave it.")],
                documentation: """
                    ReportUsage:
                    Tells the agent the user is using the app, for apps whose launches it cannot see.
                    An app unused for [limits] inactive_after (7 days by default) gets no background
                    launches until it is used again.
                    "background" may start the app's pending refresh at once, when the planner has
                    learned that the user often comes back to the app soon. While an app unit of
                    the app that the user opened runs, the agent saw the launch: "foreground" of the
                    app in use is no second open; "background" is a leave, and "foreground" after it
                    an open. A report of the state reported last changes nothing. An app may have
                    60 changes recorded at once, then one a second, and all apps together 3,600 at
                    once, then two a second: LimitsExceeded past that (not recorded; send it again
                    later).
                    """),
            .init(
                "GetRefreshStatus",
                outputs: [.init("status", .string, "\"available\", \"denied\" (the user switched this app off) or \"restricted\" (all background work off, power saver, or low battery).")],
                documentation: "GetRefreshStatus:\nWhether background refresh can run for the caller's app."),
            .init(
                "NotifyContentAvailable",
                inputs: [
                    .init("app_id", .string, "The registered app to wake, such as \"org.example.Mail\"."),
                    .init("payload", asv, """
                        A small hint for the app (at most 4096 bytes marshalled, no file descriptors),
                        passed in RunTask's info. The keys "slice_id" and "deadline" are reserved.
                        """),
                ],
                documentation: """
                    NotifyContentAvailable:
                    From a sync or push service: there is new content for the app. The agent wakes
                    it with Client1.RunTask(task_id, "", "content-available", 30, info) in the next
                    wake window, together with other work (sharing the slice of the app's other work
                    in that window, if any: seconds says how long). Only the newest undelivered wake
                    is kept: a second one before delivery replaces its payload. On battery each app
                    may be woken 3 times in any hour (a token bucket whose tokens come back an hour
                    after they were spent; LimitsExceeded says when the next is allowed); on AC,
                    without limit. A wake the app answers with an error of its
                    own is dropped; one answered org.bgpolicy.Error.Unavailable ("not now") waits
                    for the next window. InvalidArgument for text that is no app id, or a payload over 4096 bytes
                    marshalled, holding a file descriptor or a reserved key; NotRegistered for an app
                    that never registered.
                    """),
        ])

    /// Exported by apps, not by the agent; documented here so that `dbus/` ships it.
    public static let client = InterfaceDescription(
        name: BGPolicyNames.clientInterface,
        documentation: """
            org.bgpolicy.Client1:
            @short_description: Exported by apps at /org/bgpolicy/Client1; the agent calls it.

            An app exports this interface on the connection it registered with (and, for D-Bus
            activation, before it takes its bus_name), so that the agent can hand it time. It
            answers only the owner of org.bgpolicy.Agent1 (others: org.bgpolicy.Error.AccessDenied).
            How the agent reads a RunTask error: org.bgpolicy.Error.Unavailable is "not now" (the
            Swift library answers it on a connection it is closing), and the work waits for the
            next window; any other error of the app's own refuses a content-available wake,
            which is dropped; a request is put back, its next try later each time.
            """,
        methods: [
            .init(
                "RunTask",
                inputs: [
                    .init("task_id", .string, "Pass it to Scheduler1.SetTaskCompleted when the work is done."),
                    .init("identifier", .string, "The submitted task identifier."),
                    .init("kind", .string, "\"refresh\", \"processing\" or \"content-available\"; \"transfers\" is reserved for background transfers, a later step, and not sent yet."),
                    .init("seconds", .uint32, "How long the app has, counted when the agent sent the call; an app the bus starts for it gets it once started, so rely on info[\"deadline\"] instead."),
                    .init("info", asv, "\"slice_id\" (s) tasks with the same slice_id share one slice; \"deadline\" (x) the Unix time the slice ends; for \"content-available\", the payload's keys too."),
                ],
                documentation: """
                    RunTask:
                    Starts one task. Reply at once and do the work afterwards: the agent waits at most
                    10 s for the reply (25 s when it started the app by D-Bus activation). A reply
                    later than that is too late: the task is put back, and ExpireTask follows.
                    """),
            .init(
                "ExpireTask",
                inputs: [.init("task_id", .string, "A task_id from RunTask, or a token from BeginBackgroundTask.")],
                documentation: """
                    ExpireTask:
                    Stop, save, and call SetTaskCompleted (or EndBackgroundTask) now. Sent when time is
                    nearly up (5 s before the deadline), when the task uses too much CPU, and for
                    Admin1.SimulateExpiration; the task still runs to its deadline then. Also sent
                    when the machine is going to sleep, the user switches the app's background work
                    off, the agent stops, (for processing) the user comes back, or a condition the
                    task asked for goes (the charger for requires_external_power, full connectivity
                    for requires_network); to a connection that loses an unverified app id to the
                    app itself; and for a RunTask not answered in time, which the app may read late.
                    In those cases the task is already closed when ExpireTask arrives, and a
                    SetTaskCompleted or EndBackgroundTask for it gets UnknownTask.
                    """),
        ])
}
