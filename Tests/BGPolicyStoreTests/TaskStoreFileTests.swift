import BGPolicyCore
@testable import BGPolicyStore
import Foundation
import Synchronization
import Testing

@Suite("TaskStore on disk: persistence, crashes, corruption, a full disk")
struct TaskStoreFileTests {
    @Test("opens with WAL, synchronous NORMAL and foreign keys, creating missing directories")
    func pragmas() throws {
        let scratch = try ScratchDirectory()
        defer { scratch.remove() }
        let store = try TaskStore(path: scratch.path + "/state/bgpolicy/tasks.db")
        #expect(store.path == scratch.path + "/state/bgpolicy/tasks.db")
        #expect(store.recoveredFromCorruption == nil)
        #expect(try store.pragma("journal_mode") == "wal")
        #expect(try store.pragma("synchronous") == "1")
        #expect(try store.pragma("foreign_keys") == "1")
        #expect(try Int(store.pragma("busy_timeout") ?? "") ?? 0 > 0)
        let mode = try FileManager.default.attributesOfItem(atPath: scratch.path + "/state")[.posixPermissions] as? Int
        #expect(mode == 0o700)
    }

    /// A store at `path` holding one app (`Sample.maps`) and one pending request of it ("a").
    func storeWithOneRequest(path: String) throws -> TaskStore {
        let store = try TaskStore(path: path)
        try store.saveApp(Sample.app(Sample.maps))
        try store.savePending(Sample.request(Sample.maps, "a"))
        return store
    }

    @Test("opening a sound file writes nothing, though its WAL is empty (a full disk must not stop the start)")
    func openWritesNothing() throws {
        let scratch = try ScratchDirectory()
        defer { scratch.remove() }
        let path = scratch.path + "/tasks.db"
        do { _ = try storeWithOneRequest(path: path) }
        // As a clean stop leaves it: everything in the file, the WAL empty (or gone).
        let before = try Data(contentsOf: URL(fileURLWithPath: path))
        for _ in 0..<2 {
            let store = try TaskStore(path: path)
            #expect(try store.pendingRequests().map(\.identifier) == ["a"])
            #expect(try store.pragma("journal_mode") == "wal")
            // GRDB's WAL set-up wrote a transaction into an empty WAL at every open, which a
            // full disk refused (SQLITE_FULL), so the agent could not start.
            let wal = (try? FileManager.default.attributesOfItem(atPath: path + "-wal")[.size] as? Int) ?? 0
            #expect(wal == 0, "the open wrote \(wal) bytes of WAL")
            try store.checkpoint()
        }
        #expect(try Data(contentsOf: URL(fileURLWithPath: path)) == before)
    }

    @Test("everything saved is there after closing and reopening")
    func persistence() throws {
        let scratch = try ScratchDirectory()
        defer { scratch.remove() }
        let path = scratch.path + "/tasks.db"
        let app = AppRecord(
            appID: Sample.maps, identifiers: ["a", "b"], busName: "org.gnome.Maps", identity: .systemdUnit,
            backgroundOnly: true, enabled: false, registeredAt: 10, lastUsedAt: 11)
        let request = TaskRequest(
            appID: Sample.maps, identifier: "a", kind: .processing, earliestBegin: 50, requiresNetwork: true,
            expectedDuration: 120, submittedAt: 12, deliveryAttempts: 2, lastAttemptAt: 13, lastAttemptError: "gone")
        let running = Sample.running("t1", Sample.maps, "b")
        let entry = Sample.entry(.registered, at: 10)
        var entryID: Int64 = 0
        do {
            let store = try TaskStore(path: path)
            try store.saveApp(app)
            try store.setGlobalEnabled(false)
            try store.savePending(request)
            try store.startTasks([running], history: [])
            entryID = try store.append(entry)
            try store.appendUsage(appID: Sample.maps, state: .foreground, at: 14)
            try store.setSessionStartedUnits(["app-flatpak-org.example.Old-1.scope"])
            try store.setSessionStartedUnits(["app-flatpak-org.example.Tray-2.scope", "app-flatpak-org.gnome.Maps-1.scope"])
        }
        let reopened = try TaskStore(path: path)
        #expect(reopened.recoveredFromCorruption == nil)
        #expect(try reopened.apps() == [app])
        #expect(try !reopened.globalEnabled())
        #expect(try reopened.pendingRequests() == [request])
        #expect(try reopened.runningTasks() == [running])
        var stored = entry
        stored.id = entryID
        #expect(try reopened.history(since: 0, limit: 10) == [stored])
        #expect(try reopened.usage(appID: Sample.maps).map(\.time) == [14])
        // The set is replaced whole, and read back sorted.
        #expect(try reopened.sessionStartedUnits() == ["app-flatpak-org.example.Tray-2.scope", "app-flatpak-org.gnome.Maps-1.scope"])
    }

    @Test("tasks left running by a previous run are recovered as interrupted after reopening")
    func recoverAfterReopen() throws {
        let scratch = try ScratchDirectory()
        defer { scratch.remove() }
        let path = scratch.path + "/tasks.db"
        do {
            let store = try storeWithOneRequest(path: path)
            try store.startTasks([Sample.running("t1", Sample.maps, "a")], history: [Sample.entry(.delivered, at: 3_000)])
            // The agent is killed here: no finishTask.
        }
        let store = try TaskStore(path: path)
        #expect(try store.pendingRequests().isEmpty)
        let recovered = try store.recoverInterrupted(now: 4_000)
        #expect(recovered.count == 1)
        #expect(recovered.first?.taskID == "t1")
        #expect(recovered.first?.identifier == "a")
        #expect(recovered.first?.event == .interrupted)
        #expect(try store.history(since: 0, limit: 10).map(\.event) == [.delivered, .interrupted])
        #expect(try store.history(since: 0, limit: 10).last == recovered.first)
        #expect(try store.runningTasks().isEmpty)
        #expect(try TaskStore(path: path).recoverInterrupted(now: 5_000).isEmpty)
    }

    @Test("a file that is not a database is moved aside with its WAL, and a fresh store works")
    func garbageFile() throws {
        let scratch = try ScratchDirectory()
        defer { scratch.remove() }
        let path = scratch.path + "/tasks.db"
        let garbage = Data((0..<8192).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ 7) })
        try garbage.write(to: URL(fileURLWithPath: path))
        try Data("not a wal".utf8).write(to: URL(fileURLWithPath: path + "-wal"))

        let store = try TaskStore(path: path)
        let movedTo = try #require(store.recoveredFromCorruption)
        #expect(movedTo.hasPrefix(path + ".corrupt-"))
        #expect(try Data(contentsOf: URL(fileURLWithPath: movedTo)) == garbage)
        // Whether SQLite kept the old WAL (then it went along, see moveAsideTwice) or folded it
        // into the file and deleted it on closing, it must not be beside the fresh file.
        let wal = try? Data(contentsOf: URL(fileURLWithPath: path + "-wal"))
        #expect(wal != Data("not a wal".utf8))
        try store.saveApp(Sample.app(Sample.maps))
        #expect(try store.apps().count == 1)
        #expect(try TaskStore(path: path).recoveredFromCorruption == nil)
    }

    @Test("a database with a damaged page fails quick_check and is moved aside")
    func damagedPage() throws {
        let scratch = try ScratchDirectory()
        defer { scratch.remove() }
        let path = scratch.path + "/tasks.db"
        do {
            let store = try TaskStore(path: path)
            try store.saveApp(Sample.app(Sample.maps))
            for time in 0..<200 {
                try store.append(Sample.entry(.submitted, at: Double(time), detail: String(repeating: "x", count: 200)))
            }
        }
        // Closed: the WAL is checkpointed into the file. Keep page 1 (the header and the schema
        // table) and overwrite the pages after it, where the tables and indexes live.
        let handle = try FileHandle(forUpdating: URL(fileURLWithPath: path))
        let pageSize = 4096
        let size = try handle.seekToEnd()
        #expect(size > UInt64(4 * pageSize))
        try handle.seek(toOffset: UInt64(pageSize))
        try handle.write(contentsOf: Data(repeating: 0xA5, count: Int(size) - pageSize))
        try handle.close()

        let store = try TaskStore(path: path)
        let movedTo = try #require(store.recoveredFromCorruption)
        #expect(scratch.names().contains(String(movedTo.split(separator: "/").last!)))
        #expect(try store.apps().isEmpty)
        try store.saveApp(Sample.app(Sample.feeds))
        #expect(try store.apps().map(\.appID) == [Sample.feeds])
    }

    @Test("a SQLite file that is not bgpolicy's (tables, no migration record) is moved aside, not migrated into")
    func foreignDatabase() throws {
        let scratch = try ScratchDirectory()
        defer { scratch.remove() }
        let path = scratch.path + "/tasks.db"
        try TaskStore.createFile(path: path, migratedUpTo: "v1", sql: """
            DROP TABLE grdb_migrations;
            CREATE TABLE notes (id INTEGER PRIMARY KEY, text TEXT);
            INSERT INTO notes (text) VALUES ('keep me');
            """)
        let store = try TaskStore(path: path)
        let movedTo = try #require(store.recoveredFromCorruption)
        #expect(movedTo.hasPrefix(path + ".corrupt-"))
        // No migration record was added to the foreign file: opened again, it is still not ours.
        let aside = try TaskStore(path: movedTo)
        #expect(aside.recoveredFromCorruption != nil)
        try store.saveApp(Sample.app(Sample.maps))
        #expect(try store.apps().map(\.appID) == [Sample.maps])
    }

    @Test("a first start cut short after the empty migration record was made is migrated, not moved aside as corrupt")
    func emptyMigrationRecordOnly() throws {
        let scratch = try ScratchDirectory()
        defer { scratch.remove() }
        let path = scratch.path + "/tasks.db"
        // What GRDB leaves when the start ends before v1 commits: its migration record,
        // created (and committed) first, empty, and no other table.
        try TaskStore.createFile(path: path, migratedUpTo: "v1", sql: """
            DELETE FROM grdb_migrations;
            DROP TABLE app_identifiers; DROP TABLE pending; DROP TABLE running; DROP TABLE apps;
            DROP TABLE settings; DROP TABLE history; DROP TABLE usage;
            """)
        let store = try TaskStore(path: path)
        #expect(store.recoveredFromCorruption == nil)
        #expect(scratch.names().allSatisfy { !$0.contains(".corrupt-") }, "\(scratch.names())")
        try store.saveApp(Sample.app(Sample.maps))
        #expect(try store.apps().map(\.appID) == [Sample.maps])
        #expect(try TaskStore(path: path).recoveredFromCorruption == nil)
    }

    @Test("a file of the previous release holding orphan rows (an app deleted by sqlite3) is migrated")
    func orphanRowsMigrate() throws {
        let scratch = try ScratchDirectory()
        defer { scratch.remove() }
        let path = scratch.path + "/tasks.db"
        let previous = try #require(TaskStore.migrationNames.dropLast().last)
        try createFileWithOrphans(at: path, migratedUpTo: previous)
        // GRDB's default checks failed the whole database after the migration: SQLITE_CONSTRAINT,
        // and the agent could not start.
        let store = try TaskStore(path: path)
        #expect(store.recoveredFromCorruption == nil)
        #expect(try store.apps().map(\.appID) == [Sample.maps])
        #expect(try store.pendingRequests().map(\.identifier).contains("a"))
        #expect(try TaskStore(path: path).recoveredFromCorruption == nil)
    }

    @Test("a database a newer bgpolicyd migrated is refused as it is, naming the unknown changes")
    func newerVersion() throws {
        let scratch = try ScratchDirectory()
        defer { scratch.remove() }
        let path = scratch.path + "/tasks.db"
        let latest = try #require(TaskStore.migrationNames.last)
        try TaskStore.createFile(path: path, migratedUpTo: latest, sql: """
            INSERT INTO grdb_migrations (identifier) VALUES ('v99-priority');
            ALTER TABLE pending ADD COLUMN priority INTEGER NOT NULL DEFAULT 0;
            """)
        let refusal = StoreError.newerVersion(path: path, migrations: ["v99-priority"])
        #expect(throws: refusal) { try TaskStore(path: path) }
        // Left as it is, for the newer agent: not moved aside, and refused the same way again.
        #expect(scratch.names().allSatisfy { !$0.contains(".corrupt-") }, "\(scratch.names())")
        #expect(throws: refusal) { try TaskStore(path: path) }
    }

    /// Two apps, a pending request and 200 history entries (about ten pages).
    func fill(_ store: TaskStore) throws {
        try store.saveApp(Sample.app(Sample.maps))
        try store.saveApp(Sample.app(Sample.feeds))
        try store.savePending(Sample.request(Sample.maps, "a"))
        for time in 0..<200 {
            try store.append(Sample.entry(.submitted, at: Double(time), detail: String(repeating: "x", count: 200)))
        }
    }

    /// A file migrated up to `migration` in which a user's `sqlite3` (foreign keys off) deleted
    /// the app org.example.Gone: its identifier `b` and its request stay, orphans beside
    /// org.gnome.Maps's `a`.
    func createFileWithOrphans(at path: String, migratedUpTo migration: String) throws {
        try TaskStore.createFile(path: path, migratedUpTo: migration, sql: """
            INSERT INTO apps (app_id, identity, registered_at) VALUES ('org.gnome.Maps', 'flatpak', 1000);
            INSERT INTO apps (app_id, identity, registered_at) VALUES ('org.example.Gone', 'flatpak', 1000);
            INSERT INTO app_identifiers (app_id, identifier) VALUES ('org.gnome.Maps', 'a'), ('org.example.Gone', 'b');
            INSERT INTO pending (app_id, identifier, kind, submitted_at) VALUES ('org.gnome.Maps', 'a', 'refresh', 2000);
            INSERT INTO pending (app_id, identifier, kind, submitted_at) VALUES ('org.example.Gone', 'b', 'refresh', 2000);
            DELETE FROM apps WHERE app_id = 'org.example.Gone';
            """, foreignKeys: false)
    }

    /// Overwrites page `page` (counted from 1) of the file at `path`.
    func overwrite(page: Int, of path: String) throws {
        let handle = try FileHandle(forUpdating: URL(fileURLWithPath: path))
        try handle.seek(toOffset: UInt64((page - 1) * 4096))
        try handle.write(contentsOf: Data(repeating: 0xA5, count: 4096))
        try handle.close()
    }

    /// A store `fill`ed, closed (the WAL is checkpointed into the file), then `damage`d: the
    /// named table's or index's first page overwritten.
    func damagedStore(at path: String, damage name: String) throws {
        do { try fill(TaskStore(path: path)) }
        try overwrite(page: try #require(try TaskStore(path: path).rootPage(of: name)), of: path)
    }

    @Test("damage met after the open throws .corrupt, is announced once, marks the file, and the next open moves it aside")
    func damageFoundInUse() async throws {
        let scratch = try ScratchDirectory()
        defer { scratch.remove() }
        let path = scratch.path + "/tasks.db"
        do {
            let store = try TaskStore(path: path)
            try fill(store)
            try store.checkpoint()
            try overwrite(page: try #require(try store.rootPage(of: "history")), of: path)
            // The connection's cached pages go, so that the next read meets the damage.
            _ = try store.pragma("shrink_memory")
            #expect(!FileManager.default.fileExists(atPath: path + ".damaged"))
            do {
                try store.append(Sample.entry(.submitted, at: 300, detail: "x"))
                Issue.record("the damaged history took a row")
            } catch {
                guard case .corrupt = error else { Issue.record("\(error)"); return }
            }
            #expect(FileManager.default.fileExists(atPath: path + ".damaged"))
            var announced = store.corruptionFound.makeAsyncIterator()
            let first = await announced.next()
            guard case .corrupt? = first else { Issue.record("announced: \(String(describing: first))"); return }
            #expect(await announced.next() == nil, "announced once")
        }
        let store = try TaskStore(path: path)
        #expect(store.recoveredFromCorruption != nil)
        #expect(store.salvaged?.lost == ["history"])
        #expect(try store.pendingRequests().map(\.identifier) == ["a"])
        #expect(!FileManager.default.fileExists(atPath: path + ".damaged"))
    }

    @Test("a damage marker left without its database (removed since) is dropped, and a fresh store opens")
    func damageMarkerWithoutDatabase() throws {
        let scratch = try ScratchDirectory()
        defer { scratch.remove() }
        let path = scratch.path + "/tasks.db"
        #expect(FileManager.default.createFile(atPath: path + ".damaged", contents: nil))
        let store = try TaskStore(path: path)
        #expect(store.recoveredFromCorruption == nil)
        #expect(try store.apps().isEmpty)
        #expect(!FileManager.default.fileExists(atPath: path + ".damaged"))
    }

    @Test("a damaged index: the file is moved aside, and every table is copied back whole")
    func damagedIndex() throws {
        let scratch = try ScratchDirectory()
        defer { scratch.remove() }
        let path = scratch.path + "/tasks.db"
        try damagedStore(at: path, damage: "history_time")
        let store = try TaskStore(path: path)
        #expect(store.recoveredFromCorruption != nil)
        let salvaged = try #require(store.salvaged)
        #expect(salvaged.lost == [])
        #expect(salvaged.kept.contains("history"), "\(salvaged)")
        #expect(try store.apps().map(\.appID) == [Sample.feeds, Sample.maps])
        #expect(try store.pendingRequests().map(\.identifier) == ["a"])
        #expect(try store.history(since: 0, limit: 1_000).count == 200)
        #expect(try store.pragma("quick_check") == "ok")
    }

    @Test("a damaged table: the file is moved aside, and every table still readable is copied back")
    func damagedTableSalvaged() throws {
        let scratch = try ScratchDirectory()
        defer { scratch.remove() }
        let path = scratch.path + "/tasks.db"
        try damagedStore(at: path, damage: "history")
        let store = try TaskStore(path: path)
        #expect(store.recoveredFromCorruption != nil)
        let salvaged = try #require(store.salvaged)
        #expect(salvaged.lost == ["history"])
        #expect(salvaged.kept.contains("apps") && salvaged.kept.contains("pending"), "\(salvaged)")
        #expect(try store.apps().map(\.appID) == [Sample.feeds, Sample.maps])
        #expect(try store.pendingRequests().map(\.identifier) == ["a"])
        #expect(try store.history(since: 0, limit: 1_000).isEmpty)
        #expect(try store.pragma("quick_check") == "ok")
        try store.append(Sample.entry(.submitted, at: 300))
        #expect(try store.history(since: 0, limit: 10).count == 1)
    }

    @Test("a damaged file holding orphan rows (an app deleted by sqlite3) keeps their tables, without the orphans")
    func damagedFileWithOrphans() throws {
        let scratch = try ScratchDirectory()
        defer { scratch.remove() }
        let path = scratch.path + "/tasks.db"
        let latest = try #require(TaskStore.migrationNames.last)
        try createFileWithOrphans(at: path, migratedUpTo: latest)
        do {
            let store = try TaskStore(path: path)
            for time in 0..<200 {
                try store.append(Sample.entry(.submitted, at: Double(time), detail: String(repeating: "x", count: 200)))
            }
        }
        try overwrite(page: try #require(try TaskStore(path: path).rootPage(of: "history_time")), of: path)

        let store = try TaskStore(path: path)
        #expect(store.recoveredFromCorruption != nil)
        let salvaged = try #require(store.salvaged)
        // The orphan request failed the copy of every request, and of every identifier.
        #expect(salvaged.lost == [], "\(salvaged)")
        #expect(try store.apps().map(\.appID) == [Sample.maps])
        #expect(try store.pendingRequests().map(\.identifier) == ["a"])
        #expect(try store.history(since: 0, limit: 1_000).count == 200)
        #expect(try store.pragma("foreign_key_check") == nil)
    }

    @Test("a damaged file of the previous release (a migration short) keeps its readable tables, and is migrated")
    func damagedFileOfThePreviousRelease() throws {
        let scratch = try ScratchDirectory()
        defer { scratch.remove() }
        let path = scratch.path + "/tasks.db"
        let latest = try #require(TaskStore.migrationNames.last)
        #expect(latest == "v9-content-charges", "undo the newest migration below as the release before it left the file")
        var history = 0
        do {
            let store = try TaskStore(path: path)
            try fill(store)
            try store.execute(sql: """
                DELETE FROM grdb_migrations WHERE identifier = 'v9-content-charges';
                ALTER TABLE content_buckets DROP COLUMN charges;
                """)
            history = try #require(try store.rootPage(of: "history"))
            try store.checkpoint()
        }
        try overwrite(page: history, of: path)

        let store = try TaskStore(path: path)
        #expect(store.recoveredFromCorruption != nil)
        let salvaged = try #require(store.salvaged, "a file a migration short was not salvaged at all")
        #expect(salvaged.lost == ["history"])
        #expect(try store.apps().map(\.appID) == [Sample.feeds, Sample.maps])
        #expect(try store.pendingRequests().map(\.identifier) == ["a"])
        // Migrated after the copy, as at an upgrade: the new columns are there.
        #expect(try store.pragma("quick_check") == "ok")
        try store.execute(sql: "UPDATE content_buckets SET charges = ''")
        #expect(try TaskStore(path: path).recoveredFromCorruption == nil)
    }

    @Test("a damaged file of a newer bgpolicyd (a downgrade) keeps, by the columns both have, what is readable")
    func damagedFileOfANewerRelease() throws {
        let scratch = try ScratchDirectory()
        defer { scratch.remove() }
        let path = scratch.path + "/tasks.db"
        var index = 0
        do {
            let store = try TaskStore(path: path)
            try fill(store)
            try store.execute(sql: """
                INSERT INTO grdb_migrations (identifier) VALUES ('v99-from-a-newer-release');
                ALTER TABLE pending ADD COLUMN priority INTEGER NOT NULL DEFAULT 0;
                """)
            index = try #require(try store.rootPage(of: "history_time"))
            try store.checkpoint()
        }
        try overwrite(page: index, of: path)

        let store = try TaskStore(path: path)
        #expect(store.recoveredFromCorruption != nil)
        let salvaged = try #require(store.salvaged, "nothing was tried: every pending request was lost")
        #expect(salvaged.lost == [])
        #expect(try store.apps().map(\.appID) == [Sample.feeds, Sample.maps])
        #expect(try store.pendingRequests().map(\.identifier) == ["a"])
        #expect(try store.history(since: 0, limit: 1_000).count == 200)
        #expect(try TaskStore(path: path).recoveredFromCorruption == nil)
    }

    @Test("a damaged file whose migration record cannot be read keeps, table by table, what is readable")
    func damagedMigrationRecord() throws {
        let scratch = try ScratchDirectory()
        defer { scratch.remove() }
        let path = scratch.path + "/tasks.db"
        try damagedStore(at: path, damage: "grdb_migrations")
        let store = try TaskStore(path: path)
        #expect(store.recoveredFromCorruption != nil)
        let salvaged = try #require(store.salvaged, "nothing was tried")
        #expect(salvaged.lost == [])
        #expect(try store.apps().map(\.appID) == [Sample.feeds, Sample.maps])
        #expect(try store.pendingRequests().map(\.identifier) == ["a"])
        #expect(try store.history(since: 0, limit: 1_000).count == 200)
    }

    @Test("a fresh file that cannot be made (a full disk) puts the damaged one back, and the next start salvages it")
    func freshFileFails() throws {
        let scratch = try ScratchDirectory()
        defer { scratch.remove() }
        let path = scratch.path + "/tasks.db"
        try damagedStore(at: path, damage: "history")
        let damaged = try Data(contentsOf: URL(fileURLWithPath: path))
        do {
            _ = try TaskStore(path: path) { fresh throws(StoreError) in
                // What a full disk leaves: a file begun, then the failure.
                _ = FileManager.default.createFile(atPath: fresh, contents: Data("SQLite format 3".utf8))
                throw .io("\(fresh): database or disk is full")
            }
            Issue.record("the store opened")
        } catch {
            guard case .io = error else { Issue.record("\(error)"); return }
        }
        // The same file: past the 100-byte header, whose change counters the open that found the
        // damage may have stepped.
        #expect(try Data(contentsOf: URL(fileURLWithPath: path)).dropFirst(100) == damaged.dropFirst(100),
                "the damaged file is back in its place")
        #expect(scratch.names().filter { $0.contains(".corrupt-") } == [], "\(scratch.names())")
        let store = try TaskStore(path: path)
        #expect(store.recoveredFromCorruption != nil)
        #expect(store.salvaged?.lost == ["history"])
        #expect(try store.apps().map(\.appID) == [Sample.feeds, Sample.maps])
        #expect(try store.pendingRequests().map(\.identifier) == ["a"])
    }

    /// A sound store at `path` (`fill`ed) with `extra` more history entries, closed.
    func storeWithLongHistory(at path: String, extra: Int) throws {
        let store = try TaskStore(path: path)
        try fill(store)
        for time in 200..<(200 + extra) {
            try store.append(Sample.entry(.submitted, at: Double(time), detail: String(repeating: "x", count: 200)))
        }
        try store.checkpoint()
    }

    @Test("a fresh file that fills up while the tables are copied into it fails the salvage, rather than calling them lost")
    func freshFileFullDuringCopy() throws {
        let scratch = try ScratchDirectory()
        defer { scratch.remove() }
        let aside = scratch.path + "/tasks.db.corrupt-1000"
        try storeWithLongHistory(at: aside, extra: 2_000)
        // The fresh file capped 8 pages past its migrated size: the apps and the request fit,
        // the history does not. SQLITE_FULL from the fresh file said the history was lost.
        do {
            let salvaged = try TaskStore.makeFreshFile(at: scratch.path + "/tasks.db", salvaging: aside, extraPages: 8)
            Issue.record("the salvage returned \(String(describing: salvaged))")
        } catch {
            guard case .full = error else { Issue.record("\(error)"); return }
        }
        // With room, the same file is read back whole.
        for suffix in ["-wal", "-shm", ""] { try? FileManager.default.removeItem(atPath: scratch.path + "/tasks.db" + suffix) }
        let salvaged = try #require(try TaskStore.makeFreshFile(at: scratch.path + "/tasks.db", salvaging: aside))
        #expect(salvaged.lost == [])
        #expect(salvaged.kept.contains("history"), "\(salvaged)")
    }

    @Test("a start whose fresh file fills up while salvaging puts the old file back with its marker, and the next keeps it all")
    func freshFileFullDuringCopyAtStart() throws {
        let scratch = try ScratchDirectory()
        defer { scratch.remove() }
        let path = scratch.path + "/tasks.db"
        try storeWithLongHistory(at: path, extra: 2_000)
        // Sound, but found damaged in use: moved aside and read back table by table.
        #expect(FileManager.default.createFile(atPath: path + ".damaged", contents: nil))
        let before = try Data(contentsOf: URL(fileURLWithPath: path))
        do {
            _ = try TaskStore(path: path, reopen: TaskStore.openFile, freshFileExtraPages: 8)
            Issue.record("the store opened, its history lost")
        } catch {
            guard case .full = error else { Issue.record("\(error)"); return }
        }
        #expect(try Data(contentsOf: URL(fileURLWithPath: path)).dropFirst(100) == before.dropFirst(100),
                "the old file is back in its place")
        #expect(FileManager.default.fileExists(atPath: path + ".damaged"), "the marker is kept")
        #expect(scratch.names().filter { $0.contains(".corrupt-") } == [], "\(scratch.names())")
        let store = try TaskStore(path: path)
        #expect(store.recoveredFromCorruption != nil)
        #expect(store.salvaged?.lost == [])
        #expect(try store.history(since: 0, limit: 10_000).count == 2_200)
        #expect(try store.pendingRequests().map(\.identifier) == ["a"])
        #expect(!FileManager.default.fileExists(atPath: path + ".damaged"))
    }

    @Test("a rebuild killed after its first table is done again at the next start, not taken as the store", arguments: [1, 3])
    func rebuildCutShort(tablesCopied: Int) throws {
        let scratch = try ScratchDirectory()
        defer { scratch.remove() }
        let path = scratch.path + "/work/tasks.db"
        try damagedStore(at: path, damage: "history")
        // What a SIGKILL (or the stop timeout) at that point leaves: the files as they are on
        // disk then, copied aside while the rebuild goes on.
        let killed = scratch.path + "/killed"
        var copied = 0
        _ = try TaskStore(path: path, reopen: TaskStore.openFile, afterSalvagedTable: { _ in
            copied += 1
            guard copied == tablesCopied else { return }
            try? FileManager.default.copyItem(atPath: scratch.path + "/work", toPath: killed)
        })
        try #require(FileManager.default.fileExists(atPath: killed))
        let store = try TaskStore(path: killed + "/tasks.db")
        #expect(store.recoveredFromCorruption != nil, "the rebuild cut short was taken as a sound store")
        #expect(store.salvaged?.lost == ["history"])
        #expect(try store.apps().map(\.appID) == [Sample.feeds, Sample.maps])
        #expect(try store.pendingRequests().map(\.identifier) == ["a"])
        let names = ((try? FileManager.default.contentsOfDirectory(atPath: killed)) ?? [])
        #expect(names.allSatisfy { !$0.contains(".rebuilding") }, "\(names)")
    }

    @Test("a rebuild killed while the damaged file was moved aside is finished at the next start, its log left behind dropped")
    func rebuildKilledDuringTheSwap() throws {
        let scratch = try ScratchDirectory()
        defer { scratch.remove() }
        let path = scratch.path + "/tasks.db"
        // What `rebuild` leaves killed after moving the main file aside and before its log:
        // the whole fresh file beside it, the damaged one aside, its log still at the path.
        do {
            let fresh = try storeWithOneRequest(path: TaskStore.rebuildingFile(of: path))
            try fresh.checkpoint()
        }
        try Data("damaged".utf8).write(to: URL(fileURLWithPath: path + ".corrupt-1000"))
        try Data(repeating: 0x5A, count: 4096).write(to: URL(fileURLWithPath: path + "-wal"))
        #expect(FileManager.default.createFile(atPath: path + ".damaged", contents: nil))
        let store = try TaskStore(path: path)
        #expect(store.recoveredFromCorruption == path + ".corrupt-1000")
        #expect(try store.pendingRequests().map(\.identifier) == ["a"])
        #expect(scratch.names() == ["tasks.db", "tasks.db-shm", "tasks.db-wal", "tasks.db.corrupt-1000"])
    }

    @Test("a damaged file whose log cannot follow it aside is put back whole, not left without its log")
    func moveAsideRollsBack() throws {
        let scratch = try ScratchDirectory()
        defer { scratch.remove() }
        let path = scratch.path + "/tasks.db"
        for (suffix, text) in [("", "main"), ("-wal", "wal"), ("-shm", "shm")] {
            try Data(text.utf8).write(to: URL(fileURLWithPath: path + suffix))
        }
        // A directory where the `-shm` would go: its rename fails, after the main file's and
        // the log's.
        let now = time(nil)
        for stamp in (now - 1)...(now + 10) {
            try FileManager.default.createDirectory(atPath: "\(path).corrupt-\(stamp)-shm", withIntermediateDirectories: false)
        }
        #expect(throws: StoreError.self) { try TaskStore.moveAside(path) }
        for (suffix, text) in [("", "main"), ("-wal", "wal"), ("-shm", "shm")] {
            #expect(try String(contentsOfFile: path + suffix, encoding: .utf8) == text)
        }
        #expect(scratch.names().filter { $0.contains(".corrupt-") && !$0.hasSuffix("-shm") } == [])
    }

    @Test("two corrupt files moved aside in the same second get different names")
    func moveAsideTwice() throws {
        let scratch = try ScratchDirectory()
        defer { scratch.remove() }
        let path = scratch.path + "/tasks.db"
        try Data("first".utf8).write(to: URL(fileURLWithPath: path))
        let first = try TaskStore.moveAside(path)
        try Data("second".utf8).write(to: URL(fileURLWithPath: path))
        try Data("wal".utf8).write(to: URL(fileURLWithPath: path + "-wal"))
        let second = try TaskStore.moveAside(path)
        #expect(first != second)
        #expect(try String(contentsOfFile: first, encoding: .utf8) == "first")
        #expect(try String(contentsOfFile: second, encoding: .utf8) == "second")
        #expect(try String(contentsOfFile: second + "-wal", encoding: .utf8) == "wal")
        #expect(!scratch.exists("tasks.db") && !scratch.exists("tasks.db-wal"))
    }

    @Test("moving a damaged file aside keeps the newest three moved aside, and removes the older ones with their WAL")
    func oldDamagedCopiesRemoved() throws {
        let scratch = try ScratchDirectory()
        defer { scratch.remove() }
        let path = scratch.path + "/tasks.db"
        // Four copies from earlier starts (1970: older than the one moved now), one with its
        // WAL and shared memory, and files that are not copies of the store's.
        for name in ["tasks.db.corrupt-1000", "tasks.db.corrupt-1000-wal", "tasks.db.corrupt-1000-shm",
                     "tasks.db.corrupt-2000", "tasks.db.corrupt-3000", "tasks.db.corrupt-3000.1",
                     "tasks.db.corrupt-notes", "other.db.corrupt-500"] {
            #expect(FileManager.default.createFile(atPath: scratch.path + "/" + name, contents: Data(name.utf8)))
        }
        try Data("not a database, long enough to be read as one".utf8).write(to: URL(fileURLWithPath: path))

        let store = try TaskStore(path: path)
        let movedTo = try #require(store.recoveredFromCorruption)
        #expect(store.removedDamagedCopies == [scratch.path + "/tasks.db.corrupt-1000", scratch.path + "/tasks.db.corrupt-2000"])
        let name = String(movedTo.split(separator: "/").last!)
        #expect(scratch.names().filter { $0.contains(".corrupt-") }.sorted() == [
            "other.db.corrupt-500", "tasks.db.corrupt-3000", "tasks.db.corrupt-3000.1", "tasks.db.corrupt-notes", name,
        ].sorted())
        // A sound start removes nothing.
        #expect(try TaskStore(path: path).removedDamagedCopies == [])
        #expect(TaskStore.removeOldDamagedCopies(of: path).isEmpty)
    }

    @Test("the copy just moved aside is kept though older copies carry later times (the clock was set back)")
    func damagedCopyKeptAfterClockSetBack() throws {
        let scratch = try ScratchDirectory()
        defer { scratch.remove() }
        let path = scratch.path + "/tasks.db"
        // Three copies stamped in 2286: the clock has since gone back to now.
        for name in ["tasks.db.corrupt-9999999999", "tasks.db.corrupt-9999999998", "tasks.db.corrupt-9999999997"] {
            #expect(FileManager.default.createFile(atPath: scratch.path + "/" + name, contents: Data(name.utf8)))
        }
        try Data("not a database, long enough to be read as one".utf8).write(to: URL(fileURLWithPath: path))

        let store = try TaskStore(path: path)
        let movedTo = try #require(store.recoveredFromCorruption)
        #expect(FileManager.default.fileExists(atPath: movedTo), "the copy the store reports kept was removed")
        #expect(try String(contentsOfFile: movedTo, encoding: .utf8).hasPrefix("not a database"))
        // Three in all: the new one and the newest two others.
        #expect(store.removedDamagedCopies == [scratch.path + "/tasks.db.corrupt-9999999997"])
        let name = String(movedTo.split(separator: "/").last!)
        #expect(scratch.names().filter { $0.contains(".corrupt-") }.sorted() == [
            "tasks.db.corrupt-9999999998", "tasks.db.corrupt-9999999999", name,
        ].sorted())
    }

    /// Removed with its directory, or alone (its `-wal` and `-shm` left behind), under an
    /// open store: the next write puts it back whole, later writes go to it, and a new open
    /// finds everything.
    @Test("a database removed under the open store is written again at the next write", arguments: [true, false])
    func removedUnderTheStore(withItsDirectory: Bool) async throws {
        let scratch = try ScratchDirectory()
        defer { scratch.remove() }
        let directory = scratch.path + "/state"
        let path = directory + "/tasks.db"
        do {
            let store = try TaskStore(path: path)
            try fill(store)
            // Free pages, so that the copy's pages are laid out unlike the file's, whose log
            // must then not be read into it.
            try store.pruneHistory(before: 150)
            if withItsDirectory {
                try FileManager.default.removeItem(atPath: directory)
            } else {
                #expect(unlink(path) == 0)
                #expect(scratch.exists("state/tasks.db-wal"))
            }
            #expect(!scratch.exists("state/tasks.db"))
            // A read does not notice; the next write does.
            #expect(try store.apps().count == 2)
            try store.savePending(Sample.request(Sample.feeds, "b"))
            #expect(scratch.exists("state/tasks.db"))
            #expect(!scratch.exists("state/tasks.db.restoring"))
            #expect(await Self.firstEvent(of: store) == .restored(path: path))
            // Later writes go to the file now at the path.
            try store.savePending(Sample.request(Sample.maps, "c"))
            try store.setGlobalEnabled(false)
        }
        let reopened = try TaskStore(path: path)
        #expect(reopened.recoveredFromCorruption == nil)
        #expect(try reopened.apps().map(\.appID) == [Sample.feeds, Sample.maps].sorted())
        #expect(try Set(reopened.pendingRequests().map(\.identifier)) == ["a", "b", "c"])
        #expect(try reopened.globalEnabled() == false)
        #expect(try reopened.history(since: 0, limit: 1000).count == 50)
    }

    /// The copy is put in place, then cannot be opened (here an opener that fails; in life a
    /// disk that fails or fills at that moment). The store says so, takes the copy away, and
    /// goes on serving from its connection, which still holds everything (a closed one crashed
    /// SQLite's readers); the stop's checkpoint tries again at once, and then nothing is lost:
    /// not the write that found the file gone, nor those made after the failure.
    @Test("a copy that cannot be opened is taken away, the store serves on, and the stop writes it again")
    func reopenFailsAfterTheCopy() async throws {
        let scratch = try ScratchDirectory()
        defer { scratch.remove() }
        let path = scratch.path + "/tasks.db"
        let opens = Mutex(0)
        do {
            let store = try TaskStore(path: path) { path throws(StoreError) in
                let first = opens.withLock { count in
                    count += 1
                    return count == 1
                }
                if first { throw .io("\(path): cannot be opened (injected by the test)") }
                return try TaskStore.open(path: path)
            }
            var events = store.fileEvents.makeAsyncIterator()
            try fill(store)
            #expect(unlink(path) == 0)
            try store.savePending(Sample.request(Sample.feeds, "b"))
            #expect(opens.withLock { $0 } == 1)
            guard case .restoreFailed(let eventPath, let reason) = await events.next() else {
                Issue.record("no restoreFailed event")
                return
            }
            #expect(eventPath == path)
            #expect(reason.contains("could not be opened") && reason.contains("injected by the test"), "\(reason)")
            // The copy is gone again, nothing of it left beside the path.
            #expect(scratch.names().filter { $0.hasPrefix("tasks.db") }.isEmpty, "\(scratch.names())")
            // The store serves on, reads and writes alike; within the minute no new copy is tried.
            #expect(try store.apps().count == 2)
            try store.savePending(Sample.request(Sample.maps, "c"))
            #expect(opens.withLock { $0 } == 1)
            #expect(!scratch.exists("tasks.db"))
            // The stop: written again at once, then checkpointed.
            try store.checkpoint()
            #expect(opens.withLock { $0 } == 2)
            #expect(await events.next() == .restored(path: path))
            #expect(scratch.exists("tasks.db"))
        }
        let reopened = try TaskStore(path: path)
        #expect(reopened.recoveredFromCorruption == nil)
        #expect(try reopened.apps().map(\.appID) == [Sample.feeds, Sample.maps].sorted())
        #expect(try Set(reopened.pendingRequests().map(\.identifier)) == ["a", "b", "c"])
        #expect(try reopened.history(since: 0, limit: 1000).count == 200)
    }

    /// The first of `store.fileEvents`, or nil when none comes within 5 s.
    static func firstEvent(of store: TaskStore) async -> TaskStore.FileEvent? {
        await withTaskGroup(of: TaskStore.FileEvent?.self) { group in
            group.addTask {
                var events = store.fileEvents.makeAsyncIterator()
                return await events.next()
            }
            group.addTask {
                try? await Task.sleep(for: .seconds(5))
                return nil
            }
            let first = await group.next() ?? nil
            group.cancelAll()
            return first
        }
    }

    /// Another file put at the path (`mv`) is left alone, and said once; the next open, after
    /// the checkpoint at stop has emptied this store's log (still `<path>-wal`), reads the new
    /// file alone.
    @Test("a database replaced under the open store is left alone")
    func replacedUnderTheStore() async throws {
        let scratch = try ScratchDirectory()
        defer { scratch.remove() }
        let path = scratch.path + "/tasks.db"
        do {
            let store = try TaskStore(path: path)
            try store.saveApp(Sample.app(Sample.maps))
            let other = scratch.path + "/other.db"
            do { try TaskStore(path: other).saveApp(Sample.app(Sample.feeds)) }
            #expect(rename(other, path) == 0)
            try store.saveApp(Sample.app(Sample.maps))
            try store.saveApp(Sample.app(Sample.maps))
            #expect(await Self.firstEvent(of: store) == .replaced(path: path))
            // As the agent does at stop: its log, still at `<path>-wal`, is emptied.
            try store.checkpoint()
        }
        let found = try TaskStore(path: path).apps().map(\.appID)
        #expect(found == [Sample.feeds], "\(found) \(scratch.names())")
    }

    @Test("a full disk throws .full, writes nothing, and keeps what was there")
    func fullDisk() throws {
        let scratch = try ScratchDirectory()
        defer { scratch.remove() }
        let path = scratch.path + "/tasks.db"
        do {
            let store = try storeWithOneRequest(path: path)
            try store.append(Sample.entry(.submitted, at: 1))
            try store.capFileSize(extraPages: 1)

            let big = String(repeating: "a long detail ", count: 100)
            let delivered = (0..<100).map { Sample.entry(.delivered, at: 2 + Double($0), detail: big) }
            #expect {
                try store.startTasks([Sample.running("t1", Sample.maps, "a")], history: delivered)
            } throws: { error in
                guard case .full(let message) = error as? StoreError else { return false }
                return message.contains(path)
            }
            #expect {
                for time in 0..<100 {
                    try store.append(Sample.entry(.submitted, at: Double(time), detail: big))
                }
            } throws: { error in
                if case .full = error as? StoreError { true } else { false }
            }
            // Whatever fitted before the disk filled is kept, whole; the refused transaction left nothing.
            #expect(try store.pendingRequests().map(\.identifier) == ["a"])
            #expect(try store.runningTasks().isEmpty)
            let history = try store.history(since: 0, limit: 1000)
            #expect(history.contains { $0.time == 1 && $0.detail == "test" })
            #expect(history.allSatisfy { $0.event == .submitted })
        }
        // With room again (a new connection has no cap), the store carries on.
        let store = try TaskStore(path: path)
        #expect(store.recoveredFromCorruption == nil)
        #expect(try store.pendingRequests().map(\.identifier) == ["a"])
        try store.startTasks([Sample.running("t1", Sample.maps, "a")], history: [])
        #expect(try store.runningTasks().map(\.taskID) == ["t1"])
    }
}

@Suite("TaskStore's reserve for a full disk")
struct TaskStoreReserveTests {
    func size(_ path: String) -> Int? {
        (try? FileManager.default.attributesOfItem(atPath: path)[.size] as? Int) ?? nil
    }

    @Test("keepReserve allocates reserveSize bytes beside the database, once; releaseReserve gives them back, once")
    func keepAndRelease() throws {
        let scratch = try ScratchDirectory()
        defer { scratch.remove() }
        let path = scratch.path + "/tasks.db"
        let store = try TaskStore(path: path)
        let reserve = path + ".reserve"
        #expect(!store.hasReserve)
        #expect(store.keepReserve() == nil)
        #expect(size(reserve) == TaskStore.reserveSize)
        #expect(store.hasReserve)
        // Allocated, not a sparse file that a full disk could not fill in.
        var status = stat()
        #expect(stat(reserve, &status) == 0)
        #expect(Int(status.st_blocks) * 512 >= TaskStore.reserveSize)
        // Kept as it is: the same file, not made again.
        let inode = status.st_ino
        #expect(store.keepReserve() == nil)
        #expect(stat(reserve, &status) == 0 && status.st_ino == inode)
        #expect(store.releaseReserve())
        #expect(size(reserve) == nil)
        #expect(!store.hasReserve)
        #expect(!store.releaseReserve(), "there is none left to give back")
        #expect(store.keepReserve() == nil)
        #expect(size(reserve) == TaskStore.reserveSize)
    }

    @Test("a reserve cut short (a full disk, a kill) is made again whole, and its unfinished copy is not left")
    func shortReserveMadeAgain() throws {
        let scratch = try ScratchDirectory()
        defer { scratch.remove() }
        let path = scratch.path + "/tasks.db"
        let store = try TaskStore(path: path)
        let reserve = path + ".reserve"
        #expect(FileManager.default.createFile(atPath: reserve, contents: Data(count: 4096)))
        #expect(FileManager.default.createFile(atPath: reserve + ".new", contents: Data(count: 100)))
        #expect(!store.hasReserve)
        #expect(store.keepReserve() == nil)
        #expect(size(reserve) == TaskStore.reserveSize)
        #expect(size(reserve + ".new") == nil)
    }

    @Test("a directory that cannot take the reserve says why, and the store works on without it")
    func reserveRefused() throws {
        let scratch = try ScratchDirectory()
        defer { scratch.remove() }
        let path = scratch.path + "/tasks.db"
        let store = try TaskStore(path: path)
        // A directory where the unfinished reserve goes: open(2) cannot make a file there.
        try FileManager.default.createDirectory(atPath: path + ".reserve.new", withIntermediateDirectories: false)
        let failure = store.keepReserve()
        #expect(failure?.contains(path + ".reserve.new") == true, "\(failure ?? "nil")")
        #expect(!store.hasReserve)
        try store.saveApp(Sample.app(Sample.maps))
        try store.savePending(Sample.request(Sample.maps, "a"))
        #expect(try store.pendingRequests().map(\.identifier) == ["a"])
    }

    @Test("a store in memory keeps no reserve, and has none to give back")
    func inMemory() throws {
        let store = try TaskStore.inMemory()
        #expect(store.keepReserve() == nil)
        #expect(!store.hasReserve)
        #expect(!store.releaseReserve())
    }
}
