import Glibc

/// Times for people: local clock times, and distances from now such as "3 h ago" or
/// "in 14 min". `now` is a parameter everywhere so that the reports are pure functions.
enum TimeText {
    /// The wall clock, in Unix seconds.
    static func now() -> Int64 { Int64(time(nil)) }

    /// "now", "12 s ago", "in 14 min", "3 h ago", "2 d ago": the largest whole unit only,
    /// so that a table column stays narrow.
    static func relative(_ unix: Int64, now: Int64) -> String {
        let (delta, overflow) = unix.subtractingReportingOverflow(now)
        if overflow { return unix < now ? "long ago" : "far ahead" }
        if delta == 0 { return "now" }
        let amount = span(delta.magnitude)
        return delta < 0 ? "\(amount) ago" : "in \(amount)"
    }

    /// A length of time in its largest whole unit: "45 s", "14 min", "3 h", "2 d".
    static func span(_ seconds: UInt64) -> String {
        switch seconds {
        case ..<60: "\(seconds) s"
        case ..<3600: "\(seconds / 60) min"
        case ..<86_400: "\(seconds / 3600) h"
        default: "\(seconds / 86_400) d"
        }
    }

    /// "14:03:05" for a time today, "2026-11-21 14:03:05" on any other day (local time).
    static func clock(_ unix: Int64, now: Int64) -> String {
        let sameDay = format(unix, "%Y-%m-%d") == format(now, "%Y-%m-%d")
        return format(unix, sameDay ? "%H:%M:%S" : "%Y-%m-%d %H:%M:%S") ?? "\(unix)"
    }

    /// A local time with its UTC offset, such as `2026-11-22 14:03:05 +0100`.
    static func localTime(_ unix: Int64) -> String {
        format(unix, "%Y-%m-%d %H:%M:%S %z") ?? "\(unix)"
    }

    /// A local clock time and its distance from now: "15:20:00 (in 14 min)".
    static func moment(_ unix: Int64, now: Int64) -> String {
        "\(clock(unix, now: now)) (\(relative(unix, now: now)))"
    }

    /// Whole Unix seconds from a `d` timestamp (history times); nil when it is not a number
    /// a clock can show, so that a bad value from the bus never traps.
    static func seconds(_ value: Double) -> Int64? {
        guard value.isFinite, value > -1e15, value < 1e15 else { return nil }
        return Int64(value.rounded(.down))
    }

    /// `strftime` in the local time zone (`TZ`), or nil for a time it cannot show.
    static func format(_ unix: Int64, _ pattern: String) -> String? {
        tzset()
        var t = time_t(unix)
        var parts = tm()
        guard localtime_r(&t, &parts) != nil else { return nil }
        var buffer = [CChar](repeating: 0, count: 64)
        let n = strftime(&buffer, buffer.count, pattern, &parts)
        guard n > 0 else { return nil }
        return String(decoding: buffer[0..<n].map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }
}
