public import BGPolicyDBus
import BGPolicyCore

/// The agent's D-Bus interfaces, documented member by member. `dbus/*.xml` and the runtime
/// introspection are both generated from these values (`bgpolicyd --print-interface`), and a
/// test fails if the committed files differ.
public enum AgentInterfaces {
    public static let admin = InterfaceDescription(
        name: BGPolicyNames.adminInterface,
        documentation: """
            org.bgpolicy.Admin1:
            @short_description: Status and control of bgpolicyd, for the bgpolicy command and settings panels.

            Served by bgpolicyd at /org/bgpolicy/Agent1 on the session bus, under the name
            org.bgpolicy.Agent1. Errors are org.bgpolicy.Error.* with a message a person can act on;
            a call the agent cannot route gets UnknownObject, UnknownInterface, UnknownMethod,
            UnknownProperty or PropertyReadOnly (setting Conditions). Any method may also answer
            InvalidArgument (arguments of the wrong types, or a call carrying file descriptors),
            LimitsExceeded (a call's arguments over 64 KiB in the wire format; more than 256
            calls, or 4 MiB of arguments, waiting from one caller: wait for replies before
            sending more; 8,192 calls, or 64 MiB of arguments, waiting from all callers
            together: busy, try again in a moment; a reply over 32 MiB, more than a bus may take in one message: the
            message says how large it was and what to ask instead), Unavailable (the agent is stopping: call again once it is back) or
            Failed (an error of the agent's own; the message says what failed).
            Every method but GetStatus (and the Conditions property) answers AccessDenied to a
            caller in a Flatpak or snap sandbox, or one whose process the agent cannot see: an
            app schedules its own work through org.bgpolicy.Scheduler1, and these controls
            and other apps' requests and history are the user's. GetStatus leaves out for such
            a caller the keys that name apps ("running", "in_use"). When the bus could not be
            asked which process called, these methods answer Unavailable: call again.
            """,
        methods: [
            .init(
                "GetStatus",
                outputs: [
                    .init(
                        "status", .dictionary(key: .string, value: .variant),
                        """
                        A dictionary of facts about the running agent. Keys present in this version:
                        "version" (s) the agent's version; "pid" (u) its process id;
                        "started_at" (x) when it started, in Unix seconds; "uptime_seconds" (d) how long
                        it has been running, in whole seconds, from a monotonic clock; "state_dir" (s) the directory holding
                        its state; "config_source" (s) the configuration file in use, or "defaults" when
                        none exists; "config_path" (s) where the configuration is read from;
                        "config_loaded_at" (x) when the configuration in effect was read (at start, or
                        by the last reload: Reload or SIGHUP); "config_error" (s, when the last reload failed) why,
                        the agent going on with the configuration it had; "config_pending" (as, when
                        some) the knobs the file sets that take effect only at the next start, such as
                        "[refresh] strategy";
                        "conditions" (a{sv}) the same dictionary as the Conditions property;
                        "global_enabled" (b) the switch for all background work; "apps" (u) registered
                        apps; "pending" (u) pending requests of all apps; "content_wakes" (u, when some)
                        the apps with an undelivered content-available wake; "running" (aa{sv}) one entry per
                        running slice: "app_id" (s), "slice_id" (s), "task_ids" (as), "identifiers" (as),
                        "started_at" (x), "deadline" (x), "cpu_percent" (d, once measured; none while
                        the app is in use, when the CPU monitor does not watch it);
                        "next_planned_window" (x, when one is known) the earliest window any pending
                        work can run in: the earliest of the "earliest_window"s ListPending gives (none
                        while what waits can be placed only on news: a switch, the app's next use),
                        worked out at most once a second;
                        "next_window" (x, when one is due) not a window: the next time the agent will
                        look for work to start even if nothing changes (its timer; a day on when no
                        window is planned within it); "waiting" (a{su}, when something waits) what holds
                        the pending requests: for each rule (the keys Explain uses), how many requests it
                        holds, a request held by several rules counting under each; "waiting_summary" (s,
                        with it) the same in words, such as "10 wait for the session to be idle; 3 for the
                        next wake window"; "in_use" (as, when some) the apps the user has open as the
                        agent sees them (opened and not left), which the window after an open skips and
                        the CPU monitor does not watch;
                        "refresh" (a{sv}, with [refresh] strategy = predicted) the refresh planner's
                        budget and wake-ups: "budget_left" (d) refreshes left in the shared pool,
                        "budget_per_day" (d) what it gains a day and holds at most, "wakeups_24h" (u)
                        wake-ups with refreshes in the last 24 hours, "wakeups_target" (d) how many a day
                        it aims at, "wakeups_max" (u) the most it allows in any 24 hours,
                        "refresh_yield" (d) the share of its refreshes, other than those in windows
                        after use, followed by an open of the app within 15 min, recent ones counting
                        more (one half before any; the window after use weighs its refresh against
                        it), "refreshes_judged" (d) how many refreshes that share was learned from,
                        older ones counting for less (0: none yet).
                        Explain gives one request's reasons and earliest window.
                        Later versions add keys; clients must ignore keys they do not know.
                        """)
                ],
                documentation: """
                    GetStatus:
                    Returns what the agent knows about itself. Cheap: it reads no files and calls no
                    other daemon, so settings panels may call it as often as they redraw (a
                    connection's first call asks the bus which process it is, once). A caller in a
                    Flatpak or snap sandbox, or one whose process the agent cannot see, gets it
                    without "running" and "in_use", which name apps.
                    Docs/DBusAPI.md shows it called from gdbus, busctl and Python.
                    """),
            .init(
                "ListApps",
                outputs: [.init("apps", aasv, """
                    One entry per registered app: "app_id" (s); "identifiers" (as); "bus_name" (s, when
                    registered); "identity" (s) flatpak, snap, systemd-unit or unverified; "verified" (b);
                    "enabled" (b) the user's switch; "connected" (b) a connection of the app is on the bus;
                    "background_only" (b); "registered_at" (x); "last_used_at" (x, when known);
                    "pending" (u); "running" (u); "violations" (u) overruns and CPU enforcement in the
                    last 7 days; "refresh_status" (s) what GetRefreshStatus tells the app.
                    """)],
                documentation: """
                    ListApps:
                    Every app that has registered, with its switch and counts. LimitsExceeded when
                    the list would take over 32 MiB (thousands of apps with long identifiers): the
                    message says how to make it shorter.
                    """),
            .init(
                "ListPending",
                outputs: [.init("requests", aasv, """
                    Every app's pending requests, with the keys of Scheduler1.GetPending plus "app_id" (s),
                    "blocking" (as) the rules that keep it from running now, "reasons" (as) the same in
                    words, and "earliest_window" (x, when known) the earliest time it can run, as Explain
                    gives it: for a refresh under the predicted strategy, the first window that takes it
                    in the refresh plan of every app's pending refresh that GetTimeline draws. An app's
                    undelivered content-available wake is listed after its requests, with "identifier"
                    "", "kind" "content-available", "submitted_at" (x) its first notification,
                    "notifications" (u) how many it stands for (only the newest payload is kept), and
                    the same "app_id", "blocking", "reasons" and "earliest_window".
                    """)],
                documentation: """
                    ListPending:
                    What is waiting to run, and why. LimitsExceeded when the list would take over
                    32 MiB (tens of thousands of requests): the message says how to make it shorter.
                    """),
            .init(
                "GetHistory",
                inputs: [
                    .init("since", .int64, "Only entries at or after this Unix time; 0 for all that are kept."),
                    .init("limit", .uint32, "At most this many, the newest; 0 means 100, and at most 10000 are returned."),
                ],
                outputs: [.init("entries", aasv, """
                    Oldest first. Keys: "id" (x), "time" (d) Unix seconds, "event" (s), "detail" (s) in
                    words, and when known "app_id" (s), "identifier" (s), "task_id" (s), "kind" (s),
                    "result" (s), "cpu_seconds" (d) CPU the app used in the slice, "duration" (d) seconds.
                    Events: registered, submitted, replaced, cancelled, delivered, delivery-failed,
                    expiration-warned, completed, expired, vanished, interrupted, sleep-expired, switched-off, user-returned,
                    conditions-lost, cpu-warned, cpu-throttled, cpu-frozen, cpu-stopped, cpu-observed, cpu-released,
                    background-task-began, background-task-ended, background-task-expired, app-enabled,
                    app-disabled, global-enabled, global-disabled, content-queued, database-recovered; and
                    usage, only in entries older agents wrote (opens and closes now go to the usage log).
                    """)],
                documentation: """
                    GetHistory:
                    Everything the agent did, so that "it never ran" always has an answer. Failed when
                    the database cannot be read; LimitsExceeded when the entries would take over 32 MiB
                    (ask for fewer, newer, or one app's).
                    """),
            .init(
                "GetAppHistory",
                inputs: [
                    .init("app_id", .string, "An app id."),
                    .init("since", .int64, "Only entries at or after this Unix time; 0 for all that are kept."),
                    .init("limit", .uint32, "At most this many, the newest; 0 means 100, and at most 10000 are returned."),
                ],
                outputs: [.init("entries", aasv, "Oldest first, with the keys of GetHistory's; each names the app.")],
                documentation: """
                    GetAppHistory:
                    GetHistory of one app: its newest entries, however many newer ones other apps have.
                    InvalidArgument for text that is no app id; NotRegistered for an app the agent
                    neither knows nor has entries of; Failed when the database cannot be read;
                    LimitsExceeded when the entries would take over 32 MiB (ask for fewer or newer).
                    """),
            .init(
                "SetAppEnabled",
                inputs: [
                    .init("app_id", .string, "A registered app."),
                    .init("enabled", .boolean, "false stops background launches of the app and makes its Submit fail with Unavailable."),
                ],
                documentation: "SetAppEnabled:\nThe user's per-app switch; it survives restarts. Switched off, the app's running slices get ExpireTask at once and end as switched-off (no violation). InvalidArgument for text that is no app id; NotRegistered for an unknown app; Failed when the switch cannot be stored (a full disk): nothing was changed."),
            .init(
                "SetGlobalEnabled",
                inputs: [.init("enabled", .boolean, "false stops all background launches.")],
                documentation: "SetGlobalEnabled:\nThe user's switch for all background work; it survives restarts. Switched off, every running slice gets ExpireTask at once and ends as switched-off (no violation). Failed when the switch cannot be stored (a full disk): nothing was changed."),
            .init(
                "ForgetApp",
                inputs: [.init("app_id", .string, "A registered app that is not running.")],
                outputs: [.init("forgotten", asv, """
                    What was forgotten: "app_id" (s); "identifiers" (as) the task identifiers it had
                    registered; counts (u) of "pending" requests, queued "content_wakes", "history"
                    entries (its violations among them), raw "usage_events" and "usage_aggregates"
                    (hours of the week of older use), its "violations" of the last 7 days, and "rows"
                    (every stored row removed); "learned_model" (b) whether the refresh planner had
                    learned its use.
                    """)],
                documentation: """
                    ForgetApp:
                    Removes everything the agent keeps about an app, for an app that was uninstalled or
                    whose use the user wants forgotten: its registration and switch, pending requests,
                    queued content-available wake, history, usage log and what the refresh planner
                    learned of it (which stops counting toward the shared refresh budget), in memory and
                    on disk, in one transaction: on failure (Failed, a full disk) nothing is forgotten.
                    Registered again, the app starts as a new one. InvalidArgument for text that is no
                    app id (the message names the rule it breaks); NotRegistered for an unknown app;
                    NotPermitted while the app runs (connected to the bus, a slice or background task
                    under way, an app unit open): quit it first, since it would register again at once;
                    Unavailable while a delivery to it, a change to its requests, or the setting or
                    lifting of a CPU limit on it is on its way, or while a CPU limit the agent left on
                    it cannot be lifted yet (try again later).
                    """),
            .init(
                "Explain",
                inputs: [.init("app_id", .string, "A registered app."), .init("identifier", .string, "One of its task identifiers.")],
                outputs: [.init("explanation", asv, """
                    "app_id" (s), "identifier" (s), "state" (s) pending, running or not-pending,
                    "kind" (s, when pending or running), "runnable" (b) nothing blocks it,
                    "blocking" (as) rule keys: global-disabled, app-disabled, earliest-begin,
                    critical-battery, low-battery, power-saver, not-idle, no-network, no-external-power,
                    app-inactive, overrun-penalty, unreachable, app-busy, sleeping, and the planner's
                    next-window, predicted-use, refresh-interval; "reasons" (as) the same in words;
                    "summary" (s) one sentence; "earliest_window" (x, when known) the earliest wake
                    window it can run in (for a refresh under the predicted strategy, the first that
                    takes it in the plan GetTimeline draws, as ListPending gives it); and, in every
                    state, what the usage log holds of the app's opens, which the planner predicts
                    from: "opens" (u) every open recorded up to now (older than 8 weeks as counts;
                    one stamped later, while the clock was ahead, counts once its time comes),
                    "opens_last_24h" (u), "last_open" (x, when there was one). These three are left
                    out when the log cannot be read.
                    """)],
                documentation: "Explain:\nWhy a request has not run yet. InvalidArgument for text that is no app id; NotRegistered for an unknown app."),
            .init(
                "GetTimeline",
                inputs: [.init("app_id", .string, "A registered app, or \"\" for every registered app.")],
                outputs: [.init("timeline", asv, """
                    The next 24 hours as the planner sees them now: "now" (x); "start" (x) the start
                    of the first slot; "slot_seconds" (u) 900; "slots" (u) 96; "grid_seconds" (u) the
                    window grid now (900 on battery, 300 on AC); "windows" (ax) the planned wake
                    windows; "strategy" (s) the refresh strategy, "predicted" or "every-window";
                    "inactive_after_seconds" (x) [limits] inactive_after; "apps"
                    (aa{sv}) per app "app_id" (s), "probabilities" (ad) the predicted probability of an
                    open in each slot (an empty array with "every-window", which predicts nothing), "refreshes"
                    (ax) its planned refresh windows (if it resubmits after each, as apps do),
                    "pending" (as) its pending identifiers, "inactive" (b) unused for [limits]
                    inactive_after (7 days by default), so nothing is planned.
                    """)],
                documentation: """
                    GetTimeline:
                    What `bgpolicy timeline` draws. A plan, not a promise: an open, a change of
                    conditions or a new request re-plans. InvalidArgument for text that is no app id;
                    NotRegistered for an unknown app; LimitsExceeded when every app's would take over
                    32 MiB (tens of thousands of apps): ask for one app's.
                    """),
            .init(
                "SimulateLaunch",
                inputs: [.init("app_id", .string, "A registered app."), .init("identifier", .string, "One of its pending requests.")],
                documentation: """
                    SimulateLaunch:
                    Delivers that pending request now, ignoring every rule except that the app must be
                    reachable: a supported way to test an app's task handler. Returns once RunTask was
                    answered. InvalidArgument for text that is no app id; NotRegistered for an unknown
                    app; UnknownTask when no such request is
                    pending; Unavailable when the app cannot be reached (the request stays pending), or
                    while a delivery to the app, or a change to its requests, is on its way (try again
                    in a moment); Failed when the agent could not record the slice (a full disk, a
                    damaged database; the request stays pending).
                    """),
            .init(
                "SimulateExpiration",
                inputs: [.init("app_id", .string, "A registered app."), .init("identifier", .string, "One of its running tasks.")],
                documentation: """
                    SimulateExpiration:
                    Sends ExpireTask for that running task now. InvalidArgument for text that is no app
                    id; NotRegistered for an unknown app; UnknownTask when it is not running.
                    """),
            .init(
                "Reload",
                documentation: """
                    Reload:
                    Reads the configuration file again and puts it in effect, as SIGHUP does, and
                    answers once that is done: GetStatus right after shows the new "config_loaded_at"
                    and "config_pending" (or "config_error"). The unit's reload (ExecReload=) calls it,
                    through `bgpolicy reload`. Each new value acts from its next use;
                    "[refresh] strategy" waits for the next start. A reload begins after the call:
                    calls, and SIGHUPs, that come while one runs are served together by the next.
                    InvalidArgument when the file cannot be read or is not valid, with the parser's
                    message (the file, the line, the key and what would be valid), as in "not reloaded,
                    the agent goes on with the configuration it had: invalid configuration:
                    /home/u/.config/bgpolicy/bgpolicy.conf:9: [cpu] limit: expected a whole percentage
                    from 1% to 100%, like "80%", got "180%"": nothing changed, and GetStatus's
                    "config_error" says the same until a reload succeeds. Unavailable when the agent
                    is stopping (it reads the file as it starts again).
                    """),
        ],
        properties: [
            .init(
                "Conditions", .dictionary(key: .string, value: .variant), access: .read, emitsChanged: .true,
                documentation: """
                    Conditions:
                    The machine's state as the agent sees it, read from UPower (or udev when UPower
                    is missing), power-profiles-daemon, NetworkManager and logind. Emits
                    PropertiesChanged whenever any fact changes. Keys:
                    "on_battery" (b) running on battery (a draining battery counts, even when
                    UPower's OnBattery says otherwise); "percentage" (d) battery charge, 0 to 100;
                    "battery_state" (s) unknown, charging, discharging, empty, fully-charged,
                    pending-charge or pending-discharge; "power_profile" (s) unknown, power-saver,
                    balanced or performance; "connectivity" (s) unknown, none, portal, limited or
                    full; "metered" (b) NetworkManager's Metered is yes or guess-yes while it is
                    globally connected; "network_type" (s) unknown, none, ethernet, wifi, mobile,
                    bluetooth, vpn or other; "idle" (b) the user is idle: logind's IdleHint, or
                    no input for [idle] no_input_after by GNOME's idle monitor; "locked" (b) the
                    session is locked; "sources" (as) the inputs that are live (upower, udev,
                    power-profiles, networkmanager, logind, mutter); "summary" (s) the same in
                    words.
                    A boolean or number whose source is not live is left out: unknown.
                    """)
        ])

    /// Every interface the agent exports, in the order `dbus/` lists them.
    public static let all = [admin, scheduler, client]

    public static func named(_ name: String) -> InterfaceDescription? {
        all.first { $0.name == name }
    }

    public static var names: [String] { all.map(\.name) }

    /// What `dbus/NAME.xml` holds for the named interface.
    public static func documentXML(named name: String) -> String? {
        named(name)?.documentXML()
    }
}
