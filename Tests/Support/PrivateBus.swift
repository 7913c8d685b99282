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

    /// Ends the daemon with SIGTERM (SIGKILL should it not exit), so that it removes its socket
    /// file, then removes the socket file itself should it still be there: after a `crash()`,
    /// or a SIGTERM that came before the daemon set up its handler for it. Without this, each
    /// bus left a /tmp/dbus-XXXXXXXXXX behind.
    deinit {
        process.terminate()
        for path in Self.socketPaths(in: address) {
            var info = stat()
            if lstat(path, &info) == 0 && info.st_mode & S_IFMT == S_IFSOCK {
                unlink(path)
            }
        }
    }

    /// The socket files an address names (`unix:path=`, as `unix:tmpdir=` and `unix:dir=`
    /// listen on): never an abstract socket, which has no file.
    public static func socketPaths(in address: String) -> [String] {
        address.split(separator: ";").compactMap { entry -> String? in
            guard entry.hasPrefix("unix:") else { return nil }
            for pair in entry.dropFirst("unix:".count).split(separator: ",") where pair.hasPrefix("path=") {
                return unescaped(pair.dropFirst("path=".count))
            }
            return nil
        }
    }

    /// A D-Bus address value without its %XX escapes.
    private static func unescaped(_ value: Substring) -> String? {
        var bytes: [UInt8] = []
        var rest = value.utf8[...]
        while let byte = rest.popFirst() {
            guard byte == UInt8(ascii: "%") else {
                bytes.append(byte)
                continue
            }
            guard rest.count >= 2, let code = UInt8(String(decoding: rest.prefix(2), as: UTF8.self), radix: 16) else {
                return nil
            }
            bytes.append(code)
            rest = rest.dropFirst(2)
        }
        return String(decoding: bytes, as: UTF8.self)
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
    /// pid (which the kernel may give to another process) is never signalled again. Its socket
    /// file stays, as a crashed daemon's does, until the bus is released.
    public func crash() {
        process.kill()
    }
}
