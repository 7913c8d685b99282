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
    /// than the help and success. Printed here, in ArgumentParser's words: a ValidationError
    /// thrown from `run()` would be shown with the usage of `bgpolicy`, not of `simulate`.
    func run() async throws {
        ExitStatus.writeStandardError("""
            Error: name what to simulate: 'launch APP ID' or 'expire APP ID'
            Usage: \(BGPolicyCommand.usageString(for: SimulateCommand.self))
              See 'bgpolicy simulate --help' for more information.

            """)
        throw ExitCode(ExitCode.validationFailure.rawValue)
    }
}
