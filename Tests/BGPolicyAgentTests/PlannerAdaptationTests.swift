@testable import BGPolicyAgent
import BGPolicyCore
import BGPolicyDBus
import BGPolicyStore
import Glibc
import Synchronization
import Testing

/// The engine tells the refresh planner, after each decision, whether a refresh waits for its
/// choice (`RefreshPlanner.refreshesWaiting`): its thresholds adapt only then.
@Suite("The refresh planner adapts while a refresh waits for it")
struct PlannerAdaptationTests {
    /// Mail's refresh is pending. With the balanced profile it waits for the planner; with
    /// power saver on, the rules hold it, and the planner's thresholds hold too; off again, it
    /// waits for the planner once more. Told nothing, the planner lowered its window threshold
    /// through every slot of power saver.
    @Test func powerSaverHoldsThePlannersThresholds() async throws {
        let store = try TaskStore.inMemory()
        let harness = try await TestEngine(store: store)
        defer { harness.close() }
        let engine = harness.engine
        let caller = harness.connection.uniqueName
        let identifier = "org.example.Mail.refresh"
        var options = TaskEngine.RegisterOptions()
        options.appID = "org.example.Mail"
        _ = try await engine.register(caller: caller, pid: UInt32(getpid()), identifiers: [identifier], options: options)
        try await engine.submit(caller: caller, identifier: identifier, kind: "refresh", options: TaskEngine.SubmitOptions())

        var conditions = Conditions()
        conditions.onBattery = true
        conditions.percentage = 80
        conditions.powerProfile = .balanced
        conditions.connectivity = .full
        conditions.metered = false
        func decide(_ profile: PowerProfile) async -> Bool? {
            conditions.powerProfile = profile
            engine.incomingConditions.withLock { $0 = conditions }
            await engine.conditionsSettle()
            await engine.takeConditions()
            await engine.evaluate()
            return await engine.refreshPlanner?.refreshesWaiting
        }
        #expect(await decide(.balanced) == true)
        #expect(await decide(.powerSaver) == false)
        #expect(await decide(.balanced) == true)
    }
}
