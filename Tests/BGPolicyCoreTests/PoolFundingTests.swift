@testable import BGPolicyCore
import Testing

/// The refresh pool of a planner that meets new apps: each brings half a day of its budget at
/// once, so a first start (an empty pool) or an app added to many does not wait hours for the
/// pool to accrue its first refresh. A replay's apps, known from the start, bring nothing, and a
/// restart's pool is the one it stored.
@Suite("RefreshPlanner's pool and new apps")
struct PoolFundingTests {
    static let monday = WakeUpCountTests.monday

    @Test func anAppRegisteredBringsHalfADayOfItsBudget() {
        var planner = RefreshPlanner()
        planner.advance(to: Self.monday)
        #expect(planner.budgetLeft == 0)
        planner.registeredAppCount = 1
        #expect(abs(planner.budgetLeft - 1.1) < 1e-9)
        // The same count again brings nothing; two more bring theirs.
        planner.registeredAppCount = 1
        #expect(abs(planner.budgetLeft - 1.1) < 1e-9)
        planner.registeredAppCount = 3
        #expect(abs(planner.budgetLeft - 3.3) < 1e-9)
        // An app first seen opened, beyond those registered, brings its share too.
        planner.recordOpen(of: "org.example.A", at: Self.monday + 60)
        planner.recordOpen(of: "org.example.B", at: Self.monday + 61)
        planner.recordOpen(of: "org.example.C", at: Self.monday + 62)
        #expect(abs(planner.budgetLeft - 3.3) < 1e-9, "three opened, three registered: none new")
        planner.recordOpen(of: "org.example.D", at: Self.monday + 63)
        #expect(abs(planner.budgetLeft - 4.4) < 1e-9)
        // Never over a day's worth.
        var full = RefreshPlanner(registeredAppCount: 1)
        full.advance(to: Self.monday)
        full.advance(to: Self.monday + 2 * 86_400)
        #expect(abs(full.budgetLeft - 2.2) < 1e-9)
        full.registeredAppCount = 2
        #expect(abs(full.budgetLeft - 3.3) < 1e-9)
    }

    /// `[refresh] budget` at a reload: a lower one leaves at most a day of it in the pool at
    /// once; a higher one adds nothing at once, and the pool gains at the new rate from then on.
    @Test func aReloadedBudgetBoundsThePoolAndItsGain() {
        var planner = RefreshPlanner(registeredAppCount: 10)
        planner.advance(to: Self.monday)
        planner.advance(to: Self.monday + 2 * 86_400)
        #expect(abs(planner.budgetLeft - 22) < 1e-9, "a full day of 2.2 for 10 apps")
        var configuration = PolicyConfiguration.defaults
        configuration.refresh.budget = 1
        planner.configure(configuration)
        #expect(abs(planner.budgetLeft - 10) < 1e-9)
        configuration.refresh.budget = 4.8
        configuration.refresh.windowsPerDay = 12
        planner.configure(configuration)
        #expect(abs(planner.budgetLeft - 10) < 1e-9)
        #expect(planner.targetWakesPerDay == 12)
        #expect(planner.budgetPerDay == 48)
        // Six hours gain a quarter of the new day's 48.
        planner.advance(to: Self.monday + 2 * 86_400 + 6 * 3_600)
        #expect(abs(planner.budgetLeft - 22) < 1e-6)
        // What the configuration's other knobs set.
        configuration.refresh.lead = .seconds(1_200)
        configuration.refresh.minInterval = .seconds(1_800)
        configuration.limits.inactiveAfter = .seconds(3 * 86_400)
        planner.configure(configuration)
        #expect(planner.leadSeconds == 1_200)
        #expect(planner.minRefreshIntervalSeconds == 1_800)
        #expect(planner.inactiveAfterSeconds == 3 * 86_400)
    }

    @Test func appsKnownFromTheStartBringNothing() {
        // A replay's planner knows every app of the trace and starts with an empty pool, as a
        // planner that had run before them (Docs/Replay.md).
        var planner = RefreshPlanner(registeredAppCount: 5)
        planner.advance(to: Self.monday)
        #expect(planner.budgetLeft == 0)
        planner.recordOpen(of: "org.example.A", at: Self.monday + 60)
        #expect(planner.budgetLeft == 0)
    }

    @Test func aRestartKeepsThePoolItStored() throws {
        var before = RefreshPlanner()
        before.registeredAppCount = 2
        before.advance(to: Self.monday)
        before.recordWindow(at: Self.monday + 10, refreshed: ["org.example.A", "org.example.B"])
        let snapshot = try #require(before.snapshot())
        #expect(abs(snapshot.tokens - 0.2) < 1e-9)
        // The agent's start: its apps registered from the store, then the snapshot restored.
        var after = RefreshPlanner()
        after.registeredAppCount = 2
        after.advance(to: Self.monday + 20)
        after.restore(snapshot, at: Self.monday + 20)
        #expect(abs(after.budgetLeft - 0.2) < 1e-9)
        // An app registered after the restart still brings its share.
        after.registeredAppCount = 3
        #expect(abs(after.budgetLeft - 1.3) < 1e-9)
    }
}
