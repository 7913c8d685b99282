import ArgumentParser
import BGPolicyCore
import BGPolicyDBus

struct SimulateLaunchCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "launch",
        abstract: "Deliver a pending task request now, whatever the conditions.",
        discussion: """
            Every rule that would hold the request back is skipped, except that the app \
            must be reachable: running, or D-Bus activatable.
            """)

    @Argument(help: "The app's ID, as 'bgpolicy apps' shows it.", completion: AgentCompletions.apps)
    var app: String

    @Argument(
        help: "The task identifier of a pending request, as 'bgpolicy pending' shows it.",
        completion: AgentCompletions.pendingIdentifiers)
    var identifier: String

    @Flag(name: .long, help: "Print what was done as a JSON object, for scripts.")
    var json = false

    func run() async throws {
        try await ExitStatus.reporting(hints: [
            .unknownTask: "Only a pending request can be launched; 'bgpolicy pending \(app)' lists them.",
        ]) {
            let client = try await AgentClient.connect(startingAgent: true)
            defer { client.close() }
            try await client.simulateLaunch(app: app, identifier: identifier)
            print(
                json
                    ? JSONText.object(["app_id": Variant(app), "identifier": Variant(identifier), "simulated": Variant("launch")])
                    : "Delivered \(TableText.cell(identifier)) to \(TableText.cell(app)); 'bgpolicy history \(TableText.cell(app))' shows how it ends.")
        }
    }
}
