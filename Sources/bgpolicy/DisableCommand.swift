import ArgumentParser

struct DisableCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "disable",
        abstract: "Stop background work for an app, or for every app with --all.",
        usage: "bgpolicy disable (<app> | --all) [--json]",
        discussion: """
            While switched off, bgpolicyd refuses the app's new task requests. 'bgpolicy \
            enable' switches it back on.
            """)

    @OptionGroup var target: AppSwitch

    func run() async throws {
        try await target.set(false)
    }
}
