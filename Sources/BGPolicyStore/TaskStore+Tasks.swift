public import BGPolicyCore
import GRDB

extension TaskStore {
    // MARK: - Pending requests

    /// Every pending request, by app id, then by submission time.
    public func pendingRequests() throws(StoreError) -> [TaskRequest] {
        try read { db in
            try Row.fetchAll(db, sql: "SELECT * FROM pending ORDER BY app_id, submitted_at, identifier")
                .compactMap(Self.request(from:))
        }
    }

    /// The app's pending request with `identifier`, if it has one.
    public func pendingRequest(appID: AppID, identifier: String) throws(StoreError) -> TaskRequest? {
        try read { db in
            try Row.fetchOne(
                db, sql: "SELECT * FROM pending WHERE app_id = ? AND identifier = ?",
                arguments: [appID.rawValue, identifier]
            ).flatMap(Self.request(from:))
        }
    }

    /// Inserts the request, or replaces the app's pending request with the same identifier.
    /// The app must have been saved first (`saveApp`); otherwise this throws `.io` (a foreign
    /// key constraint), because a request nobody registered for cannot be delivered.
    public func savePending(_ request: TaskRequest) throws(StoreError) {
        try write { db in try Self.upsert(request, db) }
    }

    /// `savePending` and `append` in one transaction: a submission and its history entry.
    public func savePending(_ request: TaskRequest, history entry: HistoryEntry) throws(StoreError) {
        try write { db in
            try Self.upsert(request, db)
            _ = try Self.insert(entry, db)
        }
    }

    /// Removes one pending request and appends `entry`, in one transaction.
    public func deletePending(appID: AppID, identifier: String, history entry: HistoryEntry) throws(StoreError) {
        try write { db in
            try db.cachedStatement(sql: "DELETE FROM pending WHERE app_id = ? AND identifier = ?")
                .execute(arguments: [appID.rawValue, identifier])
            _ = try Self.insert(entry, db)
        }
    }

    static func upsert(_ request: TaskRequest, _ db: Database) throws {
        try db.cachedStatement(
            sql: """
                INSERT INTO pending (app_id, identifier, kind, earliest_begin, requires_network,
                    requires_external_power, expected_duration, submitted_at, delivery_attempts,
                    last_attempt_at, last_attempt_error)
                VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                ON CONFLICT (app_id, identifier) DO UPDATE SET
                    kind = excluded.kind, earliest_begin = excluded.earliest_begin,
                    requires_network = excluded.requires_network,
                    requires_external_power = excluded.requires_external_power,
                    expected_duration = excluded.expected_duration, submitted_at = excluded.submitted_at,
                    delivery_attempts = excluded.delivery_attempts, last_attempt_at = excluded.last_attempt_at,
                    last_attempt_error = excluded.last_attempt_error
                """
        ).execute(
            arguments: [
                request.appID.rawValue, request.identifier, request.kind.rawValue, request.earliestBegin,
                request.requiresNetwork, request.requiresExternalPower, request.expectedDuration.map { Int64($0) },
                request.submittedAt, request.deliveryAttempts, request.lastAttemptAt, request.lastAttemptError,
            ])
    }

    /// Removes one pending request; nothing happens when there is none.
    public func deletePending(appID: AppID, identifier: String) throws(StoreError) {
        try write { db in
            try db.execute(
                sql: "DELETE FROM pending WHERE app_id = ? AND identifier = ?", arguments: [appID.rawValue, identifier])
        }
    }

    /// Removes every pending request of the app and appends `entry` to the history, in one
    /// transaction.
    public func deleteAllPending(appID: AppID, history entry: HistoryEntry) throws(StoreError) {
        try write { db in
            try db.execute(sql: "DELETE FROM pending WHERE app_id = ?", arguments: [appID.rawValue])
            _ = try Self.insert(entry, db)
        }
    }

    // MARK: - Running tasks

    /// Records the delivery of `tasks`, in one transaction: each task's pending request is
    /// removed, its running row inserted, and `history` appended. Either all of it is on disk or
    /// none of it, so a task is never both pending and running, and after a crash it is found as
    /// running (and reported interrupted) instead of being delivered a second time.
    public func startTasks(_ tasks: [RunningTaskRecord], history: [HistoryEntry]) throws(StoreError) {
        try write { db in
            for task in tasks {
                try db.execute(
                    sql: "DELETE FROM pending WHERE app_id = ? AND identifier = ?",
                    arguments: [task.appID.rawValue, task.identifier])
                try db.execute(
                    sql: """
                        INSERT INTO running (task_id, slice_id, app_id, identifier, kind, started_at, deadline)
                        VALUES (?, ?, ?, ?, ?, ?, ?)
                        """,
                    arguments: [
                        task.taskID, task.sliceID, task.appID.rawValue, task.identifier, task.kind.rawValue,
                        task.startedAt, task.deadline,
                    ])
            }
            for entry in history {
                try Self.insert(entry, db)
            }
        }
    }

    /// Removes a finished task's running row and appends `history`, in one transaction. A task
    /// id without a row (already finished or recovered) still gets its history line.
    public func finishTask(taskID: String, history: HistoryEntry) throws(StoreError) {
        try write { db in
            try db.execute(sql: "DELETE FROM running WHERE task_id = ?", arguments: [taskID])
            try Self.insert(history, db)
        }
    }

    /// The tasks delivered and not yet finished, oldest first.
    public func runningTasks() throws(StoreError) -> [RunningTaskRecord] {
        try read { db in
            try Row.fetchAll(db, sql: "SELECT * FROM running ORDER BY started_at, task_id")
                .compactMap(Self.runningTask(from:))
        }
    }

    /// Closes what a previous run of the agent left running: the agent stopped (crash, SIGKILL,
    /// power loss) while those tasks ran, so their outcome is unknown. Each becomes an
    /// `.interrupted` history entry at `now` and its row goes, in one transaction; none is
    /// delivered again. Call once at start-up, before delivering anything. Returns the entries
    /// appended, with their ids, oldest task first.
    public func recoverInterrupted(now: UnixTime) throws(StoreError) -> [HistoryEntry] {
        try write { db in
            // Raw rows, not `runningTask(from:)`: a row with a kind this agent does not know
            // must be closed too, or it would stay "running" forever.
            let rows = try Row.fetchAll(
                db, sql: "SELECT task_id, app_id, identifier, kind FROM running ORDER BY started_at, task_id")
            var entries: [HistoryEntry] = []
            for row in rows {
                var entry = HistoryEntry(
                    time: now,
                    appID: AppID(rawValue: try row.decode(String.self, forColumn: "app_id")),
                    identifier: try row.decode(String.self, forColumn: "identifier"),
                    taskID: try row.decode(String.self, forColumn: "task_id"),
                    event: .interrupted,
                    kind: DeliveryKind(rawValue: try row.decode(String.self, forColumn: "kind")),
                    detail: "The agent stopped while this task was running; it will not be delivered again.")
                entry.id = try Self.insert(entry, db)
                entries.append(entry)
            }
            try db.execute(sql: "DELETE FROM running")
            return entries
        }
    }
}
