import ArgumentParser
import BGPolicyCore
import BGPolicyDBus
import Glibc

struct StatusCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "status",
        abstract: "Show whether bgpolicyd runs, and what it knows.")

    @Flag(name: .long, help: "Print the status as a JSON object, for scripts.")
    var json = false

    func run() async throws {
        let client = try await AgentClient.connect()
        defer { client.close() }
        let reply = try await client.call(BGPolicyNames.adminInterface, "GetStatus")
        let status: [String: Variant]
        do {
            status = try reply.decode([String: Variant].self, at: 0)
        } catch {
            throw CLIError("bgpolicyd answered GetStatus with \"\(reply.signatureText)\", not a{sv}; is it a different version?")
        }
        print(json ? JSONText.object(status) : StatusReport(status).text)
    }
}

/// The human view of `GetStatus`: a short table, unknown keys listed last.
struct StatusReport {
    let status: [String: Variant]
    init(_ status: [String: Variant]) { self.status = status }

    static let known: [(key: String, label: String)] = [
        ("pid", "PID"), ("uptime_seconds", "Uptime"), ("started_at", "Started"),
        ("state_dir", "State"), ("config_source", "Config"),
    ]

    var text: String {
        let version = (try? status.optional("version", as: String.self)) ?? nil
        var lines = ["bgpolicyd \(version ?? "(unknown version)") is running"]
        var rows: [(String, String)] = []
        for (key, label) in Self.known {
            guard let value = status[key]?.value else { continue }
            rows.append((label, format(key, value)))
        }
        if case .dictionary? = status["conditions"]?.value,
            let conditions = try? status["conditions"]!.decode([String: Variant].self)
        {
            rows.append(("Now", (try? conditions.optional("summary", as: String.self)) ?? nil ?? "unknown"))
            rows.append(("Sources", Self.sources(conditions)))
        }
        let shown = Set(Self.known.map(\.key) + ["version", "config_path", "conditions"])
        for key in status.keys.sorted() where !shown.contains(key) {
            rows.append((key, format(key, status[key]!.value)))
        }
        let width = rows.map(\.0.count).max() ?? 0
        for (label, value) in rows {
            lines.append("  " + label + String(repeating: " ", count: width - label.count + 2) + value)
        }
        return lines.joined(separator: "\n")
    }

    private func format(_ key: String, _ value: DBusValue) -> String {
        switch (key, value) {
        case ("uptime_seconds", .double(let seconds)):
            return Self.duration(seconds)
        case ("started_at", .int64(let unix)):
            return Self.localTime(unix)
        case ("config_source", .string("defaults")):
            let path = (try? status.optional("config_path", as: String.self)) ?? nil
            return "built-in defaults" + (path.map { " (no \($0))" } ?? "")
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
    static func localTime(_ unix: Int64) -> String {
        var t = time_t(unix)
        var parts = tm()
        guard localtime_r(&t, &parts) != nil else { return "\(unix)" }
        var buffer = [CChar](repeating: 0, count: 64)
        let n = strftime(&buffer, buffer.count, "%Y-%m-%d %H:%M:%S %z", &parts)
        return n > 0 ? String(decoding: buffer[0..<n].map { UInt8(bitPattern: $0) }, as: UTF8.self) : "\(unix)"
    }

    static func duration(_ seconds: Double) -> String {
        let total = Int(seconds.rounded(.down))
        let (d, h, m, s) = (total / 86_400, total % 86_400 / 3600, total % 3600 / 60, total % 60)
        if d > 0 { return "\(d) d \(h) h \(m) min" }
        if h > 0 { return "\(h) h \(m) min" }
        if m > 0 { return "\(m) min \(s) s" }
        return "\(s) s"
    }
}
