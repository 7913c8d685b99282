@testable import BGPolicyAgent
import BGPolicyCore
import BGPolicyDBus
import BGPolicyStore
import BGPolicySystem
import BGPolicyTestSupport
import Glibc
import Testing

/// A task that requires external power runs only on AC, and one that requires the network only
/// with full connectivity (SPEC §2). When the charger goes, or connectivity drops from full,
/// while such a task runs, it is told at once (`ExpireTask`) and closed as `conditions-lost`,
/// not a violation, as processing is when the user comes back; the app's other tasks in the
/// slice run on, a member not yet sent goes back to pending, and a simulated launch, which
/// ignores the rules, runs on. (Before, the conditions were checked only at the slice's start,
/// and a 10-min backup that asked for AC ran on on battery to its deadline.)
@Suite("A running task whose own conditions go is expired at once")
struct ConditionsLostTests {
    static let lost = "conditions-lost"

    static func conditions(onBattery: Bool?, connectivity: Connectivity = .full) -> Conditions {
        var c = Conditions()
        c.onBattery = onBattery
        c.connectivity = connectivity
        c.locked = true
        return c
    }

    /// Gives the engine `conditions` and waits until it has taken them.
    static func set(_ conditions: Conditions, on engine: TaskEngine) async {
        engine.noteConditions(conditions)
        await engine.takeConditions()
    }

    /// `appID`, registered (unverified) by `app` with one identifier per task, each submitted
    /// an hour ahead (nothing runs them unless asked) as `kind` with its options; their requests.
    static func register(
        _ appID: String, by app: GatedApp, on engine: TaskEngine,
        tasks: [(identifier: String, kind: String, options: TaskEngine.SubmitOptions)]
    ) async throws -> (AppID, [TaskRequest]) {
        let caller = app.connection.uniqueName
        var options = TaskEngine.RegisterOptions()
        options.appID = appID
        let id = try await engine.register(caller: caller, pid: UInt32(getpid()), identifiers: tasks.map(\.identifier), options: options)
        for task in tasks {
            var submit = task.options
            submit.earliestBegin = Int64(time(nil)) + 3600
            try await engine.submit(caller: caller, identifier: task.identifier, kind: task.kind, options: submit)
        }
        let pending = try await engine.pendingRequests(caller: caller)
        let requests = tasks.compactMap { task in pending.first { $0.identifier == task.identifier } }
        #expect(requests.count == tasks.count)
        return (id, requests)
    }

    static func externalPower() -> TaskEngine.SubmitOptions {
        var options = TaskEngine.SubmitOptions()
        options.requiresExternalPower = true
        return options
    }

    static func network() -> TaskEngine.SubmitOptions {
        var options = TaskEngine.SubmitOptions()
        options.requiresNetwork = true
        return options
    }

    /// The task id the running slice gave `identifier`.
    static func taskID(of identifier: String, in engine: TaskEngine) async -> String? {
        await engine.slices.values.lazy.flatMap(\.members).first { $0.request.identifier == identifier }?.taskID
    }

    /// Waits (up to 5 s) for the history entry `event` of `taskID`.
    static func entry(_ event: String, of taskID: String, in store: TaskStore) async throws -> HistoryEntry? {
        for _ in 0..<1000 {
            if let entry = try store.history(since: 0, limit: 1000).first(where: { $0.taskID == taskID && $0.event.rawValue == event }) {
                return entry
            }
            try await Task.sleep(for: .milliseconds(5))
        }
        return nil
    }

    @Test func theChargerGoneEndsTheTaskThatRequiresItAndTheRefreshRunsOn() async throws {
        let store = try TaskStore.inMemory()
        let harness = try await TestEngine(store: store)
        defer { harness.close() }
        let engine = harness.engine
        let app = try await GatedApp(on: harness.bus, holds: { _ in false })
        defer { app.close() }
        await Self.set(Self.conditions(onBattery: false), on: engine)

        let backup = "org.example.Backup.backup", refresh = "org.example.Backup.refresh"
        let (appID, requests) = try await Self.register(
            "org.example.Backup", by: app, on: engine,
            tasks: [(backup, "processing", Self.externalPower()), (refresh, "refresh", .init())])
        try await engine.deliver(Launch(appID: appID, requests: ArraySlice(requests), sliceLength: .seconds(600)), simulated: false)
        #expect(app.runTasks == 2)
        let backupTask = try #require(await Self.taskID(of: backup, in: engine))
        let refreshTask = try #require(await Self.taskID(of: refresh, in: engine))

        // Whether the machine is on AC no longer known (UPower gone, say): not on battery, so
        // nothing ends.
        await Self.set(Self.conditions(onBattery: nil), on: engine)
        try await Task.sleep(for: .milliseconds(200))
        #expect(app.expired.isEmpty)
        #expect(try store.history(since: 0, limit: 1000).allSatisfy { $0.event.rawValue != Self.lost })

        await Self.set(Self.conditions(onBattery: true), on: engine)
        let entry = try #require(try await Self.entry(Self.lost, of: backupTask, in: store), "no \(Self.lost) entry")
        #expect(entry.detail == "expired because the charger was unplugged (it requires external power); not a violation")
        #expect(entry.result == .failed)
        #expect(try await Self.entry("expiration-warned", of: backupTask, in: store) != nil)
        for _ in 0..<200 where app.expired.isEmpty { try await Task.sleep(for: .milliseconds(5)) }
        #expect(app.expired == [backupTask])
        #expect(await engine.recentViolations(of: appID, at: Double(time(nil))).count == 0)
        // The refresh, which asked for no AC, runs on in its slice; the backup's request is the
        // app's to submit again, as after any expiry.
        let open = await engine.slices.values.flatMap(\.openMembers).map(\.taskID)
        #expect(open == [refreshTask])
        #expect(try await engine.pendingRequests(caller: app.connection.uniqueName).isEmpty)
    }

    @Test func connectivityNoLongerFullEndsTheTaskThatRequiresTheNetwork() async throws {
        let store = try TaskStore.inMemory()
        let harness = try await TestEngine(store: store)
        defer { harness.close() }
        let engine = harness.engine
        let app = try await GatedApp(on: harness.bus, holds: { _ in false })
        defer { app.close() }
        await Self.set(Self.conditions(onBattery: true), on: engine)

        let sync = "org.example.Sync.sync", tidy = "org.example.Sync.tidy"
        let (appID, requests) = try await Self.register(
            "org.example.Sync", by: app, on: engine,
            tasks: [(sync, "processing", Self.network()), (tidy, "processing", .init())])
        try await engine.deliver(Launch(appID: appID, requests: ArraySlice(requests), sliceLength: .seconds(600)), simulated: false)
        let syncTask = try #require(await Self.taskID(of: sync, in: engine))
        let tidyTask = try #require(await Self.taskID(of: tidy, in: engine))

        // NetworkManager gone: connectivity unknown, not lost.
        await Self.set(Self.conditions(onBattery: true, connectivity: .unknown), on: engine)
        try await Task.sleep(for: .milliseconds(200))
        #expect(app.expired.isEmpty)

        await Self.set(Self.conditions(onBattery: true, connectivity: .limited), on: engine)
        let entry = try #require(try await Self.entry(Self.lost, of: syncTask, in: store), "no \(Self.lost) entry")
        #expect(entry.detail == "expired because the network's connectivity became limited (it requires the network); not a violation")
        for _ in 0..<200 where app.expired.isEmpty { try await Task.sleep(for: .milliseconds(5)) }
        #expect(app.expired == [syncTask])
        #expect(await engine.recentViolations(of: appID, at: Double(time(nil))).count == 0)
        #expect(await engine.slices.values.flatMap(\.openMembers).map(\.taskID) == [tidyTask])
    }

    @Test func aSimulatedLaunchRunsOn() async throws {
        let store = try TaskStore.inMemory()
        let harness = try await TestEngine(store: store)
        defer { harness.close() }
        let engine = harness.engine
        let app = try await GatedApp(on: harness.bus, holds: { _ in false })
        defer { app.close() }
        await Self.set(Self.conditions(onBattery: false), on: engine)

        let backup = "org.example.Forced.backup"
        let (appID, requests) = try await Self.register(
            "org.example.Forced", by: app, on: engine, tasks: [(backup, "processing", Self.externalPower())])
        try await engine.deliver(Launch(appID: appID, requests: ArraySlice(requests), sliceLength: .seconds(600)), simulated: true)
        let backupTask = try #require(await Self.taskID(of: backup, in: engine))

        await Self.set(Self.conditions(onBattery: true, connectivity: .none), on: engine)
        try await Task.sleep(for: .milliseconds(300))
        #expect(app.expired.isEmpty)
        #expect(await engine.slices.values.flatMap(\.openMembers).map(\.taskID) == [backupTask])
        #expect(try store.history(since: 0, limit: 1000).allSatisfy { $0.event.rawValue != Self.lost })
    }

    /// The charger goes while the first `RunTask` of a two-task slice is awaited: the task sent
    /// is closed as `conditions-lost`, the one not yet sent goes back to pending, never sent.
    @Test func aTaskNotYetSentGoesBackToPending() async throws {
        let store = try TaskStore.inMemory()
        let harness = try await TestEngine(store: store)
        defer { harness.close() }
        let engine = harness.engine
        let app = try await GatedApp(on: harness.bus, holds: { $0 == 1 })
        defer { app.close() }
        await Self.set(Self.conditions(onBattery: false), on: engine)

        let one = "org.example.Pair.one", two = "org.example.Pair.two"
        let (appID, requests) = try await Self.register(
            "org.example.Pair", by: app, on: engine,
            tasks: [(one, "processing", Self.externalPower()), (two, "processing", Self.externalPower())])
        let delivery = Task {
            try await engine.deliver(Launch(appID: appID, requests: ArraySlice(requests), sliceLength: .seconds(600)), simulated: false)
        }
        try await app.waitForRunTask()
        let oneTask = try #require(await Self.taskID(of: one, in: engine))
        await Self.set(Self.conditions(onBattery: true), on: engine)
        #expect(try await Self.entry(Self.lost, of: oneTask, in: store) != nil)
        app.open()
        _ = try? await delivery.value
        try await Task.sleep(for: .milliseconds(100))

        #expect(app.runTasks == 1, "RunTask was sent after the charger went")
        let caller = app.connection.uniqueName
        #expect(try await engine.pendingRequests(caller: caller).map(\.identifier) == [two])
        #expect(try store.pendingRequests().map(\.identifier) == [two])
        #expect(await engine.slices.isEmpty)
        let history = try store.history(since: 0, limit: 1000)
        #expect(!history.contains { $0.identifier == two && ($0.event == .delivered || $0.event.rawValue == Self.lost) })
    }

    /// The charger goes between the window's decision and the delivery: no slice holds the
    /// task yet, so nothing expires it; the delivery leaves it pending instead of starting it
    /// on battery (it ran its whole slice there).
    @Test func aTaskWhoseConditionsWentBeforeItsDeliveryStaysPending() async throws {
        let store = try TaskStore.inMemory()
        let harness = try await TestEngine(store: store)
        defer { harness.close() }
        let engine = harness.engine
        let app = try await GatedApp(on: harness.bus, holds: { _ in false })
        defer { app.close() }
        await Self.set(Self.conditions(onBattery: false), on: engine)

        let backup = "org.example.Late.backup", refresh = "org.example.Late.refresh"
        let (appID, requests) = try await Self.register(
            "org.example.Late", by: app, on: engine,
            tasks: [(backup, "processing", Self.externalPower()), (refresh, "refresh", .init())])
        // Decided on AC; the charger goes before the delivery runs.
        await Self.set(Self.conditions(onBattery: true), on: engine)
        try await engine.deliver(Launch(appID: appID, requests: ArraySlice(requests), sliceLength: .seconds(600)), simulated: false)

        #expect(app.runTasks == 1, "only the refresh goes")
        #expect(await Self.taskID(of: backup, in: engine) == nil)
        let caller = app.connection.uniqueName
        #expect(try await engine.pendingRequests(caller: caller).map(\.identifier) == [backup])
        #expect(try store.pendingRequests().map(\.identifier) == [backup])
        #expect(app.runTaskSeconds == [30], "the refresh's slice, not the processing one's")
    }
}
