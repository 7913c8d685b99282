public import BGPolicyCore
import GRDB

/// What `TaskStore.forgetApp` removed of one app, row counts by kind: what the agent logs and
/// `Admin1.ForgetApp` answers.
public struct ForgottenRows: Sendable, Equatable {
    /// Its registration (`apps`): 1, or 0 when it had none.
    public var registration = 0
    public var identifiers = 0
    public var pending = 0
    public var running = 0
    public var history = 0
    /// Raw usage events (`usage`).
    public var usageEvents = 0
    /// Hours of the week of folded usage (`usage_hourly`) and its folded last open
    /// (`usage_folded`).
    public var usageAggregates = 0
    /// An undelivered content-available wake, and its rate limit's bucket.
    public var contentWakes = 0
    public var contentBuckets = 0
    public var cpuEnforcements = 0
    /// Its last refresh, as the refresh planner stored it.
    public var plannerRefreshes = 0
    /// Its app units the session's autostart started.
    public var sessionUnits = 0

    public init() {}

    /// Every row removed.
    public var total: Int {
        registration + identifiers + pending + running + history + usageEvents + usageAggregates + contentWakes
            + contentBuckets + cpuEnforcements + plannerRefreshes + sessionUnits
    }
}

/// Forgetting an app (`Admin1.ForgetApp`, `bgpolicy forget`): every row that names it goes, in
/// one transaction, so that a failure (a full disk: deletes write the WAL too) leaves all of it
/// and a success none. History outlives an app's registration otherwise (it has no foreign key),
/// and the usage log and the planner know apps registered or not: only this removes them.
extension TaskStore {
    /// Every table with an `app_id` column, and the `ForgottenRows` count it adds to, in the
    /// order `forgetApp` empties them: children before `apps`, whose foreign keys would cascade
    /// to them uncounted. A test holds this list to the schema, so that a table added later
    /// with an `app_id` is not left out.
    static var perAppTables: [(table: String, count: WritableKeyPath<ForgottenRows, Int>)] { [
        ("app_identifiers", \.identifiers),
        ("pending", \.pending),
        ("running", \.running),
        ("content_wakes", \.contentWakes),
        ("content_buckets", \.contentBuckets),
        ("cpu_enforcement", \.cpuEnforcements),
        ("planner_refreshes", \.plannerRefreshes),
        ("apps", \.registration),
        ("history", \.history),
        ("usage_hourly", \.usageAggregates),
        ("usage_folded", \.usageAggregates),
        ("usage", \.usageEvents),
    ] }

    /// Removes everything stored about `appID`, in one transaction: its registration and
    /// identifiers, pending and running tasks, content-available wake and bucket, CPU
    /// enforcement records, history, raw usage events and their aggregates, the planner's record
    /// of its last refresh, and the app units of it that the session's autostart started (found
    /// by their names, `AppIdentityParser.appID(fromUnitName:)`: that table has no app column).
    /// With `plannerSnapshot` (that of a planner that forgot the app), the stored planner state
    /// is replaced by it in the same transaction, so that its pool and the app's absence from it
    /// are stored together. Throws, having changed nothing, when any of it fails.
    public func forgetApp(_ appID: AppID, plannerSnapshot: RefreshPlanner.Snapshot? = nil) throws(StoreError) -> ForgottenRows {
        try write { db in
            var forgotten = ForgottenRows()
            if let plannerSnapshot { try Self.replacePlannerSnapshot(with: plannerSnapshot, db) }
            for (table, count) in Self.perAppTables {
                try db.execute(sql: "DELETE FROM \(table) WHERE app_id = ?", arguments: [appID.rawValue])
                forgotten[keyPath: count] += db.changesCount
            }
            let units = try String.fetchAll(db, sql: "SELECT unit FROM session_started_units")
                .filter { AppIdentityParser.appID(fromUnitName: $0) == appID }
            for unit in units {
                try db.execute(sql: "DELETE FROM session_started_units WHERE unit = ?", arguments: [unit])
                forgotten.sessionUnits += db.changesCount
            }
            return forgotten
        }
    }

    /// The tables of the schema that have an `app_id` column, sorted: for the test that
    /// `perAppTables` names them all.
    func tablesWithAnAppColumn() throws(StoreError) -> [String] {
        try read { db in
            try String.fetchAll(
                db,
                sql: """
                    SELECT m.name FROM sqlite_master AS m, pragma_table_info(m.name) AS c
                    WHERE m.type = 'table' AND c.name = 'app_id' ORDER BY m.name
                    """)
        }
    }

    /// Every row that names `appID`, as text, by table (each table with an `app_id` column,
    /// and `session_started_units`' units of the app): for the tests that nothing of a
    /// forgotten app is left, and that the other apps' rows are as they were.
    func rowsNaming(_ appID: AppID) throws(StoreError) -> [String: [String]] {
        let tables = try tablesWithAnAppColumn()
        return try read { db in
            var rows: [String: [String]] = [:]
            for table in tables {
                rows[table] = try Row.fetchAll(
                    db, sql: "SELECT * FROM \(table) WHERE app_id = ? ORDER BY 1", arguments: [appID.rawValue]
                ).map { "\($0)" }
            }
            rows["session_started_units"] = try String.fetchAll(db, sql: "SELECT unit FROM session_started_units ORDER BY unit")
                .filter { AppIdentityParser.appID(fromUnitName: $0) == appID }
            return rows
        }
    }
}
