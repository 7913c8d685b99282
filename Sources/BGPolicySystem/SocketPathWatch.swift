import BGPolicyCore
internal import CBGPolicyUdev  // <sys/eventfd.h>, which Glibc's module map leaves out
import Glibc

/// Waits, with no timer, for the path of a Unix socket to appear: the agent without a system
/// bus connects again when the bus's socket is created, not on a retry timer that would wake
/// the machine every few minutes for as long as there is none (a container, a session started
/// before the system bus).
///
/// inotify watches the directory that will hold the socket or, while that is missing, the
/// nearest directory on the way that exists, for something created in it (or the directory
/// itself going). Any such change ends the wait: the caller tries to connect again, and waits
/// again if the path is still not there, one directory deeper when one was created on the way.
/// Watching starts before the path is looked at again, so a socket created in between is not
/// missed. The wait runs on a thread of its own that sleeps in `poll`, with no timeout, on the
/// watch and on an eventfd that a cancellation writes to.
public enum SocketPathWatch {
    public struct Failure: Error, Sendable, CustomStringConvertible {
        public let description: String
    }

    /// The path of the socket a D-Bus address names, when it names exactly one by path:
    /// `unix:path=…` (its value unescaped, and absolute), with or without other keys such as
    /// `guid`. Nil for anything else: abstract sockets, TCP, several addresses.
    public static func socketPath(ofAddress address: String) -> String? {
        let entries = address.split(separator: ";")
        guard entries.count == 1, entries[0].hasPrefix("unix:") else { return nil }
        var path: String?
        for pair in entries[0].dropFirst("unix:".count).split(separator: ",") {
            let parts = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            guard parts.count == 2 else { return nil }
            if parts[0] == "path" {
                guard path == nil, let value = unescape(parts[1]) else { return nil }
                path = value
            }
        }
        guard let path, path.hasPrefix("/") else { return nil }
        return path
    }

    /// A D-Bus address value with its `%XX` escapes decoded; nil for a malformed escape.
    static func unescape(_ value: Substring) -> String? {
        var bytes: [UInt8] = []
        var utf8 = value.utf8[...]
        while let byte = utf8.popFirst() {
            guard byte == UInt8(ascii: "%") else {
                bytes.append(byte)
                continue
            }
            guard utf8.count >= 2, let high = HexDigit.value(utf8.removeFirst()), let low = HexDigit.value(utf8.removeFirst()) else {
                return nil
            }
            bytes.append(high << 4 | low)
        }
        return bytes.isEmpty ? nil : String(decoding: bytes, as: UTF8.self)
    }

    /// The directory nearest to `path` on its way that exists: the one that holds it, or an
    /// ancestor of that one ("/" at the farthest).
    static func nearestExistingDirectory(of path: String) -> String {
        var directory = parent(of: path)
        while directory != "/", !isDirectory(directory) { directory = parent(of: directory) }
        return directory
    }

    private static func parent(of path: String) -> String {
        var trimmed = Substring(path)
        while trimmed.count > 1, trimmed.hasSuffix("/") { trimmed = trimmed.dropLast() }
        guard let slash = trimmed.lastIndex(of: "/") else { return "/" }
        let parent = trimmed[..<slash]
        return parent.isEmpty ? "/" : String(parent)
    }

    private static func isDirectory(_ path: String) -> Bool {
        var info = stat()
        return stat(path, &info) == 0 && (info.st_mode & S_IFMT) == S_IFDIR
    }

    /// Returns when `path` exists (at once, if it does already), or when something changed on
    /// its way (see the type's description): look again, and wait again if need be.
    /// Throws `CancellationError` when the task is cancelled, and `Failure` when the path
    /// cannot be watched (no inotify, out of watches, a directory that cannot be read): the
    /// caller then falls back to retrying on a timer.
    public static func waitForPath(_ path: String) async throws {
        let waiter = try Waiter()
        let directory = nearestExistingDirectory(of: path)
        try waiter.watch(directory)
        // Watching before looking: a change after this look wakes the wait below.
        if access(path, F_OK) == 0 || nearestExistingDirectory(of: path) != directory { return }
        try Task.checkCancellation()
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
                waiter.start(continuation)
            }
        } onCancel: {
            waiter.cancel()
        }
    }

    /// The descriptors of one wait (the watch, and an eventfd that a cancellation writes to),
    /// and its thread. Closed in `deinit`, once neither the thread nor a cancellation can use them.
    private final class Waiter: Sendable {
        let inotifyFD: Int32
        let wakeFD: Int32

        init() throws(Failure) {
            inotifyFD = inotify_init1(Int32(IN_CLOEXEC | IN_NONBLOCK))
            guard inotifyFD >= 0 else { throw Failure(description: "inotify_init1: \(String(cString: strerror(errno)))") }
            wakeFD = eventfd(0, Int32(EFD_CLOEXEC | EFD_NONBLOCK))
            guard wakeFD >= 0 else {
                let code = errno
                close(inotifyFD)
                throw Failure(description: "eventfd: \(String(cString: strerror(code)))")
            }
        }

        deinit {
            close(inotifyFD)
            close(wakeFD)
        }

        func watch(_ directory: String) throws(Failure) {
            let mask = UInt32(IN_CREATE | IN_MOVED_TO | IN_DELETE_SELF | IN_MOVE_SELF | IN_ONLYDIR)
            guard inotify_add_watch(inotifyFD, directory, mask) >= 0 else {
                throw Failure(description: "inotify_add_watch(\(directory)): \(String(cString: strerror(errno)))")
            }
        }

        /// Ends the wait with `CancellationError` (also when it has not started yet: the
        /// eventfd keeps the count).
        func cancel() {
            var one: UInt64 = 1
            _ = withUnsafeBytes(of: &one) { write(wakeFD, $0.baseAddress, 8) }
        }

        func start(_ continuation: CheckedContinuation<Void, any Error>) {
            let rc = DetachedThread.start(name: "socket-watch") { continuation.resume(with: self.wait()) }
            if rc != 0 {
                continuation.resume(throwing: Failure(description: "pthread_create: \(String(cString: strerror(rc)))"))
            }
        }

        /// The thread: until the watch or the eventfd has something to read.
        private func wait() -> Result<Void, any Error> {
            var fds = [pollfd(fd: inotifyFD, events: Int16(POLLIN), revents: 0),
                       pollfd(fd: wakeFD, events: Int16(POLLIN), revents: 0)]
            while true {
                let ready = fds.withUnsafeMutableBufferPointer { poll($0.baseAddress, nfds_t($0.count), -1) }
                if ready < 0 {
                    if errno == EINTR { continue }
                    return .failure(Failure(description: "poll: \(String(cString: strerror(errno)))"))
                }
                if fds[1].revents != 0 { return .failure(CancellationError()) }
                if fds[0].revents != 0 { return .success(()) }
            }
        }
    }
}
