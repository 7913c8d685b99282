import BGPolicyCore
import Glibc

/// Everything one run measured.
struct Results: Sendable {
    var options: Options
    var agentPID: pid_t = 0
    var daemonPID: pid_t = 0

    var statusLatency = Samples()
    var idLatency = Samples()
    /// CPU time the sequential calls cost each process, per method.
    var statusCPU = Measure.CPU()
    var idCPU = Measure.CPU()

    var statusThroughput = Measure.Throughput()
    var idThroughput = Measure.Throughput()
    var statusThroughputCPU = Measure.CPU()
    var idThroughputCPU = Measure.CPU()

    struct Memory: Sendable {
        /// The agent's VmRSS (kB) before the measured GetStatus calls and after each quarter of them.
        var agentRSS: [Int] = []
        /// The bus daemon's VmRSS (kB) over the same GetStatus calls.
        var daemonRSSDuringStatus: [Int] = []
        /// The bus daemon's VmRSS (kB) over as many GetId calls (the baseline).
        var daemonRSSDuringID: [Int] = []
        var statusRun = Measure.Throughput()
        var idRun = Measure.Throughput()

        var agentGrowth: Int { (agentRSS.last ?? 0) - (agentRSS.first ?? 0) }
        var daemonGrowthID: Int { (daemonRSSDuringID.last ?? 0) - (daemonRSSDuringID.first ?? 0) }
        var daemonGrowthStatus: Int { (daemonRSSDuringStatus.last ?? 0) - (daemonRSSDuringStatus.first ?? 0) }
    }
    var memory = Memory()

    struct Idle: Sendable {
        var seconds = 0.0
        var agentSwitches = 0
        var daemonSwitches = 0
        /// Threads that switched during the window: "name(tid)+n".
        var agentThreads: [String] = []
        var daemonThreads: [String] = []
        var agentThreadCount = 0
    }
    var idle = Idle()

    var agentStop = ""
    /// The task part (Submit, load, restart); nil when it did not run.
    var tasks: TasksResults?
    /// The usage log part; nil when it did not run.
    var usage: UsageResults?
    /// The planner's part; nil when it did not run.
    var planning: PlanningResults?
    var totalSeconds = 0.0

    // MARK: Targets

    static let latencyTarget = 2.5
    static let throughputTarget = 0.40
    static let memoryTargetKB = 1024

    var medianRatio: Double { statusLatency.median / idLatency.median }
    var p99Ratio: Double { statusLatency.percentile(99) / idLatency.percentile(99) }
    var throughputRatio: Double { statusThroughput.callsPerSecond / idThroughput.callsPerSecond }
}

// MARK: The table

extension Results {
    struct Row {
        let figure: String
        let agent: String
        let baseline: String
        let ratio: String
        let target: String
        /// nil for figures without a target.
        let met: Bool?
    }

    var rows: [Row] {
        let us = { (ns: Double) in Format.fixed(ns / 1000, 1) }
        let memoryCalls = Format.thousands(memory.statusRun.calls + memory.statusRun.errors)
        return [
            Row(
                figure: "latency median (µs)", agent: us(statusLatency.median), baseline: us(idLatency.median),
                ratio: Format.fixed(medianRatio, 2) + "×", target: "≤ \(Format.fixed(Self.latencyTarget, 1))×",
                met: medianRatio <= Self.latencyTarget),
            Row(
                figure: "latency p99 (µs)", agent: us(statusLatency.percentile(99)), baseline: us(idLatency.percentile(99)),
                ratio: Format.fixed(p99Ratio, 2) + "×", target: "≤ \(Format.fixed(Self.latencyTarget, 1))×",
                met: p99Ratio <= Self.latencyTarget),
            Row(
                figure: "CPU per sequential call, all processes (µs)", agent: us(perCall(statusCPU.total, statusLatency)),
                baseline: us(perCall(idCPU.total, idLatency)), ratio: Format.fixed(cpuRatio, 2) + "×", target: "—", met: nil),
            Row(
                figure: "throughput, \(options.concurrency) in flight (calls/s)",
                agent: Format.rounded(statusThroughput.callsPerSecond), baseline: Format.rounded(idThroughput.callsPerSecond),
                ratio: Format.fixed(throughputRatio * 100, 0) + " %", target: "≥ \(Format.fixed(Self.throughputTarget * 100, 0)) %",
                met: throughputRatio >= Self.throughputTarget && statusThroughput.errors == 0),
            Row(
                figure: "RSS growth over \(memoryCalls) calls (kB)", agent: Format.signed(memory.agentGrowth),
                baseline: Format.signed(memory.daemonGrowthID),
                ratio: Format.ratio(Double(memory.agentGrowth), Double(memory.daemonGrowthID)),
                target: "≤ \(Format.thousands(Self.memoryTargetKB)) kB", met: memory.agentGrowth <= Self.memoryTargetKB),
            Row(
                figure: "idle context switches in \(Format.fixed(idle.seconds, 0)) s", agent: "\(idle.agentSwitches)",
                baseline: "\(idle.daemonSwitches)", ratio: Format.ratio(Double(idle.agentSwitches), Double(idle.daemonSwitches)),
                target: "0", met: idle.agentSwitches == 0),
        ]
    }

    var allMet: Bool { rows.allSatisfy { $0.met != false } }

    func perCall(_ nanoseconds: UInt64, _ samples: Samples) -> Double {
        perCall(nanoseconds, samples.count)
    }

    func perCall(_ nanoseconds: UInt64, _ count: Int) -> Double {
        count == 0 ? .nan : Double(nanoseconds) / Double(count)
    }

    var cpuRatio: Double { perCall(statusCPU.total, statusLatency) / perCall(idCPU.total, idLatency) }

    func table() -> String {
        let header = ["figure", "bgpolicyd (GetStatus)", "baseline (bus daemon, GetId)", "ratio", "target", "met"]
        let body = rows.map { [$0.figure, $0.agent, $0.baseline, $0.ratio, $0.target, $0.met.map { $0 ? "yes" : "NO" } ?? "—"] }
        return Format.table(header, body)
    }

    /// The counts and durations used, and the details behind the figures.
    func details() -> String {
        let o = options
        var lines: [String] = []
        lines.append(
            "Counts: \(Format.thousands(o.warmupCalls)) warm-up + \(Format.thousands(statusLatency.count)) timed sequential calls per method "
                + "(interleaved blocks of 1,000); throughput \(o.throughputRounds) round(s) × \(Format.fixed(o.throughputSeconds, 1)) s per method "
                + "with \(o.concurrency) tasks (GetStatus \(Format.thousands(statusThroughput.calls)) calls in \(Format.fixed(Double(statusThroughput.nanoseconds) / 1e9, 2)) s, "
                + "GetId \(Format.thousands(idThroughput.calls)) in \(Format.fixed(Double(idThroughput.nanoseconds) / 1e9, 2)) s); "
                + "memory \(Format.thousands(o.memoryWarmupCalls)) warm-up + \(Format.thousands(memory.statusRun.calls)) GetStatus calls "
                + "(\(o.concurrency) in flight, \(Format.fixed(Double(memory.statusRun.nanoseconds) / 1e9, 1)) s), baseline the same number of GetId; "
                + "idle window \(Format.fixed(idle.seconds, 1)) s after \(Format.fixed(o.settleSeconds, 1)) s settling; total \(Format.fixed(totalSeconds, 1)) s.")
        lines.append(
            "Latency mean: GetStatus \(Format.fixed(statusLatency.mean / 1000, 1)) µs, GetId \(Format.fixed(idLatency.mean / 1000, 1)) µs; "
                + "p90 \(Format.fixed(statusLatency.percentile(90) / 1000, 1)) / \(Format.fixed(idLatency.percentile(90) / 1000, 1)) µs; "
                + "max \(Format.fixed(statusLatency.percentile(100) / 1000, 1)) / \(Format.fixed(idLatency.percentile(100) / 1000, 1)) µs.")
        let cpu = { (c: Measure.CPU, n: Int) in
            "agent \(Format.fixed(perCall(c.agent, n) / 1000, 1)), bus daemon \(Format.fixed(perCall(c.daemon, n) / 1000, 1)), bench (client) \(Format.fixed(perCall(c.bench, n) / 1000, 1))"
        }
        lines.append(
            "CPU µs per call, sequential: GetStatus: \(cpu(statusCPU, statusLatency.count)); GetId: \(cpu(idCPU, idLatency.count)). "
                + "With \(o.concurrency) in flight: GetStatus: \(cpu(statusThroughputCPU, statusThroughput.calls)); GetId: \(cpu(idThroughputCPU, idThroughput.calls)).")
        lines.append(
            "Agent VmRSS (kB) before and after each quarter: \(memory.agentRSS.map(Format.thousands).joined(separator: " → ")); "
                + "bus daemon over the same calls: \(memory.daemonRSSDuringStatus.map(Format.thousands).joined(separator: " → ")); "
                + "bus daemon over the GetId baseline: \(memory.daemonRSSDuringID.map(Format.thousands).joined(separator: " → ")).")
        lines.append(
            "Idle: agent has \(idle.agentThreadCount) threads; threads that switched: agent "
                + (idle.agentThreads.isEmpty ? "none" : idle.agentThreads.joined(separator: ", "))
                + "; bus daemon " + (idle.daemonThreads.isEmpty ? "none" : idle.daemonThreads.joined(separator: ", ")) + "."
                + (idle.agentThreads.contains { $0.contains("qos") }
                    ? " (Threads named …qos… are libdispatch's: its workqueue monitor ticks once a second, and idle workers exit after about 5 s.)"
                    : ""))
        let errors = statusThroughput.errors + idThroughput.errors + memory.statusRun.errors + memory.idRun.errors
        if errors > 0 {
            let first = statusThroughput.firstError ?? idThroughput.firstError ?? memory.statusRun.firstError ?? memory.idRun.firstError ?? "?"
            lines.append("Errors: \(errors) calls failed under load (first: \(first)).")
        }
        lines.append("Agent pid \(agentPID), bus daemon pid \(daemonPID); agent \(agentStop).")
        lines.append("Targets \(allMet ? "all met" : "missed: " + rows.filter { $0.met == false }.map(\.figure).joined(separator: "; ")).")
        return lines.joined(separator: "\n")
    }

    // MARK: JSON

    func json() -> String {
        func samples(_ s: Samples) -> String {
            JSON.object([
                ("count", "\(s.count)"), ("median_us", JSON.number(s.median / 1000)), ("p90_us", JSON.number(s.percentile(90) / 1000)),
                ("p99_us", JSON.number(s.percentile(99) / 1000)), ("mean_us", JSON.number(s.mean / 1000)),
                ("max_us", JSON.number(s.percentile(100) / 1000)),
            ])
        }
        func run(_ t: Measure.Throughput) -> String {
            JSON.object([
                ("calls", "\(t.calls)"), ("errors", "\(t.errors)"), ("seconds", JSON.number(Double(t.nanoseconds) / 1e9)),
                ("calls_per_second", JSON.number(t.callsPerSecond)),
            ])
        }
        let ints = { (a: [Int]) in "[" + a.map(String.init).joined(separator: ",") + "]" }
        func cpu(_ c: Measure.CPU, _ n: Int) -> String {
            JSON.object([
                ("agent_us", JSON.number(perCall(c.agent, n) / 1000)), ("bus_daemon_us", JSON.number(perCall(c.daemon, n) / 1000)),
                ("bench_us", JSON.number(perCall(c.bench, n) / 1000)), ("total_us", JSON.number(perCall(c.total, n) / 1000)),
            ])
        }
        return JSON.object([
            ("quick", options.quick ? "true" : "false"),
            ("agent_pid", "\(agentPID)"), ("bus_daemon_pid", "\(daemonPID)"),
            (
                "latency",
                JSON.object([
                    ("warmup_calls", "\(options.warmupCalls)"),
                    ("get_status", samples(statusLatency)), ("get_id", samples(idLatency)),
                    ("median_ratio", JSON.number(medianRatio)), ("p99_ratio", JSON.number(p99Ratio)),
                    ("cpu_per_call_get_status", cpu(statusCPU, statusLatency.count)), ("cpu_per_call_get_id", cpu(idCPU, idLatency.count)),
                    ("cpu_ratio", JSON.number(cpuRatio)),
                    ("target_ratio", JSON.number(Self.latencyTarget)),
                    ("met", medianRatio <= Self.latencyTarget && p99Ratio <= Self.latencyTarget ? "true" : "false"),
                ])
            ),
            (
                "throughput",
                JSON.object([
                    ("concurrency", "\(options.concurrency)"), ("get_status", run(statusThroughput)), ("get_id", run(idThroughput)),
                    ("cpu_per_call_get_status", cpu(statusThroughputCPU, statusThroughput.calls)),
                    ("cpu_per_call_get_id", cpu(idThroughputCPU, idThroughput.calls)),
                    ("ratio", JSON.number(throughputRatio)), ("target_ratio", JSON.number(Self.throughputTarget)),
                    ("met", throughputRatio >= Self.throughputTarget ? "true" : "false"),
                ])
            ),
            (
                "memory",
                JSON.object([
                    ("warmup_calls", "\(options.memoryWarmupCalls)"), ("get_status_run", run(memory.statusRun)), ("get_id_run", run(memory.idRun)),
                    ("agent_rss_kb", ints(memory.agentRSS)), ("agent_growth_kb", "\(memory.agentGrowth)"),
                    ("bus_daemon_rss_kb_during_get_status", ints(memory.daemonRSSDuringStatus)),
                    ("bus_daemon_rss_kb_during_get_id", ints(memory.daemonRSSDuringID)),
                    ("bus_daemon_growth_kb", "\(memory.daemonGrowthID)"),
                    ("target_kb", "\(Self.memoryTargetKB)"), ("met", memory.agentGrowth <= Self.memoryTargetKB ? "true" : "false"),
                ])
            ),
            (
                "idle",
                JSON.object([
                    ("seconds", JSON.number(idle.seconds)), ("agent_context_switches", "\(idle.agentSwitches)"),
                    ("bus_daemon_context_switches", "\(idle.daemonSwitches)"), ("agent_threads", "\(idle.agentThreadCount)"),
                    ("agent_threads_switching", "[" + idle.agentThreads.map(JSON.string).joined(separator: ",") + "]"),
                    ("bus_daemon_threads_switching", "[" + idle.daemonThreads.map(JSON.string).joined(separator: ",") + "]"),
                    ("target", "0"), ("met", idle.agentSwitches == 0 ? "true" : "false"),
                ])
            ),
            ("tasks", tasks?.json() ?? "null"),
            ("usage", usage?.json() ?? "null"),
            ("agent_stop", JSON.string(agentStop)),
            ("total_seconds", JSON.number(totalSeconds)),
            ("all_targets_met", allMet ? "true" : "false"),
        ])
    }
}

enum JSON {
    static func object(_ members: [(String, String)]) -> String {
        "{" + members.map { string($0.0) + ":" + $0.1 }.joined(separator: ",") + "}"
    }

    static func number(_ x: Double) -> String {
        x.isFinite ? Format.fixed(x, 3) : "null"
    }

    static func string(_ s: String) -> String { JSONString.quoted(s) }
}

enum Format {
    /// A Markdown table with its columns padded to their widest cell.
    static func table(_ header: [String], _ body: [[String]]) -> String {
        var widths = header.map(\.count)
        for row in body { for (i, cell) in row.enumerated() { widths[i] = max(widths[i], cell.count) } }
        func line(_ cells: [String]) -> String {
            "| " + cells.enumerated().map { i, cell in cell + String(repeating: " ", count: widths[i] - cell.count) }
                .joined(separator: " | ") + " |"
        }
        var out = [line(header), "|" + widths.map { String(repeating: "-", count: $0 + 2) }.joined(separator: "|") + "|"]
        out += body.map(line)
        return out.joined(separator: "\n")
    }

    /// `x` with `digits` decimals (no Foundation).
    static func fixed(_ x: Double, _ digits: Int) -> String {
        guard x.isFinite else { return "n/a" }
        var scale = 1.0
        for _ in 0..<digits { scale *= 10 }
        guard abs(x) * scale < 1e15 else { return "\(x)" }
        let scaled = (abs(x) * scale).rounded()
        let whole = (scaled / scale).rounded(.down)
        let fraction = Int(scaled - whole * scale)
        var text = (x < 0 && scaled != 0 ? "-" : "") + String(Int(whole))
        if digits > 0 {
            let f = String(fraction)
            text += "." + String(repeating: "0", count: digits - f.count) + f
        }
        return text
    }

    /// 12,345
    static func thousands(_ n: Int) -> String {
        let digits = String(n.magnitude)
        var out = ""
        for (i, c) in digits.enumerated() {
            if i > 0 && (digits.count - i) % 3 == 0 { out += "," }
            out.append(c)
        }
        return (n < 0 ? "-" : "") + out
    }

    /// 12,345 for a measured rate; "n/a" when there is none.
    static func rounded(_ x: Double) -> String {
        x.isFinite && abs(x) < 1e15 ? thousands(Int(x.rounded())) : "n/a"
    }

    static func signed(_ n: Int) -> String {
        (n > 0 ? "+" : "") + thousands(n)
    }

    /// a/b, or "n/a" when b is not positive.
    static func ratio(_ a: Double, _ b: Double) -> String {
        b > 0 ? fixed(a / b, 2) + "×" : "n/a"
    }
}
