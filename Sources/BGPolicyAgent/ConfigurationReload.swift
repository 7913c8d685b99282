import BGPolicyCore
import BGPolicyDBus
import BGPolicySystem
import Glibc
import Logging
import Synchronization

/// The configuration the agent runs on, which `SIGHUP` reads again, and what `GetStatus` says
/// of it.
final class LiveConfiguration: Sendable {
    struct State: Sendable {
        /// The environment whose configuration was read last (in effect, but for `pending`).
        var environment: AgentEnvironment
        /// When it was read, in Unix seconds.
        var loadedAt: Int64
        /// Why the last reload failed, if it did; cleared by one that succeeds.
        var error: String?
        /// Knobs read but waiting for the next start (`TaskEngine.reconfigure`).
        var pending: [String] = []
        /// `GetStatus`'s entries about the configuration, encoded when it changes.
        var entries: [StatusEntry] = []
    }

    private let state: Mutex<State>

    init(_ environment: AgentEnvironment) {
        var initial = State(environment: environment, loadedAt: Self.now())
        initial.entries = Self.entries(of: initial)
        state = Mutex(initial)
    }

    var current: State { state.withLock { $0 } }
    var statusEntries: [StatusEntry] { state.withLock { $0.entries } }

    func loaded(_ environment: AgentEnvironment, pending: [String]) {
        var new = State(environment: environment, loadedAt: Self.now(), pending: pending)
        new.entries = Self.entries(of: new)
        state.withLock { $0 = new }
    }

    func failed(_ message: String) {
        state.withLock {
            $0.error = message
            $0.entries = Self.entries(of: $0)
        }
    }

    private static func entries(of state: State) -> [StatusEntry] {
        var entries = [
            StatusEntry("config_source", .string(state.environment.configSource ?? "defaults")),
            StatusEntry("config_path", .string(state.environment.configPath)),
            StatusEntry("config_loaded_at", .int64(state.loadedAt)),
        ]
        if let error = state.error { entries.append(StatusEntry("config_error", .string(error))) }
        if !state.pending.isEmpty {
            entries.append(StatusEntry("config_pending", Variant(state.pending).value))
        }
        return entries
    }

    static func now() -> Int64 {
        var ts = timespec()
        clock_gettime(CLOCK_REALTIME, &ts)
        return Int64(ts.tv_sec)
    }
}

/// Reads the configuration file again and puts it in effect: `SIGHUP`, which
/// `systemctl --user reload bgpolicyd` sends. A file that cannot be read or is not valid
/// changes nothing: the agent goes on with what it had, logs why at error level, and
/// `GetStatus` shows it until a reload succeeds.
struct ConfigurationReloader: Sendable {
    let live: LiveConfiguration
    let engine: TaskEngine
    /// `[idle] no_input_after`, read by the idle monitor, and its re-read trigger: its watch
    /// is added with the interval, so a new interval needs a new watch.
    let idleInterval: LiveSetting<Duration>
    let idleRereads: Rereads
    /// udev's battery timer, whose period is `[battery] udev_read_interval`.
    let udevPolling: UdevBatteryPolling
    let logger: Logger

    func reload() async {
        let before = live.current.environment
        let fresh: AgentEnvironment
        do {
            fresh = try before.reloaded()
        } catch {
            let message = "\(error)"
            // Logged before GetStatus shows it: whoever sees the status change finds the
            // journal's line already written.
            logger.error(
                "Configuration not reloaded; the agent goes on with the configuration it had",
                metadata: ["config.path": "\(before.configPath)", "error": "\(message)"])
            live.failed(message)
            return
        }
        let changes = fresh.configuration.changes(from: before.configuration)
        let pending = await engine.reconfigure(fresh.configuration)
        if idleInterval.set(fresh.configuration.idle.noInputAfter) { idleRereads.poke() }
        udevPolling.set(interval: fresh.configuration.battery.udevReadInterval)
        var metadata: Logger.Metadata = ["config": "\(fresh.configSource ?? "defaults")"]
        if !changes.isEmpty { metadata["changes"] = "\(changes.joined(separator: "; "))" }
        logger.notice(changes.isEmpty ? "Configuration reloaded; nothing changed" : "Configuration reloaded", metadata: metadata)
        if !pending.isEmpty {
            logger.warning(
                "Some of the reloaded configuration takes effect only at the next start: systemctl --user restart bgpolicyd",
                metadata: ["keys": "\(pending.joined(separator: ", "))"])
        }
        live.loaded(fresh, pending: pending)
    }
}
