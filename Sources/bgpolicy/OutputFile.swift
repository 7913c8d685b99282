import Glibc

/// A file a command writes (`timeline --svg`, `replay --refreshes`): created, or emptied, when
/// opened, and written through a buffer, so that a long output (every refresh of a replay,
/// millions for a `periodic` baseline on a large trace) is never held whole. The first failure
/// is kept and nothing is written after it; `close()` reports it.
final class OutputFile {
    struct Failure: Error { let message: String }

    private var fd: Int32
    private var buffer: [UInt8] = []
    private var problem: String?
    static let bufferSize = 1 << 16

    init(creating path: String) throws(Failure) {
        fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
        guard fd >= 0 else { throw Failure(message: String(cString: strerror(errno))) }
        buffer.reserveCapacity(Self.bufferSize)
    }

    deinit { if fd >= 0 { Glibc.close(fd) } }

    func write(_ text: String) {
        buffer.append(contentsOf: text.utf8)
        if buffer.count >= Self.bufferSize { flush() }
    }

    /// Writes what is buffered and closes the file: nil when every byte was written, else what
    /// went wrong first.
    func close() -> String? {
        flush()
        guard fd >= 0 else { return problem }
        if Glibc.close(fd) != 0, problem == nil { problem = String(cString: strerror(errno)) }
        fd = -1
        return problem
    }

    private func flush() {
        defer { buffer.removeAll(keepingCapacity: true) }
        guard problem == nil, fd >= 0 else { return }
        var written = 0
        while written < buffer.count {
            let n = buffer.withUnsafeBytes { Glibc.write(fd, $0.baseAddress! + written, $0.count - written) }
            if n < 0 && errno == EINTR { continue }
            guard n > 0 else {
                problem = n < 0 ? String(cString: strerror(errno)) : "nothing more could be written"
                return
            }
            written += n
        }
    }
}
