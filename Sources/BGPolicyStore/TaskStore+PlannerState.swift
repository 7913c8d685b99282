public import BGPolicyCore
import GRDB

/// The refresh planner's state that a restart must keep (`RefreshPlanner.Snapshot`): one row in
/// `planner_state`, and the day's wake-ups and last refreshes in `planner_wakes` and
/// `planner_refreshes`. Written whole after every wake window and at stop: a few dozen rows.
extension TaskStore {
    /// The stored snapshot, or nil when none was ever stored.
    public func plannerSnapshot() throws(StoreError) -> RefreshPlanner.Snapshot? {
        try read { db in
            guard let row = try Row.fetchOne(db, sql: "SELECT * FROM planner_state WHERE id = 1") else { return nil }
            let wakes = try Double.fetchAll(db, sql: "SELECT time FROM planner_wakes ORDER BY time")
            var lastRefresh: [String: Double] = [:]
            for refresh in try Row.fetchAll(db, sql: "SELECT app_id, time FROM planner_refreshes") {
                lastRefresh[try refresh.decode(String.self, forColumn: "app_id")] = try refresh.decode(Double.self, forColumn: "time")
            }
            return RefreshPlanner.Snapshot(
                slotStart: try row.decode(Double.self, forColumn: "slot_start"),
                windowThreshold: try row.decode(Double.self, forColumn: "window_threshold"),
                appThreshold: try row.decode(Double.self, forColumn: "app_threshold"),
                tokens: try row.decode(Double.self, forColumn: "tokens"), wakes: wakes, lastRefresh: lastRefresh,
                refreshesPaid: DecayingEvidence(
                    trials: try row.decode(Double.self, forColumn: "paid_trials"),
                    successes: try row.decode(Double.self, forColumn: "paid_successes")))
        }
    }

    /// Replaces the stored snapshot with `snapshot`, in one transaction: a full disk leaves the
    /// one stored before.
    public func savePlannerSnapshot(_ snapshot: RefreshPlanner.Snapshot) throws(StoreError) {
        try write { db in try Self.replacePlannerSnapshot(with: snapshot, db) }
    }

    /// The writes of `savePlannerSnapshot`, inside a transaction of the caller's
    /// (`forgetApp`, which stores the snapshot of a planner that forgot the app).
    static func replacePlannerSnapshot(with snapshot: RefreshPlanner.Snapshot, _ db: Database) throws {
        try db.execute(
            sql: """
                INSERT OR REPLACE INTO planner_state
                    (id, slot_start, window_threshold, app_threshold, tokens, paid_trials, paid_successes)
                VALUES (1, ?, ?, ?, ?, ?, ?)
                """,
            arguments: [snapshot.slotStart, snapshot.windowThreshold, snapshot.appThreshold, snapshot.tokens,
                        snapshot.refreshesPaid.trials, snapshot.refreshesPaid.successes])
        try db.execute(sql: "DELETE FROM planner_wakes")
        for time in Set(snapshot.wakes) {
            try db.execute(sql: "INSERT INTO planner_wakes (time) VALUES (?)", arguments: [time])
        }
        try db.execute(sql: "DELETE FROM planner_refreshes")
        for (app, time) in snapshot.lastRefresh {
            try db.execute(sql: "INSERT INTO planner_refreshes (app_id, time) VALUES (?, ?)", arguments: [app, time])
        }
    }
}
