import BGPolicyCore
import Testing

/// The agent replays weeks of its usage log into the planner at start; that history has no
/// windows in it. The planner must come out of it planning as it would have, not wake at once.
@Suite("RefreshPlanner warm-up")
struct PlannerWarmUpTests {
    static let apps = (0..<10).map { "org.example.App\($0)" }

    /// Ten apps, each opened every day at its own hour (08:05, 09:05, … 17:05), for three weeks,
    /// replayed with the thresholds adapting or not; then, from midnight, the first 15-min slot
    /// in which a window refreshes.
    static func firstWindow(adaptingDuringReplay: Bool) -> Double? {
        let monday = UsagePredictorTests.monday
        var planner = RefreshPlanner(registeredAppCount: apps.count)
        planner.adaptsThresholds = adaptingDuringReplay
        for day in 0..<21 {
            for (k, app) in apps.enumerated() {
                planner.recordOpen(of: app, at: monday + Double(day) * 86_400 + Double(8 + k) * 3600 + 300)
            }
        }
        let midnight = monday + 21 * 86_400
        planner.advance(to: midnight)
        planner.adaptsThresholds = true
        let candidates = apps.map { RefreshPlanner.Candidate(appID: $0) }
        for slot in 0..<96 {
            let time = midnight + Double(slot) * 900
            planner.advance(to: time)
            if !planner.choose(at: time, among: candidates).isEmpty { return time - midnight }
        }
        return nil
    }

    @Test func replayingTheLogLeavesTheThresholdsAsTheyWere() throws {
        // The window before the first habitual open of the day, 08:05, and not before.
        let first = try #require(Self.firstWindow(adaptingDuringReplay: false))
        #expect(first >= 7 * 3600 + 45 * 60 && first <= 8 * 3600 + 5 * 60, "first window at \(first / 3600) h")
        // Adapting to three weeks without a window takes the thresholds to nothing: the first
        // slot after the restart wakes the machine.
        #expect(Self.firstWindow(adaptingDuringReplay: true) == 0)
    }
}
