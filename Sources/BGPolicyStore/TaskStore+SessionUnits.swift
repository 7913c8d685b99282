import GRDB

/// The app units the session's autostart started and that still ran when last seen
/// (`session_started_units`): the agent's `SessionStartedUnits` keeps them in memory and here,
/// so that a restart does not take them for apps the user opened. A handful of rows, written
/// whole when the set changes (at login, and as those units go).
extension TaskStore {
    /// The stored units, sorted.
    public func sessionStartedUnits() throws(StoreError) -> [String] {
        try read { db in
            try String.fetchAll(db, sql: "SELECT unit FROM session_started_units ORDER BY unit")
        }
    }

    /// Replaces the stored units with `units`, in one transaction.
    public func setSessionStartedUnits(_ units: [String]) throws(StoreError) {
        try write { db in
            try db.execute(sql: "DELETE FROM session_started_units")
            for unit in units {
                try db.execute(sql: "INSERT INTO session_started_units (unit) VALUES (?)", arguments: [unit])
            }
        }
    }
}
