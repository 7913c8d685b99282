import BGPolicyDBus
import BGPolicyTestSupport
import Foundation

@testable import BGPolicySystem

/// A private dbus-daemon with python-dbusmock's `systemd` template on it, as the user manager.
final class MockUserManager: @unchecked Sendable {
    var address: String { bus.address }
    /// Ended after the mock, when the manager is released (PrivateBus, which leaves no socket file).
    private let bus: PrivateBus
    private var mock: ChildProcess?

    init() throws {
        bus = try PrivateBus()
    }

    /// The stock template plus `Subscribe` (Tests/integration/systemd_user_template.py).
    static let subscribingTemplate = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("integration/systemd_user_template.py").path

    /// Starts the mock and waits (bounded) until it owns org.freedesktop.systemd1.
    func start(connection: DBusConnection, template: String = "systemd") async throws {
        var environment = ProcessInfo.processInfo.environment
        environment["DBUS_SESSION_BUS_ADDRESS"] = address
        let mock = try ChildProcess("/usr/bin/python3", ["-m", "dbusmock", "--session", "--template", template], environment: environment)
        self.mock = mock
        let deadline = ContinuousClock.now + .seconds(20)
        while try await connection.nameOwner(of: SystemdUserManagerProxy.busName) == nil {
            guard ContinuousClock.now < deadline, mock.isRunning else { throw CocoaError(.executableLoad) }
            try await Task.sleep(for: .milliseconds(50))
        }
    }

    /// Ends the mock (SIGKILL, by pid) and waits (bounded) until its name is free.
    func stopMock(connection: DBusConnection) async throws {
        guard let mock else { return }
        mock.kill()
        self.mock = nil
        let deadline = ContinuousClock.now + .seconds(20)
        while try await connection.nameOwner(of: SystemdUserManagerProxy.busName) != nil {
            guard ContinuousClock.now < deadline else { throw CocoaError(.executableLoad) }
            try await Task.sleep(for: .milliseconds(50))
        }
    }

    deinit {
        mock?.kill()
    }
}
