import Glibc
import SystemPackage

/// Bounded reads of small regular files: `/proc` and cgroup files, a sandbox's
/// `.flatpak-info`, the agent's configuration. Whoever can write such a path may have put
/// something else there, so the read never blocks on a FIFO or a terminal, stops at `limit`
/// bytes, and takes only a regular file. procfs and cgroupfs files report size 0, so it reads
/// until the end rather than trusting the size.
public enum SmallFile {
    /// Why a read failed: an `errno` value; `EFBIG` for a file over the limit, `EINVAL` for
    /// one that is not a regular file.
    public struct Failure: Error, Equatable, CustomStringConvertible {
        public var code: Int32

        public init(code: Int32) { self.code = code }

        public var description: String {
            code == EINVAL ? "not a regular file" : Errno(rawValue: code).description
        }
    }

    /// The file's bytes, or nil when it cannot be opened, is not a regular file, or is larger
    /// than `limit`.
    public static func read(_ path: String, limit: Int) -> [UInt8]? {
        try? read(path, limit: limit, followingSymlinks: true).get()
    }

    /// Like `read(_:limit:)`, but says why it failed. With `followingSymlinks` false, a
    /// symbolic link at `path` itself is refused (`ELOOP`).
    public static func read(_ path: String, limit: Int, followingSymlinks: Bool) -> Result<[UInt8], Failure> {
        // Non-blocking: a FIFO planted where a file was expected must not block the opener.
        // O_NOCTTY (which swift-system does not name): nor may a terminal become ours.
        var options: FileDescriptor.OpenOptions = [.closeOnExec, .nonBlocking, .init(rawValue: O_NOCTTY)]
        if !followingSymlinks { options.insert(.noFollow) }
        let fd: FileDescriptor
        do {
            fd = try FileDescriptor.open(path, .readOnly, options: options)
        } catch {
            return .failure(Failure(error))
        }
        defer { try? fd.close() }
        var info = stat()
        guard fstat(fd.rawValue, &info) == 0 else { return .failure(Failure(code: errno)) }
        guard info.st_mode & S_IFMT == S_IFREG else { return .failure(Failure(code: EINVAL)) }
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 4096)
        do {
            while true {
                let n = try chunk.withUnsafeMutableBytes { try fd.read(into: $0) }
                if n == 0 { return .success(bytes) }
                bytes += chunk[..<n]
                if bytes.count > limit { return .failure(Failure(code: EFBIG)) }
            }
        } catch {
            return .failure(Failure(error))
        }
    }

    public static func text(_ bytes: [UInt8]) -> String {
        String(decoding: bytes, as: UTF8.self)
    }
}

extension SmallFile.Failure {
    init(_ error: any Error) {
        code = (error as? Errno)?.rawValue ?? EIO
    }
}
