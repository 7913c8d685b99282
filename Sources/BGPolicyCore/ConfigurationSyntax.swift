/// The value syntax of the configuration file: durations, percentages, counts and words.
///
/// Every parser returns the value or a `ConfigurationValueError` whose message says what would be
/// valid; the caller adds where (line, section, key). Ranges are checked here too so that the
/// message can quote the text the user wrote.
enum ConfigurationSyntax {
    // MARK: Durations

    /// Units as in systemd.time(7), nanoseconds per unit: `m` is minutes there too (`M`, months,
    /// is not a unit here). Weeks and larger are left out: their length is ambiguous to readers
    /// and the policy never needs them.
    static let durationUnits: [(names: [String], nanoseconds: Int64)] = [
        (["ns", "nsec"], 1),
        (["us", "usec", "µs", "μs"], 1_000),
        (["ms", "msec"], 1_000_000),
        (["s", "sec", "secs", "second", "seconds"], 1_000_000_000),
        (["min", "mins", "minute", "minutes", "m"], 60_000_000_000),
        (["h", "hr", "hrs", "hour", "hours"], 3_600_000_000_000),
        (["d", "day", "days"], 86_400_000_000_000),
    ]

    /// Weeks, which the command line takes besides (`bgpolicy history --since 1w`), as it did
    /// before it read this syntax.
    static let week: (names: [String], nanoseconds: Int64) = (["w", "week", "weeks"], 604_800_000_000_000)

    /// The units rendered, largest first: a duration is written in the largest unit that divides it.
    private static let renderedUnits: [(name: String, nanoseconds: Int64)] = [
        ("d", 86_400_000_000_000),
        ("h", 3_600_000_000_000),
        ("min", 60_000_000_000),
        ("s", 1_000_000_000),
        ("ms", 1_000_000),
        ("us", 1_000),
    ]

    private static let durationExamples = #""30s", "10min", "2h", "7d" or "1h30min""#

    /// Parses `30s`, `5 min`, `1h30min`, `90m`, `1.5h`, `500ms` into a duration within `range`.
    /// With `wholeSeconds`, a value with a fraction of a second is refused; with `weeks`, `w`
    /// is a unit too (`Duration(parsing:)`, the command line's).
    static func duration(
        _ text: String, in range: ClosedRange<Duration>, example: String, wholeSeconds: Bool = false, weeks: Bool = false
    ) throws(ConfigurationValueError) -> Duration {
        let durationUnits = weeks ? durationUnits + [week] : durationUnits
        let chars = Array(text)
        var index = 0
        var total: Int64 = 0
        var overflowed = false

        func skipSpaces() {
            while index < chars.count, chars[index].isWhitespace { index += 1 }
        }
        func isDigit(_ c: Character) -> Bool { c.isASCII && c.isNumber }

        skipSpaces()
        guard index < chars.count else {
            throw ConfigurationValueError("expected a duration such as \(durationExamples), got \"\(text)\"")
        }
        var parts = 0
        // What follows a whole part (`60m` in `60m:x`) is named: the part before it was fine.
        func strayText() -> ConfigurationValueError {
            let rest = String(chars[index...])
            return ConfigurationValueError(
                "expected a duration such as \(durationExamples), got \"\(text)\", where \"\(rest)\" is not part of one")
        }
        while index < chars.count {
            guard isDigit(chars[index]) else {
                if parts > 0 { throw strayText() }
                throw ConfigurationValueError("expected a duration such as \(durationExamples), got \"\(text)\"")
            }
            var whole = ""
            while index < chars.count, isDigit(chars[index]) { whole.append(chars[index]); index += 1 }
            var fraction = ""
            if index < chars.count, chars[index] == "." {
                index += 1
                while index < chars.count, isDigit(chars[index]) { fraction.append(chars[index]); index += 1 }
                guard !fraction.isEmpty else {
                    throw ConfigurationValueError("expected a duration such as \(durationExamples), got \"\(text)\"")
                }
            }
            let number = fraction.isEmpty ? whole : "\(whole).\(fraction)"
            skipSpaces()
            var unit = ""
            while index < chars.count, chars[index].isLetter { unit.append(chars[index]); index += 1 }
            guard !unit.isEmpty else {
                if index < chars.count {
                    throw ConfigurationValueError("expected a duration such as \(durationExamples), got \"\(text)\"")
                }
                let within = number == text.trimmed() ? "" : " in \"\(text)\""
                throw ConfigurationValueError(
                    "expected a duration, but \"\(number)\"\(within) has no unit; add one, like \"\(number)s\" or \"\(number)min\""
                )
            }
            guard let nanosecondsPerUnit = durationUnits.first(where: { $0.names.contains(unit) })?.nanoseconds else {
                var message = "expected a duration, but \"\(text)\" has the unknown unit \"\(unit)\""
                // "minuts" is as close to "minute" as to "minutes": suggest the unit, not a spelling.
                let near = Spelling.closestCandidates(to: unit, among: durationUnits.flatMap(\.names))
                let groups = durationUnits.filter { !Set($0.names).isDisjoint(with: near) }
                if groups.count == 1, let suggestion = groups[0].names.first {
                    message += " (did you mean \"\(suggestion)\"?)"
                }
                throw ConfigurationValueError(message + (weeks ? "; units are ms, s, min, h, d and w" : "; units are ms, s, min, h and d"))
            }

            // Whole part.
            if let wholeValue = Int64(whole) {
                let (product, o1) = wholeValue.multipliedReportingOverflow(by: nanosecondsPerUnit)
                let (sum, o2) = total.addingReportingOverflow(product)
                overflowed = overflowed || o1 || o2
                total = sum
            } else {
                overflowed = true
            }
            // Fractional part, digit by digit, so that it stays exact: "1.5h" is 90min exactly.
            var divisor: Int64 = 1
            var divisorOverflowed = false
            for digit in fraction {
                if !divisorOverflowed {
                    let (next, o) = divisor.multipliedReportingOverflow(by: 10)
                    divisorOverflowed = o
                    divisor = next
                }
                let digitValue = Int64(digit.wholeNumberValue ?? 0)
                guard digitValue != 0 else { continue }
                guard !divisorOverflowed, nanosecondsPerUnit % divisor == 0 else {
                    throw ConfigurationValueError(
                        "expected a duration in whole nanoseconds, got \"\(text)\"; use fewer decimal places or a smaller unit"
                    )
                }
                let (sum, o) = total.addingReportingOverflow(digitValue * (nanosecondsPerUnit / divisor))
                overflowed = overflowed || o
                total = sum
            }
            parts += 1
            skipSpaces()
        }

        let value: Duration? = overflowed ? nil : .nanoseconds(total)
        let whole = wholeSeconds ? " in whole seconds" : ""
        guard let value, range.contains(value), !wholeSeconds || total % 1_000_000_000 == 0 else {
            throw ConfigurationValueError("expected a duration\(whole) \(describe(range)), like \"\(example)\", got \"\(text)\"")
        }
        return value
    }

    /// `"greater than 0 and at most 365d"` or `"from 1s to 1h"`.
    static func describe(_ range: ClosedRange<Duration>) -> String {
        if range.lowerBound == .nanoseconds(1) {
            return "greater than 0 and at most \(render(range.upperBound))"
        }
        return "from \(render(range.lowerBound)) to \(render(range.upperBound))"
    }

    /// The duration in the largest unit that represents it exactly: `10min`, `7d`, `1500ms`.
    /// Precision below a nanosecond is dropped; the parser never produces it.
    static func render(_ duration: Duration) -> String {
        let (seconds, attoseconds) = duration.components
        if attoseconds == 0 {
            // Whole seconds: work in seconds so that very long durations cannot overflow.
            if seconds == 0 { return "0s" }
            for unit in renderedUnits where unit.nanoseconds >= 1_000_000_000 {
                let perUnit = unit.nanoseconds / 1_000_000_000
                if seconds % perUnit == 0 { return "\(seconds / perUnit)\(unit.name)" }
            }
            return "\(seconds)s"
        }
        let (secondsInNanoseconds, o1) = seconds.multipliedReportingOverflow(by: 1_000_000_000)
        let (nanoseconds, o2) = secondsInNanoseconds.addingReportingOverflow(attoseconds / 1_000_000_000)
        if o1 || o2 { return "\(seconds)s" }
        if nanoseconds == 0 { return "0s" }
        for unit in renderedUnits where nanoseconds % unit.nanoseconds == 0 {
            return "\(nanoseconds / unit.nanoseconds)\(unit.name)"
        }
        return "\(nanoseconds)ns"
    }

    // MARK: Percentages

    /// Parses `80%` or `80 %`, a whole number within `range`.
    static func percentage(_ text: String, in range: ClosedRange<Int>, example: Percentage) throws(ConfigurationValueError) -> Percentage {
        let expected = "expected a whole percentage from \(range.lowerBound)% to \(range.upperBound)%, like \"\(example)\", got \"\(text)\""
        var body = text.trimmed()
        guard body.hasSuffix("%") else {
            if UInt(body) != nil {
                throw ConfigurationValueError(expected + "; add the \"%\" sign")
            }
            throw ConfigurationValueError(expected)
        }
        body.removeLast()
        body = body.trimmed()
        guard body.allSatisfy({ $0.isASCII && $0.isNumber }), let number = Int(body),
              range.contains(number), let value = Percentage(percent: number)
        else {
            throw ConfigurationValueError(expected)
        }
        return value
    }

    static func render(_ percentage: Percentage) -> String { percentage.description }

    // MARK: Counts

    /// Parses an unsigned decimal integer within `range`.
    static func count(_ text: String, in range: ClosedRange<Int>, example: Int) throws(ConfigurationValueError) -> Int {
        let body = text.trimmed()
        guard !body.isEmpty, body.allSatisfy({ $0.isASCII && $0.isNumber }), let number = Int(body), range.contains(number) else {
            throw ConfigurationValueError(
                "expected a whole number from \(range.lowerBound) to \(range.upperBound), like \"\(example)\", got \"\(text)\""
            )
        }
        return number
    }

    // MARK: Decimals

    /// Parses a number with at most two decimals (`2.2`, `3`, `0.25`) within `range`. No sign,
    /// exponent or digit grouping: a knob's value is written as a person reads it.
    static func decimal(_ text: String, in range: ClosedRange<Double>, example: String) throws(ConfigurationValueError) -> Double {
        let body = text.trimmed()
        let parts = body.split(separator: ".", maxSplits: 1, omittingEmptySubsequences: false)
        let digitsOnly = { (part: Substring) in part.allSatisfy { $0.isASCII && $0.isNumber } }
        let wellFormed = !body.isEmpty && !parts[0].isEmpty && parts[0].count <= 9 && digitsOnly(parts[0])
            && (parts.count == 1 || (!parts[1].isEmpty && parts[1].count <= 2 && digitsOnly(parts[1])))
        guard wellFormed, let number = Double(body), range.contains(number) else {
            var message = "expected a number from \(render(decimal: range.lowerBound)) to \(render(decimal: range.upperBound)) "
                + "with at most two decimals, like \"\(example)\", got \"\(text)\""
            if body.contains(","), !body.contains(".") { message += " (the decimal separator is \".\")" }
            throw ConfigurationValueError(message)
        }
        return number
    }

    /// `value` as `decimal` reads it back: to two decimals, without trailing zeros (`2.2`, `3`).
    static func render(decimal value: Double) -> String {
        let hundredths = Int64((value * 100).rounded())
        let whole = hundredths / 100
        let fraction = hundredths % 100
        if fraction == 0 { return String(whole) }
        return fraction % 10 == 0 ? "\(whole).\(fraction / 10)" : "\(whole).\(fraction < 10 ? "0" : "")\(fraction)"
    }

    // MARK: Words

    /// Parses one of a string-backed enum's raw values, exactly.
    static func word<Value: RawRepresentable & CaseIterable>(_ text: String, as _: Value.Type) throws(ConfigurationValueError) -> Value
    where Value.RawValue == String {
        let body = text.trimmed()
        if let value = Value(rawValue: body) { return value }
        let names = Value.allCases.map(\.rawValue)
        var message = "expected \(Spelling.list(names.map { "\"\($0)\"" }, conjunction: "or")), got \"\(text)\""
        if let suggestion = Spelling.closest(to: body, among: names) {
            message += " (did you mean \"\(suggestion)\"?)"
        }
        throw ConfigurationValueError(message)
    }
}

/// A value that does not fit its knob; the parser adds the location.
struct ConfigurationValueError: Error, Equatable {
    var message: String
    init(_ message: String) { self.message = message }
}

extension String {
    /// The string without leading and trailing whitespace.
    func trimmed() -> String {
        guard let first = firstIndex(where: { !$0.isWhitespace }),
              let last = lastIndex(where: { !$0.isWhitespace })
        else { return "" }
        return String(self[first...last])
    }
}
