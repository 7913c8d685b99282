@testable import BGPolicyAgent
import BGPolicyCore
import BGPolicyDBus
import BGPolicyStore
import BGPolicySystem
import BGPolicyTestSupport
import Glibc
import Testing

/// App units that appear while an app is already known to the agent some other way.
@Suite("App units of an app in use by its own word, or being delivered to")
struct AppUnitUseTests {
    static let appID = AppID(rawValue: "org.example.Tray")!
    static let unit = "app-gnome-org.example.Tray-42.scope"

    static func register(_ engine: TaskEngine, caller: String) async throws {
        var options = TaskEngine.RegisterOptions()
        options.appID = appID.rawValue
        _ = try await engine.register(caller: caller, pid: UInt32(getpid()), identifiers: ["org.example.Tray.refresh"], options: options)
    }

    static func rows(_ store: TaskStore) throws -> [UsageState] {
        try store.usageEvents(since: 0, limit: 100).filter { $0.appID == appID }.map(\.state)
    }

    /// The app said it is in the foreground; then the user launches it again from the
    /// launcher, whose scope hands the launch to the running process and ends a second later.
    /// That end was taken for the user leaving the app (a row, a window after use, the CPU
    /// monitor on its slices while the user works in it), and its launch for a second open;
    /// its real exit later left nothing.
    @Test func aLaunchHandedToTheRunningAppIsNeitherAnOpenNorALeave() async throws {
        let store = try TaskStore.inMemory()
        let harness = try await TestEngine(store: store)
        defer { harness.close() }
        let engine = harness.engine
        let caller = harness.connection.uniqueName
        try await Self.register(engine, caller: caller)
        try await engine.reportUsage(caller: caller, state: "foreground")
        #expect(await engine.appsInUse.contains(Self.appID))
        let before = try Self.rows(store)

        await engine.appUnitChanged(AppUnitEvent(appID: Self.appID, change: .opened, unit: Self.unit))
        await engine.appUnitChanged(AppUnitEvent(appID: Self.appID, change: .closed, unit: Self.unit))

        #expect(await engine.appsInUse.contains(Self.appID), "the app was taken as left")
        let after = try Self.rows(store)
        #expect(after == before, "rows: \(after)")
        // Its exit is the leave.
        await engine.connectionVanished(caller)
        #expect(await !engine.appsInUse.contains(Self.appID))
        #expect(try Self.rows(store) == before + [.background])
    }

    /// A `RunTask` to the app's own connection is on its way (up to 10 s) when the user opens
    /// the app: its unit is the user's doing. Every delivery counted as the agent launching
    /// the app, so the open was dropped, and the session in the app went unseen.
    @Test func aUnitOpenedDuringADeliveryToTheRunningAppIsTheUsers() async throws {
        let store = try TaskStore.inMemory()
        let harness = try await TestEngine(store: store)
        defer { harness.close() }
        let engine = harness.engine

        let app = try await GatedApp(on: harness.bus)
        defer { app.close() }
        try await Self.register(engine, caller: app.connection.uniqueName)
        var later = TaskEngine.SubmitOptions()
        later.earliestBegin = Int64(time(nil)) + 3600
        try await engine.submit(caller: app.connection.uniqueName, identifier: "org.example.Tray.refresh", kind: "refresh", options: later)
        // Its registration was an open; the user then left it for another app.
        try await engine.reportUsage(caller: app.connection.uniqueName, state: "background")
        #expect(await !engine.appsInUse.contains(Self.appID))

        let delivery = Task { try await engine.simulateLaunch(app: Self.appID.rawValue, identifier: "org.example.Tray.refresh") }
        try await app.waitForRunTask()
        await engine.appUnitChanged(AppUnitEvent(appID: Self.appID, change: .opened, unit: Self.unit))
        #expect(await engine.appsInUse.contains(Self.appID), "the user's open was taken for the agent's launch")
        let rows = try Self.rows(store)
        #expect(rows == [.foreground, .background, .foreground], "rows: \(rows)")
        app.open()
        _ = try? await delivery.value
    }
}
