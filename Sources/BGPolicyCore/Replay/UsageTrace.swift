/// A usage trace in the CSV form of SPEC §4: the header `timestamp,app_id,event`, then one event
/// a line, sorted by time. Blank lines (and a final newline, and `\r\n` endings) are accepted,
/// and so are what common CSV writers add: a UTF-8 byte-order mark before the header, and
/// fields in double quotes (RFC 4180, `""` for a quote inside one; R's `write.csv` quotes every
/// text field). Anything else that does not fit is an error naming its line.
public struct UsageTrace: Sendable, Equatable {
    public static let header = "timestamp,app_id,event"
    public let events: [UsageEvent]

    public init(events: [UsageEvent]) { self.events = events }

    /// The first and last event times, or nil for a trace with no events.
    public var span: (start: Double, end: Double)? {
        guard let first = events.first, let last = events.last else { return nil }
        return (first.time, last.time)
    }

    /// Every app that appears in the trace, sorted.
    public var appIDs: [String] { Set(events.map(\.appID)).sorted() }

    /// The latest timestamp accepted: 2100-01-01 UTC. A replay walks the trace's whole span, so
    /// a typo (a digit too many) must be an error, not a run of centuries.
    public static let latest: Double = 4_102_444_800
    /// The longest span accepted: 10 years (of 366 days).
    public static let maxSpan: Double = 3_660 * 86_400

    /// Unix seconds as SPEC §4 writes them: decimal digits, with an optional fraction (no sign,
    /// exponent, hexadecimal, `inf` or `nan`, which `Double.init` would take).
    static func isDecimal(_ field: Substring) -> Bool {
        let parts = field.split(separator: ".", maxSplits: 1, omittingEmptySubsequences: false)
        return !parts[0].isEmpty && parts.allSatisfy { part in part.utf8.allSatisfy { $0 >= 0x30 && $0 <= 0x39 } }
            && (parts.count == 1 || !parts[1].isEmpty)
    }

    static func shown(_ time: Double) -> String {
        time == time.rounded() ? String(Int64(time)) : String(time)
    }

    /// The fields of one line: split at commas, except inside double quotes, which are taken
    /// off (with `""` read as one quote). A line without quotes is only split.
    static func fields(of line: Substring, lineNumber: Int) throws(UsageTraceError) -> [Substring] {
        guard line.utf8.contains(UInt8(ascii: "\"")) else { return line.split(separator: ",", omittingEmptySubsequences: false) }
        var fields: [Substring] = []
        var rest = line[...]
        while true {
            if rest.first == "\"" {
                var field = ""
                var i = rest.index(after: rest.startIndex)
                while true {
                    guard i < rest.endIndex else {
                        throw UsageTraceError(line: lineNumber, "a field opens a double quote that the line does not close")
                    }
                    if rest[i] == "\"" {
                        let next = rest.index(after: i)
                        if next < rest.endIndex, rest[next] == "\"" {
                            field.append("\"")
                            i = rest.index(after: next)
                            continue
                        }
                        i = next
                        break
                    }
                    field.append(rest[i])
                    i = rest.index(after: i)
                }
                fields.append(Substring(field))
                rest = rest[i...]
                guard let first = rest.first else { return fields }
                guard first == "," else {
                    throw UsageTraceError(line: lineNumber, "a quoted field is followed by \"\(first)\" rather than a comma")
                }
                rest = rest.dropFirst()
            } else {
                let end = rest.firstIndex(of: ",") ?? rest.endIndex
                let field = rest[..<end]
                guard !field.contains("\"") else {
                    throw UsageTraceError(
                        line: lineNumber, "a double quote inside the unquoted field \(Self.quoted(field)): quote the whole field")
                }
                fields.append(field)
                guard end < rest.endIndex else { return fields }
                rest = rest[rest.index(after: end)...]
            }
        }
    }

    /// The most of a field or line an error quotes: a file with no line end it knows (or one
    /// huge field) would otherwise be quoted whole, up to the 256 MiB a trace may hold.
    static let quotedLimit = 60

    /// `text` in double quotes, cut after `quotedLimit` characters with the count of the rest.
    static func quoted(_ text: some StringProtocol) -> String {
        var shown = ""
        var count = 0
        for character in text {
            if count == quotedLimit { return "\"\(shown)…\" (\(text.count - count) characters more)" }
            shown.append(character)
            count += 1
        }
        return "\"\(shown)\""
    }

    /// Parses a trace from the bytes of a file, which must be UTF-8: a byte that is not is an
    /// error naming its line, rather than a U+FFFD that would make two app ids, differently
    /// malformed, one app.
    public static func parse(utf8 bytes: [UInt8]) throws(UsageTraceError) -> UsageTrace {
        // One validating pass on the common path; the scalar walk below only finds where a
        // trace that is not UTF-8 goes wrong.
        if let text = String(validating: bytes, as: UTF8.self) { return try parse(text) }
        var iterator = bytes.makeIterator()
        var parser = Unicode.UTF8.ForwardParser()
        var offset = 0
        while true {
            switch parser.parseScalar(from: &iterator) {
            case .valid(let encoded): offset += encoded.count
            case .emptyInput: preconditionFailure("String(validating:) refused bytes that decode as UTF-8 scalar by scalar")
            case .error(let length):
                let line = 1 + bytes[..<offset].count(where: { $0 == UInt8(ascii: "\n") })
                let hex = bytes[offset..<offset + length].map { "0x" + String($0, radix: 16, uppercase: true) }
                throw UsageTraceError(
                    line: line, "the bytes \(hex.joined(separator: " ")) are not UTF-8 text: save the trace as UTF-8")
            }
        }
    }

    public static func parse(_ text: String) throws(UsageTraceError) -> UsageTrace {
        var events: [UsageEvent] = []
        var sawHeader = false
        var lineNumber = 0
        // A byte-order mark is not text: spreadsheets and some Windows tools put one first.
        let body = text.first == "\u{FEFF}" ? text.dropFirst() : text[...]
        // "\r\n" is one Character in Swift, so it is a separator of its own.
        for line in body.split(omittingEmptySubsequences: false, whereSeparator: { $0 == "\n" || $0 == "\r\n" }) {
            lineNumber += 1
            if line.allSatisfy({ $0 == " " || $0 == "\t" }) { continue }
            if !sawHeader {
                guard try fields(of: line, lineNumber: lineNumber) == header.split(separator: ",") else {
                    // A file whose lines end in a lone "\r" (classic Mac OS) is one line here.
                    let lineEnds = line.contains("\r") ? "; its lines end in a lone carriage return, which is no line end here: convert them to \"\\n\"" : ""
                    throw UsageTraceError(line: lineNumber, "expected the header \"\(header)\", found \(Self.quoted(line))\(lineEnds)")
                }
                sawHeader = true
                continue
            }
            let fields = try fields(of: line, lineNumber: lineNumber)
            guard fields.count == 3 else {
                throw UsageTraceError(line: lineNumber, "expected 3 fields (timestamp,app_id,event), found \(fields.count)")
            }
            guard Self.isDecimal(fields[0]), let time = Double(fields[0]), time <= latest else {
                throw UsageTraceError(
                    line: lineNumber,
                    "timestamp \(Self.quoted(fields[0])) is not Unix time in decimal seconds up to \(Int(latest)) (the year 2100)")
            }
            if let first = events.first, time - first.time > maxSpan {
                throw UsageTraceError(
                    line: lineNumber,
                    "timestamp \(fields[0]) is more than 10 years after the trace's first, \(Self.shown(first.time)): "
                        + "a trace may span at most 10 years (a digit too many?)")
            }
            let appID = String(fields[1])
            guard !appID.isEmpty else { throw UsageTraceError(line: lineNumber, "app_id is empty") }
            guard let kind = UsageEvent.Kind(rawValue: String(fields[2])) else {
                throw UsageTraceError(line: lineNumber, "event \(Self.quoted(fields[2])) is neither open nor close")
            }
            if let previous = events.last, time < previous.time {
                throw UsageTraceError(line: lineNumber, "timestamp \(fields[0]) is earlier than the line before; the trace must be sorted by time")
            }
            events.append(UsageEvent(time: time, appID: appID, kind: kind))
        }
        guard sawHeader else { throw UsageTraceError(line: max(lineNumber, 1), "the trace is empty: no header \"\(header)\"") }
        return UsageTrace(events: events)
    }
}
