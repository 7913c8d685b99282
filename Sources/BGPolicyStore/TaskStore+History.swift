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

    /// The app's violations since `since` (`HistoryEvent.isViolation`), oldest first, each with
    /// its kind (`HistoryEvent.violation`), so that `explain` can say whether the app overran or
    /// used too much CPU: one for each distinct time and event. The tasks of one slice that
    /// overran or was throttled are written at one time with one event: they count once, as the
    /// running agent counts them (`RecentViolations`).
    public func violations(appID: AppID, since: UnixTime) throws(StoreError) -> [(time: UnixTime, kind: ViolationKind)] {
        try read { db in
            try Row.fetchAll(
                db,
                sql: """
                    SELECT DISTINCT time, event FROM history
                    WHERE app_id = ? AND time >= ? AND \(Self.isViolationSQL)
                    ORDER BY time
                    """,
                arguments: [appID.rawValue, since]
            ).compactMap { row -> (time: UnixTime, kind: ViolationKind)? in
                guard let kind = HistoryEvent(rawValue: try row.decode(String.self, forColumn: "event"))?.violation else {
                    return nil
                }
                return (try row.decode(UnixTime.self, forColumn: "time"), kind)
            }
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
                    WHERE time >= ? AND \(Self.isRefreshResultSQL) ORDER BY time, id
                    """,
                arguments: [since]
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

    /// The most history entries of each share (`historyShareSQL`) kept for one app (or for the
    /// entries of no app), however recent: an app that submits and cancels in a loop writes a
    /// row per call, and retention by age alone would let it fill the disk. At ~200 bytes a row,
    /// about 4 MB per app and share, and weeks of any app's real use.
    public static let historyPerAppLimit = 20_000

    /// The entries `violations` reads: the app's violations (`HistoryEvent.isViolation`).
    static let isViolationSQL: String = {
        let events = HistoryEvent.allCases.filter(\.isViolation).map { "'\($0.rawValue)'" }
        return "event IN (\(events.joined(separator: ", ")))"
    }()

    /// The entries `refreshResults` reads: the answers of completed refreshes.
    static let isRefreshResultSQL =
        "(event = '\(HistoryEvent.completed.rawValue)' AND kind = '\(DeliveryKind.refresh.rawValue)')"

    /// Which share of an app's history an entry is in, each capped apart (`pruneHistory`):
    /// 1 its violations, 2 its refreshes' answers, 0 the rest. The agent decides from the first
    /// two, read back at start: an app's overrun penalties (`violations`) and its refreshes'
    /// standing (`refreshResults`). Under one cap for all, an app that resubmitted 20,001 times
    /// (a `replaced` row each, at the bus's pace) pushed them out, and a restart forgave it.
    /// Capped apart, a flood pushes out only older rows of its own share. Those two are not
    /// simply left uncapped, since an app makes violations at will too (16 background tasks left
    /// to expire every 30 s): a violation gives way only to a newer one, and 20,000 of those in
    /// the 7 days that count hold an app at the longest penalty anyway; a refresh's answer only
    /// to newer answers, which are what its standing follows. Retention by age (8 weeks, counted
    /// from no later than now) never reaches into those 7 days. Literals, not arguments: the raw
    /// values are this agent's own.
    static let historyShareSQL =
        "CASE WHEN \(isViolationSQL) THEN 1 WHEN \(isRefreshResultSQL) THEN 2 ELSE 0 END"

    /// Deletes the entries with `time < before`, and the oldest of any app's share of its history
    /// (`historyShareSQL`) beyond `perApp`. Returns the number of entries deleted by the second rule.
    @discardableResult
    public func pruneHistory(before: UnixTime, perApp: Int = TaskStore.historyPerAppLimit) throws(StoreError) -> Int {
        try write { db in
            try db.execute(sql: "DELETE FROM history WHERE time < ?", arguments: [before])
            // history_app_time has every app's count at hand: only an app with more entries than
            // one share may hold can hold too many of one, and only its entries are read for their
            // share. Each share is trimmed from its oldest entry on (by time, then id, as
            // GetHistory orders them).
            let over = try Row.fetchAll(
                db, sql: "SELECT app_id FROM history GROUP BY app_id HAVING COUNT(*) > ?", arguments: [perApp])
            var trimmed = 0
            for row in over {
                let appID: String? = row["app_id"]
                let shares = try Row.fetchAll(
                    db,
                    sql: """
                        SELECT \(Self.historyShareSQL) AS share, COUNT(*) AS n FROM history
                        WHERE app_id IS ? GROUP BY share HAVING n > ?
                        """,
                    arguments: [appID, perApp])
                for share in shares {
                    let excess: Int = share["n"] - perApp
                    try db.execute(
                        sql: """
                            DELETE FROM history WHERE id IN (
                                SELECT id FROM history WHERE app_id IS ? AND \(Self.historyShareSQL) = ?
                                ORDER BY time, id LIMIT ?)
                            """,
                        arguments: [appID, share["share"] as Int, excess])
                    trimmed += db.changesCount
                }
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
