import Glibc

/// One agent per state directory: an exclusive `flock` on `bgpolicy.lock` in it, held for the
/// agent's life (the kernel drops it when the process ends, however it ends). A second agent
/// on the same directory, on the same session bus or another, refuses before it reads or
/// writes the store: its start-up clean-up would otherwise record the first one's running
/// tasks as interrupted, and two writers would each hold the other's rows in memory.
final class StateLock: Sendable {
    static let fileName = "bgpolicy.lock"

    private let fd: Int32

    /// Takes the lock in `directory` (which must exist), or throws `AgentError.stateInUse`
    /// naming the process that holds it.
    init(directory: String) throws {
        let path = directory + "/" + Self.fileName
        let fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0o600)
        guard fd >= 0 else {
            throw AgentError.stateDirectory(path: directory, reason: "open \(path): \(String(cString: strerror(errno)))")
        }
        guard flock(fd, LOCK_EX | LOCK_NB) == 0 else {
            let code = errno
            let holder = Self.readPID(fd)
            close(fd)
            if code == EWOULDBLOCK { throw AgentError.stateInUse(path: directory, pid: holder) }
            throw AgentError.stateDirectory(path: directory, reason: "flock \(path): \(String(cString: strerror(code)))")
        }
        // The holder's pid, for the message a second agent gives (best effort: the lock is the flock).
        let text = Array("\(getpid())\n".utf8)
        if ftruncate(fd, 0) == 0 {
            _ = text.withUnsafeBytes { pwrite(fd, $0.baseAddress, $0.count, 0) }
        }
        self.fd = fd
    }

    deinit {
        close(fd)
    }

    /// The pid written in the lock file, if it holds one.
    private static func readPID(_ fd: Int32) -> Int32? {
        var buffer = [UInt8](repeating: 0, count: 16)
        let n = buffer.withUnsafeMutableBytes { pread(fd, $0.baseAddress, $0.count, 0) }
        guard n > 0 else { return nil }
        return Int32(String(decoding: buffer[..<n], as: UTF8.self).trimmingSpaces())
    }
}

extension String {
    fileprivate func trimmingSpaces() -> Substring {
        var text = Substring(self)
        while let last = text.last, last.isWhitespace { text.removeLast() }
        while let first = text.first, first.isWhitespace { text.removeFirst() }
        return text
    }
}
