import ArgumentParser
import BGPolicyCore

@main
struct BGPolicyCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "bgpolicy",
        abstract: "Show and control bgpolicyd, the background-work scheduler of this desktop session.",
        discussion: """
            Every command but replay talks to bgpolicyd on the session bus; none reads its files \
            directly. With no command, bgpolicy runs status.

            Exit status: 0 on success; 1 when bgpolicyd refused the request (no such app or \
            task, say); 64 for a usage error; 69 when bgpolicyd could not be asked (no session \
            bus, not running, no answer in time); 65 for an invalid trace and 66 for a trace or a \
            configuration file that cannot be read (replay); 78 for an invalid configuration \
            file (replay --config); 73 for a file that cannot be written (replay --refreshes, \
            timeline --svg); 74 when standard output cannot be written. Errors go to standard \
            error, most with a line saying what to do.
            """,
        version: BGPolicyVersion.current,
        subcommands: [
            StatusCommand.self, AppsCommand.self, PendingCommand.self, HistoryCommand.self, ExplainCommand.self,
            TimelineCommand.self, EnableCommand.self, DisableCommand.self, ForgetCommand.self, ReloadCommand.self,
            SimulateCommand.self, ReplayCommand.self,
        ],
        defaultSubcommand: StatusCommand.self)

    /// Parses and runs. A first word that is no command is refused as such: left to the parser,
    /// it would reach `status`, the default, as an unexpected argument. So is a word after
    /// `help` that names no command, which ArgumentParser would skip, printing the help of the
    /// command before it with success.
    static func main() async {
        ExitStatus.holdClosedStandardDescriptors()
        ExitStatus.checkStandardOutputAtExit()
        TerminalWidth.keepHelpReadable()
        let arguments = Array(CommandLine.arguments.dropFirst())
        if let first = arguments.first, !first.hasPrefix("-") {
            let commands = configuration.subcommands.compactMap { $0.configuration.commandName } + ["help"]
            if !commands.contains(first) {
                // The word as typed goes back to the terminal: made safe as the agent's text is.
                exit(withError: ValidationError(
                    "'\(TableText.cell(first))' is not a bgpolicy command; the commands are: \(commands.joined(separator: ", "))."))
            }
            if first == "help" { refuseUnknownCommands(arguments.dropFirst().filter { !$0.hasPrefix("-") }) }
        }
        await main(arguments)
    }

    /// Exits with a usage error unless `words` name a command and its subcommands.
    private static func refuseUnknownCommands(_ words: [String]) {
        var command: any ParsableCommand.Type = BGPolicyCommand.self
        var path = "bgpolicy"
        for word in words {
            let subcommands = command.configuration.subcommands
            guard let next = subcommands.first(where: { $0.configuration.commandName == word }) else {
                let names = subcommands.compactMap { $0.configuration.commandName }
                exit(withError: ValidationError(
                    names.isEmpty
                        ? "'\(TableText.cell(word))' is not a command: '\(path)' has none."
                        : "'\(TableText.cell(word))' is not a \(path) command; the commands are: \(names.joined(separator: ", "))."))
            }
            command = next
            path += " " + word
        }
    }
}
