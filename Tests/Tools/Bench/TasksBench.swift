import BGPolicyCore
import BGPolicyDBus
import Glibc

/// The task part of the bench: Submit round trips against GetId, with the agent empty and
/// holding `apps × 11` pending requests, the agent's memory for them, and how long it takes
/// to start again on that state against an empty one. Runs its own agents, on a state folder
/// of its own, after the GetStatus part has stopped its agent.
struct TasksBench {
    let options: Options
    let agentPath: String
    /// The bench's own connection: readiness polls and GetStatus.
    let connection: DBusConnection
    let daemonPID: pid_t

    static let agentName = "org.bgpolicy.Agent1"
    static let scheduler = "org.bgpolicy.Scheduler1"
    /// 1 refresh + 10 processing: the default limits, full.
    static let requestsPerApp = 11

    /// Every process the agent sees is unverified, wherever the bench itself runs (a terminal's
    /// app-*.scope would otherwise name it): the agent reads identities under an empty folder.
    /// With more apps than the agent keeps by default (`[limits] apps`), its configuration
    /// raises the bound to fit them and the two fresh apps.
    private func environment(_ home: String) -> [String] {
        mkdir(home + "/proc", 0o700)
        if options.taskApps + 2 > PolicyConfiguration.defaults.limits.apps {
            mkdir(home + "/config", 0o700)
            mkdir(home + "/config/bgpolicy", 0o700)
            let text = "[limits]\napps = \(options.taskApps + 2)\n"
            if let file = fopen(home + "/config/bgpolicy/bgpolicy.conf", "w") {
                fputs(text, file)
                fclose(file)
            }
        }
        return ["BGPOLICY_PROC_ROOT=\(home)/proc"]
    }

    /// Unix seconds a day from now: far enough that nothing becomes due during the run, within
    /// the 7-day limit.
    private static func tomorrow() -> Int64 {
        var ts = timespec()
        clock_gettime(CLOCK_REALTIME, &ts)
        return Int64(ts.tv_sec) + 86_400
    }

    private static func submitMessage(_ identifier: String, _ kind: String, earliestBegin: Int64) throws -> Message {
        .methodCall(
            destination: agentName, path: try ObjectPath("/org/bgpolicy/Agent1"), interface: scheduler, member: "Submit",
            body: [.string(identifier), .string(kind), ["earliest_begin": Variant(earliestBegin)].dbusValue])
    }

    private static func schedulerCall(_ connection: DBusConnection, _ member: String, _ body: [DBusValue] = []) async throws {
        _ = try await connection.call(
            destination: agentName, path: try ObjectPath("/org/bgpolicy/Agent1"), interface: scheduler, member: member, body)
    }

    /// Registers `appID` (unverified, by the app_id option) with `identifiers` on `connection`.
    private static func register(_ connection: DBusConnection, appID: String, identifiers: [String]) async throws {
        do {
            try await schedulerCall(connection, "Register", [identifiers.dbusValue, ["app_id": Variant(appID)].dbusValue])
        } catch {
            throw BenchFailure("Register as \(appID) failed: \(error)")
        }
    }

    private static func identifiers(of appID: String) -> [(String, String)] {
        [(appID + ".refresh", "refresh")] + (1..<requestsPerApp).map { (appID + ".processing\($0)", "processing") }
    }

    func run() async throws -> TasksResults {
        var results = TasksResults()
        results.apps = options.taskApps
        results.requestsPerApp = Self.requestsPerApp
        results.submitCalls = options.submitCalls
        results.restartRounds = options.restartRounds
        let expected = options.taskApps * Self.requestsPerApp

        progress("tasks: starting an agent on a state folder of its own")
        let home = try Self.makeHome()
        defer { AgentProcess.removeTree(home) }
        var agent = try AgentProcess.spawn(path: agentPath, home: home, environment: environment(home))
        do {
            _ = try await waitUntilReady(agent)
            results.agentPID = agent.pid

            progress("tasks: Submit latency, \(options.submitCalls) sequential calls each, no other pending requests")
            (results.emptySubmit, results.emptyID, results.emptySubmitCPU, results.emptyIDCPU) = try await submitLatency(
                agent: agent, appID: "org.bgpolicy.Bench.Fresh0")

            results.agentRSSBefore = try rss(agent.pid, "agent")
            results.daemonRSSBefore = try rss(daemonPID, "bus daemon")
            progress("tasks: loading \(options.taskApps) apps × \(Self.requestsPerApp) requests, one short-lived connection per app, \(options.loadConcurrency) at a time")
            results.load = await load(apps: options.taskApps)
            if results.load.errors > 0 {
                throw BenchFailure("\(results.load.errors) calls failed while loading (first: \(results.load.firstError ?? "?"))")
            }
            try checkAlive(agent)
            // GetStatus reports the count the engine last published, after its evaluation.
            let loaded = Clock.nanoseconds()
            let settled = try await waitForPending(expected, agent, after: "loading", start: try await pendingNow())
            results.pendingSettleMS = Double(settled - loaded) / 1e6
            results.agentRSSAfter = try rss(agent.pid, "agent")
            results.daemonRSSAfter = try rss(daemonPID, "bus daemon")

            progress("tasks: Submit latency with \(Format.thousands(expected)) pending requests")
            (results.loadedSubmit, results.loadedID, results.loadedSubmitCPU, results.loadedIDCPU) = try await submitLatency(
                agent: agent, appID: "org.bgpolicy.Bench.Fresh1")
            try checkAlive(agent)

            // Restarts: SIGTERM, then alternately an agent on a fresh, empty state folder and
            // one on the loaded folder again, each timed from posix_spawn.
            progress("tasks: \(options.restartRounds) restart round(s), empty state vs \(Format.thousands(expected)) pending")
            results.loadedStopMS.append(agent.stop().milliseconds)
            for _ in 0..<options.restartRounds {
                let emptyHome = try Self.makeHome()
                defer { AgentProcess.removeTree(emptyHome) }
                let emptyStart = Clock.nanoseconds()
                let empty = try AgentProcess.spawn(path: agentPath, home: emptyHome, environment: environment(emptyHome))
                do {
                    let ready = try await waitUntilReady(empty)
                    results.emptyReadyMS.append(Double(ready.at - emptyStart) / 1e6)
                    results.emptyRestartRSS.append(try rss(empty.pid, "agent"))
                    results.emptyStopMS.append(empty.stop().milliseconds)
                } catch {
                    _ = empty.stop()
                    progress("the empty-state agent's log:\n\(empty.logTail())")
                    throw error
                }

                let loadedStart = Clock.nanoseconds()
                agent = try AgentProcess.spawn(path: agentPath, home: home, environment: environment(home))
                let ready = try await waitUntilReady(agent)
                results.loadedReadyMS.append(Double(ready.at - loadedStart) / 1e6)
                let pendingAt = ready.pending == expected
                    ? ready.at : try await waitForPending(expected, agent, after: "restarting", start: ready.pending)
                results.loadedPendingMS.append(Double(pendingAt - loadedStart) / 1e6)
                results.loadedRestartRSS.append(try rss(agent.pid, "agent"))
                results.loadedStopMS.append(agent.stop().milliseconds)
            }
        } catch {
            _ = agent.stop()
            progress("the task agent's log, its last lines:\n\(agent.logTail())")
            throw error
        }
        return results
    }

    /// A fresh app on a connection of its own: Register, then `submitCalls` Submits of one
    /// identifier (each replaces the last, so the state stays the same) interleaved with as many
    /// GetId on the same connection; then CancelAll, so it leaves no pending request behind.
    private func submitLatency(agent: AgentProcess, appID: String) async throws -> (Samples, Samples, Measure.CPU, Measure.CPU) {
        let app = try await DBusConnection.connect(to: .session)
        defer { app.close() }
        let identifier = appID + ".processing"
        try await Self.register(app, appID: appID, identifiers: [identifier])
        let submit = Caller(name: "Submit", connection: app, message: try Self.submitMessage(identifier, "processing", earliestBegin: Self.tomorrow()))
        let getID = Caller.getID(on: app)
        var discard = Samples()
        try await Measure.sequential(getID, count: options.submitWarmupCalls, into: &discard)
        try await Measure.sequential(submit, count: options.submitWarmupCalls, into: &discard)
        let block = min(1_000, max(100, options.submitCalls / 4))
        let measured = try await Measure.latency(submit, getID, count: options.submitCalls, block: block, agent: agent.pid, daemon: daemonPID)
        try await Self.schedulerCall(app, "CancelAll")
        return measured
    }

    /// `apps` apps, each registered on a connection of its own that submits its 11 requests
    /// and closes; `loadConcurrency` such connections at a time.
    private func load(apps: Int) async -> Measure.Throughput {
        let next = Counter()
        let begin = Self.tomorrow()
        let start = Clock.nanoseconds()
        var total = await withTaskGroup(of: Measure.Throughput.self) { group in
            for _ in 0..<min(options.loadConcurrency, apps) {
                group.addTask {
                    var mine = Measure.Throughput()
                    while true {
                        let index = next.next() - 1
                        guard index < apps else { break }
                        do {
                            let app = try await DBusConnection.connect(to: .session)
                            defer { app.close() }
                            let appID = "org.bgpolicy.Bench.App\(index)"
                            let requests = Self.identifiers(of: appID)
                            try await Self.register(app, appID: appID, identifiers: requests.map(\.0))
                            mine.calls += 1
                            for (identifier, kind) in requests {
                                _ = try await app.call(try Self.submitMessage(identifier, kind, earliestBegin: begin))
                                mine.calls += 1
                            }
                        } catch {
                            mine.errors += 1
                            if mine.firstError == nil { mine.firstError = "\(error)" }
                        }
                    }
                    return mine
                }
            }
            var sum = Measure.Throughput()
            for await part in group { sum.add(part) }
            return sum
        }
        total.nanoseconds = Clock.nanoseconds() - start
        return total
    }

    /// Polls GetStatus every millisecond until it reports `expected` pending requests; returns
    /// when (CLOCK_MONOTONIC ns).
    private func waitForPending(_ expected: Int, _ agent: AgentProcess, after what: String, start: Int?) async throws -> UInt64 {
        var pending = start
        let deadline = Clock.nanoseconds() + 60_000_000_000
        while pending != expected {
            guard Clock.nanoseconds() < deadline else {
                throw BenchFailure("60 s after \(what), GetStatus reports \(pending.map(String.init) ?? "no") pending requests, not \(expected)")
            }
            try checkAlive(agent)
            try await Task.sleep(for: .milliseconds(1))
            pending = try await pendingNow()
        }
        return Clock.nanoseconds()
    }

    /// `pending` in GetStatus, now.
    private func pendingNow() async throws -> Int? {
        Self.pending(in: try await connection.call(try Caller.getStatus(on: connection).message, timeout: .seconds(5)))
    }

    private static func pending(in reply: Message) -> Int? {
        guard let status = try? reply.body.first?.decode([String: Variant].self) else { return nil }
        return (try? status["pending"]?.decode(UInt32.self)).map(Int.init)
    }

    /// Polls GetStatus every millisecond until it answers; returns when (CLOCK_MONOTONIC ns)
    /// and the `pending` it reported. Until the agent owns its name the bus daemon answers
    /// each poll at once with an error (no service is activatable on the bench's bus).
    private func waitUntilReady(_ agent: AgentProcess) async throws -> (at: UInt64, pending: Int?) {
        let message = try Caller.getStatus(on: connection).message
        let deadline = Clock.nanoseconds() + 60_000_000_000
        var lastError = ""
        while Clock.nanoseconds() < deadline {
            try checkAlive(agent)
            do {
                let reply = try await connection.call(message, timeout: .seconds(5))
                return (Clock.nanoseconds(), Self.pending(in: reply))
            } catch {
                lastError = "\(error)"
            }
            try await Task.sleep(for: .milliseconds(1))
        }
        throw BenchFailure("the agent did not answer GetStatus within 60 s (last error: \(lastError))")
    }

    private func checkAlive(_ agent: AgentProcess) throws {
        if let status = agent.poll() {
            throw BenchFailure("the agent (pid \(agent.pid)) ended: \(AgentProcess.describe(status: status))")
        }
    }

    private func rss(_ pid: pid_t, _ what: String) throws -> Int {
        guard let kb = ProcFS.rssKB(of: pid) else { throw BenchFailure("cannot read VmRSS of the \(what) (pid \(pid))") }
        return kb
    }

    private static func makeHome() throws -> String {
        let tmp = getenv("TMPDIR").map { String(cString: $0) }.flatMap { $0.isEmpty ? nil : $0 } ?? "/tmp"
        var template = Array((tmp + "/bgpolicy-bench.XXXXXX").utf8CString)
        guard mkdtemp(&template) != nil else {
            throw BenchFailure("mkdtemp in \(tmp): \(String(cString: strerror(errno)))")
        }
        return template.withUnsafeBufferPointer { String(cString: $0.baseAddress!) }
    }
}

/// What the task part measured.
struct TasksResults: Sendable {
    var apps = 0
    var requestsPerApp = 0
    var submitCalls = 0
    var restartRounds = 0
    var agentPID: pid_t = 0

    var emptySubmit = Samples()
    var emptyID = Samples()
    var emptySubmitCPU = Measure.CPU()
    var emptyIDCPU = Measure.CPU()
    var loadedSubmit = Samples()
    var loadedID = Samples()
    var loadedSubmitCPU = Measure.CPU()
    var loadedIDCPU = Measure.CPU()

    /// Register and Submit calls while loading, and how long the load took.
    var load = Measure.Throughput()
    /// From the last Submit's reply until GetStatus reported all of them.
    var pendingSettleMS = 0.0
    var agentRSSBefore = 0
    var agentRSSAfter = 0
    var daemonRSSBefore = 0
    var daemonRSSAfter = 0

    /// From posix_spawn until GetStatus answered, per round.
    var emptyReadyMS: [Double] = []
    var loadedReadyMS: [Double] = []
    /// From posix_spawn until GetStatus reported every loaded request pending.
    var loadedPendingMS: [Double] = []
    /// SIGTERM to exit; the loaded agent's first entry is the one that did the loading.
    var emptyStopMS: [Double] = []
    var loadedStopMS: [Double] = []
    var emptyRestartRSS: [Int] = []
    var loadedRestartRSS: [Int] = []

    var pending: Int { apps * requestsPerApp }
    var rssGrowth: Int { agentRSSAfter - agentRSSBefore }

    static func median(_ values: [Double]) -> Double {
        guard !values.isEmpty else { return .nan }
        let sorted = values.sorted()
        let mid = sorted.count / 2
        return sorted.count % 2 == 1 ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2
    }

    func table() -> String {
        let us = { (ns: Double) in Format.fixed(ns / 1000, 1) }
        let ms = { (x: Double) in Format.fixed(x, 1) }
        let n = Format.thousands(pending)
        let ratio = { (a: Double, b: Double) in Format.ratio(a, b) }
        let header = ["figure", "bgpolicyd", "baseline", "baseline is", "ratio"]
        var body: [[String]] = []
        for (label, submit, id) in [("no other pending", emptySubmit, emptyID), ("\(n) pending", loadedSubmit, loadedID)] {
            body.append(["Submit median, \(label) (µs)", us(submit.median), us(id.median), "bus daemon GetId", ratio(submit.median, id.median)])
            body.append([
                "Submit p99, \(label) (µs)", us(submit.percentile(99)), us(id.percentile(99)), "bus daemon GetId",
                ratio(submit.percentile(99), id.percentile(99)),
            ])
        }
        body.append([
            "agent VmRSS holding \(n) pending (kB)", Format.thousands(agentRSSAfter), Format.thousands(agentRSSBefore),
            "same agent before loading", ratio(Double(agentRSSAfter), Double(agentRSSBefore)),
        ])
        let empty = Self.median(emptyReadyMS)
        body.append([
            "start to GetStatus answering, \(n) pending (ms)", ms(Self.median(loadedReadyMS)), ms(empty), "empty-state agent",
            ratio(Self.median(loadedReadyMS), empty),
        ])
        body.append([
            "start to GetStatus pending = \(n) (ms)", ms(Self.median(loadedPendingMS)), ms(empty), "empty-state agent",
            ratio(Self.median(loadedPendingMS), empty),
        ])
        return Format.table(header, body)
    }

    func details(_ options: Options) -> String {
        let us = { (ns: Double) in Format.fixed(ns / 1000, 1) }
        let list = { (values: [Double]) in values.map { Format.fixed($0, 1) }.joined(separator: ", ") }
        let perCall = { (c: Measure.CPU, n: Int) -> String in
            guard n > 0 else { return "n/a" }
            return "agent \(us(Double(c.agent) / Double(n))), bus daemon \(us(Double(c.daemon) / Double(n))), bench \(us(Double(c.bench) / Double(n)))"
        }
        let loadSeconds = Double(load.nanoseconds) / 1e9
        var lines: [String] = []
        lines.append(
            "Tasks: \(Format.thousands(apps)) unverified apps (app_id option) × \(requestsPerApp) requests (1 refresh + \(requestsPerApp - 1) processing, "
                + "earliest_begin a day ahead, so none runs), each app registered on its own connection, closed after its Submits, "
                + "\(options.loadConcurrency) at a time: \(Format.thousands(load.calls)) Register + Submit calls in \(Format.fixed(loadSeconds, 1)) s "
                + "(\(Format.rounded(load.callsPerSecond)) calls/s); GetStatus reported all \(Format.thousands(pending)) pending \(Format.fixed(pendingSettleMS, 1)) ms after the last reply.")
        lines.append(
            "Submit latency: a fresh app resubmitting one identifier, \(Format.thousands(options.submitWarmupCalls)) warm-up + "
                + "\(Format.thousands(emptySubmit.count)) timed calls, interleaved in blocks with as many GetId on the same connection; "
                + "mean \(us(emptySubmit.mean)) / \(us(loadedSubmit.mean)) µs (no other / \(Format.thousands(pending)) pending), "
                + "max \(us(emptySubmit.percentile(100))) / \(us(loadedSubmit.percentile(100))) µs.")
        lines.append(
            "CPU µs per call: Submit, no other pending: \(perCall(emptySubmitCPU, emptySubmit.count)); "
                + "with \(Format.thousands(pending)) pending: \(perCall(loadedSubmitCPU, loadedSubmit.count)); "
                + "GetId: \(perCall(emptyIDCPU, emptyID.count)).")
        let growth = rssGrowth
        lines.append(
            "Memory: agent VmRSS \(Format.thousands(agentRSSBefore)) → \(Format.thousands(agentRSSAfter)) kB over the load (\(Format.signed(growth)) kB, "
                + "\(pending > 0 ? Format.rounded(Double(growth) * 1024 / Double(pending)) : "n/a") bytes per pending request); "
                + "bus daemon \(Format.thousands(daemonRSSBefore)) → \(Format.thousands(daemonRSSAfter)) kB. "
                + "Just after a restart: empty-state agent \(emptyRestartRSS.map(Format.thousands).joined(separator: ", ")) kB, "
                + "loaded agent \(loadedRestartRSS.map(Format.thousands).joined(separator: ", ")) kB.")
        lines.append(
            "Restarts, ms from posix_spawn, per round: empty-state agent answering \(list(emptyReadyMS)); loaded agent answering "
                + "\(list(loadedReadyMS)), with all \(Format.thousands(pending)) pending \(list(loadedPendingMS)). "
                + "SIGTERM to exit, ms: loaded \(list(loadedStopMS)) (the first after the load), empty \(list(emptyStopMS)).")
        lines.append("Task agent pid \(agentPID) (the one loaded; the restarts are new processes).")
        return lines.joined(separator: "\n")
    }

    func json() -> String {
        func samples(_ s: Samples) -> String {
            JSON.object([
                ("count", "\(s.count)"), ("median_us", JSON.number(s.median / 1000)), ("p99_us", JSON.number(s.percentile(99) / 1000)),
                ("mean_us", JSON.number(s.mean / 1000)), ("max_us", JSON.number(s.percentile(100) / 1000)),
            ])
        }
        func submit(_ submit: Samples, _ id: Samples) -> String {
            JSON.object([
                ("submit", samples(submit)), ("get_id", samples(id)),
                ("median_ratio", JSON.number(submit.median / id.median)), ("p99_ratio", JSON.number(submit.percentile(99) / id.percentile(99))),
            ])
        }
        let numbers = { (a: [Double]) in "[" + a.map(JSON.number).joined(separator: ",") + "]" }
        let ints = { (a: [Int]) in "[" + a.map(String.init).joined(separator: ",") + "]" }
        return JSON.object([
            ("apps", "\(apps)"), ("requests_per_app", "\(requestsPerApp)"), ("pending", "\(pending)"),
            ("load", JSON.object([
                ("calls", "\(load.calls)"), ("errors", "\(load.errors)"), ("seconds", JSON.number(Double(load.nanoseconds) / 1e9)),
                ("get_status_settled_ms", JSON.number(pendingSettleMS)),
            ])),
            ("submit_no_other_pending", submit(emptySubmit, emptyID)),
            ("submit_loaded", submit(loadedSubmit, loadedID)),
            ("agent_rss_kb_before", "\(agentRSSBefore)"), ("agent_rss_kb_after", "\(agentRSSAfter)"),
            ("bus_daemon_rss_kb_before", "\(daemonRSSBefore)"), ("bus_daemon_rss_kb_after", "\(daemonRSSAfter)"),
            ("restart", JSON.object([
                ("rounds", "\(restartRounds)"),
                ("empty_ready_ms", numbers(emptyReadyMS)), ("loaded_ready_ms", numbers(loadedReadyMS)),
                ("loaded_pending_ms", numbers(loadedPendingMS)),
                ("empty_ready_median_ms", JSON.number(Self.median(emptyReadyMS))),
                ("loaded_ready_median_ms", JSON.number(Self.median(loadedReadyMS))),
                ("loaded_pending_median_ms", JSON.number(Self.median(loadedPendingMS))),
                ("ready_ratio", JSON.number(Self.median(loadedReadyMS) / Self.median(emptyReadyMS))),
                ("empty_stop_ms", numbers(emptyStopMS)), ("loaded_stop_ms", numbers(loadedStopMS)),
                ("empty_rss_kb", ints(emptyRestartRSS)), ("loaded_rss_kb", ints(loadedRestartRSS)),
            ])),
        ])
    }
}
