import ArgumentParser
import BGPolicyAgent
import BGPolicyCore
import Dispatch
import Glibc
import Logging
import ServiceLifecycle
import UnixSignals

/// A synchronous entry point, so that the quiet global executor is in place before any task
/// exists (Docs/Architecture.md, "An idle agent sleeps").
@main
enum Main {
    static func main() {
        holdClosedStandardDescriptors()
        // A log line to a standard error whose reader is gone (`bgpolicyd 2>&1 | less`, quit;
        // an activating bus's pipe closed) fails with EPIPE, which the log handler drops,
        // instead of killing the agent with SIGPIPE past its clean stop: slices not expired,
        // units left frozen or throttled until the next start undoes them.
        signal(SIGPIPE, SIG_IGN)
        let quiet = AgentExecutor.installAsGlobal()
        Task.detached {
            do {
                var command = try BGPolicyDaemon.parseAsRoot()
                if var daemon = command as? BGPolicyDaemon {
                    daemon.quietExecutor = quiet
                    try await daemon.run()
                } else {
                    try command.run()  // --help, --version
                }
                exit(0)
            } catch {
                BGPolicyDaemon.fail(error)
            }
        }
        dispatchMain()
    }

    /// Opens /dev/null as each standard descriptor the agent was started without
    /// (`bgpolicyd 2>&-`), before anything else opens one. Else the first descriptor opened
    /// (libdispatch's epoll, then an eventfd, the lock file, the database…) takes the number,
    /// and the log is written into it.
    static func holdClosedStandardDescriptors() {
        for fd in [STDIN_FILENO, STDOUT_FILENO, STDERR_FILENO] where fcntl(fd, F_GETFD) == -1 {
            _ = open("/dev/null", O_RDWR)  // the lowest number free: `fd`
        }
    }
}

struct BGPolicyDaemon: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "bgpolicyd",
        abstract: "The bgpolicy agent: schedules background work for desktop apps on the session bus.",
        discussion: """
            bgpolicyd owns org.bgpolicy.Agent1 on the session bus and grants the apps that \
            register with it coalesced slices of background time, when battery, charger, \
            network, idle state and its model of the user's habits say it is best. It runs as \
            the systemd user service bgpolicyd.service (systemctl --user enable --now \
            bgpolicyd), which D-Bus activation also starts once enabled; 'bgpolicy status' \
            shows what it is doing.

            It keeps its state in SQLite under the state directory, mode 0700, and one agent \
            at a time may use a state directory. SIGTERM or SIGINT stop it cleanly; requests \
            and history survive a restart. 'bgpolicy reload' (which systemctl --user reload \
            bgpolicyd runs) or SIGHUP reads the configuration again: an invalid file changes \
            nothing, and says why in the log and in 'bgpolicy status', and 'bgpolicy reload' \
            fails with it. It logs to standard error, which the user manager \
            sends to the journal (journalctl --user -u bgpolicyd); there each line carries \
            its priority, so that journalctl -p warning shows the warnings and errors alone.

            Exit status: 0 when stopped by SIGTERM or SIGINT; 78 for an invalid \
            configuration, or a database only a newer bgpolicy can read, which the service \
            does not restart into; 64 for a bad option; 1 for any other failure.
            """,
        version: BGPolicyVersion.current)

    @Option(name: .long, help: "Read the configuration from this file (default: $XDG_CONFIG_HOME/bgpolicy/bgpolicy.conf).")
    var config: String?

    @Option(name: .long, help: "Keep state in this directory (default: $XDG_STATE_HOME/bgpolicy).")
    var stateDir: String?

    @Option(name: .long, help: "trace, debug, info, notice, warning, error or critical.")
    var logLevel = "info"

    @Flag(name: .long, help: "Print the effective configuration and exit.")
    var printConfig = false

    /// Whether `AgentExecutor` runs the process's tasks (set by `Main`, logged at start).
    var quietExecutor = false

    @Option(name: .long, help: ArgumentHelp("Print the documented introspection XML of an interface (or 'list' for their names) and exit.", valueName: "interface"))
    var printInterface: String?

    func validate() throws {
        // An empty path names no file: read as one, it said "invalid configuration: : No such
        // file or directory".
        if config == "" { throw ValidationError("--config needs the path of a configuration file; \"\" names none.") }
        if stateDir == "" { throw ValidationError("--state-dir needs the path of a directory; \"\" names none.") }
    }

    func run() async throws {
        if let name = printInterface {
            if name == "list" { return print(AgentInterfaces.names.joined(separator: "\n")) }
            guard let xml = AgentInterfaces.documentXML(named: name) else {
                throw ValidationError("unknown interface \(TerminalText.oneLine(name)); known: \(AgentInterfaces.names.joined(separator: ", "))")
            }
            return print(xml, terminator: "")
        }
        let environment = try AgentEnvironment.resolve(configPath: config, stateDirectory: stateDir)
        if printConfig { return print(environment.configuration.rendered(), terminator: "") }

        guard let level = Logger.Level(rawValue: logLevel) else {
            throw ValidationError("--log-level must be one of \(Logger.Level.allCases.map(\.rawValue).joined(separator: ", ")), not \"\(TerminalText.oneLine(logLevel))\"")
        }
        LoggingSystem.bootstrap(JournalLogHandler.bootstrapFactory(level: level))
        let logger = Logger(label: "org.bgpolicy.agent")
        if !quietExecutor {
            logger.warning("Running on the default executor; libdispatch will wake the agent once a second while idle")
        }
        try environment.prepareStateDirectory()
        let agent = AgentService(environment: environment, logger: logger)
        let group = ServiceGroup(
            configuration: .init(services: [.init(service: agent)], gracefulShutdownSignals: [.sigterm, .sigint], logger: logger))
        try await group.run()
    }
}

extension BGPolicyDaemon {
    /// EX_CONFIG (sysexits.h): what a person must fix before a start can succeed. The unit's
    /// `RestartPreventExitStatus=` keeps systemd from restarting into the same error until
    /// its start limit hides it.
    static let configurationExitCode: Int32 = 78

    /// The exit for an error that ended the agent. The agent's own errors are printed as
    /// "Error: …", at error priority when standard error is the journal (`JournalLogHandler`):
    /// EX_CONFIG for a configuration or a database only a newer bgpolicy can read, 1 for the
    /// rest (systemd restarts it). Errors of the command line (`--help`, a bad option) go to
    /// the argument parser as before.
    static func fail(_ error: any Error) -> Never {
        guard let agentError = error as? AgentError else { exit(withError: error) }
        let code: Int32 = switch agentError {
        case .configuration, .storeFromNewerVersion: configurationExitCode
        default: EXIT_FAILURE
        }
        // It may quote the user's own input (a configuration value, a path): an escape sequence
        // in it must not reach the terminal, nor a newline start a line of its own.
        let text = "Error: " + TerminalText.oneLine("\(agentError)")
        if JournalLogHandler.isJournalStream(fd: STDERR_FILENO) {
            JournalLogHandler.writeToStandardError(JournalLogHandler.line(level: .error, label: "", message: text, metadata: [:]))
        } else {
            JournalLogHandler.writeToStandardError(text + "\n")
        }
        Glibc.exit(code)
    }
}
