/// A usage trace in the CSV form of SPEC §4: the header `timestamp,app_id,event`, then one event
/// a line, sorted by time. Blank lines (and a final newline, and `\r\n` endings) are accepted;
/// anything else that does not fit is an error naming its line.
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

    public static func parse(_ text: String) throws(UsageTraceError) -> UsageTrace {
        var events: [UsageEvent] = []
        var sawHeader = false
        var lineNumber = 0
        // "\r\n" is one Character in Swift, so it is a separator of its own.
        for line in text.split(omittingEmptySubsequences: false, whereSeparator: { $0 == "\n" || $0 == "\r\n" }) {
            lineNumber += 1
            if line.allSatisfy({ $0 == " " || $0 == "\t" }) { continue }
            if !sawHeader {
                guard line == header else {
                    throw UsageTraceError(line: lineNumber, "expected the header \"\(header)\", found \"\(line)\"")
                }
                sawHeader = true
                continue
            }
            let fields = line.split(separator: ",", omittingEmptySubsequences: false)
            guard fields.count == 3 else {
                throw UsageTraceError(line: lineNumber, "expected 3 fields (timestamp,app_id,event), found \(fields.count)")
            }
            guard let time = Double(fields[0]), time.isFinite else {
                throw UsageTraceError(line: lineNumber, "timestamp \"\(fields[0])\" is not a number of seconds")
            }
            let appID = String(fields[1])
            guard !appID.isEmpty else { throw UsageTraceError(line: lineNumber, "app_id is empty") }
            guard let kind = UsageEvent.Kind(rawValue: String(fields[2])) else {
                throw UsageTraceError(line: lineNumber, "event \"\(fields[2])\" is neither open nor close")
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
