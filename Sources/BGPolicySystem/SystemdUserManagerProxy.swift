public import BGPolicyDBus

/// The CPU monitor's levers on an app's unit, through the systemd user manager
/// (`org.freedesktop.systemd1` on the session bus; the contract's "The systemd user manager").
/// Every change is runtime-only: nothing is written to the user's unit files.
public struct SystemdUserManagerProxy: Sendable {
    public static let busName = "org.freedesktop.systemd1"
    static let path = try! ObjectPath("/org/freedesktop/systemd1")
    static let interface = "org.freedesktop.systemd1.Manager"
    /// The quota systemd reads as "no limit" (`CPUQuota=` cleared).
    static let infinity = UInt64.max

    let connection: DBusConnection
    /// Short: the monitor acts on a running slice, and a manager that does not answer soon is
    /// of no use to it.
    let timeout: Duration

    public init(connection: DBusConnection) {
        self.init(connection: connection, timeout: .seconds(5))
    }

    init(connection: DBusConnection, timeout: Duration) {
        self.connection = connection
        self.timeout = timeout
    }

    /// Limits `unit` to `percent` % of one CPU (`CPUQuotaPerSecUSec` = percent × 10 000 µs; more
    /// than 100 spans several CPUs).
    public func setCPUQuota(unit: String, percent: Int) async throws {
        guard percent >= 1 else { throw DBusError.invalidValue("a CPU quota is at least 1 %, not \(percent) %") }
        let (usec, overflow) = UInt64(percent).multipliedReportingOverflow(by: 10_000)
        guard !overflow, usec != Self.infinity else { throw DBusError.invalidValue("a CPU quota of \(percent) % is too large") }
        try await setQuota(unit: unit, usec: usec)
    }

    /// Removes the limit `setCPUQuota` set.
    public func clearCPUQuota(unit: String) async throws {
        try await setQuota(unit: unit, usec: Self.infinity)
    }

    /// Freezes every process of `unit` (cgroup freezer); `thaw` releases them.
    public func freeze(unit: String) async throws {
        _ = try await call("FreezeUnit", [.string(unit)])
    }

    public func thaw(unit: String) async throws {
        _ = try await call("ThawUnit", [.string(unit)])
    }

    private func setQuota(unit: String, usec: UInt64) async throws {
        let property = DBusValue.structure([.string("CPUQuotaPerSecUSec"), .variant(.uint64(usec))])
        let properties = DBusValue.array(element: .structure([.string, .variant]), [property])
        _ = try await call("SetUnitProperties", [.string(unit), .boolean(true), properties])
    }

    /// Not cancellable: each call changes a unit, and a request on its way may have reached
    /// systemd, which makes the change whether or not anyone waits for the answer. So the call
    /// runs in a task of its own, which the caller's cancellation does not reach, and the caller
    /// always learns how it ended. (A call from a cancelled task used to fail before it was sent,
    /// or stop waiting once sent: the undo of a slice closed by its own deadline timer, which the
    /// close cancels, thawed nothing; a freeze on its way when the slice ended was taken as not
    /// done, while the unit stayed frozen.)
    private func call(_ member: String, _ body: [DBusValue]) async throws -> [DBusValue] {
        let connection = connection
        let timeout = timeout
        return try await Task {
            try await connection.call(
                destination: Self.busName, path: Self.path, interface: Self.interface, member: member, body, timeout: timeout)
        }.value
    }
}
