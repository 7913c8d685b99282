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
    /// - then the copy is opened as at start (checked, WAL), and only once it is open is the
    ///   old connection closed. A copy that cannot be opened is taken away again, so that the
    ///   path is as the user left it, and the old connection goes on serving: a store is never
    ///   left without an open connection (a closed one crashes SQLite's readers, not only
    ///   fails them).
    ///
    /// A copy that fails, or cannot be opened, is said (`FileEvent.restoreFailed`) and tried
    /// again at a write a minute or more later, and at `checkpoint` (the agent's stop) at once:
    /// what the agent holds is lost only if no try succeeds before it stops.
    ///
    /// The log removed alone (`<path>-wal`, the file still there) is written again the same
    /// way (`FileEvent.logRestored`): SQLite keeps writing to the log it has open, so every
    /// commit since the last checkpoint, and every one after, would be in the removed log only,
    /// and lost if the agent then ended without its checkpoint at stop. The copy's rename
    /// unlinks the file the old connection holds, which is what keeps SQLite, closing it, from
    /// removing the new connection's log at the path. A `-wal` missing before any write was
    /// seen with one is no sign of this (a file the store could not put in WAL mode).
    ///
    /// A file another one replaced (`mv`) is left alone (`FileEvent.replaced`, once): whoever
    /// put it there meant it. The agent's log is still `<path>-wal`; the checkpoint at stop
    /// empties it, so the next start reads the new file alone. The cost is one `stat` per write.
    ///
    /// The agent writes from two threads (its executor, and `StoreWriter` for the writes that
    /// may stall): the copy is made holding the lock on the connection, which every call holds
    /// while it uses the connection (`withQueue`), so that the copy is made once and no call
    /// uses the old connection once it is closed.
    func restoreIfRemoved(retryingAtOnce: Bool = false) {
        guard let path else { return }
        var info = stat()
        if stat(path, &info) == 0 {
            let event: FileEvent? = file.withLock { open in
                guard let opened = open.identity else { return nil }
                guard opened == FileIdentity(info) else {
                    guard !open.replacementAnnounced else { return nil }
                    open.replacementAnnounced = true
                    return .replaced(path: path)
                }
                // The file is ours; its log must be there too once a write made it. A log
                // removed alone keeps the last commits in the removed file only.
                if Self.exists(path + "-wal") {
                    open.logSeen = true
                    return nil
                }
                guard open.logSeen else { return nil }
                return Self.writeAgain(path: path, &open, retryingAtOnce: retryingAtOnce, reopen: reopen, done: .logRestored(path: path))
            }
            if let event { fileEventContinuation.yield(event) }
            return
        }
        guard errno == ENOENT else { return }
        let event: FileEvent? = file.withLock { open in
            // Another thread's write may have put it back meanwhile.
            guard !Self.exists(path) else { return nil }
            return Self.writeAgain(path: path, &open, retryingAtOnce: retryingAtOnce, reopen: reopen, done: .restored(path: path))
        }
        if let event { fileEventContinuation.yield(event) }
    }

    /// Writes the file again (`writeAgain(path:from:reopen:)`) and moves `open` to it, unless a
    /// try failed less than a minute ago; `done` is the event to say when it worked.
    private static func writeAgain(
        path: String, _ open: inout OpenFile, retryingAtOnce: Bool,
        reopen: (String) throws(StoreError) -> DatabaseQueue, done: FileEvent
    ) -> FileEvent? {
        let now = Double(time(nil))
        if !retryingAtOnce, let failedAt = open.restoreFailedAt, now - failedAt < restoreRetrySeconds, now >= failedAt {
            return nil
        }
        do throws(StoreError) {
            let reopened = try writeAgain(path: path, from: open.queue, reopen: reopen)
            open = OpenFile(queue: reopened, identity: FileIdentity(of: path))
            return done
        } catch {
            open.restoreFailedAt = now
            return .restoreFailed(path: path, reason: "\(error)")
        }
    }

    /// Writes what `queue` holds to `path` (see `restoreIfRemoved`), opens it with `reopen`,
    /// and only then closes `queue`. On any failure `queue` is untouched and nothing is left at
    /// the path.
    private static func writeAgain(
        path: String, from queue: DatabaseQueue, reopen: (String) throws(StoreError) -> DatabaseQueue
    ) throws(StoreError) -> DatabaseQueue {
        try makeParentDirectories(of: path)
        let temporary = "\(path).restoring"
        unlink(temporary)
        do {
            // Outside a transaction: VACUUM cannot run inside one.
            try queue.inDatabase { db in try db.execute(sql: "VACUUM INTO ?", arguments: [temporary]) }
        } catch {
            unlink(temporary)
            throw StoreError(error, file: temporary)
        }
        // Whatever `-wal` and `-shm` are left at the path are the removed file's: SQLite would
        // read that log into the copy (its pages are the old file's), so they go first.
        for suffix in ["-wal", "-shm"] { unlink(path + suffix) }
        guard rename(temporary, path) == 0 else {
            let reason = String(cString: strerror(errno))
            unlink(temporary)
            throw .io("\(path): cannot put the copy in place: \(reason)")
        }
        let reopened: DatabaseQueue
        do {
            reopened = try reopen(path)
        } catch {
            // The old connection still holds everything: the next try copies it again.
            for suffix in ["", "-wal", "-shm"] { unlink(path + suffix) }
            throw .io("\(path): the copy was made but could not be opened, so it was taken away again: \(error)")
        }
        try? queue.close()
        return reopened
    }
}
