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
    /// The WAL goes first: SQLite would replay a leftover `-wal` into the fresh file created
    /// next, so the main file must never be moved while its WAL stays behind.
    static func moveAside(_ path: String) throws(StoreError) -> String {
        let stamp = "\(path).corrupt-\(time(nil))"
        var target = stamp
        var attempt = 0
        while exists(target) || exists(target + "-wal") {
            attempt += 1
            target = "\(stamp).\(attempt)"
        }
        for suffix in ["-wal", "-shm"] where exists(path + suffix) {
            guard rename(path + suffix, target + suffix) == 0 else {
                throw .io("\(path + suffix): cannot move the corrupt database aside: \(Self.errnoMessage())")
            }
        }
        guard rename(path, target) == 0 else {
            throw .io("\(path): cannot move the corrupt database aside: \(Self.errnoMessage())")
        }
        return target
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
        copies.sort { $0.order.lexicographicallyPrecedes($1.order) }
        // The copy just made is kept whatever its name says; the newest others fill the rest.
        let others = copies.filter { $0.path != justMade }
        let keptOthers = others.count < copies.count ? keep - 1 : keep
        let removed = others.dropLast(max(0, keptOthers)).map(\.path)
        for copy in removed {
            // The WAL first, as `moveAside` moves it: never a main file without its own log.
            for suffix in ["-wal", "-shm", ""] { unlink(copy + suffix) }
        }
        return removed
    }

    /// Undoes `moveAside`: removes what was made at `path` since (the fresh file the open left
    /// half made, its `-wal` and `-shm`), then renames `movedTo` and its `-wal` and `-shm` back.
    /// Best effort: a rename that fails leaves the file under its `.corrupt-` name, as before.
    static func putBack(_ movedTo: String, at path: String) {
        for suffix in ["-wal", "-shm", ""] { unlink(path + suffix) }
        // The main file first, then its WAL: the reverse of `moveAside`, so that no WAL is
        // ever beside a main file that is not its own.
        guard rename(movedTo, path) == 0 else { return }
        for suffix in ["-wal", "-shm"] where exists(movedTo + suffix) {
            _ = rename(movedTo + suffix, path + suffix)
        }
    }

    static func exists(_ path: String) -> Bool {
        access(path, F_OK) == 0
    }

    private static func errnoMessage() -> String {
        String(cString: strerror(errno))
    }
}
