import GRDB

/// Why the store could not do what it was asked. The agent keeps running on any of these (it
/// logs them and answers the caller `Failed`), so each case says what the user may have to do.
public enum StoreError: Error, CustomStringConvertible, Sendable, Equatable {
    /// SQLITE_FULL: the disk (or the file's size limit) is full. The transaction was rolled
    /// back: nothing of it was written, and what was there before is intact.
    case full(String)
    /// SQLITE_CORRUPT or SQLITE_NOTADB met after the store opened (at open, the file is moved
    /// aside instead; see `TaskStore.recoveredFromCorruption`).
    case corrupt(String)
    /// SQLITE_READONLY: the file or its directory cannot be written.
    case readOnly(String)
    /// Everything else. The message names the file and gives SQLite's message.
    case io(String)
    /// At open: the file has `migrations` this build does not know. A newer bgpolicyd wrote
    /// it; it is left as it is.
    case newerVersion(path: String, migrations: [String])

    public var description: String {
        switch self {
        case .full(let message): "the disk is full; nothing was written: \(message)"
        case .corrupt(let message): "the database is corrupt: \(message)"
        case .readOnly(let message): "the database cannot be written: \(message)"
        case .io(let message): message
        case .newerVersion(let path, let migrations):
            "\(path) was written by a newer bgpolicyd (it has the schema changes \(migrations.joined(separator: ", ")), "
                + "which this one does not know)"
        }
    }

    /// Classifies `error`, thrown by GRDB while working on `file`, by its SQLite result code.
    init(_ error: any Error, file: String) {
        guard let error = error as? DatabaseError else {
            // Row decoding errors and the like: GRDB's own words are precise enough.
            self = .io("\(file): \(error)")
            return
        }
        let message = "\(file): \(error.message ?? "unknown error") (SQLite code \(error.extendedResultCode.rawValue))"
        switch error.resultCode {
        case .SQLITE_FULL: self = .full(message)
        case .SQLITE_CORRUPT, .SQLITE_NOTADB: self = .corrupt(message)
        case .SQLITE_READONLY: self = .readOnly(message)
        default: self = .io(message)
        }
    }
}
