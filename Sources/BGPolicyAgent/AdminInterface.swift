import BGPolicyCore
import BGPolicyDBus
import Glibc

/// `org.bgpolicy.Admin1`: the agent's status and controls.
struct AdminInterface: Sendable {
    let environment: AgentEnvironment
    let conditions: ConditionsHub
    let startedAt: ContinuousClock.Instant
    let startedAtUnix: Int64

    init(environment: AgentEnvironment, conditions: ConditionsHub) {
        self.environment = environment
        self.conditions = conditions
        self.startedAt = ContinuousClock.now
        var now = timespec()
        clock_gettime(CLOCK_REALTIME, &now)
        self.startedAtUnix = Int64(now.tv_sec)
    }

    /// The facts `GetStatus` reports.
    func status() -> [String: Variant] {
        let uptime = ContinuousClock.now - startedAt
        let seconds = Double(uptime.components.seconds) + Double(uptime.components.attoseconds) / 1e18
        return [
            "version": Variant(BGPolicyVersion.current),
            "pid": Variant(UInt32(getpid())),
            "started_at": Variant(startedAtUnix),
            "uptime_seconds": Variant(seconds),
            "state_dir": Variant(environment.stateDirectory),
            "config_source": Variant(environment.configSource ?? "defaults"),
            "config_path": Variant(environment.configPath),
            "conditions": Variant(conditions.snapshotDBusValue),
        ]
    }

    func exported() -> ExportedInterface {
        ExportedInterface(AgentInterfaces.admin)
            // Reads only values in memory: answered on the connection's thread.
            .method("GetStatus", immediate: { _ in [status().dbusValue] })
            .property("Conditions", get: { conditions.snapshotDBusValue })
    }
}
