import ArgumentParser
import BackgroundTasks

/// feed-reader, an example app for the BackgroundTasks library (see ../README.md).
///
/// The command line: parse, wire the scheduler to the reader, wait for refreshes.
@main
struct FeedReaderCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "feed-reader",
        abstract: "An example app that keeps a local copy of a feed fresh with bgpolicyd's background refresh.",
        discussion: """
            Registers org.bgpolicy.examples.FeedReader.refresh (a refresh task) and \
            org.bgpolicy.examples.FeedReader.cleanup (a processing task that needs external power), \
            submits both, and then waits for bgpolicyd to launch them. Each refresh reads --feed and \
            writes the items to --cache. Prints one line per event.
            """)

    @Option(help: ArgumentHelp("The feed to read: a text file with one item per line, or JSON.", valueName: "file"))
    var feed: String

    @Option(help: ArgumentHelp("Where to write the fetched items and a 'refreshed_at' line.", valueName: "file"))
    var cache: String

    @Option(
        name: .customLong("app-id"),
        help: ArgumentHelp(
            "The app id to register as, for when the agent cannot derive it (not in a Flatpak, snap or systemd app unit). Empty: let the agent derive it.",
            valueName: "id"))
    var appID = FeedReader.appID

    @Option(
        name: .customLong("bus-name"),
        help: ArgumentHelp("A D-Bus-activatable name at which the agent may start this app.", valueName: "name"))
    var busName: String?

    @Option(
        name: .customLong("exit-after"),
        help: ArgumentHelp("Exit after this many completed refreshes (0: run until stopped).", valueName: "n"))
    var exitAfter = 0

    func validate() throws {
        guard exitAfter >= 0 else { throw ValidationError("--exit-after must be 0 or more") }
    }

    func run() async throws {
        let scheduler = BGTaskScheduler(appID: appID.isEmpty ? nil : appID, busName: busName)
        let (completions, completed) = AsyncStream.makeStream(of: Void.self)
        let reader = FeedReader(scheduler: scheduler, feedPath: feed, cachePath: cache, refreshCompleted: completed)

        // Handlers first, then activate(): the first Register must carry both identifiers, and an
        // app started by D-Bus activation must be ready before it takes its bus name.
        scheduler.register(forTaskWithIdentifier: FeedReader.refreshIdentifier) { task in
            Task { await reader.refresh(task) }
        }
        scheduler.register(forTaskWithIdentifier: FeedReader.cleanupIdentifier) { task in
            Task { await reader.cleanup(task) }
        }
        do {
            let registeredAs = try await scheduler.activate()
            EventLog.emit("registered", ["app_id": registeredAs, "identifiers": scheduler.registeredIdentifiers.joined(separator: ",")])
        } catch let error as BGTaskSchedulerError {
            EventLog.emit("register-failed", ["error": error.code.rawValue, "message": error.message])
            throw ExitCode(1)
        }
        await reader.submitRefresh()
        await reader.submitCleanup()

        var count = 0
        for await _ in completions {
            count += 1
            if exitAfter > 0 && count >= exitAfter { break }
        }
        EventLog.emit("exiting", ["refreshes": "\(count)"])
    }
}
