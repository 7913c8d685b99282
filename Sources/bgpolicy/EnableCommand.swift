import ArgumentParser

struct EnableCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "enable",
        abstract: "Allow background work for an app, or for every app with --all.",
        usage: "bgpolicy enable (<app> | --all) [--json]",
        discussion: """
            The per-app switches and the global one are separate: an app gets background \
            work only while both are on.
            """)

    @OptionGroup var target: AppSwitch

    func run() async throws {
        try await target.set(true)
    }
}
