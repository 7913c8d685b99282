import BGPolicyCore
import BGPolicyDBus
import Logging
import Synchronization
import Testing

@testable import BGPolicySystem

/// `AppUnitSource` against python-dbusmock's systemd user manager on a private bus: the
/// manager appears after the source started, is subscribed to, emits real GNOME and KDE unit
/// names among others, then restarts.
/// What the source reported, in order.
final class Reported: Sendable {
    let events = Mutex<[AppUnitEvent]>([])
    /// The running app units reported at each connection to a manager.
    let running = Mutex<[[RunningAppUnit]]>([])
}

@Suite("AppUnitSource", .serialized)
struct AppUnitSourceTests {
    static let managerPath = try! ObjectPath("/org/freedesktop/systemd1")
    static let managerInterface = "org.freedesktop.systemd1.Manager"

    func emit(_ connection: DBusConnection, _ member: String, _ unit: String) async throws {
        let path = DBusValue.objectPath(try ObjectPath("/org/freedesktop/systemd1/unit/u"))
        _ = try await connection.call(
            destination: SystemdUserManagerProxy.busName, path: Self.managerPath, interface: "org.freedesktop.DBus.Mock",
            member: "EmitSignal",
            [.string(Self.managerInterface), .string(member), .string("so"), .array(element: .variant, [.variant(.string(unit)), .variant(path)])],
            timeout: .seconds(5))
    }

    /// The mock manager emits `Reloading(active)`.
    func emitReloading(_ connection: DBusConnection, _ active: Bool) async throws {
        _ = try await connection.call(
            destination: SystemdUserManagerProxy.busName, path: Self.managerPath, interface: "org.freedesktop.DBus.Mock",
            member: "EmitSignal",
            [.string(Self.managerInterface), .string("Reloading"), .string("b"), .array(element: .variant, [.variant(.boolean(active))])],
            timeout: .seconds(5))
    }

    /// Calls the mock manager's `member` (`StartUnit`, `StopUnit`) for `unit`.
    func manage(_ connection: DBusConnection, _ member: String, _ unit: String) async throws {
        _ = try await connection.call(
            destination: SystemdUserManagerProxy.busName, path: Self.managerPath, interface: Self.managerInterface,
            member: member, [.string(unit), .string("replace")], timeout: .seconds(5))
    }

    /// Waits (bounded) until the running mock logged a `Subscribe` call.
    func waitForSubscribe(_ connection: DBusConnection) async throws {
        let deadline = ContinuousClock.now + .seconds(20)
        while true {
            let reply = try await connection.call(
                destination: SystemdUserManagerProxy.busName, path: Self.managerPath, interface: "org.freedesktop.DBus.Mock",
                member: "GetMethodCalls", [.string("Subscribe")], timeout: .seconds(5))
            if case .array(_, let calls)? = reply.first, !calls.isEmpty { return }
            guard ContinuousClock.now < deadline else { throw DBusError.invalidValue("the source never called Subscribe") }
            try await Task.sleep(for: .milliseconds(20))
        }
    }

    /// Waits (bounded, 10 s) until `seen` holds `count` events; returns them all.
    func wait(for count: Int, in seen: Reported) async throws -> [AppUnitEvent] {
        let deadline = ContinuousClock.now + .seconds(10)
        while seen.events.withLock({ $0.count }) < count, ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(20))
        }
        return seen.events.withLock { $0 }
    }

    func event(_ id: String, _ change: AppUnitEvent.Change, _ unit: String) -> AppUnitEvent {
        AppUnitEvent(appID: AppID(rawValue: id)!, change: change, unit: unit)
    }

    @Test("app units are reported in order, other units not; a manager that appears late or restarts is followed")
    func follows() async throws {
        let manager = try MockUserManager()
        let sourceConnection = try await DBusConnection.connect(to: .address(manager.address))
        defer { sourceConnection.close() }
        let control = try await DBusConnection.connect(to: .address(manager.address))
        defer { control.close() }

        let seen = Reported()
        let source = AppUnitSource(sessionBus: sourceConnection)
        let running = Task {
            await source.run(logger: Logger(label: "test")) { units in
                seen.running.withLock { $0.append(units) }
            } report: { event in
                seen.events.withLock { $0.append(event) }
            }
        }

        // The manager appears after the source started.
        try await manager.start(connection: control, template: MockUserManager.subscribingTemplate)
        try await waitForSubscribe(control)
        for (member, unit) in [
            ("UnitNew", "session-2.scope"), ("UnitNew", "dbus.service"), ("JobNew", "app-gnome-org.gnome.Maps-12345.scope"),
            ("UnitNew", "app-gnome-org.gnome.Maps-12345.scope"), ("UnitNew", "app-org.kde.konsole-a1b2c3.scope"),
            ("UnitRemoved", "dbus.service"), ("UnitRemoved", "app-org.kde.dolphin@12ab.service"),
            ("UnitRemoved", "app-gnome-org.gnome.Maps-12345.scope"),
        ] {
            try await emit(control, member, unit)
        }
        let first: [AppUnitEvent] = [
            event("org.gnome.Maps", .opened, "app-gnome-org.gnome.Maps-12345.scope"),
            event("org.kde.konsole", .opened, "app-org.kde.konsole-a1b2c3.scope"),
            event("org.kde.dolphin", .closed, "app-org.kde.dolphin@12ab.service"),
            event("org.gnome.Maps", .closed, "app-gnome-org.gnome.Maps-12345.scope"),
        ]
        #expect(try await wait(for: 4, in: seen) == first)

        // It restarts: the new manager is subscribed to and heard.
        try await manager.stopMock(connection: control)
        try await manager.start(connection: control, template: MockUserManager.subscribingTemplate)
        try await waitForSubscribe(control)
        try await emit(control, "UnitNew", "app-org.kde.konsole-a1b2c3.scope")
        #expect(try await wait(for: 5, in: seen) == first + [event("org.kde.konsole", .opened, "app-org.kde.konsole-a1b2c3.scope")])
        // Each manager was asked which app units run (none in these mocks: the agent's tests
        // start some) before its signals were followed.
        #expect(seen.running.withLock { $0 } == [[], []])

        running.cancel()
        await running.value
    }

    @Test("a reload's signals are held: only the app unit that really went is reported, once the reload is done")
    func reload() async throws {
        let manager = try MockUserManager()
        let sourceConnection = try await DBusConnection.connect(to: .address(manager.address))
        defer { sourceConnection.close() }
        let control = try await DBusConnection.connect(to: .address(manager.address))
        defer { control.close() }
        try await manager.start(connection: control, template: MockUserManager.subscribingTemplate)
        let nautilus = "app-gnome-org.gnome.Nautilus-12345.scope", konsole = "app-org.kde.konsole-a1b2c3.scope"
        for unit in [nautilus, konsole] {
            _ = try await control.call(
                destination: SystemdUserManagerProxy.busName, path: Self.managerPath, interface: "org.freedesktop.DBus.Mock",
                member: "AddMockUnit", [.string(unit)], timeout: .seconds(5))
            try await manage(control, "StartUnit", unit)
        }

        let seen = Reported()
        let source = AppUnitSource(sessionBus: sourceConnection)
        let running = Task {
            await source.run(logger: Logger(label: "test")) { units in
                seen.running.withLock { $0.append(units) }
            } report: { event in
                seen.events.withLock { $0.append(event) }
            }
        }
        try await waitForSubscribe(control)
        // Both scopes are taken down and built again; Konsole exits meanwhile, and is not built again.
        try await emitReloading(control, true)
        for unit in ["dbus.service", nautilus, konsole] { try await emit(control, "UnitRemoved", unit) }
        for unit in ["dbus.service", nautilus] { try await emit(control, "UnitNew", unit) }
        try await manage(control, "StopUnit", konsole)
        try await emitReloading(control, false)
        // Maps opens after the reload: once it is reported, the reload's end has been handled.
        try await emit(control, "UnitNew", "app-gnome-org.gnome.Maps-12345.scope")
        #expect(try await wait(for: 2, in: seen) == [
            event("org.kde.konsole", .closed, konsole),
            event("org.gnome.Maps", .opened, "app-gnome-org.gnome.Maps-12345.scope"),
        ])
        #expect(seen.running.withLock { $0 }.map { $0.map(\.unit) } == [[nautilus, konsole].sorted()])

        running.cancel()
        await running.value
    }
}
