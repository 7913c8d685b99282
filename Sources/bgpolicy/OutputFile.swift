import SystemPackage

/// A file a command writes (`timeline --svg`, `replay --refreshes`): created, or emptied, when
/// opened, and written through a buffer, so that a long output (every refresh of a replay,
/// millions for a `periodic` baseline on a large trace) is never held whole. The first failure
/// is kept and nothing is written after it; `close()` reports it.
final class OutputFile {
    struct Failure: Error { let message: String }

    private var fd: FileDescriptor?
    private var buffer: [UInt8] = []
    private var problem: String?
    static let bufferSize = 1 << 16

    init(creating path: String) throws(Failure) {
        do {
            fd = try FileDescriptor.open(
                path, .writeOnly, options: [.create, .truncate, .closeOnExec], permissions: [.ownerReadWrite, .groupRead, .otherRead])
        } catch {
            throw Failure(message: "\(error)")
        }
        buffer.reserveCapacity(Self.bufferSize)
    }

    deinit { try? fd?.close() }

    func write(_ text: String) {
        buffer.append(contentsOf: text.utf8)
        if buffer.count >= Self.bufferSize { flush() }
    }

    /// Writes what is buffered and closes the file: nil when every byte was written, else what
    /// went wrong first.
    func close() -> String? {
        flush()
        guard let open = fd else { return problem }
        fd = nil
        do {
            try open.close()
        } catch {
            if problem == nil { problem = "\(error)" }
        }
        return problem
    }

    private func flush() {
        defer { buffer.removeAll(keepingCapacity: true) }
        guard problem == nil, let fd else { return }
        do {
            try fd.writeAll(buffer)
        } catch {
            problem = "\(error)"
        }
    }
}
