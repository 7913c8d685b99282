import ArgumentParser

struct SimulateCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "simulate",
        abstract: "Launch or expire a task now, to debug an app's background code.",
        discussion: """
            The Linux counterpart of iOS's _simulateLaunchForTaskWithIdentifier: a \
            supported way to exercise an app's task handlers without waiting for a window.
            """,
        subcommands: [SimulateLaunchCommand.self, SimulateExpireCommand.self])

    /// `bgpolicy simulate` alone is a usage error (exit 64), as a missing argument is, rather
    /// than the help and success.
    func run() async throws {
        throw ValidationError("name what to simulate: 'launch APP ID' or 'expire APP ID'")
    }
}
