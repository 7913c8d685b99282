import Foundation
import Synchronization

/// A private dbus-daemon for one test: never the machine's own bus. Shared by the test targets
/// that need a real bus (the D-Bus layer's and the client library's).
public final class PrivateBus: @unchecked Sendable {
    public let address: String
    private let process: Process
    /// Set once the daemon has been killed and reaped, so its pid (which the kernel may give to
    /// another process) is never signalled again.
    private let killed = Mutex(false)

    /// The stock session configuration, or `configFile`.
    public init(configFile: String? = nil) throws {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/dbus-daemon")
        process.arguments = [configFile.map { "--config-file=\($0)" } ?? "--session", "--nofork", "--nopidfile", "--print-address=1"]
        let pipe = Pipe()
        process.standardOutput = pipe
        process.standardError = FileHandle.nullDevice
        try process.run()
        var data = Data()
        while !data.contains(UInt8(ascii: "\n")) {
            let chunk = pipe.fileHandleForReading.availableData
            guard !chunk.isEmpty else { break }
            data.append(chunk)
        }
        guard let line = String(data: data, encoding: .utf8)?.split(separator: "\n").first else {
            process.terminate()
            throw CocoaError(.fileReadUnknown)
        }
        address = String(line)
        self.process = process
    }

    deinit {
        crash()
    }

    /// Stops the daemon (SIGSTOP) until `resume()`: what its clients send waits in their
    /// sockets, unanswered, as from a bus that is slow to answer.
    public func pause() {
        signal(SIGSTOP)
    }

    /// Lets a paused daemon go on (SIGCONT); harmless on one that is not paused.
    public func resume() {
        signal(SIGCONT)
    }

    private func signal(_ number: Int32) {
        killed.withLock { k in
            guard !k else { return }
            kill(process.processIdentifier, number)
        }
    }

    /// Kills the daemon at once, as if it crashed, and waits for it to exit.
    public func crash() {
        let alreadyKilled = killed.withLock { k in
            defer { k = true }
            return k
        }
        guard !alreadyKilled else { return }
        // SIGKILL: the daemon inherits a signal mask from the test runner's threads in which
        // SIGTERM may be blocked.
        kill(process.processIdentifier, SIGKILL)
        process.waitUntilExit()
    }
}
