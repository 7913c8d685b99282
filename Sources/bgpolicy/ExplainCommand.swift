import ArgumentParser
import BGPolicyDBus

struct ExplainCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "explain",
        abstract: "Say why a task has not run yet, and when it can.",
        discussion: """
            Prints the request's state, a one-sentence summary, each rule that blocks it \
            (its key, as 'bgpolicy pending' shows it, and the same in words), the next \
            window in which it can run, if bgpolicyd can tell, and how often bgpolicyd has \
            seen the user open the app, which it predicts the app's use from.
            """)

    @Argument(help: "The app's ID, as 'bgpolicy apps' shows it.", completion: AgentCompletions.apps)
    var app: String

    @Argument(help: "The task identifier, as 'bgpolicy pending' shows it.", completion: AgentCompletions.pendingIdentifiers)
    var identifier: String

    @Flag(name: .long, help: "Print the agent's explanation as a JSON object, for scripts.")
    var json = false

    func run() async throws {
        try await ExitStatus.reporting {
            let client = try await AgentClient.connect(startingAgent: false)
            defer { client.close() }
            let explanation = try await client.explain(app: app, identifier: identifier)
            print(json ? JSONText.object(explanation) : ExplainReport(explanation, now: TimeText.now()).text)
        }
    }
}

/// The human view of `Explain`: labelled lines, as `status` prints them.
struct ExplainReport {
    let explanation: VariantDictionary
    let now: Int64
    init(_ explanation: VariantDictionary, now: Int64) {
        self.explanation = explanation
        self.now = now
    }

    var text: String {
        let e = explanation
        var rows: [(label: String, value: String)] = []
        var state = e.string("state").map { $0 == "not-pending" ? "not pending" : $0 } ?? "unknown"
        if let kind = e.string("kind") { state += " (\(kind))" }
        rows.append(("State", state))
        if let summary = e.string("summary") { rows.append(("Summary", summary)) }
        let blocking = e.strings("blocking") ?? []
        let reasons = e.strings("reasons") ?? []
        var because: [String]
        if blocking.count == reasons.count {
            because = zip(blocking, reasons).map { "\($0): \($1)" }
        } else {
            // The agent pairs them; if a version does not, show both rather than guess.
            because = blocking + reasons
        }
        if because.isEmpty, e.string("state") == "pending" {
            because = e.bool("runnable") == false ? ["nothing bgpolicyd can name"] : ["nothing: it runs in the next window"]
        }
        for (i, line) in because.enumerated() { rows.append((i == 0 ? "Blocked by" : "", line)) }
        if let window = e.integer("earliest_window") {
            rows.append(("Earliest window", TimeText.moment(window, now: now)))
        }
        if let opened = Self.opened(e, now: now) { rows.append(("Opened", opened)) }
        // An empty identifier is shown as the summary quotes it: "APP " ended in a space.
        let identifier = e.string("identifier").map { $0.isEmpty ? "''" : $0 }
        let title = [e.string("app_id"), identifier].compactMap { $0 }.joined(separator: " ")
        let width = rows.map(\.label.count).max() ?? 0
        let body = rows.map { row in
            "  " + row.label + String(repeating: " ", count: width - row.label.count + 2) + TableText.cell(row.value)
        }
        return ([TableText.cell(title)] + body).joined(separator: "\n")
    }

    /// What the usage log holds of the app's opens: "42 times, 5 in the last 24 h; last
    /// 2 h ago". Never seen opened, it says where opens come from, since a refresh is planned
    /// before predicted opens and an app whose opens the agent cannot see is never predicted.
    /// Nil when the agent sent no figures (it could not read its log).
    static func opened(_ e: VariantDictionary, now: Int64) -> String? {
        guard let opens = e.integer("opens") else { return nil }
        guard opens > 0 else {
            return "never, as far as bgpolicyd has seen (it learns opens from the app's app-*.scope or "
                + "app-*.service units, its Register and its ReportUsage)"
        }
        var text = opens == 1 ? "once" : "\(opens) times"
        if let recent = e.integer("opens_last_24h") { text += ", \(recent) in the last 24 h" }
        if let last = e.integer("last_open") {
            let when = TimeText.relative(last, now: now)
            text += "; last " + (when == "now" ? "just now" : when)
        }
        return text
    }
}
