@testable import BGPolicyAgent
import BGPolicyCore
import BGPolicyDBus
import BGPolicyStore
import BGPolicySystem
import BGPolicyTestSupport
import Glibc
import Logging
import Synchronization

/// The engine itself, on a private bus and a store the test gives: for what only the engine
/// decides (the order of its store writes, what it learns at start), without an agent process.
struct TestEngine {
    let bus: PrivateBus
    let connection: DBusConnection
    let engine: TaskEngine

    init(store: TaskStore, configuration: PolicyConfiguration = PolicyConfiguration()) async throws {
        bus = try PrivateBus()
        connection = try await DBusConnection.connect(to: .address(bus.address))
        engine = TaskEngine(
            store: store, policy: WindowPlanner(), configuration: configuration,
            connection: connection, inspector: .fromEnvironment(), logger: Logger(label: "test"))
        try await engine.load()
    }

    func close() {
        connection.close()
    }

    /// `id`, registered (unverified) by a connection that then left the bus: an app the engine
    /// knows, not in use, with nothing connected.
    func appThatLeft(_ id: String) async throws -> AppID {
        let app = try await DBusConnection.connect(to: .address(bus.address))
        var options = TaskEngine.RegisterOptions()
        options.appID = id
        let appID = try await engine.register(caller: app.uniqueName, pid: UInt32(getpid()), identifiers: ["\(id).refresh"], options: options)
        await engine.connectionVanished(app.uniqueName)
        app.close()
        return appID
    }

    /// `id`, registered (unverified) by `caller` with the one identifier `\(id).refresh`, whose
    /// refresh request is pending with an earliest begin an hour ahead: nothing runs it unless
    /// asked.
    func registerWithARefreshLater(_ id: String, caller: String) async throws -> AppID {
        var options = TaskEngine.RegisterOptions()
        options.appID = id
        let appID = try await engine.register(caller: caller, pid: UInt32(getpid()), identifiers: ["\(id).refresh"], options: options)
        var later = TaskEngine.SubmitOptions()
        later.earliestBegin = Int64(time(nil)) + 3600
        try await engine.submit(caller: caller, identifier: "\(id).refresh", kind: "refresh", options: later)
        return appID
    }

    /// A slice `id` of `appID` in `unit`, 30 s long with no tasks, put in the engine as a
    /// launch would have; `monitor` watching it when given.
    func addSlice(_ id: String, of appID: AppID, unit: String, monitor: CPUUsageMonitor? = nil) async -> Slice {
        var slice = Slice(
            id: id, appID: appID, connection: ":1.999", members: [], startedAt: Double(time(nil)),
            started: ContinuousClock.now, length: .seconds(30))
        slice.unit = unit
        slice.monitor = monitor
        await engine.add(slice)
        return slice
    }
}

extension TaskEngine {
    func add(_ slice: Slice) {
        slices[slice.id] = slice
    }
}

/// A one-shot gate for a thread (the store writer's, held by a job that waits on it): `wait()`
/// blocks until `open()`.
final class Gate: Sendable {
    private let opened = Mutex(false)

    func wait() {
        while !opened.withLock({ $0 }) { usleep(1_000) }
    }

    func open() {
        opened.withLock { $0 = true }
    }
}

/// An app on the harness's bus: a connection of its own, exporting `Client1`. Each `RunTask`
/// is counted, with the `seconds` it gives; those `holds` picks (by number, from 1) wait until
/// `open()`, then `answer` runs (returning answers the call, throwing answers it with that
/// error). `ExpireTask` is answered, and the task ids it named are kept (`expired`).
final class GatedApp: Sendable {
    let connection: DBusConnection
    private let serving: Task<Void, Never>
    private let state = State()

    private final class State: Sendable {
        let calls = Mutex(0)
        let seconds = Mutex<[UInt32]>([])
        let opened = Mutex(false)
        let expired = Mutex<[String]>([])
    }

    init(
        on bus: PrivateBus, holds: @escaping @Sendable (Int) -> Bool = { _ in true },
        answer: @escaping @Sendable (Int) throws -> Void = { _ in }
    ) async throws {
        connection = try await DBusConnection.connect(to: .address(bus.address))
        let state = state
        let client = ExportedInterface(AgentInterfaces.client)
            .method("RunTask") { call in
                let number = state.calls.withLock { count in
                    count += 1
                    return count
                }
                let seconds = try call.arguments.decode(UInt32.self, at: 3)
                state.seconds.withLock { $0.append(seconds) }
                while holds(number), !state.opened.withLock({ $0 }) { try await Task.sleep(for: .milliseconds(5)) }
                try answer(number)
                return []
            }
            .method("ExpireTask") { call in
                if case .string(let taskID)? = call.arguments.first { state.expired.withLock { $0.append(taskID) } }
                return []
            }
        try connection.objects.export([client], at: TaskEngine.clientPath)
        let connection = connection
        serving = Task { await connection.objects.serve() }
    }

    /// How many `RunTask` calls have arrived.
    var runTasks: Int { state.calls.withLock { $0 } }

    /// The task ids of the `ExpireTask` calls that have arrived, in order.
    var expired: [String] { state.expired.withLock { $0 } }

    /// The `seconds` of each `RunTask` that has arrived, in order.
    var runTaskSeconds: [UInt32] { state.seconds.withLock { $0 } }

    /// Waits until the first `RunTask` has arrived.
    func waitForRunTask() async throws {
        while runTasks == 0 { try await Task.sleep(for: .milliseconds(5)) }
    }

    /// Lets the held `RunTask` calls be answered.
    func open() {
        state.opened.withLock { $0 = true }
    }

    func close() {
        serving.cancel()
        connection.close()
    }
}

/// A stand-in for the systemd user manager on the harness's bus: `org.freedesktop.systemd1`,
/// exporting at `/org/freedesktop/systemd1` the `Manager` methods `handlers` names, each
/// answered by its handler (returning answers the call, throwing answers it with that error).
/// Calls from one connection are answered in order, as systemd does.
final class FakeUserManager: Sendable {
    let connection: DBusConnection
    private let serving: Task<Void, Never>

    /// The methods the CPU monitor calls, as `handlers` may name them.
    static let methods: [InterfaceDescription.Method] = [
        .init("SetUnitProperties", inputs: [
            .init("name", .string), .init("runtime", .boolean),
            .init("properties", .array(.structure([.string, .variant]))),
        ], documentation: "A test's."),
        .init("FreezeUnit", inputs: [.init("name", .string)], documentation: "A test's."),
        .init("ThawUnit", inputs: [.init("name", .string)], documentation: "A test's."),
    ]

    init(on bus: PrivateBus, handlers: [String: MethodHandler]) async throws {
        connection = try await DBusConnection.connect(to: .address(bus.address))
        var interface = ExportedInterface(InterfaceDescription(
            name: "org.freedesktop.systemd1.Manager", documentation: "The part the CPU monitor calls.",
            methods: Self.methods.filter { handlers[$0.name] != nil }))
        for (name, handler) in handlers.sorted(by: { $0.key < $1.key }) { interface = interface.method(name, handler) }
        try connection.objects.export([interface], at: ObjectPath("/org/freedesktop/systemd1"))
        let connection = connection
        serving = Task { await connection.objects.serve() }
        _ = try await connection.requestName("org.freedesktop.systemd1")
    }

    func close() {
        serving.cancel()
        connection.close()
    }
}
