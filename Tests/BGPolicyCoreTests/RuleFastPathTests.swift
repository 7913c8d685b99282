@testable import BGPolicyCore
import Testing

/// Decisions test a request's own conditions on its fields (`ownConditionsHold`) before
/// building any reason; `Explain` builds the reasons (`requestReasons`). Both must agree on
/// every combination, or the agent would run what `Explain` says waits, or the reverse.
@Suite("The decision's fast path agrees with the rules")
struct RuleFastPathTests {
    @Test func fastPathAndReasonsAgreeOnEveryCombination() {
        let now: UnixTime = 1_700_000_000
        var checked = 0
        for kind in TaskKind.allCases {
            for earliest in [nil, now - 1, now, now + 1] as [UnixTime?] {
                for network in [false, true] {
                    for power in [false, true] {
                        for connectivity in [Connectivity.full, .limited, .none, .unknown] {
                            for onBattery in [nil, true, false] as [Bool?] {
                                for (locked, idle) in [(nil, nil), (true, false), (false, false), (false, true)] as [(Bool?, Bool?)] {
                                    var conditions = Conditions()
                                    conditions.connectivity = connectivity
                                    conditions.onBattery = onBattery
                                    conditions.locked = locked
                                    conditions.idle = idle
                                    let context = SchedulingContext(now: now, conditions: conditions)
                                    let request = TaskRequest(
                                        appID: AppID(rawValue: "org.example.App")!, identifier: "org.example.App.x", kind: kind,
                                        earliestBegin: earliest, requiresNetwork: network, requiresExternalPower: power,
                                        submittedAt: now - 60)
                                    let fast = RunWhenEligiblePolicy.ownConditionsHold(
                                        kind: kind, earliestBegin: earliest, requiresNetwork: network,
                                        requiresExternalPower: power, context)
                                    let reasons = RunWhenEligiblePolicy().requestReasons(request, context, words: false)
                                    #expect(fast == reasons.isEmpty, "\(request) \(conditions)")
                                    checked += 1
                                }
                            }
                        }
                    }
                }
            }
        }
        #expect(checked == 2 * 4 * 2 * 2 * 4 * 3 * 4)
    }
}
