import BGPolicyCore
import GRDB

/// Rows to values. A file may hold words this agent does not know: a newer agent wrote them and
/// the user went back to this one. Nothing here traps on them. Each reader either skips the row
/// (when the value cannot be acted on safely) or reads the word conservatively, as its comment
/// says. Skipped rows stay in the file untouched, for the newer agent to find again.
extension TaskStore {
    /// A time read from the file, in Unix seconds, when it is one: not NaN, not infinite, and
    /// within a few thousand years (±10^11 s). A damaged or hand-edited file can hold anything
    /// in a REAL column, and every time read goes on to be planned from and sent over D-Bus as
    /// whole seconds, where a conversion of infinity or NaN would trap. Nil otherwise.
    static func saneTime(_ value: Double?) -> UnixTime? {
        guard let value, value.isFinite, abs(value) < 1e11 else { return nil }
        return value
    }

    /// A registered app; `nil` when its id is not one this agent accepts (it registers again).
    static func app(from row: Row, identifiers: [String: [String]]) throws -> AppRecord? {
        let rawID = try row.decode(String.self, forColumn: "app_id")
        guard let appID = AppID(rawValue: rawID) else { return nil }
        // An identity this agent cannot name is trusted least: unverified.
        let identity = IdentitySource(rawValue: try row.decode(String.self, forColumn: "identity")) ?? .unverified
        return AppRecord(
            appID: appID,
            identifiers: identifiers[rawID] ?? [],
            busName: try row.decode(String?.self, forColumn: "bus_name"),
            identity: identity,
            backgroundOnly: try row.decode(Bool.self, forColumn: "background_only"),
            enabled: try row.decode(Bool.self, forColumn: "enabled"),
            // Not a time (see `saneTime`): registered at the epoch, long ago, and not used since.
            registeredAt: saneTime(try row.decode(Double.self, forColumn: "registered_at")) ?? 0,
            lastUsedAt: saneTime(try row.decode(Double?.self, forColumn: "last_used_at")))
    }

    /// A pending request; `nil` for an unknown kind, which this agent could not deliver as asked.
    static func request(from row: Row) throws -> TaskRequest? {
        guard let appID = AppID(rawValue: try row.decode(String.self, forColumn: "app_id")),
            let kind = TaskKind(rawValue: try row.decode(String.self, forColumn: "kind"))
        else { return nil }
        return TaskRequest(
            appID: appID,
            identifier: try row.decode(String.self, forColumn: "identifier"),
            kind: kind,
            // Not a time (see `saneTime`): no earliest begin, rather than one never reached.
            earliestBegin: saneTime(try row.decode(Double?.self, forColumn: "earliest_begin")),
            requiresNetwork: try row.decode(Bool.self, forColumn: "requires_network"),
            requiresExternalPower: try row.decode(Bool.self, forColumn: "requires_external_power"),
            // Advisory only: a value out of UInt32's range is dropped rather than trapped on.
            expectedDuration: try row.decode(Int64?.self, forColumn: "expected_duration").flatMap { UInt32(exactly: $0) },
            submittedAt: saneTime(try row.decode(Double.self, forColumn: "submitted_at")) ?? 0,
            deliveryAttempts: try row.decode(Int.self, forColumn: "delivery_attempts"),
            lastAttemptAt: saneTime(try row.decode(Double?.self, forColumn: "last_attempt_at")),
            lastAttemptError: try row.decode(String?.self, forColumn: "last_attempt_error"))
    }

    /// A running task; `nil` for an unknown kind. `recoverInterrupted` reads the rows itself, so
    /// such a task still ends in history as interrupted.
    static func runningTask(from row: Row) throws -> RunningTaskRecord? {
        guard let appID = AppID(rawValue: try row.decode(String.self, forColumn: "app_id")),
            let kind = DeliveryKind(rawValue: try row.decode(String.self, forColumn: "kind"))
        else { return nil }
        return RunningTaskRecord(
            taskID: try row.decode(String.self, forColumn: "task_id"),
            sliceID: try row.decode(String.self, forColumn: "slice_id"),
            appID: appID,
            identifier: try row.decode(String.self, forColumn: "identifier"),
            kind: kind,
            startedAt: saneTime(try row.decode(Double.self, forColumn: "started_at")) ?? 0,
            deadline: saneTime(try row.decode(Double.self, forColumn: "deadline")) ?? 0)
    }

    /// A history entry; `nil` for an unknown event, which has no value to be read as. An unknown
    /// kind or result only loses that detail: it reads as "not known" (`nil`).
    static func historyEntry(from row: Row) throws -> HistoryEntry? {
        guard let event = HistoryEvent(rawValue: try row.decode(String.self, forColumn: "event")) else { return nil }
        return HistoryEntry(
            id: try row.decode(Int64.self, forColumn: "id"),
            time: saneTime(try row.decode(Double.self, forColumn: "time")) ?? 0,
            appID: try row.decode(String?.self, forColumn: "app_id").flatMap(AppID.init(rawValue:)),
            identifier: try row.decode(String?.self, forColumn: "identifier"),
            taskID: try row.decode(String?.self, forColumn: "task_id"),
            event: event,
            kind: try row.decode(String?.self, forColumn: "kind").flatMap(DeliveryKind.init(rawValue:)),
            result: try row.decode(String?.self, forColumn: "result").flatMap(TaskResult.init(rawValue:)),
            detail: try row.decode(String.self, forColumn: "detail"),
            cpuSeconds: try row.decode(Double?.self, forColumn: "cpu_seconds"),
            duration: try row.decode(Double?.self, forColumn: "duration"))
    }
}
