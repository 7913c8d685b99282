import Glibc

/// A private dbus-daemon for one test: never the machine's own bus. Shared by the test targets
/// that need a real bus (the D-Bus layer's and the client library's).
public final class PrivateBus: Sendable {
    public let address: String
    private let process: ChildProcess

    /// The stock session configuration, or `configFile`.
    public init(configFile: String? = nil) throws {
        let process = try ChildProcess(
            "/usr/bin/dbus-daemon",
            [configFile.map { "--config-file=\($0)" } ?? "--session", "--nofork", "--nopidfile", "--print-address=1"],
            standardOutput: .pipe)
        guard let line = process.readLine(), !line.isEmpty else {
            process.kill()
            throw ChildProcess.SpawnError(executable: "/usr/bin/dbus-daemon", step: "no address printed", code: EIO)
        }
        address = line
        self.process = process
    }

    deinit {
        crash()
    }

    /// Stops the daemon (SIGSTOP) until `resume()`: what its clients send waits in their
    /// sockets, unanswered, as from a bus that is slow to answer.
    public func pause() {
        process.signal(SIGSTOP)
    }

    /// Lets a paused daemon go on (SIGCONT); harmless on one that is not paused.
    public func resume() {
        process.signal(SIGCONT)
    }

    /// Kills the daemon at once, as if it crashed, and waits for it to exit. Once reaped, its
    /// pid (which the kernel may give to another process) is never signalled again.
    public func crash() {
        process.kill()
    }
}
