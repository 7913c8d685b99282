import ArgumentParser
import BGPolicyCore

@main
struct BGPolicyCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "bgpolicy",
        abstract: "Show and control bgpolicyd, the background-work scheduler of this desktop session.",
        discussion: "Every command but replay talks to bgpolicyd on the session bus; none reads its files directly.",
        version: BGPolicyVersion.current,
        subcommands: [
            StatusCommand.self, AppsCommand.self, PendingCommand.self, HistoryCommand.self, ExplainCommand.self,
            TimelineCommand.self, EnableCommand.self, DisableCommand.self, SimulateCommand.self, ReplayCommand.self,
        ],
        defaultSubcommand: StatusCommand.self)
}
