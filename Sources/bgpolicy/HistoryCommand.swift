import ArgumentParser
import BGPolicyCore
import BGPolicyDBus

struct HistoryCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "history",
        abstract: "Show what bgpolicyd did: registrations, slices, results, violations.",
        discussion: """
            Events are listed oldest first; TIME is local, with the date for days other \
            than today. With an APP, only that app's events are shown, the newest --limit \
            of them. When --limit left older events out, a note on standard error says so.
            """)

    @Argument(help: "Only this app's events (an app ID, as 'bgpolicy apps' shows it).", completion: AgentCompletions.apps)
    var app: String?

    // Unconditional: "-5" is a value to refuse in words, not a missing one.
    @Option(
        parsing: .unconditional,
        help: ArgumentHelp(
            "Events since this long ago (90m, 24h, 2d, 1h30m) or since a Unix time. (default: 24h)",
            valueName: "duration|unix"),
        transform: Since.init(argument:))
    var since: Since = .ago(86_400)

    @Option(
        parsing: .unconditional,
        help: ArgumentHelp("Show at most this many events, the newest ones (1 to 10000).", valueName: "n"))
    var limit: Int = 50

    @Flag(name: .long, help: "Print the agent's history entries as a JSON array, for scripts.")
    var json = false

    /// Where the history starts: a distance back from now, or an absolute Unix time.
    enum Since {
        case ago(Int64)
        case unix(Int64)

        /// The earliest Unix time a bare number may be (2001-09-09): below it, a number is far
        /// more likely a duration without its unit (`--since 90`) than a time this machine
        /// kept history at. 0 stays: GetHistory's "all that are kept".
        static let earliestUnixTime: Int64 = 1_000_000_000

        /// The furthest back a duration may reach (`describe` names it); one that reaches before
        /// 1970 is refused in `validate`, where the time is known.
        static let longestDuration: Duration = .seconds(36_500 * 86_400)

        init(argument: String) throws {
            if !argument.isEmpty, argument.allSatisfy({ $0.isASCII && $0.isNumber }) {
                // Too long for Int64: a time in the future, which `validate` refuses.
                let unix = Int64(argument) ?? .max
                guard unix == 0 || unix >= Self.earliestUnixTime else {
                    throw ValidationError(
                        "\(argument) would be a Unix time in 1970, before any history; did you mean \(argument)s? "
                            + "Give a duration with its unit (\(argument)s, \(argument)m, \(argument)h) or a Unix time in seconds.")
                }
                self = .unix(unix)
                return
            }
            // The configuration file's syntax (`1.5h`, `30sec`, `2days`, `1 h`), as the agent reads
            // it, and weeks; in any case (`24H`), as bgpolicy took it before.
            do {
                let duration = try Duration(parsing: argument.lowercased(), in: .zero ... Self.longestDuration, example: "24h")
                self = .ago(duration.components.seconds)
            } catch {
                throw ValidationError(
                    "\(error.description); use a duration such as 90m, 24h, 2d, 1w or 1h30m, or a Unix time in seconds.")
            }
        }

        func unix(now: Int64) -> Int64 {
            switch self {
            case .ago(let seconds): now.subtractingReportingOverflow(seconds).overflow ? Int64.min : now - seconds
            case .unix(let unix): unix
            }
        }
    }

    /// The most GetHistory returns in one call.
    static let maximumLimit = 10_000

    func validate() throws {
        guard (1...Self.maximumLimit).contains(limit) else {
            throw ValidationError("--limit must be between 1 and \(Self.maximumLimit), not \(limit).")
        }
        // A time ahead lists nothing, and is most often milliseconds given for seconds. A
        // minute of slack lets a script compute the time before it runs this.
        // A distance back past 1970 would ask for a negative Unix time.
        if case .ago(let seconds) = since, seconds > TimeText.now() {
            throw ValidationError(
                "--since goes \(seconds / 86_400) days back, to before 1970: give a shorter duration, "
                    + "or 0 for every event the agent keeps.")
        }
        if case .unix(let unix) = since, unix > TimeText.now() + 60 {
            throw ValidationError(
                "--since \(unix) is a Unix time in the future: give one in seconds (not milliseconds) in the past, "
                    + "or a duration such as 24h.")
        }
    }

    func run() async throws {
        try await ExitStatus.reporting {
            let client = try await AgentClient.connect(startingAgent: false)
            defer { client.close() }
            let now = TimeText.now()
            let start = since.unix(now: now)
            var entries: [VariantDictionary]
            var cut: Cut?
            // One more than asked tells whether the limit cut the list; the agent gives at
            // most `maximumLimit`, so at that limit it can only be said that it may have.
            let asked = UInt32(min(limit + 1, Self.maximumLimit))
            if let app {
                entries = try await client.history(of: app, since: start, limit: asked)
            } else {
                entries = try await client.history(since: start, limit: asked)
            }
            if entries.count > limit {
                cut = .cut
                entries.removeFirst(entries.count - limit)
            } else if entries.count >= Self.maximumLimit {
                cut = .maybe
            }
            print(json ? JSONText.value(entries.dbusValue) : HistoryReport(entries, app: app, since: start, now: now).text)
            // On stderr, so that the table and the JSON stay as they are for what reads them.
            if let cut { ExitStatus.writeStandardError("bgpolicy: note: " + cut.note(limit: limit) + "\n") }
        }
    }

    /// Whether `--limit` (or the agent's own limit) left older events out of the list.
    enum Cut: Equatable {
        case cut
        /// The agent gave as many events as it ever does: there may be older ones.
        case maybe

        func note(limit: Int) -> String {
            switch self {
            case .cut:
                // Never at the agent's own limit: it gives no more than that to cut.
                "only the newest \(limit) events are shown; older ones were left out (--limit shows up to \(HistoryCommand.maximumLimit))."
            case .maybe:
                "bgpolicyd gives at most \(HistoryCommand.maximumLimit) events, the newest; older ones may have been left out."
            }
        }
    }
}

/// The human view of `GetHistory`: one row per event, oldest first, as the agent sends them.
struct HistoryReport {
    let entries: [VariantDictionary]
    let app: String?
    let since: Int64
    let now: Int64
    init(_ entries: [VariantDictionary], app: String?, since: Int64, now: Int64) {
        self.entries = entries
        self.app = app
        self.since = since
        self.now = now
    }

    var text: String {
        guard !entries.isEmpty else {
            let whose = app.map { " for \(TableText.cell($0))" } ?? ""
            // `--since 0`: every event kept, not since 1970.
            if since <= 0 { return "No events\(whose)." }
            return "No events\(whose) since \(TimeText.clock(since, now: now)) (\(TimeText.relative(since, now: now)))."
        }
        var table = TableText([
            .init("TIME"), .init("APP"), .init("IDENTIFIER"), .init("EVENT"), .init("RESULT"), .init("DETAIL"),
        ])
        for entry in entries {
            table.append([
                entry.integer("time").map { TimeText.clock($0, now: now) } ?? TableText.none,
                entry.cell("app_id"), entry.cell("identifier"), entry.cell("event"), entry.cell("result"),
                entry.string("detail") ?? "",
            ])
        }
        return table.text
    }
}
