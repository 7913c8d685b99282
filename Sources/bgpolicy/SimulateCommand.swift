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
}
