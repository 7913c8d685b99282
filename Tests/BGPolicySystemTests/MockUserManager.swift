import BGPolicyDBus
import Foundation

@testable import BGPolicySystem

/// A private dbus-daemon with python-dbusmock's `systemd` template on it, as the user manager.
final class MockUserManager: @unchecked Sendable {
    let address: String
    private let bus: Process
    private var mock: Process?

    init() throws {
        bus = Process()
        bus.executableURL = URL(fileURLWithPath: "/usr/bin/dbus-daemon")
        bus.arguments = ["--session", "--nofork", "--nopidfile", "--print-address=1"]
        let pipe = Pipe()
        bus.standardOutput = pipe
        bus.standardError = FileHandle.nullDevice
        try bus.run()
        var data = Data()
        while !data.contains(UInt8(ascii: "\n")) {
            let chunk = pipe.fileHandleForReading.availableData
            guard !chunk.isEmpty else { break }
            data.append(chunk)
        }
        guard let line = String(decoding: data, as: UTF8.self).split(separator: "\n").first else {
            kill(bus.processIdentifier, SIGKILL)
            bus.waitUntilExit()
            throw CocoaError(.fileReadUnknown)
        }
        address = String(line)
    }

    /// The stock template plus `Subscribe` (Tests/integration/systemd_user_template.py).
    static let subscribingTemplate = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("integration/systemd_user_template.py").path

    /// Starts the mock and waits (bounded) until it owns org.freedesktop.systemd1.
    func start(connection: DBusConnection, template: String = "systemd") async throws {
        let mock = Process()
        mock.executableURL = URL(fileURLWithPath: "/usr/bin/python3")
        mock.arguments = ["-m", "dbusmock", "--session", "--template", template]
        var environment = ProcessInfo.processInfo.environment
        environment["DBUS_SESSION_BUS_ADDRESS"] = address
        mock.environment = environment
        mock.standardOutput = FileHandle.nullDevice
        mock.standardError = FileHandle.nullDevice
        try mock.run()
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
        kill(mock.processIdentifier, SIGKILL)
        mock.waitUntilExit()
        self.mock = nil
        let deadline = ContinuousClock.now + .seconds(20)
        while try await connection.nameOwner(of: SystemdUserManagerProxy.busName) != nil {
            guard ContinuousClock.now < deadline else { throw CocoaError(.executableLoad) }
            try await Task.sleep(for: .milliseconds(50))
        }
    }

    deinit {
        // By pid, and SIGKILL: the test runner's threads may block SIGTERM for children.
        for process in [mock, bus].compactMap({ $0 }) where process.isRunning {
            kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
        }
    }
}
