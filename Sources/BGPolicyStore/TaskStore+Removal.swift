import GRDB
import Glibc
import Synchronization

/// The file a path named: its device and inode.
struct FileIdentity: Equatable, Sendable {
    let device: UInt64
    let inode: UInt64

    init(_ info: stat) {
        device = UInt64(info.st_dev)
        inode = UInt64(info.st_ino)
    }

    /// The file at `path` now; nil when there is none.
    init?(of path: String) {
        var info = stat()
        guard stat(path, &info) == 0 else { return nil }
        self.init(info)
    }
}

extension TaskStore {
    /// How long after a failed try to write a removed file again the next try may come.
    static let restoreRetrySeconds = 60.0

    /// Called after every write. If the database file was removed under the running agent (a
    /// user tidying `~/.local/state`, say), the connection still holds the removed file, and
    /// all of it would be gone at the next start. So it is written again at its path, from the
    /// open connection, and the connection moves to it (`FileEvent.restored`):
    /// - `VACUUM INTO` a temporary file beside it (its directory made again if need be),
    ///   renamed into place: a whole copy, or none;
    /// - the removed file's `<path>-wal` and `-shm`, when only the file itself was removed, are
    ///   removed before the copy takes its place: a new connection would read that log into the
    ///   copy, whose pages are laid out anew (SQLite itself, closing a connection whose file was
    ///   removed, leaves its log where it is);
    /// - then the old connection is closed, and the new file opened as at start (checked, WAL).
    ///
    /// A file another one replaced (`mv`) is left alone (`FileEvent.replaced`, once): whoever
    /// put it there meant it. The agent's log is still `<path>-wal`; the checkpoint at stop
    /// empties it, so the next start reads the new file alone. The cost is one `stat` per write.
    ///
    /// The agent writes from two threads (its executor, and `StoreWriter` for the writes that
    /// may stall): the copy is made holding the lock on the connection, so that it is made once,
    /// and no call takes the old connection once it is closed. (One that took it just before
    /// fails, and its caller is told so: nothing of it was written.)
    func restoreIfRemoved() {
        guard let path else { return }
        var info = stat()
        if stat(path, &info) == 0 {
            let announce = file.withLock { open in
                guard let opened = open.identity, !open.replacementAnnounced, opened != FileIdentity(info) else {
                    return false
                }
                open.replacementAnnounced = true
                return true
            }
            if announce { fileEventContinuation.yield(.replaced(path: path)) }
            return
        }
        guard errno == ENOENT else { return }
        let event: FileEvent? = file.withLock { open in
            // Another thread's write may have put it back meanwhile.
            guard !Self.exists(path) else { return nil }
            let now = Double(time(nil))
            if let failedAt = open.restoreFailedAt, now - failedAt < Self.restoreRetrySeconds, now >= failedAt {
                return nil
            }
            do throws(RestoreFailure) {
                let reopened = try Self.writeAgain(path: path, from: open.queue)
                open = OpenFile(queue: reopened, identity: FileIdentity(of: path))
                return .restored(path: path)
            } catch {
                switch error {
                case .copy(let error):
                    open.restoreFailedAt = now
                    return .restoreFailed(path: path, reason: "\(error)")
                case .reopen(let error):
                    return .reopenFailed(path: path, reason: "\(error)")
                }
            }
        }
        if let event { fileEventContinuation.yield(event) }
    }

    /// Why `writeAgain` failed: before the copy was in place (`queue` still serves), or after,
    /// when `queue` was closed and the copy could not be opened.
    enum RestoreFailure: Error {
        case copy(StoreError)
        case reopen(StoreError)
    }

    /// Writes what `queue` holds to `path` (see `restoreIfRemoved`) and opens it.
    private static func writeAgain(path: String, from queue: DatabaseQueue) throws(RestoreFailure) -> DatabaseQueue {
        do {
            try makeParentDirectories(of: path)
        } catch {
            throw .copy(error)
        }
        let temporary = "\(path).restoring"
        unlink(temporary)
        do {
            // Outside a transaction: VACUUM cannot run inside one.
            try queue.inDatabase { db in try db.execute(sql: "VACUUM INTO ?", arguments: [temporary]) }
        } catch {
            unlink(temporary)
            throw .copy(StoreError(error, file: temporary))
        }
        // Whatever `-wal` and `-shm` are left at the path are the removed file's: SQLite would
        // read that log into the copy (its pages are the old file's), so they go first.
        for suffix in ["-wal", "-shm"] { unlink(path + suffix) }
        guard rename(temporary, path) == 0 else {
            let reason = String(cString: strerror(errno))
            unlink(temporary)
            throw .copy(.io("\(path): cannot put the copy in place: \(reason)"))
        }
        try? queue.close()
        do {
            return try open(path: path)
        } catch {
            throw .reopen(error)
        }
    }
}
