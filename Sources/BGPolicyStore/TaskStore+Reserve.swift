import Glibc

extension TaskStore {
    /// How much room the store keeps in reserve beside the database (`keepReserve`): 1 MiB,
    /// enough for the WAL to take a few hundred put-back requests (one takes a few pages of
    /// 4 KiB), and little on any disk a desktop runs from.
    public static let reserveSize = 1 << 20

    /// The file that holds the reserve, beside the database.
    static func reserveFile(of path: String) -> String { "\(path).reserve" }

    /// Keeps `reserveSize` bytes of the disk allocated to `<database>.reserve`, for
    /// `releaseReserve` to give back when the disk is full and a write must not be lost: a
    /// request put back after a failed delivery is pending only in memory until it is written,
    /// and a stop, or a crash, on a full disk would lose it.
    ///
    /// Does nothing when the file is there at its size. The blocks are allocated
    /// (`posix_fallocate`, not a sparse file) and synced in `<database>.reserve.new`, which is
    /// renamed into place only whole: a file cut short by a full disk or a kill is never taken
    /// for the reserve, and is removed. Returns `nil` when the reserve is in place, else why it
    /// is not (the disk is full, or the directory cannot be written); the store works either
    /// way, without a reserve. A store in memory has no disk to keep room on: `nil`.
    ///
    /// On copy-on-write file systems (btrfs, ZFS) an allocated block is not a promise that a
    /// later write finds room, so the reserve helps less there.
    @discardableResult
    public func keepReserve() -> String? {
        guard let path else { return nil }
        let reserve = Self.reserveFile(of: path)
        var status = stat()
        if stat(reserve, &status) == 0, status.st_size >= Self.reserveSize { return nil }
        let temporary = reserve + ".new"
        let fd = Glibc.open(temporary, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
        guard fd >= 0 else { return "\(temporary): \(String(cString: strerror(errno)))" }
        // posix_fallocate returns the error; it does not set errno.
        var failure = posix_fallocate(fd, 0, off_t(Self.reserveSize))
        if failure == 0, fsync(fd) != 0 { failure = errno }
        close(fd)
        guard failure == 0 else {
            unlink(temporary)
            return "\(temporary): \(String(cString: strerror(failure)))"
        }
        guard rename(temporary, reserve) == 0 else {
            let reason = String(cString: strerror(errno))
            unlink(temporary)
            return "\(reserve): \(reason)"
        }
        Self.syncDirectory(of: reserve)
        return nil
    }

    /// Whether the reserve (`keepReserve`) is in place.
    public var hasReserve: Bool {
        guard let path else { return false }
        var status = stat()
        return stat(Self.reserveFile(of: path), &status) == 0 && status.st_size >= Self.reserveSize
    }

    /// Gives the reserve back to the file system, so that a write the full disk refused can
    /// be tried again; `false` when there was none (spent already, or never made).
    public func releaseReserve() -> Bool {
        guard let path else { return false }
        return unlink(Self.reserveFile(of: path)) == 0
    }
}
