import Glibc

extension TaskStore {
    /// `mkdir -p` of the directory holding `path`, new directories 0700.
    static func makeParentDirectories(of path: String) throws(StoreError) {
        guard let slash = path.lastIndex(of: "/") else { return }
        let components = path[..<slash].split(separator: "/")
        var directory = path.hasPrefix("/") ? "/" : ""
        for component in components {
            directory += component
            if mkdir(directory, 0o700) != 0 && errno != EEXIST {
                throw .io("\(directory): cannot create the directory: \(Self.errnoMessage())")
            }
            directory += "/"
        }
    }

    /// The file beside the database that says SQLite found it damaged while the agent ran
    /// (`TaskStore.failure`): the next open moves the database aside without asking
    /// `quick_check`, which does not look at everything a read can trip on (an index that no
    /// longer matches its table), so that a file that fails only in use cannot make the agent
    /// stop at every start.
    static func damageMarker(of path: String) -> String { "\(path).damaged" }

    /// Leaves `damageMarker(of: path)`; best effort (a full disk may refuse even that, and then
    /// the next start has only `quick_check` to go by).
    static func markDamaged(_ path: String) {
        let fd = Glibc.open(damageMarker(of: path), O_WRONLY | O_CREAT | O_CLOEXEC, 0o600)
        if fd >= 0 { close(fd) }
    }

    /// Renames a broken database and its `-wal` and `-shm` to `<path>.corrupt-<unix time>`
    /// (`.1`, `.2`… appended if that name is taken) and returns the new name of the main file.
    ///
    /// The main file goes first, and when a log cannot follow it everything goes back: a main
    /// file left at the path without its WAL would be opened as it was before the log's
    /// commits, and could pass `quick_check`. (A kill between the renames leaves the path
    /// empty but for the log, and `settleRebuild` removes it: `rebuild` moves the file aside only
    /// once its rows are in the fresh file.)
    static func moveAside(_ path: String) throws(StoreError) -> String {
        let stamp = "\(path).corrupt-\(time(nil))"
        var target = stamp
        var attempt = 0
        while exists(target) || exists(target + "-wal") {
            attempt += 1
            target = "\(stamp).\(attempt)"
        }
        guard rename(path, target) == 0 else {
            throw .io("\(path): cannot move the corrupt database aside: \(Self.errnoMessage())")
        }
        for suffix in ["-wal", "-shm"] where exists(path + suffix) {
            guard rename(path + suffix, target + suffix) == 0 else {
                let reason = Self.errnoMessage()
                for moved in ["-wal", "-shm"] where exists(target + moved) { _ = rename(target + moved, path + moved) }
                _ = rename(target, path)
                throw .io("\(path + suffix): cannot move the corrupt database aside: \(reason)")
            }
        }
        return target
    }

    /// Where `rebuild` makes the fresh file, beside the database.
    static func rebuildingFile(of path: String) -> String { "\(path).rebuilding" }

    /// Makes the fresh file that replaces the damaged one at `path`, with every table of it
    /// that can still be read (`makeFreshFile`), moves the damaged one aside (`moveAside`), and
    /// returns where it went and what was salvaged. On failure the damaged file is where it
    /// was, and nothing else is left.
    ///
    /// The fresh file is made at `rebuildingFile(of:)`, from the damaged file where it lies,
    /// synced, and only then renamed into place: the copy commits table by table, and made at
    /// the path itself, a kill in the middle (SIGKILL at the stop timeout, a power cut) left a
    /// sound file holding the first tables, which the next start took as the store, the rest
    /// lost without a word and the copy moved aside never read again. Now a kill before the
    /// swap leaves the damaged file at the path, which the next start finds damaged again (it
    /// still fails `quick_check`, or its marker is still there: the store removes it only once
    /// open), and a kill during the swap leaves a whole fresh file (`settleRebuild`).
    static func rebuild(_ path: String, extraPages: Int?, afterTable: ((String) -> Void)?) throws(StoreError)
        -> (movedTo: String, kept: (kept: [String], lost: [String])?)
    {
        let fresh = rebuildingFile(of: path)
        removeDatabase(at: fresh)
        let kept: (kept: [String], lost: [String])?
        do throws(StoreError) {
            kept = try makeFreshFile(at: fresh, salvaging: path, extraPages: extraPages, afterTable: afterTable)
            // `fill` checkpointed and closed it: the file holds everything, and its empty log
            // and index may go. Synced, so that a power cut after the rename cannot leave
            // the name pointing at pages never written.
            for suffix in ["-wal", "-shm"] { unlink(fresh + suffix) }
            try syncFile(fresh)
        } catch {
            removeDatabase(at: fresh)
            throw error
        }
        let movedTo: String
        do throws(StoreError) {
            movedTo = try moveAside(path)
        } catch {
            unlink(fresh)
            throw error
        }
        guard rename(fresh, path) == 0 else {
            let reason = Self.errnoMessage()
            putBack(movedTo, at: path)
            unlink(fresh)
            throw .io("\(path): cannot put the rebuilt database in place: \(reason)")
        }
        syncDirectory(of: path)
        return (movedTo, kept)
    }

    /// Deals with what a start killed during `rebuild` left, before the file is opened, and
    /// returns the copy moved aside when it finished that rebuild.
    ///
    /// A fresh file at `rebuildingFile(of:)` beside the database is part made, and is removed:
    /// the damaged file is still at the path, and is rebuilt again. Without a database beside
    /// it, the kill came while the damaged file was moved aside (`rebuild` moves it only once
    /// the fresh file is whole and synced): the fresh file is put in place, after any `-wal`
    /// and `-shm` left at the path, the damaged file's (`moveAside` moves them after it), whose
    /// rows the fresh file holds and whose log SQLite would read into it. The copy reported is
    /// the newest by name (`damagedCopies`).
    static func settleRebuild(of path: String) throws(StoreError) -> String? {
        let fresh = rebuildingFile(of: path)
        guard exists(fresh) else { return nil }
        if exists(path) {
            removeDatabase(at: fresh)
            return nil
        }
        for suffix in ["-wal", "-shm"] { unlink(path + suffix) }
        guard rename(fresh, path) == 0 else {
            throw .io("\(path): cannot put the rebuilt database in place: \(Self.errnoMessage())")
        }
        syncDirectory(of: path)
        // It spoke of the damaged file, now moved aside.
        unlink(damageMarker(of: path))
        return damagedCopies(of: path).last
    }

    /// Writes `path`'s data to the disk (`fsync`).
    static func syncFile(_ path: String) throws(StoreError) {
        let fd = Glibc.open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0, fsync(fd) == 0 else {
            let reason = Self.errnoMessage()
            if fd >= 0 { close(fd) }
            throw .io("\(path): cannot write it to the disk: \(reason)")
        }
        close(fd)
    }

    /// Writes the directory holding `path` to the disk, so that a rename in it survives a power
    /// cut. Best effort: the rename is done, and the store works on either way.
    static func syncDirectory(of path: String) {
        let directory = path.lastIndex(of: "/").map { String(path[...$0]) } ?? "."
        let fd = Glibc.open(directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard fd >= 0 else { return }
        _ = fsync(fd)
        close(fd)
    }

    /// How many damaged files moved aside (`moveAside`) are kept beside the database: the
    /// newest. Each is a whole database with its WAL, and a file damaged again and again
    /// would otherwise fill the disk with them.
    public static let keptDamagedCopies = 3

    /// Removes, with their `-wal` and `-shm`, all but the newest `keep` files `moveAside` left
    /// beside `path` (`<path>.corrupt-<time>`, then `.1`, `.2`… in the same second; nothing
    /// else is touched), and returns the paths removed, oldest first.
    ///
    /// `justMade`, the copy `moveAside` has just made, is never removed, and counts as one of
    /// the `keep`: its name has the time of the move, and a clock set back since older copies
    /// were made would otherwise call it the oldest and remove it, while the agent reports it
    /// kept.
    static func removeOldDamagedCopies(
        of path: String, keeping keep: Int = keptDamagedCopies, justMade: String? = nil
    ) -> [String] {
        let copies = damagedCopies(of: path)
        // The copy just made is kept whatever its name says; the newest others fill the rest.
        let others = copies.filter { $0 != justMade }
        let keptOthers = others.count < copies.count ? keep - 1 : keep
        let removed = Array(others.dropLast(max(0, keptOthers)))
        for copy in removed {
            removeDatabase(at: copy)
        }
        return removed
    }

    /// Undoes `moveAside`: removes what was made at `path` since (the fresh file the open left
    /// half made, its `-wal` and `-shm`), then renames `movedTo` and its `-wal` and `-shm` back.
    /// Best effort: a rename that fails leaves the file under its `.corrupt-` name, as before.
    static func putBack(_ movedTo: String, at path: String) {
        removeDatabase(at: path)
        // The main file first, then its WAL, as `moveAside` moves them: no WAL is ever beside
        // a main file that is not its own.
        guard rename(movedTo, path) == 0 else { return }
        for suffix in ["-wal", "-shm"] where exists(movedTo + suffix) {
            _ = rename(movedTo + suffix, path + suffix)
        }
    }

    /// The files `moveAside` left beside `path` (`<path>.corrupt-<time>`, then `.1`, `.2`… in
    /// the same second; nothing else), oldest first by name.
    static func damagedCopies(of path: String) -> [String] {
        let slash = path.lastIndex(of: "/")
        let directory = slash.map { String(path[...$0]) } ?? ""
        let prefix = String(path[(slash.map { path.index(after: $0) } ?? path.startIndex)...]) + ".corrupt-"
        guard let dir = opendir(directory.isEmpty ? "." : directory) else { return [] }
        var copies: [(order: [Int], path: String)] = []
        while let entry = readdir(dir) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
            guard name.hasPrefix(prefix) else { continue }
            // "<time>" or "<time>.<n>": not a `-wal` or `-shm`, nor a name someone else chose.
            let parts = name.dropFirst(prefix.count).split(separator: ".", omittingEmptySubsequences: false)
            let order = parts.compactMap { part in part.allSatisfy { ("0"..."9").contains($0) } ? Int(part) : nil }
            guard (1...2).contains(parts.count), order.count == parts.count else { continue }
            copies.append((order + [0], directory + name))
        }
        closedir(dir)
        return copies.sorted { $0.order.lexicographicallyPrecedes($1.order) }.map(\.path)
    }

    /// Removes the database at `path` with its `-wal` and `-shm`, the log first: a main file is
    /// never left without its own log, nor a log beside a file that is not its own.
    static func removeDatabase(at path: String) {
        for suffix in ["-wal", "-shm", ""] { unlink(path + suffix) }
    }

    static func exists(_ path: String) -> Bool {
        access(path, F_OK) == 0
    }

    private static func errnoMessage() -> String {
        String(cString: strerror(errno))
    }
}
