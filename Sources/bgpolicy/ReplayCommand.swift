import ArgumentParser
import BGPolicyCore
import Glibc
import SystemPackage

/// `bgpolicy replay`: runs a refresh policy in virtual time over a usage trace and prints the
/// figures of Docs/Replay.md. It works offline: it does not talk to bgpolicyd.
struct ReplayCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "replay",
        abstract: "Replay a usage trace under a refresh policy and print how it did.",
        discussion: """
            The trace is a CSV file with the header timestamp,app_id,event (SPEC.md §4). The \
            replay runs offline, in virtual time, learning only from the past (by default bgpolicy \
            is told, as the agent of a machine in use would know, how many apps the trace holds: see \
            --apps); opens are scored after the first 7 days. See Docs/Replay.md for the exact \
            definitions.
            """)

    @Option(name: .long, help: ArgumentHelp("The usage trace to replay.", valueName: "file"), completion: .file(extensions: ["csv"]))
    var trace: String

    @Option(name: .long, help: ArgumentHelp(
        "bgpolicy, periodic:<period> (every app on one aligned timer, like periodic:60m) or oracle:<lead> (a refresh that long before every open).",
        valueName: "policy"), completion: AgentCompletions.replayPolicies)
    var policy: String = "bgpolicy"

    @Option(name: .long, help: ArgumentHelp(
        "What bgpolicy is told of the trace's apps: at-start (every app registered before the first event, as on a machine in use for a while) or first-seen (each app known from its first open). The baselines take every app.",
        valueName: "when"), completion: .list(["at-start", "first-seen"]))
    var apps: String = "at-start"

    @Option(name: .long, help: ArgumentHelp(
        "Replay bgpolicy with the knobs of this configuration file, in bgpolicyd's syntax: [refresh] budget, windows_per_day, lead and min_interval, and [limits] inactive_after. Without it, the built-in defaults, whatever bgpolicyd is configured with.",
        valueName: "file"), completion: .file(extensions: ["conf"]))
    var config: String?

    @Flag(name: .long, help: "Print the figures as a JSON object, for scripts.")
    var json = false

    @Option(name: .long, help: ArgumentHelp(
        "Also write every refresh the policy made to this CSV file (timestamp,app_id), to score it with another evaluator.",
        valueName: "file"), completion: .file(extensions: ["csv"]))
    var refreshes: String?

    /// A trace that cannot be read (EX_NOINPUT) or parsed (EX_DATAERR).
    static let noInput = ExitCode(66)
    static let badData = ExitCode(65)
    /// A configuration file (--config) that is not valid, or asks for what a replay does not
    /// do (EX_CONFIG, as bgpolicyd exits for one).
    static let badConfiguration = ExitCode(78)
    /// A configuration file is a few hundred bytes; bgpolicyd reads at most this much of one.
    static let maximumConfigurationBytes = 1 << 20

    /// Every usage error is found here, not in `run()`: ArgumentParser shows a ValidationError
    /// thrown from `run()` with the usage of `bgpolicy`, not of `replay` (as SimulateCommand notes).
    func validate() throws {
        // "" is no file (a script's unset variable): "cannot read : No such file" names none.
        if trace == "" { throw ValidationError("--trace needs the name of the file to read.") }
        if refreshes == "" { throw ValidationError("--refreshes needs the name of the file to write.") }
        if config == "" { throw ValidationError("--config needs the name of the configuration file to read.") }
        let choice: ReplayPolicyChoice
        do {
            choice = try ReplayPolicyChoice(parsing: policy)
        } catch {
            throw ValidationError(error.description)
        }
        guard let known = Self.replayApps(apps) else {
            throw ValidationError("--apps \(TerminalText.oneLine(apps)): expected at-start or first-seen.")
        }
        if known != .registeredAtStart, choice != .bgpolicy {
            throw ValidationError("--apps \(apps) is for --policy bgpolicy only: \(choice) takes every app of the trace, as it is defined to.")
        }
        if config != nil, choice != .bgpolicy {
            throw ValidationError("--config is for --policy bgpolicy only: \(choice) has no knobs, as it is defined to.")
        }
        if let refreshes, Self.sameFile(refreshes, trace) {
            // Creating it would empty the trace before anyone noticed the slip.
            throw ValidationError("--refreshes names the trace itself (\(refreshes)); writing the refreshes there would overwrite it. Name another file.")
        }
    }

    func run() throws {
        guard let choice = try? ReplayPolicyChoice(parsing: policy) else {
            preconditionFailure("validate() lets through only a policy that parses")
        }
        // The configuration first: a mistake in it is found before a long trace is read.
        let knobs = try config.map(Self.readConfiguration) ?? .defaults
        let bytes: [UInt8]
        switch Self.readFile(trace, limit: Self.maximumTraceBytes, what: "a trace") {
        case .success(let contents): bytes = contents
        case .failure(let message):
            Self.printError("cannot read \(trace): \(message)")
            throw Self.noInput
        }
        let parsed: UsageTrace
        do {
            parsed = try UsageTrace.parse(utf8: bytes)
        } catch {
            Self.printError("\(trace): \(error.description)")
            throw Self.badData
        }
        // Every refresh is scored, and written to --refreshes, as the replay makes it: nothing
        // holds them all (a `periodic` baseline on a large trace makes millions).
        var file: OutputFile?
        if let refreshes {
            do {
                file = try OutputFile(creating: refreshes)
            } catch {
                Self.printError("cannot write \(refreshes): \(error.message)")
                throw TimelineCommand.cannotCreate
            }
            file?.write("timestamp,app_id\n")
        }
        var scorer = ReplayScorer(trace: parsed)
        choice.replay(parsed, apps: Self.replayApps(apps) ?? .registeredAtStart, configuration: knobs) { refresh in
            scorer.add(refresh)
            file?.write(Self.refreshLine(refresh))
        }
        if let refreshes, let problem = file?.close() {
            Self.printError("cannot write \(refreshes): \(problem)")
            throw TimelineCommand.cannotCreate
        }
        let metrics = scorer.finish()
        print(json ? Self.jsonText(metrics) : Self.tableText(metrics, policy: choice))
        if metrics.scoredOpens == 0 { Self.printError("note: \(trace): \(Self.nothingScored(parsed))") }
    }

    /// The knobs of the configuration file at `path`, read as bgpolicyd reads its own; exits 66
    /// for a file that cannot be read and 78 for one that is not valid, or that sets `[refresh]
    /// strategy = every-window`: the replay plays the predicted strategy, and a figure measured
    /// under it would not be what that file's agent does.
    static func readConfiguration(_ path: String) throws -> PolicyConfiguration {
        let text: String
        switch readFile(path, limit: maximumConfigurationBytes, what: "a configuration file") {
        case .success(let bytes): text = String(decoding: bytes, as: UTF8.self)
        case .failure(let message):
            printError("cannot read \(path): \(message)")
            throw noInput
        }
        let configuration: PolicyConfiguration
        do {
            configuration = try ConfigurationParser.parse(text, source: path)
        } catch {
            printError(error.description)
            throw badConfiguration
        }
        guard configuration.refresh.strategy == .predicted else {
            printError(
                "\(path): [refresh] strategy = \(configuration.refresh.strategy.rawValue): a replay plays the predicted "
                    + "strategy only; set strategy = predicted (or remove the line) to replay this file's other knobs")
            throw badConfiguration
        }
        return configuration
    }

    /// The `--apps` choice, or nil for a word that is none.
    static func replayApps(_ word: String) -> ReplayApps? {
        switch word {
        case "at-start": .registeredAtStart
        case "first-seen": .firstSeen
        default: nil
        }
    }

    /// Whether two paths name one existing file (the same inode on the same device), however
    /// they are spelled: `trace.csv`, `./trace.csv`, a link to it.
    static func sameFile(_ a: String, _ b: String) -> Bool {
        var first = stat(), second = stat()
        guard stat(a, &first) == 0, stat(b, &second) == 0 else { return false }
        return first.st_dev == second.st_dev && first.st_ino == second.st_ino
    }

    /// Why no open of `trace` was scored (`ReplayMetrics.scoredOpens` is 0): every figure is
    /// then 0, and that says nothing about the policy.
    static func nothingScored(_ trace: UsageTrace) -> String {
        guard let span = trace.span else { return "the trace has no events, so every figure is 0" }
        let days = decimal((span.end - span.start) / 86_400, places: 1)
        return "no open comes after the trace's first 7 days (it spans \(days) days), and only those are scored, "
            + "so every figure is 0"
    }

    /// A refresh as a line of the --refreshes file (`timestamp,app_id`, after a header line),
    /// the timestamp as the trace writes it (whole seconds without a fraction).
    static func refreshLine(_ refresh: ReplayRefresh) -> String {
        let t = refresh.time
        let stamp = t == t.rounded() && abs(t) < 1e15 ? String(Int64(t)) : "\(t)"
        return stamp + "," + csvField(refresh.appID) + "\n"
    }

    /// `field` as RFC 4180 writes it: as it is, or, when it holds a comma, a double quote or a
    /// line break, in double quotes with each quote doubled. The trace may quote an app id
    /// (`"org.example.A,B"`), and the file must read back with the same id.
    static func csvField(_ field: String) -> String {
        // Scalars, not Characters: "\r\n" is one Character, equal to neither "\r" nor "\n".
        guard field.unicodeScalars.contains(where: { $0 == "," || $0 == "\"" || $0 == "\r" || $0 == "\n" }) else {
            return field
        }
        var quoted = "\""
        for scalar in field.unicodeScalars {
            if scalar == "\"" { quoted.unicodeScalars.append(scalar) }
            quoted.unicodeScalars.append(scalar)
        }
        return quoted + "\""
    }

    static func jsonText(_ metrics: ReplayMetrics) -> String {
        "{" + zip(ReplayMetrics.keys, metrics.values).map { key, value in
            JSONText.string(key) + ": " + (value.isFinite ? "\(value)" : "null")
        }.joined(separator: ", ") + "}"
    }

    static func tableText(_ metrics: ReplayMetrics, policy: ReplayPolicyChoice) -> String {
        var table = TableText([.init("METRIC"), .init(policy.description, .right)])
        for (key, value) in zip(ReplayMetrics.keys, metrics.values) {
            table.append([key, decimal(value, places: key == "median_staleness_s" ? 0 : 3)])
        }
        return table.text
    }

    /// `value` with a fixed number of decimals, without Foundation's formatting.
    static func decimal(_ value: Double, places: Int) -> String {
        guard value.isFinite else { return TableText.none }
        var scale = 1.0
        for _ in 0..<places { scale *= 10 }
        let scaled = (abs(value) * scale).rounded()
        let whole = Int(scaled / scale)
        let fraction = Int(scaled - Double(whole) * scale)
        let sign = value < 0 && scaled > 0 ? "-" : ""
        guard places > 0 else { return sign + "\(whole)" }
        let digits = String(fraction)
        return sign + "\(whole)." + String(repeating: "0", count: places - digits.count) + digits
    }

    enum ReadResult { case success([UInt8]), failure(String) }

    /// The most of a trace `replay` reads: 256 MiB, some 7 million events, 25 times the largest
    /// trace measured (StudentLife, 9 MB for three users). Without a bound, `--trace /dev/zero`
    /// or a pipe that never ends grew the process until the kernel killed it.
    static let maximumTraceBytes = 256 << 20

    /// The whole file at `path`, which may be a pipe (`--trace /dev/stdin`, `<(…)`), if it
    /// holds at most `limit` bytes. A regular file is judged by its size before it is read.
    static func readFile(_ path: String, limit: Int, what: String) -> ReadResult {
        let tooLarge = ReadResult.failure("it is larger than \(limit >> 20) MiB, the most \(what) may be")
        do {
            let fd = try FileDescriptor.open(path, .readOnly, options: .closeOnExec)
            return try fd.closeAfter {
                var info = stat()
                if fstat(fd.rawValue, &info) == 0, info.st_mode & S_IFMT == S_IFREG, info.st_size > limit { return tooLarge }
                var bytes: [UInt8] = []
                var buffer = [UInt8](repeating: 0, count: 1 << 16)
                while true {
                    let n = try buffer.withUnsafeMutableBytes { try fd.read(into: $0) }
                    if n == 0 { break }
                    // A pipe or a device has no size to judge it by, nor has a file that grows.
                    if bytes.count + n > limit { return tooLarge }
                    bytes.append(contentsOf: buffer[0..<n])
                }
                return .success(bytes)
            }
        } catch {
            return .failure("\(error)")
        }
    }

    static func printError(_ message: String) {
        // The trace's text and the path are quoted in messages: no control character reaches the terminal.
        ExitStatus.writeStandardError("bgpolicy: " + TableText.cell(message) + "\n")
    }
}
