import Glibc

/// What the bench runs, and how much of it. `--quick` shrinks every count for a smoke test.
struct Options: Sendable {
    var quick = false
    var json = false
    var agentPath: String?
    /// Sequential calls per method before the latency run (not measured).
    var warmupCalls = 2_000
    /// Sequential, timed calls per method.
    var latencyCalls = 20_000
    /// Calls in flight for the throughput and memory runs.
    var concurrency = 64
    /// Seconds per method per throughput round; rounds alternate GetId and GetStatus.
    var throughputSeconds = 2.0
    var throughputRounds = 2
    /// GetStatus calls over which the agent's RSS growth is measured, after `memoryWarmupCalls`.
    var memoryCalls = 100_000
    var memoryWarmupCalls = 20_000
    /// The idle window in which context switches are counted.
    var idleSeconds = 10.0
    /// Quiet time before the idle window, so the tail of the load has settled.
    var settleSeconds = 1.0
    /// Apps loaded with 11 pending requests each for the task part.
    var taskApps = 1_000
    /// Short-lived app connections registering and submitting at once while loading.
    var loadConcurrency = 4
    /// Timed sequential Submit calls (and as many GetId) per load level, after the warm-up.
    var submitCalls = 5_000
    var submitWarmupCalls = 500
    /// Alternating starts of an empty-state and the loaded agent.
    var restartRounds = 5
    /// Which parts run: the agent's (bus, tasks) and the usage log's.
    var runAgent = true
    var runUsage = true
    var runPlanning = true
    /// The planning part: apps (each with 1 refresh and 10 processing requests) and decisions.
    var planningApps = 1_000
    var planningDecisions = 300
    /// Events appended, in batches of 1,000, for the usage ingest rate.
    var usageIngestEvents = 500_000
    /// Events in the usage log the summary query runs against (1,000 apps over 8 weeks).
    var usageEvents = 10_000_000
    /// Timed summary queries (and as many baseline counts), after 100 of each not timed.
    var usageQueries = 1_000
    /// Where the big usage log is kept between runs (built again when its key differs); a
    /// temporary file when nil, and always with --quick.
    var usageFile: String?

    static let usage = """
        usage: bgpolicy-bench [--quick] [--json] [--agent PATH] [--latency-calls N] [--concurrency N]
                              [--throughput-seconds S] [--memory-calls N] [--idle-seconds S]
                              [--task-apps N] [--submit-calls N] [--restart-rounds N]
                              [--only agent|usage|planning] [--usage-events N] [--usage-queries N]
                              [--usage-ingest-events N] [--usage-file PATH]

        Benchmarks the D-Bus layer on the session bus in DBUS_SESSION_BUS_ADDRESS (run it under
        dbus-run-session, or through `make bench`). Starts its own bgpolicyd (by default the one
        next to this executable) with --state-dir, XDG_STATE_HOME and XDG_CONFIG_HOME in a fresh
        temporary folder, and compares it with the bus daemon answering org.freedesktop.DBus.GetId:

          latency      median and p99 of sequential GetStatus vs GetId round trips
          throughput   calls/s with N calls in flight (N tasks, each calling back to back)
          memory       the agent's VmRSS growth over many GetStatus calls, after a warm-up
          idle         the agent's context switches (all threads) in a window with no calls

        Then, with agents of their own (state in another temporary folder):

          submit       median and p99 of sequential Submit (a fresh unverified app resubmitting
                       one identifier) vs GetId, with no other requests pending, then with
                       N apps × 11 pending requests loaded (each app on its own short-lived
                       connection)
          memory       the agent's VmRSS before and after loading
          restart      SIGTERM, then start on the loaded state: ms until GetStatus answers and
                       until it reports every request pending, vs an empty-state agent's start

        Then the usage log, with no bus and no agent (Tests/Tools/Bench/UsageBench.swift):

          ingest       events/s appended to a file store in batches of 1,000, vs the same rows
                       through one prepared INSERT into a bare table without indexes
          summary      p50 and p99 of the per-app prediction query (TaskStore.usageSummary) with
                       10,000,000 events from 1,000 apps in the log, vs SELECT count(*) of the
                       app's rows on the same file

        Figures are reported, not asserted: the exit status is 0 unless the bench could not run.

          --quick                 small counts, for a smoke test (a few seconds)
          --json                  print the results as JSON instead of a table
          --agent PATH            the bgpolicyd to start
          --latency-calls N       timed sequential calls per method (default 20000)
          --concurrency N         calls in flight for throughput and memory (default 64)
          --throughput-seconds S  seconds per method per round, 2 rounds (default 2)
          --memory-calls N        GetStatus calls for the RSS growth (default 100000)
          --idle-seconds S        the idle window (default 10)
          --task-apps N           apps loaded with 11 pending requests each (default 1000)
          --submit-calls N        timed sequential Submit calls per load level (default 5000)
          --restart-rounds N      empty-state and loaded starts, alternating (default 5)
          --planning-decisions N  timed decisions per policy in the planning part (default 300)
          --only agent|usage|planning
                                  run only the agent's part (bus, tasks), only the planner's
                                  decision (no bus), or only the usage log's
          --usage-events N        events in the log for the summary query (default 10000000)
          --usage-queries N       timed summary queries (default 1000)
          --usage-ingest-events N events for the ingest rate (default 500000)
          --usage-file PATH       keep the usage log there between runs (not with --quick)
        """

    static func parse(_ arguments: [String]) throws(UsageError) -> Options {
        var options = Options()
        var overrides: [(inout Options) -> Void] = []
        var i = 0
        func value(_ flag: String) throws(UsageError) -> String {
            i += 1
            guard i < arguments.count else { throw UsageError("\(flag) needs a value") }
            return arguments[i]
        }
        func int(_ flag: String) throws(UsageError) -> Int {
            let text = try value(flag)
            guard let n = Int(text), n > 0 else { throw UsageError("\(flag) takes a positive whole number, not \"\(text)\"") }
            return n
        }
        func seconds(_ flag: String) throws(UsageError) -> Double {
            let text = try value(flag)
            guard let s = Double(text), s > 0, s.isFinite else { throw UsageError("\(flag) takes a positive number of seconds, not \"\(text)\"") }
            return s
        }
        while i < arguments.count {
            let argument = arguments[i]
            switch argument {
            case "--quick": options.quick = true
            case "--json": options.json = true
            case "--agent": options.agentPath = try value(argument)
            case "--latency-calls":
                let n = try int(argument)
                overrides.append { $0.latencyCalls = n }
            case "--concurrency":
                let n = try int(argument)
                overrides.append { $0.concurrency = n }
            case "--throughput-seconds":
                let s = try seconds(argument)
                overrides.append { $0.throughputSeconds = s }
            case "--memory-calls":
                let n = try int(argument)
                overrides.append { $0.memoryCalls = n }
            case "--idle-seconds":
                let s = try seconds(argument)
                overrides.append { $0.idleSeconds = s }
            case "--task-apps":
                let n = try int(argument)
                overrides.append { $0.taskApps = n }
            case "--submit-calls":
                let n = try int(argument)
                overrides.append { $0.submitCalls = n }
            case "--restart-rounds":
                let n = try int(argument)
                overrides.append { $0.restartRounds = n }
            case "--planning-decisions":
                let n = try int(argument)
                overrides.append { $0.planningDecisions = n }
            case "--only":
                switch try value(argument) {
                case "agent":
                    options.runUsage = false
                    options.runPlanning = false
                case "usage":
                    options.runAgent = false
                    options.runPlanning = false
                case "planning":
                    options.runAgent = false
                    options.runUsage = false
                case let other: throw UsageError("--only takes agent, usage or planning, not \"\(other)\"")
                }
            case "--usage-events":
                let n = try int(argument)
                overrides.append { $0.usageEvents = n }
            case "--usage-queries":
                let n = try int(argument)
                overrides.append { $0.usageQueries = n }
            case "--usage-ingest-events":
                let n = try int(argument)
                overrides.append { $0.usageIngestEvents = n }
            case "--usage-file": options.usageFile = try value(argument)
            case "-h", "--help": throw UsageError(nil)
            default: throw UsageError("unknown argument \"\(argument)\"")
            }
            i += 1
        }
        if options.quick {
            options.warmupCalls = 200
            options.latencyCalls = 1_000
            options.throughputSeconds = 0.5
            options.throughputRounds = 1
            options.memoryCalls = 5_000
            options.memoryWarmupCalls = 1_000
            options.idleSeconds = 2
            options.settleSeconds = 0.3
            options.taskApps = 50
            options.submitCalls = 1_000
            options.submitWarmupCalls = 100
            options.restartRounds = 2
            options.usageIngestEvents = 20_000
            options.usageEvents = 100_000
            options.usageQueries = 500
            options.planningDecisions = 30
        }
        for apply in overrides { apply(&options) }
        return options
    }
}

struct UsageError: Error {
    /// nil for `--help`.
    let message: String?
    init(_ message: String?) { self.message = message }
}

/// A reason the bench could not run at all (exit status 1).
struct BenchFailure: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}
