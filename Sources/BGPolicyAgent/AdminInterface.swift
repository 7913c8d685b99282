import BGPolicyCore
import BGPolicyDBus
import Glibc
import Synchronization

/// `org.bgpolicy.Admin1`: the agent's status and controls.
struct AdminInterface: Sendable {
    let environment: AgentEnvironment
    let conditions: ConditionsHub
    let engine: TaskEngine
    let startedAt: ContinuousClock.Instant
    /// The entries of `GetStatus` that never change, encoded once.
    let constantEntries: [StatusEntry]

    init(environment: AgentEnvironment, conditions: ConditionsHub, engine: TaskEngine) {
        self.environment = environment
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
            "config_source": Variant(environment.configSource ?? "defaults"),
            "config_path": Variant(environment.configPath),
        ])
    }

    /// The `a{sv}` `GetStatus` returns. Built from entries encoded when they change (the
    /// constants, the engine's part, the conditions), so a call encodes only the uptime:
    /// settings panels may call it as often as they redraw. The uptime is in whole seconds, so
    /// that the reply stays the same for a second at a time unless something changes,
    /// and the object server sends a copy of the last one, which libdbus does not validate
    /// again (`ReplyTemplates`).
    func status() -> DBusValue {
        let seconds = (ContinuousClock.now - startedAt).seconds.rounded(.down)
        var entries = constantEntries
        entries.append(StatusEntry("uptime_seconds", .double(seconds)))
        entries.append(StatusEntry("conditions", conditions.snapshotDBusValue))
        engine.statusEntries.withLock { entries.append(contentsOf: $0) }
        entries.sort { $0.key < $1.key }
        return .dictionary(key: .string, value: .variant, entries.map(\.entry))
    }

    func exported() -> ExportedInterface {
        ExportedInterface(AgentInterfaces.admin)
            // Reads only values in memory: answered on the connection's thread.
            .method("GetStatus", immediate: { _ in [status()] })
            .property("Conditions", get: { conditions.snapshotDBusValue })
            .method("ListApps") { call in
                try call.arguments.expect("")
                return [await engine.listApps().dbusValue]
            }
            .method("ListPending") { call in
                try call.arguments.expect("")
                return [await engine.listPending().dbusValue]
            }
            .method("GetHistory") { call in
                try call.arguments.expect("xu")
                let entries = try await engine.history(
                    since: call.arguments.decode(Int64.self, at: 0), limit: call.arguments.decode(UInt32.self, at: 1))
                return [entries.map(TaskEngine.dictionary).dbusValue]
            }
            .method("SetAppEnabled") { call in
                try call.arguments.expect("sb")
                try await engine.setAppEnabled(
                    call.arguments.decode(String.self, at: 0), enabled: call.arguments.decode(Bool.self, at: 1))
                return []
            }
            .method("SetGlobalEnabled") { call in
                try call.arguments.expect("b")
                try await engine.setGlobalEnabled(call.arguments.decode(Bool.self, at: 0))
                return []
            }
            .method("GetTimeline") { call in
                try call.arguments.expect("s")
                let text = try call.arguments.decode(String.self, at: 0)
                var appID: AppID?
                if !text.isEmpty {
                    guard let id = AppID(rawValue: text), await engine.isRegistered(id) else {
                        throw SchedulerError.unknownApp(text)
                    }
                    appID = id
                }
                return [await engine.timeline(of: appID).dbusValue]
            }
            .method("Explain") { call in
                try call.arguments.expect("ss")
                let text = try call.arguments.decode(String.self, at: 0)
                guard let appID = AppID(rawValue: text), await engine.isRegistered(appID) else {
                    throw SchedulerError.unknownApp(text)
                }
                let identifier = try call.arguments.decode(String.self, at: 1)
                return [await engine.explain(appID: appID, identifier: identifier).dbusValue]
            }
            .method("SimulateLaunch") { call in
                try call.arguments.expect("ss")
                try await engine.simulateLaunch(
                    app: call.arguments.decode(String.self, at: 0), identifier: call.arguments.decode(String.self, at: 1))
                return []
            }
            .method("SimulateExpiration") { call in
                try call.arguments.expect("ss")
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
