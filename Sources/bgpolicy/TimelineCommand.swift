import ArgumentParser
import BGPolicyCore
import BGPolicyDBus
import Glibc

struct TimelineCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "timeline",
        abstract: "Draw the next 24 hours: predicted use, planned refreshes, wake windows.",
        discussion: """
            For each app, a strip of one cell per 15 minutes shows how likely the user is \
            to open it; a full cell is the highest chance in the picture, which the legend \
            gives in per cent. ▲ under a strip marks a refresh planned for that app; │ in \
            the windows row, a moment at which bgpolicyd plans to wake; ▼, now. Times are \
            local. In a narrow terminal each column shows the most likely of several slots.
            """)

    @Argument(help: "Only this app (an app ID, as 'bgpolicy apps' shows it).", completion: AgentCompletions.apps)
    var app: String?

    @Option(
        help: ArgumentHelp("Also write the picture to this file as an SVG image.", valueName: "file"),
        completion: .file(extensions: ["svg"]))
    var svg: String?

    @Flag(name: .long, help: "Print the agent's timeline as a JSON object, for scripts.")
    var json = false

    /// The SVG file cannot be written (EX_CANTCREAT).
    static let cannotCreate = ExitCode(73)

    func validate() throws {
        if svg == "" { throw ValidationError("--svg needs the name of the file to write.") }
    }

    func run() async throws {
        try await ExitStatus.reporting {
            let client = try await AgentClient.connect(startingAgent: false)
            defer { client.close() }
            // GetTimeline reads "" as every app: an empty APP (a script's unset variable) is an
            // app id no app has, and is refused as pending and history refuse it.
            if app == "" { try await client.requireRegistered("") }
            let reply = try await client.timeline(app: app ?? "")
            if json, svg == nil {
                print(JSONText.object(reply))
                return
            }
            let timeline = try TimelineReply.timeline(reply)
            // From the bus: a time that is no Int64 (Int64.max arrives as 2^63) is taken as now.
            let now = timeline.now.isFinite && abs(timeline.now) < 1e15 ? Int64(timeline.now.rounded(.down)) : Int64(time(nil))
            let offset = Self.utcOffset(at: now)
            if let svg {
                if let problem = Self.write(TimelineSVG.render(timeline, utcOffsetSeconds: offset), to: svg) {
                    ExitStatus.printError("cannot write \(svg): \(problem)", hint: nil)
                    throw Self.cannotCreate
                }
            }
            print(
                json
                    ? JSONText.object(reply)
                    : TimelineText.render(timeline, utcOffsetSeconds: offset, width: Self.terminalWidth(), color: Self.usesColor()))
        }
    }

    /// The local time zone's offset from UTC at `unix` (`TZ` applies). One offset serves the
    /// whole picture: a change to or from summer time within it shifts the later hours.
    static func utcOffset(at unix: Int64) -> Int {
        tzset()
        var t = time_t(unix)
        var parts = tm()
        guard localtime_r(&t, &parts) != nil else { return 0 }
        return Int(parts.tm_gmtoff)
    }

    /// `COLUMNS` if set, else the terminal's width; nil (every slot) when writing to a pipe or file.
    static func terminalWidth() -> Int? { TerminalWidth.columns }

    /// Colour only for a terminal, and never when `NO_COLOR` is set (no-color.org) or `TERM` is dumb.
    static func usesColor() -> Bool {
        guard isatty(STDOUT_FILENO) == 1 else { return false }
        if let noColor = getenv("NO_COLOR"), noColor.pointee != 0 { return false }
        if let term = getenv("TERM"), String(cString: term) == "dumb" { return false }
        return true
    }

    /// Writes the file whole; nil when done, else what went wrong.
    static func write(_ text: String, to path: String) -> String? {
        do {
            let file = try OutputFile(creating: path)
            file.write(text)
            return file.close()
        } catch {
            return error.message
        }
    }
}

/// The `GetTimeline` reply, read strictly: the picture is drawn from every key, so a missing
/// or mistyped one is an answer of another version, not a cell to leave blank.
enum TimelineReply {
    /// More slots than this is not a picture of a day: refuse rather than allocate.
    static let maximumSlots = 10_000

    static func timeline(_ reply: VariantDictionary) throws -> Timeline {
        let slots = try required(reply, "slots", as: UInt32.self)
        let slotSeconds = try required(reply, "slot_seconds", as: UInt32.self)
        guard (1...UInt32(maximumSlots)).contains(slots), slotSeconds > 0 else {
            throw unexpected("\(slots) slots of \(slotSeconds) s")
        }
        let strategyName = try required(reply, "strategy", as: String.self)
        guard let strategy = RefreshStrategy(rawValue: strategyName) else {
            throw unexpected("the refresh strategy \"\(TableText.cell(strategyName))\"")
        }
        var apps: [Timeline.App] = []
        for entry in try required(reply, "apps", as: [VariantDictionary].self) {
            let id = try required(entry, "app_id", as: String.self, in: "an app")
            let probabilities = try required(entry, "probabilities", as: [Double].self, in: id)
            // With every-window the agent predicts nothing, and sends none.
            guard probabilities.count == (strategy == .everyWindow ? 0 : Int(slots)) else {
                throw unexpected("\(probabilities.count) probabilities for \(TableText.cell(id)), not \(slots)")
            }
            apps.append(
                Timeline.App(
                    appID: id, probabilities: probabilities,
                    refreshes: try required(entry, "refreshes", as: [Int64].self, in: id).map(Double.init),
                    pending: try required(entry, "pending", as: [String].self, in: id),
                    inactive: try required(entry, "inactive", as: Bool.self, in: id)))
        }
        return Timeline(
            now: Double(try required(reply, "now", as: Int64.self)),
            start: Double(try required(reply, "start", as: Int64.self)),
            slotSeconds: Int(slotSeconds), slots: Int(slots),
            gridSeconds: Int(try required(reply, "grid_seconds", as: UInt32.self)),
            windows: try required(reply, "windows", as: [Int64].self).map(Double.init),
            apps: apps, strategy: strategy,
            // Optional: an agent of the release before it did not send it.
            inactiveAfterSeconds: try optional(reply, "inactive_after_seconds", as: Int64.self).map(Double.init))
    }

    private static func optional<T: DBusRepresentable>(_ dict: VariantDictionary, _ key: String, as _: T.Type) throws -> T? {
        guard dict[key] != nil else { return nil }
        return try required(dict, key, as: T.self)
    }

    private static func required<T: DBusRepresentable>(
        _ dict: VariantDictionary, _ key: String, as _: T.Type, in whose: String? = nil
    ) throws -> T {
        let place = whose.map { " for \(TableText.cell($0))" } ?? ""
        guard let variant = dict[key] else { throw unexpected("no \"\(key)\"\(place)") }
        guard let value = try? T(dbusValue: variant.value) else {
            throw unexpected("\"\(key)\"\(place) of type '\([variant.value].signatureText)', not '\(T.dbusType.signature)'")
        }
        return value
    }

    private static func unexpected(_ what: String) -> CLIError {
        CLIError(
            "bgpolicyd answered GetTimeline with something unexpected: \(what); is it a different version?",
            hint: "Compare 'bgpolicy --version' with the version 'bgpolicy status' shows.")
    }
}
