import GRDB

extension TaskStore {
    /// The schema, as migrations. A migration, once shipped, never changes: a later schema is a
    /// new migration appended here. Plain SQL rather than GRDB's table builder, so that what is
    /// on disk reads exactly as written.
    ///
    /// Enum columns carry the raw strings of the core's enums and have no CHECK constraints:
    /// a newer agent may write values this one does not know, and the readers deal with them
    /// (see TaskStore+Rows.swift). Times are Unix seconds as REAL; booleans are 0/1.
    ///
    /// Every migration is registered with `foreignKeyChecks: .immediate`: it runs with foreign
    /// keys on, its own rows checked as it writes them. GRDB's default, `.deferred`, runs it
    /// with them off and then checks the whole database, so one orphan row (a user's
    /// `sqlite3`, whose foreign keys are off, deleting an app) failed every later migration
    /// and the agent could not start after the upgrade. None of these rebuilds a table. One
    /// that must (create, copy, drop, rename: with foreign keys on, the drop would delete the
    /// old table's children) registers with `.deferred`, and deletes the orphans first.
    static var migrator: DatabaseMigrator {
        var migrator = DatabaseMigrator()
        migrator.registerMigration("v1", foreignKeyChecks: .immediate) { db in
            try db.execute(sql: """
                CREATE TABLE apps (
                    app_id TEXT PRIMARY KEY NOT NULL,
                    bus_name TEXT,
                    identity TEXT NOT NULL,
                    background_only INTEGER NOT NULL DEFAULT 0,
                    enabled INTEGER NOT NULL DEFAULT 1,
                    registered_at REAL NOT NULL,
                    last_used_at REAL
                );
                -- A child table rather than a JSON column: the store needs no JSON coder, and
                -- "which app declared this identifier" stays one indexed query.
                CREATE TABLE app_identifiers (
                    app_id TEXT NOT NULL REFERENCES apps(app_id) ON DELETE CASCADE,
                    identifier TEXT NOT NULL,
                    PRIMARY KEY (app_id, identifier)
                ) WITHOUT ROWID;
                CREATE TABLE settings (
                    key TEXT PRIMARY KEY NOT NULL,
                    value
                );
                -- Only a registered app can submit, so a request always has its app.
                CREATE TABLE pending (
                    app_id TEXT NOT NULL REFERENCES apps(app_id) ON DELETE CASCADE,
                    identifier TEXT NOT NULL,
                    kind TEXT NOT NULL,
                    earliest_begin REAL,
                    requires_network INTEGER NOT NULL DEFAULT 0,
                    requires_external_power INTEGER NOT NULL DEFAULT 0,
                    expected_duration INTEGER,
                    submitted_at REAL NOT NULL,
                    delivery_attempts INTEGER NOT NULL DEFAULT 0,
                    last_attempt_at REAL,
                    last_attempt_error TEXT,
                    PRIMARY KEY (app_id, identifier)
                );
                CREATE TABLE running (
                    task_id TEXT PRIMARY KEY NOT NULL,
                    slice_id TEXT NOT NULL,
                    app_id TEXT NOT NULL REFERENCES apps(app_id) ON DELETE CASCADE,
                    identifier TEXT NOT NULL,
                    kind TEXT NOT NULL,
                    started_at REAL NOT NULL,
                    deadline REAL NOT NULL
                );
                -- AUTOINCREMENT: ids are never reused after pruning, so an id a client saw in
                -- GetHistory keeps naming the same entry. No foreign key: history outlives apps.
                CREATE TABLE history (
                    id INTEGER PRIMARY KEY AUTOINCREMENT,
                    time REAL NOT NULL,
                    app_id TEXT,
                    identifier TEXT,
                    task_id TEXT,
                    event TEXT NOT NULL,
                    kind TEXT,
                    result TEXT,
                    detail TEXT NOT NULL DEFAULT '',
                    cpu_seconds REAL,
                    duration REAL
                );
                CREATE INDEX history_time ON history(time);
                CREATE INDEX history_app_time ON history(app_id, time);
                CREATE TABLE usage (
                    id INTEGER PRIMARY KEY,
                    app_id TEXT NOT NULL,
                    state TEXT NOT NULL,
                    time REAL NOT NULL
                );
                CREATE INDEX usage_app_time ON usage(app_id, time);
                """)
        }
        // The usage log's housekeeping (TaskStore+Usage.swift): raw events are kept for
        // `usageRetention`, then folded into per-app, per-hour-of-week counts kept for good.
        migrator.registerMigration("v2-usage-hourly", foreignKeyChecks: .immediate) { db in
            try db.execute(sql: """
                -- week_hour: hours since Monday 00:00 UTC, 0...167. opens: foreground events
                -- folded so far. REAL, so that a later agent may decay the counts in place.
                CREATE TABLE usage_hourly (
                    app_id TEXT NOT NULL,
                    week_hour INTEGER NOT NULL CHECK (week_hour BETWEEN 0 AND 167),
                    opens REAL NOT NULL,
                    PRIMARY KEY (app_id, week_hour)
                ) WITHOUT ROWID;
                -- The newest open folded per app, so that the last open outlives its raw row.
                CREATE TABLE usage_folded (
                    app_id TEXT PRIMARY KEY NOT NULL,
                    last_open REAL NOT NULL
                ) WITHOUT ROWID;
                -- Replaces usage_app_time: with the state in the key, the per-app summary reads
                -- only the app's foreground entries, from the index alone (no table lookups).
                CREATE INDEX usage_app_state_time ON usage(app_id, state, time);
                DROP INDEX usage_app_time;
                -- For pruning by age and for replaying recent opens at start-up.
                CREATE INDEX usage_time ON usage(time);
                """)
        }
        // Content-available wakes and their rate limit (TaskStore+ContentWakes.swift), so that
        // a restart neither drops an undelivered wake nor refills a spent bucket.
        migrator.registerMigration("v3-content-wakes", foreignKeyChecks: .immediate) { db in
            try db.execute(sql: """
                -- An app's one undelivered wake (newest only). payload: bytes in the encoding
                -- that payload_encoding names, which the agent chooses and reads back; the store
                -- does not look inside.
                CREATE TABLE content_wakes (
                    app_id TEXT PRIMARY KEY NOT NULL REFERENCES apps(app_id) ON DELETE CASCADE,
                    payload BLOB NOT NULL,
                    payload_encoding TEXT NOT NULL,
                    received_at REAL NOT NULL,
                    first_received_at REAL NOT NULL,
                    notification_count INTEGER NOT NULL DEFAULT 1
                ) WITHOUT ROWID;
                -- An app's token bucket as last worked out: tokens at updated_at, refilling
                -- continuously from then. No row reads as a full bucket.
                CREATE TABLE content_buckets (
                    app_id TEXT PRIMARY KEY NOT NULL REFERENCES apps(app_id) ON DELETE CASCADE,
                    tokens REAL NOT NULL,
                    updated_at REAL NOT NULL
                ) WITHOUT ROWID;
                """)
        }
        // The app units the session's autostart started (the agent's SessionStartedUnits), so
        // that after a restart the agent still knows them from units the user opened.
        migrator.registerMigration("v4-session-started-units", foreignKeyChecks: .immediate) { db in
            try db.execute(sql: """
                CREATE TABLE session_started_units (
                    unit TEXT PRIMARY KEY NOT NULL
                ) WITHOUT ROWID;
                """)
        }
        // What the refresh planner must not forget across a restart and cannot learn again
        // from the usage log (TaskStore+PlannerState.swift, RefreshPlanner.Snapshot).
        migrator.registerMigration("v5-planner-state", foreignKeyChecks: .immediate) { db in
            try db.execute(sql: """
                -- One row: the thresholds, and the refresh budget left as at slot_start, the start
                -- of the 15-min slot the planner was in.
                CREATE TABLE planner_state (
                    id INTEGER PRIMARY KEY CHECK (id = 1),
                    slot_start REAL NOT NULL,
                    window_threshold REAL NOT NULL,
                    app_threshold REAL NOT NULL,
                    tokens REAL NOT NULL
                );
                -- The wake-ups of the last 24 hours.
                CREATE TABLE planner_wakes (
                    time REAL PRIMARY KEY NOT NULL
                ) WITHOUT ROWID;
                -- Each app's last refresh, for those that can still hold its next. No foreign
                -- key: the planner knows apps from the usage log, registered or not.
                CREATE TABLE planner_refreshes (
                    app_id TEXT PRIMARY KEY NOT NULL,
                    time REAL NOT NULL
                ) WITHOUT ROWID;
                """)
        }
        migrator.registerMigration("v6-cpu-enforcement", foreignKeyChecks: .immediate) { db in
            try db.execute(sql: """
                -- What the CPU monitor did to an app and has not undone yet, so that an agent that
                -- stopped or crashed during the slice undoes it at its next start. action:
                -- throttled or frozen (unit set), stopped (pid set, with process_started, its
                -- start in seconds since boot, so that a reused pid is never continued).
                CREATE TABLE cpu_enforcement (
                    slice_id TEXT PRIMARY KEY NOT NULL,
                    app_id TEXT NOT NULL,
                    action TEXT NOT NULL,
                    unit TEXT,
                    pid INTEGER,
                    process_started REAL,
                    since REAL NOT NULL
                ) WITHOUT ROWID;
                """)
        }
        // What the refresh planner's refreshes paid (RefreshPlanner.refreshYield): a file from
        // before starts from none, as a first start does.
        migrator.registerMigration("v7-refresh-yield", foreignKeyChecks: .immediate) { db in
            try db.execute(sql: """
                ALTER TABLE planner_state ADD COLUMN paid_trials REAL NOT NULL DEFAULT 0;
                ALTER TABLE planner_state ADD COLUMN paid_successes REAL NOT NULL DEFAULT 0;
                """)
        }
        // The quota a throttled unit had before, for the undo to put back (a user's own
        // CPUQuota= was lost to "no quota"). A row from before has none, and is undone as then.
        migrator.registerMigration("v8-cpu-quota-before", foreignKeyChecks: .immediate) { db in
            try db.execute(sql: """
                -- The unit's CPUQuotaPerSecUSec before a throttle, in microseconds, as the bits of
                -- the unsigned value (SQLite's integers are signed): -1 is UInt64.max, no quota.
                -- NULL: not known (not read, or not a throttle); the undo then sets no quota.
                ALTER TABLE cpu_enforcement ADD COLUMN quota_before INTEGER;
                """)
        }
        // Content-available buckets as the times of their charges not yet back (each comes back
        // an hour after it was spent), where they were tokens refilling continuously. A row
        // from before has none (NULL) and is read as `ContentAvailableBucket(tokens:updatedAt:perHour:)`.
        migrator.registerMigration("v9-content-charges", foreignKeyChecks: .immediate) { db in
            try db.execute(sql: """
                -- The charges' times, oldest first, as decimal numbers separated by spaces. A row
                -- written with them has tokens 0 and updated_at the newest charge (0 with none),
                -- which an earlier agent reads as a spent bucket.
                ALTER TABLE content_buckets ADD COLUMN charges TEXT;
                """)
        }
        return migrator
    }
}
