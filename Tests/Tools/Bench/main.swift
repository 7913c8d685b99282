// bgpolicy-bench: the D-Bus layer's benchmark (`make bench`). Starts a bgpolicyd on the
// session bus and measures GetStatus through DBusConnection.call against the bus daemon's
// own GetId in the same run: latency, throughput, memory growth and idle wake-ups; then
// Submit against GetId with and without many pending requests, and restarts (TasksBench);
// then the usage log's ingest and per-app summary against bare SQL (UsageBench); then the
// planner's decision for one window with 1,000 apps × 11 requests (PlanningBench).
// Figures are reported, never asserted; see Options.usage.
import BGPolicyDBus
import Glibc

/// Progress goes to standard error, so `--json` output stays clean.
func progress(_ line: String) {
    let text = "bench: " + line + "\n"
    _ = text.utf8CString.withUnsafeBufferPointer { write(2, $0.baseAddress, $0.count - 1) }
}

struct Bench {
    let options: Options

    func run() async -> Int32 {
        let started = Clock.nanoseconds()
        var results = Results(options: options)
        var agent: AgentProcess?
        do {
            if options.runAgent {
                let connection: DBusConnection
                do {
                    connection = try await DBusConnection.connect(to: .session)
                } catch {
                    throw BenchFailure("cannot connect to the session bus (\(error)); run under dbus-run-session or `make bench`")
                }
                defer { connection.close() }
                results.daemonPID = try await busDaemonPID(connection)

                if let owner = try await connection.nameOwner(of: "org.bgpolicy.Agent1") {
                    throw BenchFailure("org.bgpolicy.Agent1 is already owned (by \(owner)) on this bus; run the bench on a private bus (dbus-run-session)")
                }
                guard let path = options.agentPath ?? AgentProcess.defaultPath() else {
                    throw BenchFailure("cannot find this executable's folder; pass --agent PATH")
                }
                progress("starting \(path)")
                let spawned = try AgentProcess.spawn(path: path)
                agent = spawned
                results.agentPID = spawned.pid
                progress("agent pid \(spawned.pid), bus daemon pid \(results.daemonPID), bench pid \(getpid())")

                let getStatus = try Caller.getStatus(on: connection)
                let getID = Caller.getID(on: connection)
                try await waitUntilReady(spawned, getStatus)
                if let pid = try? await connection.credentials(of: "org.bgpolicy.Agent1").pid, pid != UInt32(spawned.pid) {
                    throw BenchFailure("org.bgpolicy.Agent1 is owned by pid \(pid), not by the agent the bench started (\(spawned.pid))")
                }

                // Latency.
                progress("warm-up: \(options.warmupCalls) sequential calls each")
                var discard = Samples()
                try await Measure.sequential(getID, count: options.warmupCalls, into: &discard)
                try await Measure.sequential(getStatus, count: options.warmupCalls, into: &discard)
                progress("latency: \(options.latencyCalls) sequential calls each")
                (results.statusLatency, results.idLatency, results.statusCPU, results.idCPU) = try await Measure.latency(
                    getStatus, getID, count: options.latencyCalls, agent: spawned.pid, daemon: results.daemonPID)
                try checkAlive(spawned)

                // Throughput, alternating rounds.
                progress("throughput: \(options.throughputRounds) × \(options.throughputSeconds) s per method, \(options.concurrency) in flight")
                for _ in 0..<options.throughputRounds {
                    let t0 = Measure.CPU.Snapshot.read(agent: spawned.pid, daemon: results.daemonPID)
                    results.idThroughput.add(await Measure.throughput(getID, concurrency: options.concurrency, seconds: options.throughputSeconds))
                    let t1 = Measure.CPU.Snapshot.read(agent: spawned.pid, daemon: results.daemonPID)
                    results.statusThroughput.add(await Measure.throughput(getStatus, concurrency: options.concurrency, seconds: options.throughputSeconds))
                    let t2 = Measure.CPU.Snapshot.read(agent: spawned.pid, daemon: results.daemonPID)
                    results.idThroughputCPU.add(from: t0, to: t1)
                    results.statusThroughputCPU.add(from: t1, to: t2)
                }
                try checkAlive(spawned)

                // Memory.
                progress("memory: \(options.memoryWarmupCalls) warm-up + \(options.memoryCalls) GetStatus calls, then as many GetId")
                let warm = await Measure.counted(getStatus, count: options.memoryWarmupCalls, concurrency: options.concurrency)
                if warm.errors > 0 { progress("warning: \(warm.errors) calls failed in the memory warm-up (\(warm.firstError ?? "?"))") }
                (results.memory.statusRun, results.memory.agentRSS, results.memory.daemonRSSDuringStatus) = try await memoryRun(
                    getStatus, agent: spawned.pid, daemon: results.daemonPID)
                (results.memory.idRun, _, results.memory.daemonRSSDuringID) = try await memoryRun(
                    getID, agent: spawned.pid, daemon: results.daemonPID)
                try checkAlive(spawned)

                // Idle.
                progress("idle: settling \(options.settleSeconds) s, then counting context switches for \(options.idleSeconds) s")
                try await sleep(options.settleSeconds)
                results.idle = try await idleWindow(agent: spawned.pid, daemon: results.daemonPID)
                try checkAlive(spawned)
                stop(spawned, &results)
                agent = nil

                // Submit, load and restart, with agents of their own.
                results.tasks = try await TasksBench(
                    options: options, agentPath: path, connection: connection, daemonPID: results.daemonPID
                ).run()
            }
        } catch {
            progress("could not run: \(error)")
            if let agent {
                _ = agent.stop()
                progress("the agent's log, kept in \(agent.logPath); its last lines:\n\(agent.logTail())")
            }
            return 1
        }

        if let agent { stop(agent, &results) }

        // The usage log: no bus, no agent.
        if options.runUsage {
            do {
                results.usage = try UsageBench(options: options).run()
            } catch {
                progress("could not run the usage part: \(error)")
                return 1
            }
        }
        // The planner: no bus, no agent, no store.
        if options.runPlanning {
            progress("planning: \(options.planningApps) apps × 11 requests, \(options.planningDecisions) decisions each")
            results.planning = PlanningBench.run(apps: options.planningApps, decisions: options.planningDecisions)
        }
        results.totalSeconds = Double(Clock.nanoseconds() - started) / 1e9

        if options.json {
            if options.runAgent {
                print(results.json())
            } else {
                print(JSON.object([("usage", results.usage?.json() ?? "null"), ("planning", results.planning?.json() ?? "null")]))
            }
        } else {
            var sections: [String] = []
            if options.runAgent {
                sections.append(results.table() + "\n\n" + results.details())
                if let tasks = results.tasks { sections.append(tasks.table() + "\n\n" + tasks.details(options)) }
            }
            if let usage = results.usage { sections.append(usage.table() + "\n\n" + usage.details()) }
            if let planning = results.planning { sections.append(planning.table() + "\n\n" + planning.details()) }
            print(sections.joined(separator: "\n\n"))
        }
        return 0
    }

    private func stop(_ agent: AgentProcess, _ results: inout Results) {
        let stop = agent.stop()
        results.agentStop = "stopped by SIGTERM: \(stop.description) after \(Format.fixed(stop.milliseconds, 0)) ms"
        if stop.killed { results.agentStop = stop.description }
        agent.removeHome()
    }

    private func busDaemonPID(_ connection: DBusConnection) async throws -> pid_t {
        if let pid = try? await connection.credentials(of: DBusConnection.busName).pid {
            return pid_t(pid)
        }
        let reply = try await connection.call(
            destination: DBusConnection.busName, path: DBusConnection.busPath, interface: DBusConnection.busName,
            member: "GetConnectionUnixProcessID", [.string(DBusConnection.busName)])
        guard case .uint32(let pid)? = reply.first else { throw BenchFailure("GetConnectionUnixProcessID answered \(reply)") }
        return pid_t(pid)
    }

    private func waitUntilReady(_ agent: AgentProcess, _ getStatus: Caller) async throws {
        let deadline = Clock.nanoseconds() + 30_000_000_000
        var lastError = ""
        while Clock.nanoseconds() < deadline {
            try checkAlive(agent)
            do {
                _ = try await getStatus.connection.call(getStatus.message, timeout: .seconds(2))
                return
            } catch {
                lastError = "\(error)"
            }
            try await sleep(0.02)
        }
        throw BenchFailure("the agent did not answer GetStatus within 30 s (last error: \(lastError))")
    }

    private func checkAlive(_ agent: AgentProcess) throws {
        if let status = agent.poll() {
            throw BenchFailure("the agent ended: \(AgentProcess.describe(status: status))")
        }
    }

    private func rss(_ pid: pid_t, _ what: String) throws -> Int {
        guard let kb = ProcFS.rssKB(of: pid) else { throw BenchFailure("cannot read VmRSS of the \(what) (pid \(pid))") }
        return kb
    }

    /// `memoryCalls` calls in four quarters, reading both processes' RSS before and after each.
    private func memoryRun(_ caller: Caller, agent: pid_t, daemon: pid_t) async throws -> (Measure.Throughput, [Int], [Int]) {
        var agentRSS = [try rss(agent, "agent")]
        var daemonRSS = [try rss(daemon, "bus daemon")]
        var total = Measure.Throughput()
        let quarters = 4
        for q in 0..<quarters {
            let n = options.memoryCalls / quarters + (q < options.memoryCalls % quarters ? 1 : 0)
            total.add(await Measure.counted(caller, count: n, concurrency: options.concurrency))
            agentRSS.append(try rss(agent, "agent"))
            daemonRSS.append(try rss(daemon, "bus daemon"))
        }
        return (total, agentRSS, daemonRSS)
    }

    private func idleWindow(agent: pid_t, daemon: pid_t) async throws -> Results.Idle {
        func snapshot(_ pid: pid_t, _ what: String) throws -> [ProcFS.ThreadSwitches] {
            guard let threads = ProcFS.threadSwitches(of: pid) else { throw BenchFailure("cannot read /proc/\(pid)/task of the \(what)") }
            return threads
        }
        let agentBefore = try snapshot(agent, "agent")
        let daemonBefore = try snapshot(daemon, "bus daemon")
        let start = Clock.nanoseconds()
        try await sleep(options.idleSeconds)
        let agentAfter = try snapshot(agent, "agent")
        let daemonAfter = try snapshot(daemon, "bus daemon")
        let seconds = Double(Clock.nanoseconds() - start) / 1e9

        /// Sum of per-thread increases; a thread born in the window counts from 0, and one that
        /// ended in it counts 1 (it woke at least to exit; its own count is gone with it).
        func delta(_ before: [ProcFS.ThreadSwitches], _ after: [ProcFS.ThreadSwitches]) -> (Int, [String]) {
            var earlier: [Int: Int] = [:]
            for t in before { earlier[t.tid] = t.switches }
            var sum = 0
            var woken: [String] = []
            for t in after {
                let d = t.switches - (earlier[t.tid] ?? 0)
                if d > 0 {
                    sum += d
                    woken.append("\(t.name)(\(t.tid))+\(d)")
                }
            }
            for t in before where !after.contains(where: { $0.tid == t.tid }) {
                sum += 1
                woken.append("\(t.name)(\(t.tid)) ended, +1")
            }
            return (sum, woken)
        }
        var idle = Results.Idle()
        idle.seconds = seconds
        (idle.agentSwitches, idle.agentThreads) = delta(agentBefore, agentAfter)
        (idle.daemonSwitches, idle.daemonThreads) = delta(daemonBefore, daemonAfter)
        idle.agentThreadCount = agentAfter.count
        return idle
    }

    private func sleep(_ seconds: Double) async throws {
        try await Task.sleep(for: .milliseconds(Int(seconds * 1000)))
    }
}

let options: Options
do {
    options = try Options.parse(Array(CommandLine.arguments.dropFirst()))
} catch {
    if let message = error.message {
        progress(message)
        progress(Options.usage)
        exit(2)
    }
    print(Options.usage)
    exit(0)
}
exit(await Bench(options: options).run())
