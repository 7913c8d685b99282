import ArgumentParser
import BGPolicyCore
import BGPolicyDBus

struct ReloadCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "reload",
        abstract: "Make bgpolicyd read its configuration file again.",
        discussion: """
            Returns once the agent has read the file and put it in effect, so that \
            'bgpolicy status' right after shows it. An invalid file changes nothing: the agent \
            goes on with the configuration it had, and bgpolicy prints what is wrong (the \
            file, the line, the key) and exits with status 1. 'systemctl --user reload \
            bgpolicyd' runs this command. A stopped agent is not started: it reads the file \
            when it starts.
            """)

    @Flag(name: .long, help: "Print the configuration in use as a JSON object, for scripts.")
    var json = false

    func run() async throws {
        try await ExitStatus.reporting(hints: [
            .invalidArgument: "Fix the file, then run 'bgpolicy reload' again.",
            .unavailable: "If the agent is stopping, it reads the file when it starts again; otherwise try again.",
        ]) {
            // Never started for this: under systemd the reload job of the unit runs it, and an
            // activation would ask the user manager to start that same unit.
            let client = try await AgentClient.connect(startingAgent: false)
            defer { client.close() }
            try await client.reload()
            // What is in use now, from GetStatus; left out if the agent does not say.
            let configuration = ((try? await client.status()) ?? [:]).filter { $0.key.hasPrefix("config_") }
            print(json ? JSONText.object(configuration) : Self.said(configuration))
        }
    }

    /// The file read, or the defaults, and the knobs that wait for a restart.
    static func said(_ configuration: VariantDictionary) -> String {
        var text = switch (configuration.string("config_source"), configuration.string("config_path")) {
        case ("defaults"?, let path?): "Configuration reloaded: there is no \(TableText.cell(path)), so the defaults apply."
        case ("defaults"?, nil): "Configuration reloaded: there is no file, so the defaults apply."
        case (let source?, _): "Configuration reloaded from \(TableText.cell(source))."
        case (nil, _): "Configuration reloaded."
        }
        if let pending = configuration.strings("config_pending"), !pending.isEmpty {
            text += " \(pending.map(TableText.cell).joined(separator: ", ")) take\(pending.count == 1 ? "s" : "") effect at the next start "
                + "(systemctl --user restart bgpolicyd)."
        }
        return text
    }
}
