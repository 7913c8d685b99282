import GRDB
import Glibc

extension TaskStore {
    /// Makes the fresh file at `path` to replace the damaged one at `aside`, migrated to
    /// this build's schema, with every table of `aside` that can still be read whole copied
    /// into it (`copyTables`), and closes it again: the store then opens it as at start
    /// (`reopen`). Returns the tables kept and lost; nil when nothing could be tried (`aside` is
    /// no database, or not bgpolicy's). Throws when the fresh file
    /// cannot be made or the rows cannot be written into it (a full disk: `copyTables`), leaving
    /// what it began at `path` for `rebuild` to remove. `extraPages`: the tests' seam for a full
    /// disk, capping the fresh file at its size once migrated plus that many pages.
    ///
    /// The rows go into the schema they were written in, and the migrations the old file lacked
    /// then run on them, as at any upgrade: the fresh file is migrated up to the old file's last
    /// migration, the tables are copied, and the rest is migrated. So a file damaged under one
    /// release and first opened by the next (an upgrade is a start) keeps what is readable, as
    /// one of this release does. Where the old file's migration record cannot be read (it is
    /// damaged itself), or is not a first part of this build's (a newer bgpolicyd's file
    /// included), or the later migrations fail on
    /// what was copied, the rows go into this build's schema, by the columns both tables have:
    /// a table whose rows lack a column that needs a value is lost, whole.
    static func makeFreshFile(
        at path: String, salvaging aside: String, extraPages: Int? = nil, afterTable: ((String) -> Void)? = nil
    ) throws(StoreError) -> (kept: [String], lost: [String])? {
        let ours = migrationNames
        let record: MigrationRecord
        do {
            record = try migrationRecord(of: aside)
        } catch {
            throw StoreError(error, file: aside)
        }
        switch record {
        case .notOurs:
            try fill(path, from: nil, migratedUpTo: nil, extraPages: extraPages, afterTable: afterTable)
            return nil
        case .unreadable:
            return try fill(path, from: aside, migratedUpTo: nil, extraPages: extraPages, afterTable: afterTable)
        case .read(let theirs):
            guard !theirs.isEmpty else {
                try fill(path, from: nil, migratedUpTo: nil, extraPages: extraPages, afterTable: afterTable)
                return nil
            }
            guard theirs.isSubset(of: ours) else {
                // A newer bgpolicyd's file (a downgrade): into this build's schema, by the
                // columns both have, as when the record cannot be read. Its undamaged file
                // would have been refused, left for the newer agent; a damaged one is moved
                // aside all the same, and its pending requests are worth more copied than not.
                return try fill(path, from: aside, migratedUpTo: nil, extraPages: extraPages, afterTable: afterTable)
            }
            guard Set(ours.prefix(theirs.count)) == theirs else {
                return try fill(path, from: aside, migratedUpTo: nil, extraPages: extraPages, afterTable: afterTable)
            }
            do {
                return try fill(path, from: aside, migratedUpTo: ours[theirs.count - 1], extraPages: extraPages, afterTable: afterTable)
            } catch {
                // Begun again from nothing, into this build's schema (a full disk fails again).
                removeDatabase(at: path)
                return try fill(path, from: aside, migratedUpTo: nil, extraPages: extraPages, afterTable: afterTable)
            }
        }
    }

    /// What the file moved aside says of its schema.
    private enum MigrationRecord {
        /// No database, or no migration record: nothing of it can be read back.
        case notOurs
        /// The record is there, but cannot be read.
        case unreadable
        case read(Set<String>)
    }

    /// Throws only what `isWriteFailure` calls the disk's failure (the file could not be
    /// attached on a full disk, which must put it back rather than salvage nothing).
    private static func migrationRecord(of aside: String) throws -> MigrationRecord {
        do {
            return try DatabaseQueue().writeWithoutTransaction { db -> MigrationRecord in
                try db.execute(sql: "ATTACH DATABASE ? AS aside", arguments: [aside])
                defer { try? db.execute(sql: "DETACH DATABASE aside") }
                let hasRecord = try Bool.fetchOne(db, sql: """
                    SELECT EXISTS (SELECT 1 FROM aside.sqlite_master WHERE type = 'table' AND name = 'grdb_migrations')
                    """)
                guard hasRecord == true else { return .notOurs }
                guard let theirs = try? String.fetchSet(db, sql: "SELECT identifier FROM aside.grdb_migrations") else {
                    return .unreadable
                }
                return .read(theirs)
            }
        } catch where isWriteFailure(error) {
            throw error
        } catch {
            return .notOurs
        }
    }

    /// SQLite failed to write or to reach the disk (SQLITE_FULL, SQLITE_IOERR, SQLITE_READONLY),
    /// not to read what was written: nothing says the rows are unreadable, and the salvage must
    /// fail (the damaged file goes back, for the next start) rather than call them lost.
    static func isWriteFailure(_ error: any Error) -> Bool {
        guard let error = error as? DatabaseError else { return false }
        return [.SQLITE_FULL, .SQLITE_IOERR, .SQLITE_READONLY].contains(error.resultCode)
    }

    /// Creates the file at `path`, migrated up to `stage` (all the way when nil), copies the
    /// tables of `aside` into it (when given), migrates the rest, and closes it. `extraPages`: see
    /// `makeFreshFile`; `afterTable`: see `copyTables`.
    @discardableResult
    private static func fill(
        _ path: String, from aside: String?, migratedUpTo stage: String?, extraPages: Int?, afterTable: ((String) -> Void)?
    ) throws(StoreError)
        -> (kept: [String], lost: [String])?
    {
        do {
            let queue = try DatabaseQueue(path: path, configuration: configuration)
            defer { try? queue.close() }
            if let stage {
                try migrator.migrate(queue, upTo: stage)
            } else {
                try migrator.migrate(queue)
            }
            if let extraPages {
                try queue.inDatabase { db in
                    let pages = try Int.fetchOne(db, sql: "PRAGMA page_count") ?? 0
                    try db.execute(sql: "PRAGMA max_page_count = \(pages + extraPages)")
                }
            }
            let salvaged = try aside.flatMap { aside in try copyTables(from: aside, into: queue, afterTable: afterTable) }
            try migrator.migrate(queue)
            // Everything into the file itself, the log emptied: `rebuild` renames the file
            // alone into place.
            _ = try queue.writeWithoutTransaction { db in try Row.fetchOne(db, sql: "PRAGMA wal_checkpoint(TRUNCATE)") }
            return salvaged
        } catch {
            throw StoreError(error, file: path)
        }
    }

    /// Copies into `queue` every table of `aside` that can still be read whole: one statement
    /// a table, in creation order (parents before the tables that refer to them), so a table
    /// is kept whole or not at all. Rows whose parent row is missing (their app deleted with
    /// foreign keys off before the damage, or its table lost) are left out, not the table with
    /// them. Only the columns both tables have; a table `aside` does not have is neither kept
    /// nor lost. Nil when `aside` cannot be attached.
    ///
    /// A table is lost only to what its rows are: damaged (SQLITE_CORRUPT, SQLITE_NOTADB), or
    /// refused by the fresh schema (a constraint). A failure to write (`isWriteFailure`: the
    /// fresh file meeting a full disk) throws, here or at the attach, so that the store puts
    /// the damaged file back for the next start instead of giving up rows it could read.
    ///
    /// `afterTable`: the tests' seam for a rebuild cut short, called with each table once its
    /// rows are committed.
    static func copyTables(
        from aside: String, into queue: DatabaseQueue, afterTable: ((String) -> Void)? = nil
    ) throws -> (kept: [String], lost: [String])? {
        try queue.writeWithoutTransaction { db -> (kept: [String], lost: [String])? in
            do {
                try db.execute(sql: "ATTACH DATABASE ? AS aside", arguments: [aside])
            } catch where isWriteFailure(error) {
                throw error
            } catch {
                return nil
            }
            defer { try? db.execute(sql: "DETACH DATABASE aside") }
            let tables = try String.fetchAll(db, sql: """
                SELECT name FROM main.sqlite_master
                WHERE type = 'table' AND name NOT LIKE 'sqlite_%' AND name != 'grdb_migrations' ORDER BY rowid
                """)
            var kept: [String] = []
            var lost: [String] = []
            for table in tables {
                do {
                    let theirs = Set(try String.fetchAll(
                        db, sql: "SELECT name FROM pragma_table_info(?, 'aside')", arguments: [table]))
                    guard !theirs.isEmpty else { continue }
                    let columns = try String.fetchAll(db, sql: "SELECT name FROM pragma_table_info(?, 'main')", arguments: [table])
                        .filter(theirs.contains).map { "\"\($0)\"" }.joined(separator: ", ")
                    do {
                        try copy(table, columns: columns, where: "1", db)
                    } catch let error as DatabaseError where error.extendedResultCode == .SQLITE_CONSTRAINT_FOREIGNKEY {
                        // Rows whose app was gone before the damage (a user's `sqlite3`, whose
                        // foreign keys are off, deleting an app: `migrator`): no agent reads
                        // them, and one of them lost the whole table. Left out. A table whose
                        // parent table was lost stays lost with it.
                        guard let (parents, parentsKept) = try parentsFilter(of: table, db), lost.allSatisfy({ !parents.contains($0) })
                        else { throw error }
                        try copy(table, columns: columns, where: parentsKept, db)
                    }
                    kept.append(table)
                    afterTable?(table)
                } catch where isWriteFailure(error) {
                    throw error
                } catch {
                    lost.append(table)
                }
            }
            do {
                if lost.contains("app_identifiers") { try rebuildIdentifiers(db) }
            } catch where isWriteFailure(error) {
                throw error
            } catch {}
            do {
                try keepSequences(db)
            } catch where isWriteFailure(error) {
                throw error
            } catch {}
            return (kept, lost)
        }
    }

    /// Copies the rows of `aside`'s `table` that match `condition` (SQL, on `aside."table"`)
    /// into `main`, all or none. Not SQLite's transfer optimisation (which `WHERE 1` prevents),
    /// which would copy the old indexes' pages too, damaged ones included: rows only, read by a
    /// scan of the table, and the fresh indexes built from them.
    private static func copy(_ table: String, columns: String, where condition: String, _ db: Database) throws {
        try db.inSavepoint {
            try db.execute(sql: """
                INSERT INTO main."\(table)" (\(columns)) SELECT \(columns) FROM aside."\(table)" WHERE \(condition)
                """)
            return .commit
        }
    }

    /// The tables `table`'s foreign keys in the fresh schema refer to, and a condition on
    /// `aside."table"`'s rows that each key finds its parent row in `main` (or is NULL); nil
    /// when it has none, or one this cannot write (a key naming no parent column).
    private static func parentsFilter(of table: String, _ db: Database) throws -> (parents: Set<String>, condition: String)? {
        let keys = try Row.fetchAll(db, sql: #"SELECT id, "table", "from", "to" FROM pragma_foreign_key_list(?, 'main') ORDER BY id, seq"#,
                                    arguments: [table])
        guard !keys.isEmpty else { return nil }
        var conditions: [String] = []
        var parents: Set<String> = []
        for id in Set(keys.map { $0["id"] as Int }).sorted() {
            let columns = keys.filter { $0["id"] as Int == id }
            guard let parent: String = columns.first?["table"] else { return nil }
            parents.insert(parent)
            var matches: [String] = []
            var anyNull: [String] = []
            for column in columns {
                guard let from: String = column["from"], let to: String = column["to"] else { return nil }
                matches.append(#"p."\#(to)" = aside."\#(table)"."\#(from)""#)
                anyNull.append(#"aside."\#(table)"."\#(from)" IS NULL"#)
            }
            conditions.append(
                "(" + anyNull.joined(separator: " OR ")
                    + #" OR EXISTS (SELECT 1 FROM main."\#(parent)" p WHERE "# + matches.joined(separator: " AND ") + "))")
        }
        return (parents, conditions.joined(separator: " AND "))
    }

    /// The identifiers the apps registered were lost while their requests may be kept: at load
    /// every request whose identifier its app no longer registers is dropped, so losing this
    /// one table lost every pending request. Each kept request (and running task) names an
    /// identifier its app registered: they are taken back from there, and the app's next
    /// `Register` replaces the list as usual.
    private static func rebuildIdentifiers(_ db: Database) throws {
        try db.execute(sql: """
            INSERT OR IGNORE INTO main.app_identifiers (app_id, identifier)
            SELECT app_id, identifier FROM main.pending
            UNION SELECT app_id, identifier FROM main.running WHERE identifier != ''
            """)
    }

    /// Keeps the AUTOINCREMENT counters (`sqlite_sequence`) of the copied tables at least where
    /// they were: the history's ids are never reused (a client may hold one), and rows deleted
    /// before the damage (a forgotten app's) left the counter above the highest id copied.
    /// Best effort: a damaged `sqlite_sequence` leaves the counters at the highest ids copied.
    private static func keepSequences(_ db: Database) throws {
        let theirs = try Row.fetchAll(db, sql: "SELECT name, seq FROM aside.sqlite_sequence")
        for row in theirs {
            let name: String = try row.decode(String.self, atIndex: 0)
            let seq: Int64 = try row.decode(Int64.self, atIndex: 1)
            if try Bool.fetchOne(db, sql: "SELECT EXISTS (SELECT 1 FROM main.sqlite_sequence WHERE name = ?)", arguments: [name]) == true {
                try db.execute(
                    sql: "UPDATE main.sqlite_sequence SET seq = max(seq, ?) WHERE name = ?", arguments: [seq, name])
            } else if try Bool.fetchOne(
                db, sql: "SELECT EXISTS (SELECT 1 FROM main.sqlite_master WHERE type = 'table' AND name = ?)", arguments: [name]) == true
            {
                try db.execute(sql: "INSERT INTO main.sqlite_sequence (name, seq) VALUES (?, ?)", arguments: [name, seq])
            }
        }
    }
}
