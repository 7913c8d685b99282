import BGPolicyCore
import Testing

@testable import BGPolicyAgent

@Suite("TaskEngine.opportunity: which changes of conditions open an opportunistic window")
struct OpportunityTests {
    static func conditions(
        connectivity: Connectivity = .full, metered: Bool? = false, onBattery: Bool? = true,
        idle: Bool? = false, locked: Bool? = false
    ) -> Conditions {
        var c = Conditions()
        c.connectivity = connectivity
        c.metered = metered
        c.onBattery = onBattery
        c.idle = idle
        c.locked = locked
        return c
    }

    static let unmetered = conditions()

    /// (before, after, the window's reason or none).
    static let cases: [(String, Conditions, Conditions, OpportunityReason?)] = [
        ("metered to unmetered", conditions(metered: true), unmetered, .unmeteredNetwork),
        ("no network to an unmetered one", conditions(connectivity: .none, metered: nil), unmetered, .unmeteredNetwork),
        ("limited to full", conditions(connectivity: .limited), unmetered, .unmeteredNetwork),
        // NetworkManager's facts arriving, at start or when it comes back: nothing appeared.
        ("nothing known yet", conditions(connectivity: .unknown, metered: nil), unmetered, nil),
        ("connectivity known, metered not yet", conditions(metered: nil), unmetered, nil),
        ("unmetered all along", unmetered, unmetered, nil),
        ("unmetered to metered", unmetered, conditions(metered: true), nil),
        ("unlocked", conditions(locked: true), unmetered, .unlocked),
        ("active again", conditions(idle: true), unmetered, .userActive),
        ("active again while locked", conditions(idle: true, locked: true), conditions(locked: true), nil),
        ("charger plugged in", unmetered, conditions(onBattery: false), .chargerPlugged),
        ("battery state learned", conditions(onBattery: nil), unmetered, nil),
    ]

    @Test(arguments: cases)
    func opportunity(_ c: (String, Conditions, Conditions, OpportunityReason?)) {
        #expect(TaskEngine.opportunity(from: c.1, to: c.2) == c.3, "\(c.0)")
    }
}
