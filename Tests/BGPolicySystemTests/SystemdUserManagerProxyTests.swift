import BGPolicyDBus
import Foundation
import Testing

@testable import BGPolicySystem

@Suite("SystemdUserManagerProxy", .serialized)
struct SystemdUserManagerProxyTests {
    static let managerPath = try! ObjectPath("/org/freedesktop/systemd1")
    static let managerInterface = "org.freedesktop.systemd1.Manager"
    static let mockInterface = "org.freedesktop.DBus.Mock"

    /// Adds a method to the mock manager; `code` is Python run on each call.
    func addMethod(_ connection: DBusConnection, _ name: String, signature: String, code: String = "") async throws {
        _ = try await connection.call(
            destination: SystemdUserManagerProxy.busName, path: Self.managerPath, interface: Self.mockInterface, member: "AddMethod",
            [.string(Self.managerInterface), .string(name), .string(signature), .string(""), .string(code)], timeout: .seconds(5))
    }

    /// The arguments of each call of `method` the mock received.
    func calls(_ connection: DBusConnection, _ method: String) async throws -> [[DBusValue]] {
        let reply = try await connection.call(
            destination: SystemdUserManagerProxy.busName, path: Self.managerPath, interface: Self.mockInterface, member: "GetMethodCalls",
            [.string(method)], timeout: .seconds(5))
        guard case .array(_, let entries)? = reply.first else { return [] }
        return entries.compactMap { entry in
            guard case .structure(let fields) = entry, fields.count == 2, case .array(_, let arguments) = fields[1] else { return nil }
            return arguments.map(\.unwrappedVariant)
        }
    }

    @Test("quota, restore, freeze and thaw reach the manager with systemd's signatures")
    func calls() async throws {
        let manager = try MockUserManager()
        let connection = try await DBusConnection.connect(to: .address(manager.address))
        defer { connection.close() }
        try await manager.start(connection: connection)
        try await addMethod(connection, "SetUnitProperties", signature: "sba(sv)")
        try await addMethod(connection, "FreezeUnit", signature: "s")
        try await addMethod(connection, "ThawUnit", signature: "s")

        let proxy = SystemdUserManagerProxy(connection: connection)
        let unit = #"app-gnome-firefox\x2desr-9876.scope"#
        try await proxy.setCPUQuota(unit: unit, percent: 10)
        try await proxy.setCPUQuota(unit: unit, percent: 250)
        try await proxy.restoreCPUQuota(unit: unit, to: 500_000)
        try await proxy.restoreCPUQuota(unit: unit, to: nil)
        try await proxy.freeze(unit: unit)
        try await proxy.thaw(unit: unit)

        func quota(_ usec: UInt64) -> [DBusValue] {
            [.string(unit), .boolean(true),
             .array(element: .structure([.string, .variant]), [.structure([.string("CPUQuotaPerSecUSec"), .variant(.uint64(usec))])])]
        }
        #expect(try await calls(connection, "SetUnitProperties") == [quota(100_000), quota(2_500_000), quota(500_000), quota(UInt64.max)])
        #expect(try await calls(connection, "FreezeUnit") == [[.string(unit)]])
        #expect(try await calls(connection, "ThawUnit") == [[.string(unit)]])
    }

    @Test("a unit's quota is read from the interface of its type")
    func quotaRead() async throws {
        let manager = try MockUserManager()
        let connection = try await DBusConnection.connect(to: .address(manager.address))
        defer { connection.close() }
        try await manager.start(connection: connection)
        /// A unit of the mock's, with `quota` as CPUQuotaPerSecUSec on `interface`.
        func addUnit(_ name: String, _ interface: String, _ quota: UInt64) async throws {
            _ = try await connection.call(
                destination: SystemdUserManagerProxy.busName, path: Self.managerPath, interface: Self.mockInterface,
                member: "AddMockUnit", [.string(name)], timeout: .seconds(5))
            let escaped = name.replacingOccurrences(of: ".", with: "_").replacingOccurrences(of: "-", with: "_")
            _ = try await connection.call(
                destination: SystemdUserManagerProxy.busName, path: try ObjectPath("/org/freedesktop/systemd1/unit/\(escaped)"),
                interface: Self.mockInterface, member: "AddProperty",
                [.string(interface), .string("CPUQuotaPerSecUSec"), .variant(.uint64(quota))], timeout: .seconds(5))
        }
        try await addUnit("app-gnome-org.example.A-1.scope", "org.freedesktop.systemd1.Scope", 500_000)
        try await addUnit("app-org.example.B-2.service", "org.freedesktop.systemd1.Service", UInt64.max)
        try await addUnit("app-org.example.C-3.service", "org.freedesktop.systemd1.Scope", 200_000)

        let proxy = SystemdUserManagerProxy(connection: connection)
        #expect(try await proxy.cpuQuota(unit: "app-gnome-org.example.A-1.scope") == 500_000)
        #expect(try await proxy.cpuQuota(unit: "app-org.example.B-2.service") == UInt64.max)
        // On another type's interface: not this unit's quota.
        await #expect(throws: DBusError.self) { try await proxy.cpuQuota(unit: "app-org.example.C-3.service") }
        await #expect(throws: DBusError.self) { try await proxy.cpuQuota(unit: "app-org.example.D-4.service") }
        await #expect(throws: DBusError.invalidValue("default.target is not a unit with a cgroup (service, scope, slice, socket, mount or swap)")) {
            try await proxy.cpuQuota(unit: "default.target")
        }
    }

    @Test("the manager's errors reach the caller; a silent manager times out")
    func errors() async throws {
        let manager = try MockUserManager()
        let connection = try await DBusConnection.connect(to: .address(manager.address))
        defer { connection.close() }
        try await manager.start(connection: connection)
        try await addMethod(
            connection, "FreezeUnit", signature: "s",
            code: "raise dbus.exceptions.DBusException('Unit x.scope not loaded.', name='org.freedesktop.systemd1.NoSuchUnit')")
        try await addMethod(connection, "ThawUnit", signature: "s", code: "import time; time.sleep(3)")

        let proxy = SystemdUserManagerProxy(connection: connection)
        await #expect(throws: DBusError.remote(name: "org.freedesktop.systemd1.NoSuchUnit", message: "Unit x.scope not loaded.")) {
            try await proxy.freeze(unit: "x.scope")
        }
        // No such method on the mock: systemd's own answer for an unknown member comes back as is.
        await #expect(throws: DBusError.self) { try await proxy.restoreCPUQuota(unit: "x.scope", to: nil) }
        await #expect(throws: DBusError.self) { try await proxy.setCPUQuota(unit: "x.scope", percent: 0) }
        await #expect(throws: DBusError.self) { try await proxy.setCPUQuota(unit: "x.scope", percent: Int.max) }

        let impatient = SystemdUserManagerProxy(connection: connection, timeout: .milliseconds(300))
        let started = ContinuousClock.now
        await #expect(throws: DBusError.self) { try await impatient.thaw(unit: "x.scope") }
        #expect(ContinuousClock.now - started < .seconds(2))
    }
}
