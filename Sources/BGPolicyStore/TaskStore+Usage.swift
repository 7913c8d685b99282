public import BGPolicyCore
import GRDB

/// What the store knows about one app's use, for the predictor: every open it has seen, counted
/// by hour of the week, and the recent ones. Raw events and the counts folded from expired ones
/// (`TaskStore.pruneUsage(olderThan:)`) are added up, so pruning never changes a summary.
public struct UsageSummary: Sendable, Equatable {
    public var appID: AppID
    /// Foreground events ever recorded: the folded counts plus the raw rows.
    public var opensTotal: Double
    /// The newest foreground event, raw or folded; `nil` when the app was never seen opening.
    public var lastOpen: UnixTime?
    /// Raw foreground events in `now - 24 h ... now`.
    public var opensLast24h: Int
    /// 168 counts, one per hour of the week in UTC (0 = Monday 00:00–01:00, see
    /// `TaskStore.weekHour(of:)`): the folded counts plus the raw foreground events.
    public var weekHourOpens: [Double]

    public init(
        appID: AppID, opensTotal: Double = 0, lastOpen: UnixTime? = nil, opensLast24h: Int = 0,
        weekHourOpens: [Double] = Array(repeating: 0, count: TaskStore.hoursPerWeek)
    ) {
        self.appID = appID
        self.opensTotal = opensTotal
        self.lastOpen = lastOpen
        self.opensLast24h = opensLast24h
        self.weekHourOpens = weekHourOpens
    }
}

/// The usage log: one raw row per foreground/background change, kept for `usageRetention`;
/// older foreground rows are folded into `usage_hourly` (opens per app and hour of the week,
/// kept for good) and `usage_folded` (each app's last open) by `pruneUsage(olderThan:)`.
///
/// No "folded up to" mark is needed: a prune folds and deletes the same rows in one
/// transaction, so every foreground event is counted exactly once, raw or folded, and a
/// late-arriving old event is simply folded by the next prune.
extension TaskStore {
    /// How long raw usage events are kept: 8 weeks, so that the recent weeks stay exact while
    /// the hour-of-week counts keep the long run.
    public static let usageRetention: Double = 8 * 7 * 86_400

    public static let hoursPerWeek = 168

    /// The hour of the week in UTC of a Unix time: 0 is Monday 00:00–01:00. The Unix epoch,
    /// 1970-01-01, was a Thursday, 72 hours after the Monday that began its week. In floating
    /// point, so that no stored value can trap; an infinite one counts as hour 0.
    public static func weekHour(of time: UnixTime) -> Int {
        guard time.isFinite else { return 0 }
        var hour = ((time / 3_600).rounded(.down) + 72).truncatingRemainder(dividingBy: Double(hoursPerWeek))
        if hour < 0 { hour += Double(hoursPerWeek) }
        return min(Int(hour), hoursPerWeek - 1)
    }

    /// `weekHour(of:)` in SQL, for the column `time`. CAST truncates towards zero, so a
    /// negative time with a fraction of an hour goes one hour further down, as `floor` would
    /// (SQLite's `floor` needs the optional math functions).
    static let weekHourSQL = """
        (((CAST(time / 3600 AS INTEGER) - (time < 0 AND CAST(time / 3600 AS INTEGER) * 3600 <> time)) + 72) % 168 + 168) % 168
        """

    // The statements whose plans matter with millions of rows (see `usageQueryPlans()`).
    // Arguments: cutoff, 'foreground'. They walk usage_time over the old rows only. INDEXED BY,
    // because without statistics SQLite prefers scanning all of usage_app_state_time (it covers
    // the columns and orders by app), which reads all 8 weeks to fold one day. The WHERE before
    // ON CONFLICT also keeps SQLite's parser from reading the upsert as a join constraint.
    static let foldHourlySQL = """
        INSERT INTO usage_hourly (app_id, week_hour, opens)
        SELECT app_id, \(weekHourSQL) AS week_hour, COUNT(*) FROM usage INDEXED BY usage_time
        WHERE time < ? AND state = ? GROUP BY app_id, week_hour
        ON CONFLICT (app_id, week_hour) DO UPDATE SET opens = opens + excluded.opens
        """
    static let foldLastOpenSQL = """
        INSERT INTO usage_folded (app_id, last_open)
        SELECT app_id, MAX(time) FROM usage INDEXED BY usage_time WHERE time < ? AND state = ? GROUP BY app_id
        ON CONFLICT (app_id) DO UPDATE SET last_open = MAX(last_open, excluded.last_open)
        """
    /// Argument: cutoff.
    static let deleteOldUsageSQL = "DELETE FROM usage WHERE time < ?"
    /// Arguments: since, limit. Walks usage_time backwards from the newest row and stops after
    /// `limit` events.
    static let eventsSQL = """
        SELECT app_id, state, time FROM (
            SELECT id, app_id, state, time FROM usage WHERE time >= ?
            ORDER BY time DESC, id DESC LIMIT ?)
        ORDER BY time, id
        """
    /// Arguments: app id, 'foreground', now. Reads a range of usage_app_state_time alone.
    /// The times are counted per hour in Swift: a GROUP BY on the computed hour sorts the
    /// rows in a temporary b-tree, and with 10,000,000 events that took 4 times as long
    /// (`make bench`).
    static let rawSummarySQL = "SELECT time FROM usage WHERE app_id = ? AND state = ? AND time <= ?"

    // MARK: - Appending

    /// Records that the app went to the foreground or the background at `at`.
    public func appendUsage(appID: AppID, state: UsageState, at time: UnixTime) throws(StoreError) {
        try write { db in
            try Self.insertUsageStatement(db).execute(arguments: [appID.rawValue, state.rawValue, time])
        }
    }

    /// Records many events in one transaction (ingest of a backlog; the bench): one commit,
    /// so one WAL append, for the lot.
    public func appendUsage(_ events: [(appID: AppID, state: UsageState, time: UnixTime)]) throws(StoreError) {
        guard !events.isEmpty else { return }
        try write { db in
            let insert = try Self.insertUsageStatement(db)
            for event in events {
                try insert.execute(arguments: [event.appID.rawValue, event.state.rawValue, event.time])
            }
        }
    }

    /// Cached: usage is appended on every app switch.
    private static func insertUsageStatement(_ db: Database) throws -> Statement {
        try db.cachedStatement(sql: "INSERT INTO usage (app_id, state, time) VALUES (?, ?, ?)")
    }

    // MARK: - Housekeeping

    /// Folds the foreground events older than `cutoff` into the per-hour counts and each app's
    /// last open, and deletes every raw event older than `cutoff` (foreground, background and
    /// states this agent does not know), all in one transaction. Returns how many raw rows went.
    /// Running it again with the same cutoff changes nothing. The agent calls it with
    /// `now - usageRetention`.
    @discardableResult
    public func pruneUsage(olderThan cutoff: UnixTime) throws(StoreError) -> Int {
        try write { db in
            let foreground = UsageState.foreground.rawValue
            try db.execute(sql: Self.foldHourlySQL, arguments: [cutoff, foreground])
            try db.execute(sql: Self.foldLastOpenSQL, arguments: [cutoff, foreground])
            try db.execute(sql: Self.deleteOldUsageSQL, arguments: [cutoff])
            return db.changesCount
        }
    }

    /// Gives back the space the WAL took for a prune: checkpoints it and truncates it to zero
    /// bytes. Call after `pruneUsage(olderThan:)`. The database file itself does not shrink:
    /// the pages a prune frees stay in it, and the next inserts reuse them, so the file stops
    /// growing at about the retention's size. (Between prunes `journal_size_limit` keeps the
    /// WAL from staying bigger than `walSizeLimit`.)
    ///
    /// Never a full `VACUUM`: it rewrites the whole file (through a temporary copy as big as the
    /// database, plus as much WAL), holds the write lock throughout, and so would stall the
    /// agent, which calls the store on its one executor, for seconds on a big log, and could
    /// fail on the nearly full disk where space matters most. Nor `auto_vacuum`, which only a
    /// new file or a `VACUUM` can turn on.
    ///
    /// It does not wait for another process's reader (a user's `sqlite3` left in a
    /// transaction): a `TRUNCATE` checkpoint waits for every reader of the WAL to finish, for as
    /// long as the busy timeout (5 s), and the agent's executor, which called it, answered
    /// nobody meanwhile. With the timeout off for the call, it folds in what it can and returns;
    /// the next call catches up.
    public func compact() throws(StoreError) {
        do {
            // Outside a transaction: a checkpoint cannot run inside one.
            try withQueue { queue in
                try queue.inDatabase { db in
                    let timeout = try Int.fetchOne(db, sql: "PRAGMA busy_timeout") ?? 0
                    try db.execute(sql: "PRAGMA busy_timeout = 0")
                    defer { try? db.execute(sql: "PRAGMA busy_timeout = \(timeout)") }
                    // Its row (busy, log pages, checkpointed pages) is not an error: busy = 1 only
                    // when another process reads, and the next call catches up.
                    _ = try Row.fetchOne(db, sql: "PRAGMA wal_checkpoint(TRUNCATE)")
                }
            }
        } catch {
            throw failure(error)
        }
    }

    // MARK: - Reading

    /// The newest `limit` events (opens and closes) with `time >= since`, of all apps, oldest
    /// first (the order to replay them in, to warm the planner at start-up); none when `limit`
    /// is not positive. Rows with an app id this agent does not accept, or a state it does not
    /// know, are left out.
    public func usageEvents(since: UnixTime, limit: Int) throws(StoreError)
        -> [(appID: AppID, state: UsageState, time: UnixTime)]
    {
        guard limit > 0 else { return [] }
        return try read { db in
            try Row.fetchAll(db, sql: Self.eventsSQL, arguments: [since, limit]).compactMap { row in
                guard let appID = AppID(rawValue: try row.decode(String.self, forColumn: "app_id")),
                    let state = UsageState(rawValue: try row.decode(String.self, forColumn: "state"))
                else { return nil }
                return (appID, state, try row.decode(Double.self, forColumn: "time"))
            }
        }
    }

    /// What the predictor needs about one app, at `now`. Three indexed reads: the app's folded
    /// counts (at most 168 rows), its folded last open, and one pass over its raw foreground
    /// events that reads usage_app_state_time alone (never the table). An unknown app gets
    /// zeros. About 1 ms for an app with 5,000 raw opens (`make bench`).
    public func usageSummary(appID: AppID, now: UnixTime) throws(StoreError) -> UsageSummary {
        try read { db in
            var summary = UsageSummary(appID: appID)
            for row in try Row.fetchAll(
                db, sql: "SELECT week_hour, opens FROM usage_hourly WHERE app_id = ?", arguments: [appID.rawValue])
            {
                let hour = try row.decode(Int.self, atIndex: 0)
                guard (0..<Self.hoursPerWeek).contains(hour) else { continue }
                let opens = try row.decode(Double.self, atIndex: 1)
                summary.weekHourOpens[hour] += opens
                summary.opensTotal += opens
            }
            summary.lastOpen = try Double.fetchOne(
                db, sql: "SELECT last_open FROM usage_folded WHERE app_id = ?", arguments: [appID.rawValue])
            let dayAgo = now - 86_400
            var raw = 0
            var last: UnixTime?
            // Only opens at or before `now`: a row stamped later was written while the clock
            // was ahead (a forward jump, set right since), and is no open yet. As the last open
            // it said the app was opened in the future, for as long as the row is kept (a year
            // ahead: a year), and it counted among the opens of its hour. It counts once `now`
            // reaches it.
            let times = try Double.fetchCursor(
                db, sql: Self.rawSummarySQL, arguments: [appID.rawValue, UsageState.foreground.rawValue, now])
            while let time = try times.next() {
                summary.weekHourOpens[Self.weekHour(of: time)] += 1
                raw += 1
                if time > dayAgo { summary.opensLast24h += 1 }
                // The largest, not the last read: the statement has no ORDER BY.
                last = max(last ?? time, time)
            }
            summary.opensTotal += Double(raw)
            if let last { summary.lastOpen = max(summary.lastOpen ?? last, last) }
            return summary
        }
    }

    // MARK: - Testing

    /// `EXPLAIN QUERY PLAN` of each statement above, by name, its lines joined by "; ", for
    /// the test that every one of them uses an index.
    func usageQueryPlans() throws(StoreError) -> [String: String] {
        let statements: [(String, String, StatementArguments)] = [
            ("foldHourly", Self.foldHourlySQL, [0.0, "foreground"]),
            ("foldLastOpen", Self.foldLastOpenSQL, [0.0, "foreground"]),
            ("deleteOld", Self.deleteOldUsageSQL, [0.0]),
            ("events", Self.eventsSQL, [0.0, 10]),
            ("rawSummary", Self.rawSummarySQL, ["org.example.App", "foreground", 0.0]),
            ("hourlySummary", "SELECT week_hour, opens FROM usage_hourly WHERE app_id = ?", ["org.example.App"]),
        ]
        return try read { db in
            var plans: [String: String] = [:]
            for (name, sql, arguments) in statements {
                plans[name] = try Row.fetchAll(db, sql: "EXPLAIN QUERY PLAN " + sql, arguments: arguments)
                    .map { try $0.decode(String.self, forColumn: "detail") }.joined(separator: "; ")
            }
            return plans
        }
    }

    /// Creates a database file migrated only up to `migration` (say "v1"), then runs `sql` in
    /// it: a file as an older agent left it, for the migration tests. With `foreignKeys` false,
    /// `sql` runs with them off, statement by statement, as a user's `sqlite3` would.
    static func createFile(
        path: String, migratedUpTo migration: String, sql: String, foreignKeys: Bool = true
    ) throws(StoreError) {
        do {
            let queue = try DatabaseQueue(path: path, configuration: configuration)
            try migrator.migrate(queue, upTo: migration)
            if foreignKeys {
                try queue.write { db in try db.execute(sql: sql) }
            } else {
                try queue.writeWithoutTransaction { db in
                    try db.execute(sql: "PRAGMA foreign_keys = OFF")
                    try db.execute(sql: sql)
                }
            }
            try queue.close()
        } catch {
            throw StoreError(error, file: path)
        }
    }

    /// The app's usage log, oldest first, for tests until the learning issue reads it. Unknown
    /// states are left out.
    func usage(appID: AppID) throws(StoreError) -> [(state: UsageState, time: UnixTime)] {
        try read { db in
            try Row.fetchAll(
                db, sql: "SELECT state, time FROM usage WHERE app_id = ? ORDER BY time, id", arguments: [appID.rawValue]
            ).compactMap { row in
                guard let state = UsageState(rawValue: try row.decode(String.self, forColumn: "state")) else { return nil }
                return (state, try row.decode(Double.self, forColumn: "time"))
            }
        }
    }
}
