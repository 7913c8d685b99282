public import BGPolicyCore
import GRDB

extension TaskStore {
    // MARK: - History

    /// Appends one entry (its `id` is ignored) and returns the id the store gave it.
    @discardableResult
    public func append(_ entry: HistoryEntry) throws(StoreError) -> Int64 {
        try write { db in try Self.insert(entry, db) }
    }

    /// The newest `limit` entries with `time >= since` (of one app when `appID` is given),
    /// oldest first; none when `limit` is not positive. Entries with an event this agent does
    /// not know are left out, so fewer than `limit` may come back although more exist.
    public func history(since: UnixTime, limit: Int, appID: AppID? = nil) throws(StoreError) -> [HistoryEntry] {
        guard limit > 0 else { return [] }
        return try read { db in
            var arguments: StatementArguments = [since]
            var filter = "time >= ?"
            if let appID {
                filter += " AND app_id = ?"
                arguments += [appID.rawValue]
            }
            arguments += [limit]
            // Newest first to apply the limit, then turned back; id breaks ties in time.
            return try Row.fetchAll(
                db,
                sql: """
                    SELECT * FROM (SELECT * FROM history WHERE \(filter) ORDER BY time DESC, id DESC LIMIT ?)
                    ORDER BY time, id
                    """,
                arguments: arguments
            ).compactMap(Self.historyEntry(from:))
        }
    }

    /// The times of the app's violations since `since` (`HistoryEvent.isViolation`), oldest
    /// first: one for each distinct time and event. The tasks of one slice that overran or was
    /// throttled are written at one time with one event: they count once, as the running agent
    /// counts them (`RecentViolations`).
    public func violationTimes(appID: AppID, since: UnixTime) throws(StoreError) -> [UnixTime] {
        try read { db in
            let events = HistoryEvent.allCases.filter(\.isViolation).map(\.rawValue)
            let placeholders = Array(repeating: "?", count: events.count).joined(separator: ", ")
            var arguments: StatementArguments = [appID.rawValue, since]
            arguments += StatementArguments(events)
            return try UnixTime.fetchAll(
                db,
                sql: """
                    SELECT time FROM (
                        SELECT DISTINCT time, event FROM history
                        WHERE app_id = ? AND time >= ? AND event IN (\(placeholders)))
                    ORDER BY time
                    """,
                arguments: arguments)
        }
    }

    /// The completed refreshes since `since`, oldest first: each app's answers (`new-data`,
    /// `no-data`…), which the planner reads back at start to judge its standing. One query for
    /// every app.
    public func refreshResults(since: UnixTime) throws(StoreError) -> [(appID: AppID, result: TaskResult)] {
        try read { db in
            try Row.fetchAll(
                db,
                sql: """
                    SELECT app_id, result FROM history
                    WHERE time >= ? AND event = ? AND kind = ? ORDER BY time, id
                    """,
                arguments: [since, HistoryEvent.completed.rawValue, DeliveryKind.refresh.rawValue]
            ).compactMap { row in
                guard let app = try row.decode(String?.self, forColumn: "app_id").flatMap(AppID.init(rawValue:)),
                    let result = try row.decode(String?.self, forColumn: "result").flatMap(TaskResult.init(rawValue:))
                else { return nil }
                return (app, result)
            }
        }
    }

    /// The time of the newest history entry and of the newest usage event, if any: where the
    /// agent counts retention back from at start, when the clock says later (`TaskEngine.load`).
    public func newestTimes() throws(StoreError) -> (history: UnixTime?, usage: UnixTime?) {
        try read { db in
            (try UnixTime.fetchOne(db, sql: "SELECT max(time) FROM history"),
             try UnixTime.fetchOne(db, sql: "SELECT max(time) FROM usage"))
        }
    }

    /// The most history entries kept for one app (or for the entries of no app), however
    /// recent: an app that submits and cancels in a loop writes a row per call, and retention
    /// by age alone would let it fill the disk. At ~200 bytes a row, about 4 MB per app, and
    /// weeks of any app's real use.
    public static let historyPerAppLimit = 20_000

    /// Deletes the entries with `time < before`, and the oldest of any app's beyond `perApp`.
    /// Returns the number of entries deleted by the second rule.
    @discardableResult
    public func pruneHistory(before: UnixTime, perApp: Int = TaskStore.historyPerAppLimit) throws(StoreError) -> Int {
        try write { db in
            try db.execute(sql: "DELETE FROM history WHERE time < ?", arguments: [before])
            // history_app_time has every app's count at hand; only an app over the limit is
            // touched, from its oldest entry on (by time, then id, as GetHistory orders them).
            let over = try Row.fetchAll(
                db, sql: "SELECT app_id, COUNT(*) AS n FROM history GROUP BY app_id HAVING n > ?", arguments: [perApp])
            var trimmed = 0
            for row in over {
                let appID: String? = row["app_id"]
                let excess: Int = row["n"] - perApp
                try db.execute(
                    sql: """
                        DELETE FROM history WHERE id IN (
                            SELECT id FROM history WHERE app_id IS ? ORDER BY time, id LIMIT ?)
                        """,
                    arguments: [appID, excess])
                trimmed += db.changesCount
            }
            return trimmed
        }
    }

    /// The one place history rows are written.
    @discardableResult
    static func insert(_ entry: HistoryEntry, _ db: Database) throws -> Int64 {
        // Cached: history is written on every call that changes anything, so it is parsed once.
        try db.cachedStatement(
            sql: """
                INSERT INTO history (time, app_id, identifier, task_id, event, kind, result, detail, cpu_seconds, duration)
                VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                """
        ).execute(
            arguments: [
                entry.time, entry.appID?.rawValue, entry.identifier, entry.taskID, entry.event.rawValue,
                entry.kind?.rawValue, entry.result?.rawValue, entry.detail, entry.cpuSeconds, entry.duration,
            ])
        return db.lastInsertedRowID
    }
}
