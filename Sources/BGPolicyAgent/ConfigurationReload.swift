import BGPolicyCore
import BGPolicyDBus
import BGPolicySystem
import Glibc
import Logging
import Synchronization

/// The configuration the agent runs on, which a reload (`SIGHUP`, `Admin1.Reload`) reads
/// again, and what `GetStatus` says of it.
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

/// Reads the configuration file again and puts it in effect: `SIGHUP`, and
/// `org.bgpolicy.Admin1.Reload`, which `systemctl --user reload bgpolicyd` calls through
/// `bgpolicy reload`. A file that cannot be read or is not valid changes nothing: the agent
/// goes on with what it had, logs why at error level, and `GetStatus` shows it until a reload
/// succeeds (and `Reload` answers it).
///
/// Reloads run one at a time, in `run(_:)`: two at once would both start from the same
/// configuration, and the one that read the file first could put its values in effect last.
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

    /// Runs the reloads asked of `requests` until the task is cancelled (`ReloadRequests.serve`).
    func run(_ requests: ReloadRequests) async {
        await requests.serve { await reload() }
    }

    /// Reads the file and puts it in effect. Called only through `run(_:)`, one at a time.
    private func reload() async -> ReloadRequests.Outcome {
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
            return .failed(message)
        }
        // What changed in effect: against the configuration the engine ran on, not the last
        // file read, whose `[refresh] strategy` may be waiting for the next start (a change to
        // it was logged as made, beside the warning that it was not).
        let (pending, changes) = await engine.reconfigure(fresh.configuration)
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
        return .loaded
    }
}

/// Reloads asked for and not yet begun: by `SIGHUP`, which waits for nothing, and by
/// `Admin1.Reload`, whose caller waits for the outcome of a reload that begins after its call,
/// so that what `GetStatus` says right after the answer is that reload's. One task runs them,
/// one at a time (`serve`, from `ConfigurationReloader.run`).
final class ReloadRequests: Sendable {
    enum Outcome: Sendable, Equatable {
        /// The file was read and is in effect (but for the knobs that wait for a restart).
        case loaded
        /// The file cannot be read or is not valid, in the parser's words (file, line, key);
        /// the agent goes on with the configuration it had.
        case failed(String)
        /// The agent is stopping: the file was not read.
        case stopping
    }

    typealias Caller = CheckedContinuation<Outcome, Never>

    private struct State {
        var callers: [Caller] = []
        /// A `SIGHUP` came since the last reload began.
        var hangup = false
        /// The agent is stopping: no reload begins any more.
        var closed = false
    }

    private let state = Mutex(State())
    /// Poked after each request is recorded. One poke is kept while a reload runs: the requests
    /// made meanwhile are taken together when it is done.
    private let asked: AsyncStream<Void>
    private let poke: AsyncStream<Void>.Continuation

    init() {
        (asked, poke) = AsyncStream.makeStream(of: Void.self, bufferingPolicy: .bufferingNewest(1))
    }

    /// How many callers wait for a reload that has not begun (for tests).
    var waiting: Int { state.withLock { $0.callers.count } }

    /// `SIGHUP`: a reload, answered to no one.
    func hangup() {
        state.withLock { $0.hangup = true }
        poke.yield()
    }

    /// `Admin1.Reload`: waits for a reload that begins after this call, and returns its outcome.
    func reload() async -> Outcome {
        await withCheckedContinuation { (caller: Caller) in
            let closed = state.withLock { s in
                if !s.closed { s.callers.append(caller) }
                return s.closed
            }
            if closed { return caller.resume(returning: .stopping) }
            poke.yield()
        }
    }

    /// Runs the reloads asked for with `reload`, one at a time, until the task is cancelled;
    /// then answers the callers still waiting that the agent is stopping. Each reload serves
    /// every request made before it began, so a burst of them costs one or two reloads, and
    /// none begins from a configuration another has not finished putting in effect.
    func serve(_ reload: () async -> Outcome) async {
        for await _ in asked {
            if Task.isCancelled { break }
            // Nil: asked before the reload just done began, and answered by it.
            guard let waiting = take() else { continue }
            let outcome = await reload()
            for caller in waiting { caller.resume(returning: outcome) }
        }
        for caller in close() { caller.resume(returning: .stopping) }
    }

    /// The callers a reload about to begin answers; nil when nothing was asked since the last
    /// one began (a poke whose requests that one took).
    private func take() -> [Caller]? {
        state.withLock { s in
            guard s.hangup || !s.callers.isEmpty else { return nil }
            defer { s.callers = []; s.hangup = false }
            return s.callers
        }
    }

    /// No reload begins any more; returns the callers still waiting.
    private func close() -> [Caller] {
        state.withLock { s in
            s.closed = true
            defer { s.callers = [] }
            return s.callers
        }
    }
}
