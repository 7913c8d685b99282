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

    /// Undoes `setCPUQuota`: puts back `usec`, the quota `cpuQuota(unit:)` read before it, so
    /// that a `CPUQuota=` of the user's own outlives the throttle; nil (not read) leaves none.
    public func restoreCPUQuota(unit: String, to usec: UInt64?) async throws {
        try await setQuota(unit: unit, usec: usec ?? Self.infinity)
    }

    /// The unit's `CPUQuotaPerSecUSec` now (`UInt64.max`: no limit). systemd has it not on
    /// `org.freedesktop.systemd1.Unit` but on the interface of the unit's type (`…Scope`,
    /// `…Service`, …), at the path `GetUnit` gives (`NoSuchUnit` when the unit is not loaded).
    public func cpuQuota(unit: String) async throws -> UInt64 {
        guard let interface = Self.cgroupInterface(of: unit) else {
            throw DBusError.invalidValue("\(unit) is not a unit with a cgroup (service, scope, slice, socket, mount or swap)")
        }
        let reply = try await call("GetUnit", [.string(unit)])
        guard case .objectPath(let path)? = reply.first else {
            throw DBusError.typeMismatch(expected: "o", got: reply.signatureText)
        }
        let value = try await call(
            path: path, interface: ObjectServer.propertiesInterface, "Get", [.string(interface), .string("CPUQuotaPerSecUSec")])
        guard case .variant(.uint64(let usec))? = value.first else {
            throw DBusError.typeMismatch(expected: "t", got: value.map(\.unwrappedVariant).signatureText)
        }
        return usec
    }

    /// The interface that holds the cgroup properties of `unit`'s type, by its suffix; nil for
    /// a type without a cgroup (systemd's `bus_cgroup_vtable` is on these six only).
    static func cgroupInterface(of unit: String) -> String? {
        guard let dot = unit.lastIndex(of: "."), let type = cgroupTypes[String(unit[unit.index(after: dot)...])] else { return nil }
        return "org.freedesktop.systemd1.\(type)"
    }

    static let cgroupTypes = [
        "service": "Service", "scope": "Scope", "slice": "Slice", "socket": "Socket", "mount": "Mount", "swap": "Swap",
    ]

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
    private func call(
        path: ObjectPath = Self.path, interface: String = Self.interface, _ member: String, _ body: [DBusValue]
    ) async throws -> [DBusValue] {
        let connection = connection
        let timeout = timeout
        return try await Task {
            try await connection.call(
                destination: Self.busName, path: path, interface: interface, member: member, body, timeout: timeout)
        }.value
    }
}
