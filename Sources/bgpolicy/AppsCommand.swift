import ArgumentParser
import BGPolicyDBus

struct AppsCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "apps",
        abstract: "List the apps that have registered for background work.",
        discussion: """
            VIOLATIONS counts the app's overruns (slices and background tasks) and CPU \
            enforcements of the last 7 days; LAST USED is when the user last had the app in \
            the foreground.
            """)

    @Flag(name: .long, help: "Print the agent's app records as a JSON array, for scripts.")
    var json = false

    func run() async throws {
        try await ExitStatus.reporting {
            let client = try await AgentClient.connect(startingAgent: false)
            defer { client.close() }
            let apps = try await client.listApps()
            print(json ? JSONText.value(apps.dbusValue) : AppsReport(apps, now: TimeText.now()).text)
        }
    }
}

/// The human view of `ListApps`: one row per app, sorted by id.
struct AppsReport {
    let apps: [VariantDictionary]
    let now: Int64
    init(_ apps: [VariantDictionary], now: Int64) {
        self.apps = apps
        self.now = now
    }

    var text: String {
        guard !apps.isEmpty else { return "No app has registered with bgpolicyd." }
        var table = TableText([
            .init("APP"), .init("ENABLED"), .init("IDENTITY"), .init("CONNECTED"),
            .init("PENDING", .right), .init("RUNNING", .right), .init("VIOLATIONS", .right), .init("LAST USED"),
        ])
        for app in apps.sorted(by: { ($0.string("app_id") ?? "") < ($1.string("app_id") ?? "") }) {
            table.append([
                app.cell("app_id"), app.cell("enabled"), app.cell("identity"), app.cell("connected"),
                app.cell("pending"), app.cell("running"), app.cell("violations"),
                app.integer("last_used_at").map { TimeText.relative($0, now: now) } ?? "never",
            ])
        }
        return table.text
    }
}
