import BGPolicyCore
import BGPolicyDBus
import Logging
import Synchronization
import Testing

@testable import BGPolicySystem

/// A stand-in for mutter's `org.gnome.Mutter.IdleMonitor` on its own connection: it hands out
/// watch ids, records the calls, answers `GetIdletime` with a value the test sets, and fires
/// watches when told.
final class FakeIdleMonitor: Sendable {
    struct State {
        var nextID: UInt32 = 1
        var idleWatches: [UInt32: UInt64] = [:]
        var activeWatches: Set<UInt32> = []
        var removed: [UInt32] = []
        var idleTime: UInt64 = 0
    }

    final class Shared: Sendable {
        let state = Mutex(State())
    }

    let connection: DBusConnection
    private let shared = Shared()
    private let serving: Task<Void, Never>

    static let description = InterfaceDescription(
        name: IdleMonitorSource.interface, documentation: "",
        methods: [
            .init("GetIdletime", outputs: [.init("idletime", .uint64)], documentation: ""),
            .init("AddIdleWatch", inputs: [.init("interval", .uint64)], outputs: [.init("id", .uint32)], documentation: ""),
            .init("AddUserActiveWatch", outputs: [.init("id", .uint32)], documentation: ""),
            .init("RemoveWatch", inputs: [.init("id", .uint32)], documentation: ""),
        ],
        signals: [.init("WatchFired", arguments: [.init("id", .uint32)], documentation: "")])

    init(address: String, idleTime: UInt64 = 0) async throws {
        connection = try await DBusConnection.connect(to: .address(address))
        let shared = self.shared
        shared.state.withLock { $0.idleTime = idleTime }
        let interface = ExportedInterface(Self.description)
            .method("GetIdletime") { _ in [.uint64(shared.state.withLock { $0.idleTime })] }
            .method("AddIdleWatch") { call in
                let interval = try call.arguments.decode(UInt64.self, at: 0)
                return [.uint32(shared.state.withLock { s in
                    defer { s.nextID += 1 }
                    s.idleWatches[s.nextID] = interval
                    return s.nextID
                })]
            }
            .method("AddUserActiveWatch") { _ in
                [.uint32(shared.state.withLock { s in
                    defer { s.nextID += 1 }
                    s.activeWatches.insert(s.nextID)
                    return s.nextID
                })]
            }
            .method("RemoveWatch") { call in
                let id = try call.arguments.decode(UInt32.self, at: 0)
                shared.state.withLock { s in
                    s.removed.append(id)
                    s.idleWatches[id] = nil
                    s.activeWatches.remove(id)
                }
                return []
            }
        try connection.objects.export([interface], at: IdleMonitorSource.path)
        let connection = self.connection
        serving = Task { await connection.objects.serve() }
        _ = try await connection.requestName(IdleMonitorSource.busName, flags: [.doNotQueue])
    }

    /// Fires a watch; a user-active watch is removed, as mutter does.
    func fire(_ id: UInt32) throws {
        withState { _ = $0.activeWatches.remove(id) }
        try connection.emitSignal(path: IdleMonitorSource.path, interface: IdleMonitorSource.interface, member: "WatchFired", body: [.uint32(id)])
    }

    func withState<R>(_ body: (inout State) -> R) -> R {
        shared.state.withLock { body(&$0) }
    }

    func close() {
        serving.cancel()
        connection.close()
    }
}

/// What the source reported, in order.
final class InputReports: Sendable {
    let reports = Mutex<[ConditionReport]>([])
}

@Suite("IdleMonitorSource", .serialized)
struct IdleMonitorSourceTests {
    /// Waits (bounded, 10 s) until `condition` holds.
    func wait(_ what: String, _ condition: () -> Bool) async throws {
        let deadline = ContinuousClock.now + .seconds(10)
        while !condition() {
            guard ContinuousClock.now < deadline else { throw DBusError.invalidValue("timed out waiting for \(what)") }
            try await Task.sleep(for: .milliseconds(10))
        }
    }

    func start(_ source: IdleMonitorSource, _ seen: InputReports) -> Task<Void, Never> {
        let (rereads, keep) = AsyncStream.makeStream(of: Void.self)
        return Task {
            let context = SourceContext(logger: Logger(label: "test"), rereads: rereads) { report in
                seen.reports.withLock { $0.append(report) }
            }
            await source.run(context)
            keep.finish()
        }
    }

    @Test("the idle watch's interval is no_input_after in milliseconds")
    func interval() async throws {
        let bus = try MockUserManager()
        let connection = try await DBusConnection.connect(to: .address(bus.address))
        defer { connection.close() }
        for (duration, ms) in [(Duration.seconds(300), UInt64(300_000)), (.milliseconds(1500), 1500), (.microseconds(10), 1)] {
            #expect(IdleMonitorSource(sessionBus: connection, noInputAfter: duration).intervalMilliseconds == ms)
        }
    }

    @Test("idle watch, then a user-active watch per idle period; a monitor that appears late or restarts is re-armed")
    func follows() async throws {
        let bus = try MockUserManager()
        let sourceConnection = try await DBusConnection.connect(to: .address(bus.address))
        defer { sourceConnection.close() }

        let seen = InputReports()
        let running = start(IdleMonitorSource(sessionBus: sourceConnection, noInputAfter: .seconds(2)), seen)
        defer { running.cancel() }
        func last() -> ConditionReport? { seen.reports.withLock { $0.last } }

        // mutter appears after the source has looked for it (and found nobody); the user is active.
        try await wait("no monitor at the start") { last() == .lost }
        var monitor = try await FakeIdleMonitor(address: bus.address, idleTime: 100)
        try await wait("the idle watch") { monitor.withState { !$0.idleWatches.isEmpty } }
        let idleWatch = try #require(monitor.withState { $0.idleWatches.first })
        #expect(idleWatch.value == 2000)
        try await wait("in use at the start") { last() == .input(InputSample(noInput: false)) }
        #expect(monitor.withState { $0.activeWatches.isEmpty })

        // Twice idle, twice active.
        for _ in 0..<2 {
            try monitor.fire(idleWatch.key)
            try await wait("no input") { last() == .input(InputSample(noInput: true)) }
            try await wait("a user-active watch") { monitor.withState { $0.activeWatches.count == 1 } }
            let active = try #require(monitor.withState { $0.activeWatches.first })
            // Another client's watch id fires too: ignored.
            try monitor.fire(999)
            try monitor.fire(active)
            try await wait("input again") { last() == .input(InputSample(noInput: false)) }
        }
        // `.lost` first: mutter was missing when the source started.
        #expect(seen.reports.withLock { $0 } == [.lost] + [false, true, false, true, false].map { .input(InputSample(noInput: $0)) })

        // mutter goes: the input is lost. It comes back already idle: re-armed, reported idle.
        monitor.close()
        try await wait("lost") { last() == .lost }
        monitor = try await FakeIdleMonitor(address: bus.address, idleTime: 5000)
        defer { monitor.close() }
        try await wait("no input after the restart") { last() == .input(InputSample(noInput: true)) }
        try await wait("a watch of each kind") { monitor.withState { $0.idleWatches.count == 1 && $0.activeWatches.count == 1 } }
        #expect(monitor.withState { $0.idleWatches.first?.value } == 2000)

        // Stopping the source removes the watches it holds.
        running.cancel()
        await running.value
        try await wait("the watches removed") { monitor.withState { $0.idleWatches.isEmpty && $0.activeWatches.isEmpty } }
    }
}
