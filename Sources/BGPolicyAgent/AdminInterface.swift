import BGPolicyCore
import BGPolicyDBus
import BGPolicySystem
import Glibc
import Synchronization

/// `org.bgpolicy.Admin1`: the agent's status and controls.
struct AdminInterface: Sendable {
    let environment: AgentEnvironment
    /// The configuration in effect, which a reload changes.
    let configuration: LiveConfiguration
    /// Where `Reload` asks for a reload and waits for it.
    let reloads: ReloadRequests
    let conditions: ConditionsHub
    let engine: TaskEngine
    let startedAt: ContinuousClock.Instant
    /// The entries of `GetStatus` that never change, encoded once.
    let constantEntries: [StatusEntry]
    /// What `requireOutsideSandbox` found of each caller.
    let callers = CallerVerdicts()

    init(
        environment: AgentEnvironment, configuration: LiveConfiguration, reloads: ReloadRequests, conditions: ConditionsHub,
        engine: TaskEngine
    ) {
        self.environment = environment
        self.configuration = configuration
        self.reloads = reloads
        self.conditions = conditions
        self.engine = engine
        self.startedAt = ContinuousClock.now
        var now = timespec()
        clock_gettime(CLOCK_REALTIME, &now)
        self.constantEntries = StatusEntry.encode([
            "version": Variant(BGPolicyVersion.current),
            "pid": Variant(UInt32(getpid())),
            "started_at": Variant(Int64(now.tv_sec)),
            "state_dir": Variant(environment.stateDirectory),
        ])
    }

    /// The `a{sv}` `GetStatus` returns. Built from entries encoded when they change (the
    /// constants, the engine's part, the conditions), so a call encodes only the uptime:
    /// settings panels may call it as often as they redraw. The uptime is in whole seconds, so
    /// that the reply stays the same for a second at a time unless something changes,
    /// and the object server sends a copy of the last one, which libdbus does not validate
    /// again (`ReplyTemplates`).
    ///
    /// - Parameter namingApps: false for a caller in an app sandbox, or one the agent cannot
    ///   place: the entries that name apps (`appNamingKeys`) are left out.
    func status(namingApps: Bool = true) -> DBusValue {
        let seconds = (ContinuousClock.now - startedAt).seconds.rounded(.down)
        var entries = constantEntries
        entries.append(StatusEntry("uptime_seconds", .double(seconds)))
        entries.append(StatusEntry("conditions", conditions.snapshotDBusValue))
        entries.append(contentsOf: configuration.statusEntries)
        engine.statusEntries.withLock { engineEntries in
            if namingApps {
                entries.append(contentsOf: engineEntries)
            } else {
                entries.append(contentsOf: engineEntries.lazy.filter { !Self.appNamingKeys.contains($0.key) })
            }
        }
        entries.sort { $0.key < $1.key }
        return .dictionary(key: .string, value: .variant, entries.map(\.entry))
    }

    /// `GetStatus`'s entries that name apps: which apps the user has open, and which run in
    /// the background now. A sandboxed app may read the device's state and the counts, not
    /// what the user does with other apps.
    static let appNamingKeys: Set<String> = ["running", "in_use"]

    /// Admin1 is for the user's own tools (`bgpolicy`, a settings panel). An app in a Flatpak
    /// or snap sandbox may be let talk to the agent to schedule its own work; that must not
    /// let it read other apps' requests and history, or turn their work (or all work) off.
    /// So every method but `GetStatus` (and the `Conditions` property: the device's state and
    /// counts, nothing of any one app's) refuses a caller the agent finds in a sandbox, or
    /// cannot place, and `GetStatus` leaves out for it the entries that name apps.
    /// Unsandboxed processes of the user could edit the agent's files anyway.
    func requireOutsideSandbox(_ sender: String) async throws(SchedulerError) {
        if let refusal = await sandboxRefusal(of: sender) { throw refusal }
    }

    /// Why Admin1 refuses `sender`; nil when it is outside an app sandbox. `AccessDenied` when
    /// it is in one or cannot be placed, `Unavailable` when the bus could not be asked.
    func sandboxRefusal(of sender: String) async -> SchedulerError? {
        if let verdict = callers.verdict(of: sender) { return verdict.map { SchedulerError(.accessDenied, $0) } }
        let pid: UInt32?
        do {
            pid = try await engine.connection.credentials(of: sender).pid
        } catch {
            // A passing failure (the bus slow to answer, the agent stopping): refused this once,
            // and not remembered, so that the caller's next call is asked about again. Not
            // `AccessDenied`, which a tool may take for good (as `Register` answers it).
            return SchedulerError(.unavailable, "the agent could not tell which process called (\(error)); org.bgpolicy.Admin1 answers only callers it can see are outside an app sandbox. Try again")
        }
        let refusal: String?
        if let pid {
            let identity = engine.inspector.identify(pid: pid)
            switch identity.source {
            case .flatpak, .snap:
                refusal = "org.bgpolicy.Admin1 is for the user's own tools, and this caller is \(identity.appID.map { "\($0)" } ?? "an app") in a \(identity.source == .flatpak ? "Flatpak" : "snap") sandbox: an app schedules its own work through org.bgpolicy.Scheduler1; the user manages all apps' with the bgpolicy command"
            case .unverified where !identity.seen:
                refusal = "the agent cannot see the calling process (PID \(pid): its /proc entry is gone or hidden), so it cannot tell it is outside an app sandbox; org.bgpolicy.Admin1 answers only callers it can. A process that exited leaves its connection to its children: call from the process that connected"
            case .systemdUnit, .unverified:
                refusal = nil
            }
        } else {
            refusal = "the bus did not give the caller's process id, so the agent cannot tell it is outside an app sandbox; org.bgpolicy.Admin1 answers only callers it can"
        }
        // Definite answers only: they hold for the connection's life.
        callers.record(refusal, for: sender)
        return refusal.map { SchedulerError(.accessDenied, $0) }
    }

    /// What to ask instead when a method's reply is over `AgentService.maximumReplyBytes`: the
    /// end of its LimitsExceeded message, after the size. `bgpolicy pending APP` reads the
    /// whole of ListPending, so it is no way round it.
    static let oversizedReplyAdvice: [String: String] = [
        "ListApps":
            "'bgpolicy status' counts the registered apps: forget those that no longer run ('bgpolicy forget APP'; "
            + "'bgpolicy history' names apps as they register), and a lower [limits] apps keeps new ones out.",
        "ListPending":
            "'bgpolicy apps' shows how many requests each app has pending: 'bgpolicy forget APP' drops an app with all "
            + "its requests, and a lower [limits] pending_processing keeps an app from submitting as many again; "
            + "'bgpolicy explain APP ID' explains one request.",
        "GetHistory":
            "Ask for fewer entries (a smaller limit: 'bgpolicy history --limit N'), newer ones (a later since: --since), "
            + "or one app's (GetAppHistory: 'bgpolicy history APP').",
        "GetAppHistory":
            "Ask for fewer entries (a smaller limit: 'bgpolicy history APP --limit N') or newer ones (a later since: --since).",
        "GetTimeline":
            "Ask for one app's (its app id: 'bgpolicy timeline APP'); 'bgpolicy forget APP' takes apps no longer used out of "
            + "the whole.",
    ]

    func exported() -> ExportedInterface {
        Self.oversizedReplyAdvice.reduce(ExportedInterface(AgentInterfaces.admin)) { interface, advice in
            interface.whenReplyTooLarge(advice.key, advise: advice.value)
        }
            // Reads only values in memory: answered on the connection's thread once the caller
            // is placed (inside an app sandbox or not); its first call waits for the bus to say
            // which process it is.
            .method(
                "GetStatus",
                immediate: { call in
                    guard let verdict = callers.verdict(of: call.sender) else { throw ObjectServer.NotImmediate() }
                    return [status(namingApps: verdict == nil)]
                },
                queued: { call in
                    try call.arguments.expect("")
                    return [status(namingApps: await sandboxRefusal(of: call.sender) == nil)]
                })
            .property("Conditions", get: { conditions.snapshotDBusValue })
            .method("ListApps") { call in
                try call.arguments.expect("")
                try await requireOutsideSandbox(call.sender)
                return [await engine.listApps().dbusValue]
            }
            .method("ListPending") { call in
                try call.arguments.expect("")
                try await requireOutsideSandbox(call.sender)
                return [await engine.listPending().dbusValue]
            }
            .method("GetHistory") { call in
                try call.arguments.expect("xu")
                try await requireOutsideSandbox(call.sender)
                let entries = try await engine.history(
                    since: call.arguments.decode(Int64.self, at: 0), limit: call.arguments.decode(UInt32.self, at: 1))
                return [entries.map(TaskEngine.dictionary).dbusValue]
            }
            .method("GetAppHistory") { call in
                try call.arguments.expect("sxu")
                try await requireOutsideSandbox(call.sender)
                let text = try call.arguments.decode(String.self, at: 0)
                let appID = try SchedulerError.appID(text)
                let entries = try await engine.history(
                    of: appID, since: call.arguments.decode(Int64.self, at: 1), limit: call.arguments.decode(UInt32.self, at: 2))
                return [entries.map(TaskEngine.dictionary).dbusValue]
            }
            .method("SetAppEnabled") { call in
                try call.arguments.expect("sb")
                try await requireOutsideSandbox(call.sender)
                try await engine.setAppEnabled(
                    call.arguments.decode(String.self, at: 0), enabled: call.arguments.decode(Bool.self, at: 1))
                return []
            }
            .method("SetGlobalEnabled") { call in
                try call.arguments.expect("b")
                try await requireOutsideSandbox(call.sender)
                try await engine.setGlobalEnabled(call.arguments.decode(Bool.self, at: 0))
                return []
            }
            .method("ForgetApp") { call in
                try call.arguments.expect("s")
                try await requireOutsideSandbox(call.sender)
                return [try await engine.forgetApp(call.arguments.decode(String.self, at: 0)).dbusValue]
            }
            .method("GetTimeline") { call in
                try call.arguments.expect("s")
                try await requireOutsideSandbox(call.sender)
                let text = try call.arguments.decode(String.self, at: 0)
                var appID: AppID?
                if !text.isEmpty {
                    let id = try SchedulerError.appID(text)
                    guard await engine.isRegistered(id) else { throw SchedulerError.unknownApp(text) }
                    appID = id
                }
                return [await engine.timeline(of: appID).dbusValue]
            }
            .method("Explain") { call in
                try call.arguments.expect("ss")
                try await requireOutsideSandbox(call.sender)
                let text = try call.arguments.decode(String.self, at: 0)
                let appID = try SchedulerError.appID(text)
                guard await engine.isRegistered(appID) else { throw SchedulerError.unknownApp(text) }
                let identifier = try call.arguments.decode(String.self, at: 1)
                return [await engine.explain(appID: appID, identifier: identifier).dbusValue]
            }
            // Answers once a reload that began after the call is done, so that GetStatus right
            // after shows it; an invalid file is refused in the parser's words.
            .method("Reload") { call in
                try call.arguments.expect("")
                try await requireOutsideSandbox(call.sender)
                switch await reloads.reload() {
                case .loaded: return []
                case .failed(let why): throw SchedulerError.notReloaded(why)
                case .stopping:
                    throw SchedulerError(.unavailable, "the agent is stopping, and did not read the configuration; it reads it as it starts again")
                }
            }
            .method("SimulateLaunch") { call in
                try call.arguments.expect("ss")
                try await requireOutsideSandbox(call.sender)
                try await engine.simulateLaunch(
                    app: call.arguments.decode(String.self, at: 0), identifier: call.arguments.decode(String.self, at: 1))
                return []
            }
            .method("SimulateExpiration") { call in
                try call.arguments.expect("ss")
                try await requireOutsideSandbox(call.sender)
                try await engine.simulateExpiration(
                    app: call.arguments.decode(String.self, at: 0), identifier: call.arguments.decode(String.self, at: 1))
                return []
            }
    }
}

/// One `{sv}` entry of a status dictionary, with its key kept for sorting.
struct StatusEntry: Sendable {
    let key: String
    let entry: DBusDictEntry

    init(_ key: String, _ value: DBusValue) {
        self.key = key
        self.entry = DBusDictEntry(key: .string(key), value: .variant(value))
    }

    static func encode(_ dictionary: [String: Variant]) -> [StatusEntry] {
        dictionary.map { StatusEntry($0.key, $0.value.value) }.sorted { $0.key < $1.key }
    }
}

/// Whether each Admin1 caller may use the controls: nil allowed, else why not. A unique name is
/// never given twice on a bus, so an answer holds for as long as its connection, and the bus
/// is asked once per connection, not per call. Bounded: when it holds `limit` callers, it
/// forgets them all and asks again.
final class CallerVerdicts: Sendable {
    private let verdicts = Mutex<[String: String?]>([:])
    static let limit = 4_096

    /// The recorded answer for `sender`: `.some(nil)` allowed, `.some(why)` refused, nil unknown.
    func verdict(of sender: String) -> String?? {
        verdicts.withLock { $0[sender] }
    }

    func record(_ refusal: String?, for sender: String) {
        verdicts.withLock {
            if $0.count >= Self.limit { $0.removeAll() }
            $0[sender] = .some(refusal)
        }
    }
}
