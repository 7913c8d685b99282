import ArgumentParser
import BGPolicyCore
import BGPolicyDBus

struct ForgetCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "forget",
        abstract: "Forget an app: everything bgpolicyd keeps about it.",
        discussion: """
            For an app that was uninstalled, or whose use bgpolicyd should no longer keep: its \
            registration and switch, its pending requests and queued wake, its history, its \
            usage log and what the refresh planner learned of it all go, and it no longer \
            counts toward the shared refresh budget. If the app registers again, it starts \
            as a new app. A running app is refused: quit it first.
            """)

    @Argument(help: "The app's ID, as 'bgpolicy apps' shows it.", completion: AgentCompletions.apps)
    var app: String

    @Flag(name: .long, help: "Print what was forgotten as a JSON object, for scripts.")
    var json = false

    func run() async throws {
        try await ExitStatus.reporting(hints: [
            .notPermitted: "Quit the app, then run 'bgpolicy forget \(app)' again.",
            .unavailable: "Nothing was forgotten; try again in a moment.",
        ]) {
            let client = try await AgentClient.connect(startingAgent: true)
            defer { client.close() }
            let forgotten = try await client.forgetApp(app)
            print(json ? JSONText.object(forgotten) : Self.said(forgotten, app: app))
        }
    }

    /// What was forgotten, in a sentence: the counts that are not zero.
    static func said(_ forgotten: VariantDictionary, app: String) -> String {
        func count(_ key: String, _ one: String, _ many: String) -> String? {
            guard let n = forgotten.integer(key), n > 0 else { return nil }
            return n == 1 ? "1 \(one)" : "\(n) \(many)"
        }
        let identifiers = forgotten.strings("identifiers") ?? []
        var parts = [identifiers.isEmpty ? "its registration" : "its registration (\(identifiers.map(TableText.cell).joined(separator: ", ")))"]
        parts += [
            count("pending", "pending request", "pending requests"),
            count("content_wakes", "queued content-available wake", "queued content-available wakes"),
            count("history", "history entry", "history entries"),
            count("usage_events", "usage event", "usage events"),
            count("usage_aggregates", "hourly usage count", "hourly usage counts"),
        ].compactMap { $0 }
        if forgotten.bool("learned_model") == true { parts.append("what the refresh planner learned of it") }
        let list = parts.count == 1 ? parts[0] : parts.dropLast().joined(separator: ", ") + " and " + parts.last!
        return "Forgot \(TableText.cell(app)): \(list). If it registers again, it starts as a new app."
    }
}
