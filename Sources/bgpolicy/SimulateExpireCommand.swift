import ArgumentParser
import BGPolicyCore
import BGPolicyDBus

struct SimulateExpireCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "expire",
        abstract: "Tell a running task that its time is up, now.",
        discussion: """
            Sends the app ExpireTask for the running task, as bgpolicyd does shortly \
            before a slice ends, so that the app's expiration handler can be tested.
            """)

    @Argument(help: "The app's ID, as 'bgpolicy apps' shows it.", completion: AgentCompletions.apps)
    var app: String

    @Argument(
        help: "The task identifier of a running task, as 'bgpolicy status' shows it.",
        completion: AgentCompletions.runningIdentifiers)
    var identifier: String

    @Flag(name: .long, help: "Print what was done as a JSON object, for scripts.")
    var json = false

    func run() async throws {
        try await ExitStatus.reporting(hints: [
            .unknownTask: "Only a running task can be expired; 'bgpolicy status' lists what runs now.",
        ]) {
            let client = try await AgentClient.connect(startingAgent: true)
            defer { client.close() }
            try await client.simulateExpiration(app: app, identifier: identifier)
            print(
                json
                    ? JSONText.object(["app_id": Variant(app), "identifier": Variant(identifier), "simulated": Variant("expire")])
                    : "Asked \(TableText.cell(app)) to expire \(TableText.cell(identifier)) now.")
        }
    }
}
