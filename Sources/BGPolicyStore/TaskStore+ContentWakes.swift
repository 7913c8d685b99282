public import BGPolicyCore
import struct Foundation.Data
import GRDB

/// An undelivered content-available wake as stored: `ContentAvailableQueue.Wake` with its
/// payload in bytes. The store keeps the bytes and the name of their encoding and never looks
/// inside: the payload is a D-Bus `a{sv}`, and the store does not import the D-Bus layer (the
/// agent encodes and decodes it; see `TaskEngine+ContentAvailable.swift`).
public struct ContentWakeRecord: Sendable, Equatable {
    public var appID: AppID
    public var payload: [UInt8]
    /// Which encoding `payload` is in, so that a later agent can change it and still read what
    /// an earlier one wrote.
    public var payloadEncoding: String
    public var receivedAt: UnixTime
    public var firstReceivedAt: UnixTime
    public var notificationCount: Int

    public init(
        appID: AppID, payload: [UInt8], payloadEncoding: String, receivedAt: UnixTime, firstReceivedAt: UnixTime,
        notificationCount: Int
    ) {
        self.appID = appID
        self.payload = payload
        self.payloadEncoding = payloadEncoding
        self.receivedAt = receivedAt
        self.firstReceivedAt = firstReceivedAt
        self.notificationCount = notificationCount
    }
}

/// Content-available wakes and their rate limit, kept across restarts: each app's one
/// undelivered wake (`content_wakes`) and its token bucket (`content_buckets`). Both go with
/// the app's row in `apps` (ON DELETE CASCADE).
extension TaskStore {
    /// Every stored wake, by app id. Rows whose app id this agent does not accept are left out
    /// (and left in the file).
    public func contentWakes() throws(StoreError) -> [ContentWakeRecord] {
        try read { db in
            try Row.fetchAll(db, sql: "SELECT * FROM content_wakes ORDER BY app_id").compactMap { row in
                guard let appID = AppID(rawValue: try row.decode(String.self, forColumn: "app_id")) else { return nil }
                let payload = try row.decode(Data.self, forColumn: "payload")
                return ContentWakeRecord(
                    appID: appID, payload: [UInt8](payload),
                    payloadEncoding: try row.decode(String.self, forColumn: "payload_encoding"),
                    receivedAt: Self.saneTime(try row.decode(Double.self, forColumn: "received_at")) ?? 0,
                    firstReceivedAt: Self.saneTime(try row.decode(Double.self, forColumn: "first_received_at")) ?? 0,
                    notificationCount: try row.decode(Int.self, forColumn: "notification_count"))
            }
        }
    }

    /// Every stored bucket, by app id. An app without one has a full bucket. A bucket an earlier
    /// agent stored as tokens (no charges) is read as `ContentAvailableBucket(tokens:updatedAt:perHour:)`
    /// with `perHour`, the limit now. A charge that does not read as a number counts as spent
    /// at the time the bucket is next read (`ContentAvailableQueue.restore`).
    public func contentBuckets(perHour: Int) throws(StoreError) -> [AppID: ContentAvailableBucket] {
        try read { db in
            var buckets: [AppID: ContentAvailableBucket] = [:]
            for row in try Row.fetchAll(db, sql: "SELECT app_id, tokens, updated_at, charges FROM content_buckets") {
                guard let appID = AppID(rawValue: try row.decode(String.self, forColumn: "app_id")) else { continue }
                if let charges = try row.decode(String?.self, forColumn: "charges") {
                    buckets[appID] = ContentAvailableBucket(charges: Self.decodeCharges(charges))
                } else {
                    buckets[appID] = ContentAvailableBucket(
                        tokens: try row.decode(Double.self, forColumn: "tokens"),
                        updatedAt: Self.saneTime(try row.decode(Double.self, forColumn: "updated_at")) ?? .nan,
                        perHour: perHour)
                }
            }
            return buckets
        }
    }

    static func encodeCharges(_ charges: [UnixTime]) -> String {
        charges.map { "\($0)" }.joined(separator: " ")
    }

    static func decodeCharges(_ text: String) -> [UnixTime] {
        text.split(separator: " ").map { saneTime(Double($0)) ?? .nan }
    }

    /// Stores the app's undelivered wake, replacing the one stored before, and its bucket
    /// (`nil`: it has none, which reads as full), in one transaction. The app must have been
    /// saved first (`saveApp`); otherwise this throws `.io` (a foreign key constraint).
    public func saveContentWake(_ wake: ContentWakeRecord, bucket: ContentAvailableBucket?) throws(StoreError) {
        try write { db in
            try db.cachedStatement(
                sql: """
                    INSERT INTO content_wakes (app_id, payload, payload_encoding, received_at,
                        first_received_at, notification_count)
                    VALUES (?, ?, ?, ?, ?, ?)
                    ON CONFLICT (app_id) DO UPDATE SET
                        payload = excluded.payload, payload_encoding = excluded.payload_encoding,
                        received_at = excluded.received_at, first_received_at = excluded.first_received_at,
                        notification_count = excluded.notification_count
                    """
            ).execute(arguments: [
                wake.appID.rawValue, Data(wake.payload), wake.payloadEncoding, wake.receivedAt,
                wake.firstReceivedAt, wake.notificationCount,
            ])
            if let bucket {
                try db.cachedStatement(sql: Self.upsertBucketSQL)
                    .execute(arguments: [
                        wake.appID.rawValue, 0.0, bucket.charges.last(where: \.isFinite) ?? 0,
                        Self.encodeCharges(bucket.charges),
                    ])
            } else {
                try db.cachedStatement(sql: "DELETE FROM content_buckets WHERE app_id = ?")
                    .execute(arguments: [wake.appID.rawValue])
            }
        }
    }

    static let upsertBucketSQL = """
        INSERT INTO content_buckets (app_id, tokens, updated_at, charges) VALUES (?, ?, ?, ?)
        ON CONFLICT (app_id) DO UPDATE SET tokens = excluded.tokens, updated_at = excluded.updated_at,
            charges = excluded.charges
        """

    /// Moves every stored time of content-available wakes and buckets by `step` seconds, in one
    /// transaction: the wall clock was set by `step`, and what these times measure (a bucket's
    /// refill, how long a wake has waited) must stay as long ago as it was. The agent runs it on
    /// its store writer, in line with the wake writes queued before the step, whose times are
    /// those before it: moved after them, every row ends up moved once. Nothing happens for a
    /// step that is zero or not finite.
    public func moveContentTimes(by step: Double) throws(StoreError) {
        guard step.isFinite, step != 0 else { return }
        try write { db in
            try db.execute(
                sql: "UPDATE content_buckets SET updated_at = updated_at + ?1", arguments: [step])
            for row in try Row.fetchAll(
                db, sql: "SELECT app_id, charges FROM content_buckets WHERE charges IS NOT NULL AND charges != ''")
            {
                let charges = Self.decodeCharges(try row.decode(String.self, forColumn: "charges"))
                try db.execute(
                    sql: "UPDATE content_buckets SET charges = ? WHERE app_id = ?",
                    arguments: [
                        Self.encodeCharges(charges.map { $0.isFinite ? $0 + step : $0 }),
                        try row.decode(String.self, forColumn: "app_id"),
                    ])
            }
            try db.execute(
                sql: """
                    UPDATE content_wakes SET received_at = received_at + ?1,
                        first_received_at = first_received_at + ?1
                    """, arguments: [step])
        }
    }

    /// Removes the app's stored wake, once it reached the app; its bucket stays. Nothing
    /// happens when there is none.
    public func deleteContentWake(appID: AppID) throws(StoreError) {
        try write { db in
            try db.cachedStatement(sql: "DELETE FROM content_wakes WHERE app_id = ?").execute(arguments: [appID.rawValue])
        }
    }
}
