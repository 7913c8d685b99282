@testable import BackgroundTasks
import BGPolicyCore
import BGPolicyDBus
import BGPolicyTestSupport
import Foundation
import Synchronization
import Testing

/// bgpolicyd itself, from the same build folder as the tests, on a private bus with a state
/// directory of its own that survives `stop()`, `kill()` and `start()`. Work runs as soon as
/// it is eligible (1-s windows, refresh in every window), as in the integration tests.
final class RealAgent: @unchecked Sendable {
    let bus: PrivateBus
    let directory: URL
    /// The test's own connection, for Admin1 and to watch the agent's name.
    let admin: DBusConnection
    private let process = Mutex<ChildProcess?>(nil)

    static let immediateWindows = """
        [windows]
        grid_on_battery = 1s
        grid_on_ac = 1s
        [refresh]
        strategy = every-window

        """

    /// The agent's binary: `$BGPOLICY_BUILD_DIR/bgpolicyd`, or next to the test runner.
    static var executable: URL {
        if let dir = ProcessInfo.processInfo.environment["BGPOLICY_BUILD_DIR"], !dir.isEmpty {
            return URL(fileURLWithPath: dir).appendingPathComponent("bgpolicyd")
        }
        let runner = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath()
        // .build/debug/bgpolicyPackageTests.xctest, or a bundle's Contents/MacOS/… elsewhere.
        var dir = runner.deletingLastPathComponent()
        while dir.path != "/" {
            let candidate = dir.appendingPathComponent("bgpolicyd")
            if FileManager.default.isExecutableFile(atPath: candidate.path) { return candidate }
            dir = dir.deletingLastPathComponent()
        }
        return runner.deletingLastPathComponent().appendingPathComponent("bgpolicyd")
    }

    /// A private bus, and the agent on it (started unless `start` is false). With
    /// `activatable`, the bus can start the agent itself, as a session bus where bgpolicyd is
    /// installed does (D-Bus activation); each such start is counted (`activations`).
    init(start: Bool = true, config: String = RealAgent.immediateWindows, activatable: Bool = false) async throws {
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("bgpolicy-lib-\(UUID().uuidString)")
        let configDir = directory.appendingPathComponent("config/bgpolicy")
        try FileManager.default.createDirectory(at: configDir, withIntermediateDirectories: true)
        try Data(config.utf8).write(to: configDir.appendingPathComponent("bgpolicy.conf"))
        bus = activatable ? try Self.activatingBus(in: directory) : try PrivateBus()
        admin = try await DBusConnection.connect(to: .address(bus.address))
        if start { try await self.start() }
    }

    deinit {
        if let process = process.withLock({ $0 }) {
            process.kill()
        }
        admin.close()
        try? FileManager.default.removeItem(at: directory)
    }

    var address: DBusConnection.Bus { .address(bus.address) }

    /// A bus with one service directory, whose activation file starts bgpolicyd as `start()`
    /// does, after noting the start in `activations`.
    private static func activatingBus(in directory: URL) throws -> PrivateBus {
        let services = directory.appendingPathComponent("services")
        try FileManager.default.createDirectory(at: services, withIntermediateDirectories: true)
        let path = directory.path
        let command = "echo started >> \(path)/activations; exec /usr/bin/env -u JOURNAL_STREAM"
            + " XDG_STATE_HOME=\(path)/state XDG_CONFIG_HOME=\(path)/config DBUS_SYSTEM_BUS_ADDRESS=unix:path=/nonexistent"
            + " \(executable.path) --log-level debug >> \(path)/agent.log 2>&1"
        let activation = "[D-BUS Service]\nName=\(BGPolicyNames.busName)\nExec=/bin/sh -c '\(command)'\n"
        try Data(activation.utf8).write(to: services.appendingPathComponent("\(BGPolicyNames.busName).service"))
        let config = directory.appendingPathComponent("bus.conf")
        try Data(
            """
            <busconfig>
              <type>session</type>
              <listen>unix:tmpdir=/tmp</listen>
              <auth>EXTERNAL</auth>
              <servicedir>\(services.path)</servicedir>
              <policy context="default">
                <allow send_destination="*" eavesdrop="true"/>
                <allow eavesdrop="true"/>
                <allow own="*"/>
              </policy>
            </busconfig>
            """.utf8
        ).write(to: config)
        return try PrivateBus(configFile: config.path)
    }

    /// How many times the bus has started the agent (an `activatable` bus's).
    var activations: Int {
        let text = (try? String(contentsOf: directory.appendingPathComponent("activations"), encoding: .utf8)) ?? ""
        return text.split(separator: "\n").count
    }

    /// SIGTERM to the agent the bus started; returns once its name is free.
    func stopActivated() async throws {
        guard let owner = try await owner() else { return }
        let pid = try await admin.call(
            destination: "org.freedesktop.DBus", path: try ObjectPath("/org/freedesktop/DBus"), interface: "org.freedesktop.DBus",
            member: "GetConnectionUnixProcessID", [.string(owner)]
        ).decode(UInt32.self, at: 0)
        Glibc.kill(pid_t(pid), SIGTERM)
        try await waitUntil("the agent's name to be free") { try await self.owner() == nil }
    }

    /// Starts the agent and returns once it owns its name.
    func start() async throws {
        let executable = Self.executable
        guard FileManager.default.isExecutableFile(atPath: executable.path) else {
            Issue.record("\(executable.path) is missing: swift build --build-tests builds it (or set BGPOLICY_BUILD_DIR)")
            throw CancellationError()
        }
        var environment = ProcessInfo.processInfo.environment
        environment["DBUS_SESSION_BUS_ADDRESS"] = bus.address
        environment["DBUS_SYSTEM_BUS_ADDRESS"] = "unix:path=/nonexistent"
        environment["XDG_STATE_HOME"] = directory.appendingPathComponent("state").path
        environment["XDG_CONFIG_HOME"] = directory.appendingPathComponent("config").path
        environment.removeValue(forKey: "JOURNAL_STREAM")
        let log = directory.appendingPathComponent("agent.log").path
        let agent = try ChildProcess(
            executable.path, ["--log-level", "debug"], environment: environment, standardOutput: .file(log), standardError: .file(log))
        process.withLock { $0 = agent }
        try await waitUntil("bgpolicyd to own its name") {
            guard agent.isRunning else {
                Issue.record("bgpolicyd exited (wait status \(agent.waitForExit())):\n\(self.log)")
                throw CancellationError()
            }
            return try await self.owner() != nil
        }
    }

    /// What the agent wrote to standard error, for failure messages.
    var log: String {
        (try? String(contentsOf: directory.appendingPathComponent("agent.log"), encoding: .utf8)) ?? ""
    }

    func owner() async throws -> String? {
        try await admin.nameOwner(of: BGPolicyNames.busName)
    }

    /// SIGTERM: the agent stops cleanly (running slices get `ExpireTask`); returns once its name is free.
    func stop() async throws {
        try await end(SIGTERM)
    }

    /// SIGKILL: the agent vanishes mid-whatever; returns once its name is free.
    func kill() async throws {
        try await end(SIGKILL)
    }

    /// Sends `signal` to the agent, and returns at once.
    func signal(_ signal: Int32) {
        guard let agent = process.withLock({ $0 }) else { return }
        agent.signal(signal)
    }

    private func end(_ signal: Int32) async throws {
        guard let agent = process.withLock({ $0 }) else { return }
        agent.signal(signal)
        agent.waitForExit()
        try await waitUntil("the agent's name to be free") { try await self.owner() == nil }
    }

    // MARK: Admin1, from the test's own connection

    @discardableResult
    func adminCall(_ member: String, _ body: [DBusValue] = []) async throws -> [DBusValue] {
        try await admin.call(
            destination: BGPolicyNames.busName, path: BGTaskScheduler.agentPath, interface: BGPolicyNames.adminInterface,
            member: member, body)
    }

    func simulateLaunch(_ appID: String, _ identifier: String) async throws {
        try await adminCall("SimulateLaunch", [.string(appID), .string(identifier)])
    }

    func simulateExpiration(_ appID: String, _ identifier: String) async throws {
        try await adminCall("SimulateExpiration", [.string(appID), .string(identifier)])
    }

    /// `ListPending`'s identifiers for `appID`.
    func pending(of appID: String) async throws -> [String] {
        let entries = try await adminCall("ListPending").decode([[String: Variant]].self, at: 0)
        return try entries.filter { try $0.optional("app_id", as: String.self) == appID }
            .compactMap { try $0.optional("identifier", as: String.self) }.sorted()
    }

    /// `ListApps`' entry for `appID`.
    func app(_ appID: String) async throws -> [String: Variant]? {
        let entries = try await adminCall("ListApps").decode([[String: Variant]].self, at: 0)
        return try entries.first { try $0.optional("app_id", as: String.self) == appID }
    }

    /// History events (`event`, `detail`) for `appID`, oldest first.
    func history(of appID: String) async throws -> [(event: String, identifier: String, detail: String)] {
        let entries = try await adminCall("GetHistory", [.int64(0), .uint32(10_000)]).decode([[String: Variant]].self, at: 0)
        return try entries.filter { try $0.optional("app_id", as: String.self) == appID }.map {
            (try $0.optional("event", as: String.self) ?? "", try $0.optional("identifier", as: String.self) ?? "",
             try $0.optional("detail", as: String.self) ?? "")
        }
    }
}

/// Polls `condition` every 10 ms for up to `seconds`.
func waitUntil(_ what: String, seconds: Double = 10, _ condition: () async throws -> Bool) async throws {
    let deadline = ContinuousClock.now + .milliseconds(Int(seconds * 1000))
    while ContinuousClock.now < deadline {
        if try await condition() { return }
        try await Task.sleep(for: .milliseconds(10))
    }
    Issue.record("timed out waiting for \(what)")
    throw CancellationError()
}
