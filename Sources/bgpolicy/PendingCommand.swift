import ArgumentParser
import BGPolicyDBus

struct PendingCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "pending",
        abstract: "List the task requests that wait to run, and what holds each back.",
        discussion: """
            EARLIEST is when the request can run at the earliest: the next window in which \
            nothing blocks it, if bgpolicyd can tell, else the app's earliest begin time. \
            BLOCKED BY names the rules that hold it back now ('bgpolicy explain APP ID' \
            says them in words); "—" means it runs in the next window.
            """)

    @Argument(help: "Only this app's requests (an app ID, as 'bgpolicy apps' shows it).", completion: AgentCompletions.apps)
    var app: String?

    @Flag(name: .long, help: "Print the agent's request records as a JSON array, for scripts.")
    var json = false

    func run() async throws {
        try await ExitStatus.reporting {
            let client = try await AgentClient.connect(startingAgent: false)
            defer { client.close() }
            var pending = try await client.listPending()
            if let app {
                pending = pending.filter { $0.string("app_id") == app }
                if pending.isEmpty { try await client.requireRegistered(app) }
            }
            print(json ? JSONText.value(pending.dbusValue) : PendingReport(pending, app: app, now: TimeText.now()).text)
        }
    }
}

/// The human view of `ListPending`: one row per request, by app, then oldest first.
struct PendingReport {
    let pending: [VariantDictionary]
    let app: String?
    let now: Int64
    init(_ pending: [VariantDictionary], app: String?, now: Int64) {
        self.pending = pending
        self.app = app
        self.now = now
    }

    var text: String {
        guard !pending.isEmpty else {
            return app.map { "Nothing is pending for \(TableText.cell($0))." } ?? "Nothing is pending."
        }
        var table = TableText([
            .init("APP"), .init("IDENTIFIER"), .init("KIND"), .init("SUBMITTED"), .init("EARLIEST"), .init("BLOCKED BY"),
        ])
        let sorted = pending.sorted {
            let a = ($0.string("app_id") ?? "", $0.integer("submitted_at") ?? 0)
            let b = ($1.string("app_id") ?? "", $1.integer("submitted_at") ?? 0)
            return a < b
        }
        for request in sorted {
            let blocking = request.strings("blocking") ?? []
            table.append([
                request.cell("app_id"), request.cell("identifier"), request.cell("kind"),
                request.integer("submitted_at").map { TimeText.relative($0, now: now) } ?? TableText.none,
                earliest(request, runnable: blocking.isEmpty),
                blocking.isEmpty ? TableText.none : blocking.joined(separator: ", "),
            ])
        }
        return table.text
    }

    /// The agent's predicted window when it has one; else the app's own earliest begin, a
    /// lower bound; else "now" for a request nothing blocks.
    private func earliest(_ request: VariantDictionary, runnable: Bool) -> String {
        if let window = request.integer("earliest_window") {
            return window > now ? TimeText.relative(window, now: now) : "now"
        }
        if let begin = request.integer("earliest_begin"), begin > now {
            return TimeText.relative(begin, now: now)
        }
        return runnable ? "now" : "unknown"
    }
}
