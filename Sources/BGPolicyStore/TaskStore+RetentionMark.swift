public import BGPolicyCore
import GRDB

/// The retention clock a start trusted (`RetentionClock`), kept in `settings` with the id of
/// the boot it was made in, so that a later start in the same boot carries it on.
extension TaskStore {
    private static let retentionTrustedWallKey = "retention_trusted_wall"
    private static let retentionBootAtTrustedKey = "retention_boot_at_trusted"
    private static let retentionBootIDKey = "retention_boot_id"

    /// The kept clock and its boot's id; nil when none was kept, or what is there is not whole
    /// (a newer or older agent's, a damaged row): the start then makes a new one.
    public func keptRetentionClock() throws(StoreError) -> (clock: RetentionClock, bootID: String)? {
        try read { db in
            func value(_ key: String) throws -> DatabaseValue? {
                try DatabaseValue.fetchOne(db, sql: "SELECT value FROM settings WHERE key = ?", arguments: [key])
            }
            guard let wall = try value(Self.retentionTrustedWallKey).flatMap(Double.fromDatabaseValue),
                  let boot = try value(Self.retentionBootAtTrustedKey).flatMap(Double.fromDatabaseValue),
                  let bootID = try value(Self.retentionBootIDKey).flatMap(String.fromDatabaseValue),
                  wall.isFinite, boot.isFinite, !bootID.isEmpty
            else { return nil }
            return (RetentionClock(trustedWall: wall, bootAtTrusted: boot), bootID)
        }
    }

    public func keepRetentionClock(_ clock: RetentionClock, bootID: String) throws(StoreError) {
        try write { db in
            let upsert = "INSERT INTO settings (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value"
            try db.execute(sql: upsert, arguments: [Self.retentionTrustedWallKey, clock.trustedWall])
            try db.execute(sql: upsert, arguments: [Self.retentionBootAtTrustedKey, clock.bootAtTrusted])
            try db.execute(sql: upsert, arguments: [Self.retentionBootIDKey, bootID])
        }
    }
}
