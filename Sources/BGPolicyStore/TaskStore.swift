public import BGPolicyCore
import GRDB
import Glibc
import Synchronization

/// What the agent keeps across restarts: registered apps, the switches, pending requests, the
/// tasks running right now, the history, and the usage log. SQLite through GRDB.
///
/// Every method is synchronous and runs on the caller's thread: the agent calls the store from
/// its one executor, and a `DatabaseQueue` used synchronously needs no other thread. The agent
/// is the only writer (the CLI asks the agent, never the file).
///
/// Durability: WAL with `synchronous = NORMAL`. A committed transaction survives the agent being
/// killed (SIGKILL, a crash), because the WAL is in the kernel's page cache; it may be lost on
/// power loss or a kernel crash, where the last transactions before the loss roll back. That is
/// the trade-off: one fsync per checkpoint instead of one per task start, and a lost tail of
/// history is acceptable where a corrupt file would not be (WAL never corrupts on power loss).
public final class TaskStore: Sendable {
    /// The database file, or `nil` for `inMemory()`.
    public let path: String?
    /// When the file found at open was corrupt or not a database: where it was moved to (its
    /// `-wal` and `-shm` files beside it, with the same suffixes). The store is then a fresh,
    /// empty one, and the agent should say so loudly.
    public let recoveredFromCorruption: String?
    /// When the file was moved aside: the tables whose rows were copied back from it (each
    /// whole or not at all, `makeFreshFile`), and those that could not be.
    public let salvaged: (kept: [String], lost: [String])?
    /// When the file was moved aside: the older damaged files removed to keep only the newest
    /// `keptDamagedCopies` (with their `-wal` and `-shm`), oldest first. The agent logs them.
    public let removedDamagedCopies: [String]

    /// Runs `body` on the connection, holding the lock on it throughout: the connection
    /// changes only when the file was removed under it and written again
    /// (`restoreIfRemoved`), which takes the same lock, so no call ever uses a connection the
    /// swap closed (GRDB hands a closed connection's reads to SQLite, which crashes on them).
    /// The agent is the single writer, and `DatabaseQueue` serialises its calls anyway.
    func withQueue<T>(_ body: (DatabaseQueue) throws -> T) throws -> T {
        try file.withLock { open throws -> sending T in try body(open.queue) }
    }

    /// The connection, and which file it opened (device and inode; nil in memory).
    struct OpenFile {
        var queue: DatabaseQueue
        var identity: FileIdentity?
        /// Another file took the path, and `FileEvent.replaced` said so (once).
        var replacementAnnounced = false
        /// When the last try to write the removed file again failed: the next comes a minute
        /// or more later (`restoreIfRemoved`).
        var restoreFailedAt: Double?
        /// `<path>-wal` was seen after a write: the connection is in WAL mode, so from then on
        /// a `-wal` missing after a write was removed under it (`restoreIfRemoved`).
        var logSeen = false
    }

    let file: Mutex<OpenFile>

    /// What happened to the database file under the running agent (`fileEvents`).
    public enum FileEvent: Sendable, Equatable {
        /// It was removed (with its directory, maybe), and written again at its path from what
        /// the agent held: nothing was lost.
        case restored(path: String)
        /// Its log (`<path>-wal`) was removed, and not the file: the commits since the last
        /// checkpoint were only in the removed log, and later ones would have gone to it too,
        /// all lost if the agent then ended without its checkpoint at stop (SIGKILL, a crash, a
        /// power cut). So the file was written again at its path as for `restored`: nothing was
        /// lost.
        case logRestored(path: String)
        /// Another file took its path (`mv`): the agent goes on with the file it opened, and
        /// the next start reads the new one (the checkpoint at stop empties the agent's log,
        /// which is still `<path>-wal`).
        case replaced(path: String)
        /// It (or its log alone) was removed, and could not be written again, or the copy could
        /// not be opened (the message says why): the store goes on with the removed file, and
        /// tries again at a write a minute or more later, and at `checkpoint`.
        case restoreFailed(path: String, reason: String)
    }

    /// Each `FileEvent`, for the agent to log.
    public let fileEvents: AsyncStream<FileEvent>
    let fileEventContinuation: AsyncStream<FileEvent>.Continuation

    /// Yields once, the first time SQLite calls the open file corrupt (`StoreError.corrupt`):
    /// the damage came after the check at open, and only a new open can move the file aside
    /// and read back what is still readable. The agent stops on it, so that systemd starts it
    /// again and the start-up recovery runs (`AgentError.storeCorrupt`).
    public let corruptionFound: AsyncStream<StoreError>
    private let corruptionContinuation: AsyncStream<StoreError>.Continuation

    /// Opens the database at `path`, creating it (and any missing directory above it, as 0700:
    /// the history says what the user ran) when needed, checks it, and migrates it.
    ///
    /// A file that is corrupt (`PRAGMA quick_check` fails, or it was found damaged while the
    /// agent ran: `damageMarker(of:)`) or is not a database is renamed
    /// `<path>.corrupt-<unix time>` and a fresh one is put in its place, into which every
    /// table still readable in the old one was copied back (`makeFreshFile`: a damaged index loses
    /// nothing, since its table is read without it; `rebuild`: made beside it and renamed into
    /// place whole, so that a start cut short never leaves part of it as the store). Any other failure
    /// (permissions, a locked file, a full disk) throws and leaves the file alone: only a file
    /// SQLite itself calls broken is worth giving up.
    public convenience init(path: String) throws(StoreError) {
        try self.init(path: path, reopen: Self.openFile)
    }

    /// How a file the store has just put in place is opened: the fresh one after a corrupt one
    /// was moved aside, and one written again under the store (`restoreIfRemoved`):
    /// `open(path:)` (`openFile`). The tests' seam for an open that fails at that point.
    let reopen: @Sendable (String) throws(StoreError) -> DatabaseQueue

    /// `open(path:)` as the store's default `reopen`.
    static let openFile: @Sendable (String) throws(StoreError) -> DatabaseQueue = { path throws(StoreError) in
        try TaskStore.open(path: path)
    }

    /// `init(path:)`, with the opener `restoreIfRemoved` uses after the copy, and, for tests of
    /// a full disk, the room the fresh file made after a damaged one gets
    /// (`makeFreshFile(extraPages:)`), and, for tests of a rebuild cut short, what runs after
    /// each table is copied into it (`copyTables(afterTable:)`).
    init(
        path: String, reopen: @escaping @Sendable (String) throws(StoreError) -> DatabaseQueue,
        freshFileExtraPages: Int? = nil, afterSalvagedTable: ((String) -> Void)? = nil
    ) throws(StoreError) {
        self.reopen = reopen
        try Self.makeParentDirectories(of: path)
        (corruptionFound, corruptionContinuation) = AsyncStream.makeStream(bufferingPolicy: .bufferingOldest(1))
        (fileEvents, fileEventContinuation) = AsyncStream.makeStream(bufferingPolicy: .bufferingNewest(16))
        let marker = Self.damageMarker(of: path)
        let queue: DatabaseQueue
        do throws(StoreError) {
            let finished = try Self.settleRebuild(of: path)
            // (A marker without its database, which someone removed, has nothing left to say.)
            if Self.exists(marker), Self.exists(path) {
                throw StoreError.corrupt("\(path): found damaged while the agent last ran")
            }
            queue = try Self.open(path: path)
            // A rebuild the last start finished but did not put in place: it is said as loudly
            // as one done now, though which tables it kept is no longer known.
            recoveredFromCorruption = finished
            salvaged = nil
            removedDamagedCopies = finished.map { Self.removeOldDamagedCopies(of: path, justMade: $0) } ?? []
        } catch .corrupt(_) {
            let (movedTo, kept) = try Self.rebuild(path, extraPages: freshFileExtraPages, afterTable: afterSalvagedTable)
            do {
                queue = try reopen(path)
            } catch {
                // Nothing is lost yet, and nothing must be: the damaged file goes back where it
                // was (with its marker, if it had one), so that the next start meets it and
                // salvages it, rather than a fresh file it could not check.
                Self.putBack(movedTo, at: path)
                throw error
            }
            recoveredFromCorruption = movedTo
            salvaged = kept
            removedDamagedCopies = Self.removeOldDamagedCopies(of: path, justMade: movedTo)
        }
        unlink(marker)
        file = Mutex(OpenFile(queue: queue, identity: FileIdentity(of: path)))
        self.path = path
    }

    private init(memoryQueue: DatabaseQueue) {
        reopen = Self.openFile
        (corruptionFound, corruptionContinuation) = AsyncStream.makeStream(bufferingPolicy: .bufferingOldest(1))
        (fileEvents, fileEventContinuation) = AsyncStream.makeStream(bufferingPolicy: .bufferingNewest(16))
        file = Mutex(OpenFile(queue: memoryQueue, identity: nil))
        self.path = nil
        self.recoveredFromCorruption = nil
        self.salvaged = nil
        self.removedDamagedCopies = []
    }

    /// A private, empty store in memory, for tests and `--no-store` runs.
    public static func inMemory() throws(StoreError) -> TaskStore {
        let label = ":memory:"
        do {
            let queue = try DatabaseQueue(configuration: configuration)
            try migrator.migrate(queue)
            return TaskStore(memoryQueue: queue)
        } catch {
            throw StoreError(error, file: label)
        }
    }

    /// How the file is opened: WAL with `synchronous = NORMAL` (see the type's comment for why
    /// that is enough), set by the store, not by GRDB's `journalMode = .wal`.
    ///
    /// The open must write nothing to a file that is already in WAL mode: GRDB's WAL set-up,
    /// finding the `-wal` missing or empty (as every clean stop leaves it: the checkpoint
    /// truncates it, and `compact` does too), creates and drops a table to fill it, for the
    /// sake of `DatabasePool` readers and snapshots, which the store does not use. On a full
    /// disk that write failed and the agent could not start at all, where it could have served
    /// everything it holds with writes refused (`StoreError.full`); and it landed in a damaged
    /// file before `quick_check` had looked at it. `PRAGMA journal_mode = WAL` alone writes
    /// only to a file not yet in WAL mode (a new one).
    static var configuration: Configuration { makeConfiguration(exclusive: false) }

    /// `configuration`, or with `locking_mode = EXCLUSIVE` set before anything is read
    /// (`open(path:)`).
    static func makeConfiguration(exclusive: Bool) -> Configuration {
        var configuration = Configuration()
        configuration.label = "bgpolicy.store"
        configuration.foreignKeysEnabled = true
        configuration.journalMode = .default
        configuration.prepareDatabase { db in
            if exclusive { try db.execute(sql: "PRAGMA locking_mode = EXCLUSIVE") }
            let mode = try String.fetchOne(db, sql: "PRAGMA journal_mode = WAL")
            // "memory" for `inMemory()`, which has no file to keep a log beside.
            guard mode == "wal" || mode == "memory" else {
                throw DatabaseError(message: "could not switch to WAL (journal_mode is \(mode ?? "unknown"))")
            }
            try db.execute(sql: "PRAGMA synchronous = NORMAL")
            // The WAL is reused from its start after each checkpoint, but never shrinks: one big
            // transaction (a prune of a long usage log) would leave it that big for good. Cut
            // back to this when it is reused; twice what the automatic checkpoint (1,000 pages)
            // lets it reach otherwise, so that everyday use does not cut and grow it in turn.
            try db.execute(sql: "PRAGMA journal_size_limit = \(walSizeLimit)")
        }
        // The agent is the only writer, but `sqlite3` run by a curious user takes locks too.
        configuration.busyMode = .timeout(5)
        return configuration
    }

    /// `PRAGMA journal_size_limit`, in bytes (`configuration`).
    static let walSizeLimit = 8 << 20

    /// Opens, checks and migrates the file, closing it again on failure so that it can be moved.
    ///
    /// On a full disk an existing file whose `-shm` is missing (SQLite removes it, and the
    /// `-wal`, when the last connection closes: a user's `sqlite3` after the agent stopped)
    /// cannot even be read: SQLite must write the shared-memory file before the first read.
    /// Then the file is opened with `locking_mode = EXCLUSIVE`, which keeps the WAL's index in
    /// the process's memory and needs no `-shm`: the agent starts and serves what it holds,
    /// writes fail as `.full` until there is room, and no other process can read the file
    /// until the agent next starts (`openedExclusively`).
    static func open(path: String) throws(StoreError) -> DatabaseQueue {
        let queue: DatabaseQueue
        do {
            queue = try DatabaseQueue(path: path, configuration: configuration)
        } catch let error as DatabaseError where [.SQLITE_FULL, .SQLITE_IOERR].contains(error.resultCode) && exists(path) {
            guard let opened = try? DatabaseQueue(path: path, configuration: makeConfiguration(exclusive: true)) else {
                throw StoreError(error, file: path)
            }
            queue = opened
        } catch {
            throw StoreError(error, file: path)
        }
        let problems: [String]
        do {
            problems = try queue.read { db in try String.fetchAll(db, sql: "PRAGMA quick_check") }
        } catch {
            try? queue.close()
            throw StoreError(error, file: path)
        }
        guard problems == ["ok"] else {
            try? queue.close()
            throw .corrupt("\(path): quick_check: \(problems.prefix(3).joined(separator: "; "))")
        }
        do {
            try checkSchema(queue, path: path)
            try migrator.migrate(queue)
        } catch let error as StoreError {
            try? queue.close()
            throw error
        } catch {
            try? queue.close()
            throw StoreError(error, file: path)
        }
        return queue
    }

    /// The schema changes this build knows, in order.
    static var migrationNames: [String] { migrator.migrations }

    /// Before migrating, that the file is ours and not newer than this build: a database with
    /// migrations this build does not know was written by a newer bgpolicyd (`.newerVersion`:
    /// kept as it is, for that version); one with tables but no migration record was never
    /// ours (`.corrupt`: moved aside like a broken file, rather than migrated into). The empty
    /// migration record alone is ours: GRDB commits it before the first migration, so a first
    /// start cut short there (killed, a full disk) leaves just that, to be migrated as new.
    private static func checkSchema(_ queue: DatabaseQueue, path: String) throws {
        let (applied, tables) = try queue.read { db in
            (try migrator.appliedIdentifiers(db),
             try String.fetchAll(db, sql: """
                SELECT name FROM sqlite_master
                WHERE type = 'table' AND name NOT LIKE 'sqlite_%' AND name != 'grdb_migrations' ORDER BY name
                """))
        }
        let unknown = applied.subtracting(migrator.migrations).sorted()
        guard unknown.isEmpty else { throw StoreError.newerVersion(path: path, migrations: unknown) }
        if applied.isEmpty, !tables.isEmpty {
            throw StoreError.corrupt("\(path): not a bgpolicy database (tables: \(tables.prefix(5).joined(separator: ", ")))")
        }
    }

    /// Folds the WAL into the database file and truncates it (`wal_checkpoint(TRUNCATE)`). The
    /// agent calls it at stop, so it first writes the file again if it was removed and is not
    /// back yet (`restoreIfRemoved`), without waiting out the minute after a failed try: it is
    /// the last chance to keep what the connection holds.
    public func checkpoint() throws(StoreError) {
        restoreIfRemoved(retryingAtOnce: true)
        do {
            _ = try withQueue { queue in
                try queue.writeWithoutTransaction { db in try Row.fetchOne(db, sql: "PRAGMA wal_checkpoint(TRUNCATE)") }
            }
        } catch {
            throw failure(error)
        }
    }

    /// The file was opened with `locking_mode = EXCLUSIVE`, because the disk was full and
    /// the `-shm` could not be made (`open(path:)`): no other process can read it until the
    /// agent next starts. The agent says so.
    public var openedExclusively: Bool {
        (try? pragma("locking_mode")) == "exclusive"
    }

    /// What error messages call the database.
    var fileLabel: String { path ?? ":memory:" }

    /// `error`, thrown by GRDB on the open store, as a `StoreError`; a corrupt file is also
    /// announced on `corruptionFound` (once: later ones are dropped).
    func failure(_ error: any Error) -> StoreError {
        let mapped = StoreError(error, file: fileLabel)
        if case .corrupt = mapped {
            if let path { Self.markDamaged(path) }
            corruptionContinuation.yield(mapped)
            corruptionContinuation.finish()
        }
        return mapped
    }

    /// Reads in one transaction, mapping SQLite's errors.
    func read<T>(_ body: (Database) throws -> T) throws(StoreError) -> T {
        do {
            return try withQueue { queue in try queue.read(body) }
        } catch {
            throw failure(error)
        }
    }

    /// Writes in one transaction, mapping SQLite's errors. A throwing `body` rolls it all back.
    /// Then, if the file was removed meanwhile, writes it again (`restoreIfRemoved`).
    func write<T>(_ body: (Database) throws -> T) throws(StoreError) -> T {
        let result: T
        do {
            result = try withQueue { queue in try queue.write(body) }
        } catch {
            throw failure(error)
        }
        restoreIfRemoved()
        return result
    }

    // MARK: - Apps

    /// Every registered app, by app id.
    public func apps() throws(StoreError) -> [AppRecord] {
        try read { db in
            var identifiers: [String: [String]] = [:]
            for row in try Row.fetchAll(db, sql: "SELECT app_id, identifier FROM app_identifiers ORDER BY app_id, identifier") {
                identifiers[try row.decode(String.self, forColumn: "app_id"), default: []]
                    .append(try row.decode(String.self, forColumn: "identifier"))
            }
            return try Row.fetchAll(db, sql: "SELECT * FROM apps ORDER BY app_id").compactMap { row in
                try Self.app(from: row, identifiers: identifiers)
            }
        }
    }

    /// Inserts the app, or replaces everything stored about it (its identifier list included);
    /// in the same transaction, removes the pending request of each entry's identifier in
    /// `cancelling` and appends the entry.
    public func saveApp(_ app: AppRecord, cancelling: [HistoryEntry] = []) throws(StoreError) {
        try write { db in
            // An upsert, not INSERT OR REPLACE: replacing would delete the row and, through the
            // foreign keys, the app's pending and running tasks with it.
            try db.execute(
                sql: """
                    INSERT INTO apps (app_id, bus_name, identity, background_only, enabled, registered_at, last_used_at)
                    VALUES (?, ?, ?, ?, ?, ?, ?)
                    ON CONFLICT (app_id) DO UPDATE SET
                        bus_name = excluded.bus_name, identity = excluded.identity,
                        background_only = excluded.background_only, enabled = excluded.enabled,
                        registered_at = excluded.registered_at, last_used_at = excluded.last_used_at
                    """,
                arguments: [
                    app.appID.rawValue, app.busName, app.identity.rawValue, app.backgroundOnly, app.enabled,
                    app.registeredAt, app.lastUsedAt,
                ])
            try db.execute(sql: "DELETE FROM app_identifiers WHERE app_id = ?", arguments: [app.appID.rawValue])
            for identifier in Set(app.identifiers) {
                try db.execute(
                    sql: "INSERT INTO app_identifiers (app_id, identifier) VALUES (?, ?)",
                    arguments: [app.appID.rawValue, identifier])
            }
            for entry in cancelling {
                try db.execute(
                    sql: "DELETE FROM pending WHERE app_id = ? AND identifier = ?",
                    arguments: [app.appID.rawValue, entry.identifier])
                _ = try Self.insert(entry, db)
            }
        }
    }

    // MARK: - Switches

    private static let globalEnabledKey = "global_enabled"

    /// The user's switch for all background work; on until first set.
    public func globalEnabled() throws(StoreError) -> Bool {
        try read { db in
            // Anything but a stored 0 means on: the default, and what a newer agent's unknown
            // value is read as, because "off" silently stopping every app is the worse surprise.
            let value = try Int64.fetchOne(
                db, sql: "SELECT value FROM settings WHERE key = ? AND typeof(value) = 'integer'",
                arguments: [Self.globalEnabledKey])
            return value != 0
        }
    }

    public func setGlobalEnabled(_ enabled: Bool) throws(StoreError) {
        try write { db in
            try db.execute(
                sql: "INSERT INTO settings (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                arguments: [Self.globalEnabledKey, enabled ? 1 : 0])
        }
    }

    // MARK: - Testing

    /// Caps the file at its current size plus `extraPages` pages (`PRAGMA max_page_count`, this
    /// connection only), so that tests meet SQLITE_FULL without filling a disk. Returns the cap.
    @discardableResult
    func capFileSize(extraPages: Int) throws(StoreError) -> Int {
        do {
            return try withQueue { queue in
                try queue.inDatabase { db in
                    let pages = try Int.fetchOne(db, sql: "PRAGMA page_count") ?? 0
                    return try Int.fetchOne(db, sql: "PRAGMA max_page_count = \(pages + extraPages)") ?? 0
                }
            }
        } catch {
            throw failure(error)
        }
    }

    /// Runs raw SQL, so that tests can write what a newer agent would.
    func execute(sql: String) throws(StoreError) {
        try write { db in try db.execute(sql: sql) }
    }

    /// The first page of a table or index, for tests that damage one.
    func rootPage(of name: String) throws(StoreError) -> Int? {
        try read { db in try Int.fetchOne(db, sql: "SELECT rootpage FROM sqlite_master WHERE name = ?", arguments: [name]) }
    }

    /// The value of a pragma on this connection, as text, for tests.
    func pragma(_ name: String) throws(StoreError) -> String? {
        do {
            return try withQueue { queue in try queue.inDatabase { db in try String.fetchOne(db, sql: "PRAGMA \(name)") } }
        } catch {
            throw failure(error)
        }
    }
}
