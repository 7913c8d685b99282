public import BGPolicyCore
import GRDB

/// What the CPU monitor did to an app during a slice and has not undone (`cpu_enforcement`):
/// a CPU quota or a freeze on its systemd unit, or SIGSTOP on its process. A row is written
/// when the monitor acts and removed when the slice's end undoes it, so the rows left at start
/// are what an agent that stopped or crashed left in place, for the new one to undo.
public struct EnforcementRecord: Sendable, Equatable {
    public enum Action: Sendable, Equatable {
        /// `quotaBefore`: the unit's `CPUQuotaPerSecUSec` before the throttle (`UInt64.max`:
        /// none), which the undo puts back; nil when it could not be read (or by an agent from
        /// before it was stored), and then the undo leaves the unit with no quota.
        case throttled(unit: String, quotaBefore: UInt64?)
        case frozen(unit: String)
        /// `processStarted`: the process's start, in seconds since boot, when it was stopped.
        case stopped(pid: UInt32, processStarted: Double)
    }

    public var sliceID: String
    public var appID: String
    public var action: Action
    public var since: UnixTime

    public init(sliceID: String, appID: String, action: Action, since: UnixTime) {
        self.sliceID = sliceID
        self.appID = appID
        self.action = action
        self.since = since
    }
}

extension TaskStore {
    public func recordEnforcement(_ record: EnforcementRecord) throws(StoreError) {
        var name: String
        var unit: String?
        var pid: Int64?
        var started: Double?
        var quotaBefore: Int64?
        switch record.action {
        case .throttled(let u, let q): (name, unit, quotaBefore) = ("throttled", u, q.map(Int64.init(bitPattern:)))
        case .frozen(let u): (name, unit) = ("frozen", u)
        case .stopped(let p, let s): (name, pid, started) = ("stopped", Int64(p), s)
        }
        try write { db in
            try db.execute(
                sql: """
                    INSERT OR REPLACE INTO cpu_enforcement (slice_id, app_id, action, unit, pid, process_started, since, quota_before)
                    VALUES (?, ?, ?, ?, ?, ?, ?, ?)
                    """,
                arguments: [record.sliceID, record.appID, name, unit, pid, started, record.since, quotaBefore])
        }
    }

    public func removeEnforcement(sliceID: String) throws(StoreError) {
        try write { db in
            try db.execute(sql: "DELETE FROM cpu_enforcement WHERE slice_id = ?", arguments: [sliceID])
        }
    }

    /// The enforcements not undone, oldest first. A row this agent cannot read (an action it
    /// does not know, a unit or pid missing) is left out and stays stored: a later agent may
    /// know it, and nothing is undone by guesswork.
    public func enforcementsLeft() throws(StoreError) -> [EnforcementRecord] {
        try read { db in
            var records: [EnforcementRecord] = []
            for row in try Row.fetchAll(db, sql: "SELECT * FROM cpu_enforcement ORDER BY since, slice_id") {
                let unit: String? = row["unit"]
                let pid: Int64? = row["pid"]
                let started: Double? = row["process_started"]
                let quotaBefore: Int64? = row["quota_before"]
                let action: EnforcementRecord.Action
                switch try row.decode(String.self, forColumn: "action") {
                case "throttled":
                    guard let unit else { continue }
                    action = .throttled(unit: unit, quotaBefore: quotaBefore.map(UInt64.init(bitPattern:)))
                case "frozen":
                    guard let unit else { continue }
                    action = .frozen(unit: unit)
                case "stopped":
                    guard let pid, pid > 1, pid <= Int64(UInt32.max), let started else { continue }
                    action = .stopped(pid: UInt32(pid), processStarted: started)
                default: continue
                }
                records.append(EnforcementRecord(
                    sliceID: try row.decode(String.self, forColumn: "slice_id"),
                    appID: try row.decode(String.self, forColumn: "app_id"), action: action,
                    since: try row.decode(Double.self, forColumn: "since")))
            }
            return records
        }
    }
}
