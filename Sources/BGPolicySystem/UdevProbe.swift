public import BGPolicyCore
import Glibc
import Logging
import SystemPackage

/// Runs `UdevPowerSource` alone and prints what it reports, for integration tests that drive
/// a umockdev testbed and for looking at a machine by hand.
///
/// Each report is one JSON object on one line of stdout, written with a single `write` as soon
/// as it is made:
///
///     {"source":"udev","report":"power","onBatteryReported":false,"batteryPresent":true,"percentage":80.0,"state":"discharging","warningLevel":"unknown","timeToEmpty":null}
///     {"source":"udev","report":"lost"}
///
/// The first line comes after the uevent monitor is listening, so a test may change the
/// testbed as soon as it has read it. Logs go to stderr.
public enum UdevProbe {
    public static func run(seconds: Double) async {
        let logger = Logger(label: "bgpolicy.udev-probe", factory: { StreamLogHandler.standardError(label: $0) })
        let (rereads, rereadInput) = AsyncStream.makeStream(of: Void.self)
        let context = SourceContext(logger: logger, rereads: rereads) { report in
            writeLine(jsonLine(report))
        }
        await withTaskGroup(of: Void.self) { group in
            group.addTask { await UdevPowerSource().run(context) }
            group.addTask { try? await Task.sleep(for: .seconds(max(seconds, 0))) }
            // Whichever ends first — the time, or the source after a failure — ends both.
            await group.next()
            group.cancelAll()
        }
        rereadInput.finish()
    }

    /// The JSON line for a report (no trailing newline).
    public static func jsonLine(_ report: ConditionReport) -> String {
        var fields: [(String, String)] = [("source", quoted(ConditionSourceName.udev.rawValue))]
        switch report {
        case .power(let s):
            fields += [
                ("report", quoted("power")),
                ("onBatteryReported", s.onBatteryReported.map { "\($0)" } ?? "null"),
                ("batteryPresent", "\(s.batteryPresent)"),
                ("percentage", s.percentage.flatMap { $0.isFinite ? "\($0)" : nil } ?? "null"),
                ("state", quoted(s.state.rawValue)),
                ("warningLevel", quoted(s.warningLevel.rawValue)),
                ("timeToEmpty", s.timeToEmpty.map { "\($0)" } ?? "null"),
            ]
        case .profile: fields.append(("report", quoted("profile")))
        case .network: fields.append(("report", quoted("network")))
        case .session: fields.append(("report", quoted("session")))
        case .input: fields.append(("report", quoted("input")))
        case .lost: fields.append(("report", quoted("lost")))
        }
        return "{" + fields.map { "\(quoted($0.0)):\($0.1)" }.joined(separator: ",") + "}"
    }

    /// The strings here are fixed enum names; escaping covers quotes and backslashes anyway.
    private static func quoted(_ text: String) -> String {
        var out = "\""
        for scalar in text.unicodeScalars {
            switch scalar {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            case _ where scalar.value < 0x20: out += "\\u" + String(repeating: "0", count: 4 - String(scalar.value, radix: 16).count) + String(scalar.value, radix: 16)
            default: out.unicodeScalars.append(scalar)
            }
        }
        return out + "\""
    }

    /// One unbuffered write per line, so a reader on a pipe sees each report at once.
    private static func writeLine(_ line: String) {
        _ = try? FileDescriptor.standardOutput.writeAll((line + "\n").utf8)
    }
}
