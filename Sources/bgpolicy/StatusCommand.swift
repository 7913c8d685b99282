import ArgumentParser
import BGPolicyCore
import BGPolicyDBus

struct StatusCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "status",
        abstract: "Show whether bgpolicyd runs, and what it knows.")

    @Flag(name: .long, help: "Print the status as a JSON object, for scripts.")
    var json = false

    func run() async throws {
        try await ExitStatus.reporting {
            let client = try await AgentClient.connect(startingAgent: false)
            defer { client.close() }
            let reply = try await client.call(BGPolicyNames.adminInterface, "GetStatus")
            let status: [String: Variant]
            do {
                status = try reply.decode([String: Variant].self, at: 0)
            } catch {
                throw CLIError("bgpolicyd answered GetStatus with \"\(reply.signatureText)\", not a{sv}; is it a different version?")
            }
            print(json ? JSONText.object(status) : StatusReport(status, now: TimeText.now()).text)
        }
    }
}

/// The human view of `GetStatus`: a short table, unknown keys listed last, then the
/// scheduler's switch, counts and running slices.
struct StatusReport {
    let status: [String: Variant]
    let now: Int64
    init(_ status: [String: Variant], now: Int64) {
        self.status = status
        self.now = now
    }

    static let known: [(key: String, label: String)] = [
        ("pid", "PID"), ("uptime_seconds", "Uptime"), ("started_at", "Started"),
        ("state_dir", "State"), ("config_source", "Config"),
    ]

    var text: String {
        let version = (try? status.optional("version", as: String.self)) ?? nil
        // Every text from the agent goes through TableText.cell, as in the other commands' tables:
        // no escape sequence or bidirectional override reaches the terminal.
        var lines = ["bgpolicyd \(version.map(TableText.cell) ?? "(unknown version)") is running"]
        var rows: [(String, String)] = []
        for (key, label) in Self.known {
            guard let value = status[key]?.value else { continue }
            rows.append((label, format(key, value)))
        }
        // A reload (bgpolicy reload, SIGHUP) that failed, or knobs read that wait for a restart.
        if let error = status.string("config_error") {
            rows.append(("Config error", TableText.cell(
                "not reloaded, the agent goes on with the configuration it had: \(error)")))
        }
        if let pending = status.strings("config_pending"), !pending.isEmpty {
            rows.append(("Config pending", TableText.cell(
                "\(pending.joined(separator: ", ")) take\(pending.count == 1 ? "s" : "") effect at the next start "
                    + "(systemctl --user restart bgpolicyd)")))
        }
        if case .dictionary? = status["conditions"]?.value,
            let conditions = try? status["conditions"]!.decode([String: Variant].self)
        {
            rows.append(("Now", (try? conditions.optional("summary", as: String.self)) ?? nil ?? "unknown"))
            rows.append(("Sources", Self.sources(conditions)))
        }
        let shown = Set(
            Self.known.map(\.key) + ["version", "config_path", "config_loaded_at", "config_error", "config_pending", "conditions"]
                + Self.scheduling)
        for key in status.keys.sorted() where !shown.contains(key) {
            rows.append((key, format(key, status[key]!.value)))
        }
        // The state directory, the summary, the source names, unknown keys and their values.
        rows = rows.map { (TableText.cell($0.0), TableText.cell($0.1)) }
        let width = rows.map(\.0.count).max() ?? 0
        for (label, value) in rows {
            lines.append("  " + label + String(repeating: " ", count: width - label.count + 2) + value)
        }
        let work = schedulingLines
        if !work.isEmpty { lines += [""] + work }
        return lines.joined(separator: "\n")
    }

    /// The keys `schedulingLines` shows (an agent without a scheduler sends none of them).
    static let scheduling = [
        "global_enabled", "apps", "pending", "content_wakes", "running", "next_planned_window", "next_window", "waiting",
        "waiting_summary", "in_use", "refresh",
    ]

    /// "Background work: on", "Apps: 3, pending: 1" (", content-available wakes: 1" when some
    /// wait), one line per running slice, the next planned window, and the agent's next look
    /// when it is another time: each only when the agent sends its key.
    var schedulingLines: [String] {
        var lines: [String] = []
        if let on = status.bool("global_enabled") {
            lines.append("Background work: " + (on ? "on" : "off"))
        }
        if status["apps"] != nil || status["pending"] != nil {
            let wakes = status.integer("content_wakes").map { ", content-available wakes: \($0)" } ?? ""
            lines.append("Apps: \(status.cell("apps")), pending: \(status.cell("pending"))" + wakes)
        }
        if case .array(_, let slices)? = status["running"]?.value {
            for slice in slices {
                guard let slice = try? VariantDictionary(dbusValue: slice) else { continue }
                lines.append("Running: " + TableText.cell(Self.describe(slice, now: now)))
            }
        }
        let planned = status.integer("next_planned_window")
        if let planned { lines.append("Next window: " + TimeText.moment(planned, now: now)) }
        // `next_window` is the agent's timer, no window: a refresh held until a time with no
        // window planned after it was shown as "Next window" a day after that time.
        if let look = status.integer("next_window"), look != planned {
            lines.append("Next look for work: " + TimeText.moment(look, now: now))
        }
        if let waiting = status.string("waiting_summary"), !waiting.isEmpty {
            lines.append("Waiting: " + TableText.cell(waiting) + " (bgpolicy pending says why)")
        }
        if let inUse = status.strings("in_use"), !inUse.isEmpty {
            lines.append("In use: " + TableText.cell(inUse.joined(separator: ", ")))
        }
        if let refresh = try? status["refresh"]?.decode([String: Variant].self), let line = Self.refreshLine(refresh) {
            lines.append("Refresh: " + line)
        }
        return lines
    }

    /// The refresh planner's budget, wake-ups and yield: "12 refreshes left of 26.4 a day; 14
    /// wake-ups in the last 24 h (aims at 21, at most 48); 64 % of refreshes followed by an open
    /// within 15 min". The yield only once some refresh was judged (before, it is its prior).
    /// Nil when the agent sends none of them, or the planner knows no app yet and has woken
    /// nothing (all zeros say nothing).
    static func refreshLine(_ refresh: [String: Variant]) -> String? {
        if refresh.double("budget_per_day") == 0, (refresh.integer("wakeups_24h") ?? 0) == 0 { return nil }
        var parts: [String] = []
        if let left = refresh.double("budget_left") {
            let whole = max(left, 0).rounded(.down)
            var budget = "\(number(whole)) refresh\(whole == 1 ? "" : "es") left"
            if let perDay = refresh.double("budget_per_day") { budget += " of \(number(perDay)) a day" }
            parts.append(budget)
        }
        if let wakes = refresh.integer("wakeups_24h") {
            var limits: [String] = []
            if let target = refresh.double("wakeups_target") { limits.append("aims at \(number(target))") }
            if let max = refresh.integer("wakeups_max") { limits.append("at most \(max)") }
            parts.append("\(wakes) wake-up\(wakes == 1 ? "" : "s") in the last 24 h"
                + (limits.isEmpty ? "" : " (" + limits.joined(separator: ", ") + ")"))
        }
        if let paid = refresh.double("refresh_yield"), paid.isFinite, (refresh.double("refreshes_judged") ?? 0) >= 1 {
            parts.append("\(Int((100 * min(max(paid, 0), 1)).rounded())) % of refreshes followed by an open within 15 min")
        }
        return parts.isEmpty ? nil : parts.joined(separator: "; ")
    }

    /// A count that may have a fraction: "26", "26.4" (any finite number an agent sends).
    private static func number(_ x: Double) -> String {
        guard abs(x) < 1e15 else { return "\(x)" }
        let tenths = (x * 10).rounded()
        return tenths.truncatingRemainder(dividingBy: 10) == 0 ? "\(Int64(tenths / 10))" : "\(tenths / 10)"
    }

    /// One running slice: "org.example.Feeds refresh-feed, sync (slice 7, started 2 min ago,
    /// deadline in 28 s, CPU 3.1 %)".
    static func describe(_ slice: VariantDictionary, now: Int64) -> String {
        let ids = slice.strings("identifiers") ?? slice.strings("task_ids") ?? []
        var facts: [String] = []
        if let id = slice.string("slice_id") { facts.append("slice \(id)") }
        if let started = slice.integer("started_at") { facts.append("started " + TimeText.relative(started, now: now)) }
        // The agent rounds the deadline up to a whole second, and `now` is rounded down: counted
        // from the start of the second, a 30-s slice just begun showed "deadline in 31 s". The
        // time left is counted from the end of the second, as the deadline is.
        if let deadline = slice.integer("deadline") {
            facts.append("deadline " + TimeText.relative(deadline, now: now < .max ? now + 1 : now))
        }
        if let cpu = slice.double("cpu_percent") { facts.append("CPU \((cpu * 10).rounded() / 10) %") }
        let what = ([slice.string("app_id") ?? "an app"] + [ids.joined(separator: ", ")]).filter { !$0.isEmpty }
        return what.joined(separator: " ") + (facts.isEmpty ? "" : " (" + facts.joined(separator: ", ") + ")")
    }

    private func format(_ key: String, _ value: DBusValue) -> String {
        switch (key, value) {
        case ("uptime_seconds", .double(let seconds)):
            return Self.duration(seconds)
        case ("started_at", .int64(let unix)):
            return Self.localTime(unix)
        case ("config_source", .string(let source)):
            let path = (try? status.optional("config_path", as: String.self)) ?? nil
            let shown = source == "defaults" ? "built-in defaults" + (path.map { " (no \($0))" } ?? "") : source
            guard var read = status.integer("config_loaded_at") else { return shown }
            // The file was read at the start at the earliest. Whole seconds of the wall clock,
            // here and in the agent, can put that a second before the uptime (also whole seconds,
            // of another clock) says: "read 2 s ago" beside "Uptime 1 s".
            if case .double(let uptime)? = status["uptime_seconds"]?.value, let seconds = TimeText.seconds(uptime), seconds >= 0 {
                read = max(read, now - seconds)
            }
            return shown + ", read " + TimeText.relative(read, now: now)
        case (_, .string(let s)):
            return s
        default:
            return JSONText.value(value)
        }
    }

    /// The inputs that are live and those that are missing, in words.
    static func sources(_ conditions: [String: Variant]) -> String {
        let live = Set(((try? conditions.optional("sources", as: [String].self)) ?? nil) ?? [])
        var missing: [String] = []
        if !live.contains("upower") {
            missing.append(live.contains("udev") ? "upower (udev stands in)" : "upower")
        }
        if !live.contains("upower") && !live.contains("udev") { missing.append("udev") }
        for name in ["power-profiles", "networkmanager", "logind"] where !live.contains(name) { missing.append(name) }
        let liveText = live.isEmpty ? "none live" : live.sorted().joined(separator: ", ")
        return missing.isEmpty ? liveText : liveText + "; missing: " + missing.joined(separator: ", ")
    }

    /// Local time with its UTC offset, such as `2026-11-22 14:03:05 +0100`.
    static func localTime(_ unix: Int64) -> String { TimeText.localTime(unix) }

    static func duration(_ seconds: Double) -> String {
        // From the bus: anything, so nothing that cannot be an Int may reach Int(_:).
        guard seconds.isFinite, seconds >= 0, seconds < 1e15 else { return "unknown" }
        let total = Int(seconds.rounded(.down))
        let (d, h, m, s) = (total / 86_400, total % 86_400 / 3600, total % 3600 / 60, total % 60)
        if d > 0 { return "\(d) d \(h) h \(m) min" }
        if h > 0 { return "\(h) h \(m) min" }
        if m > 0 { return "\(m) min \(s) s" }
        return "\(s) s"
    }
}
