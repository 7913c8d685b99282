@testable import BGPolicyCore
import Testing

/// Decisions test a request's own conditions on its fields (`ownConditionsHold`), and the app's
/// (`appConditionsHold`), before building any reason; `Explain` builds the reasons
/// (`requestReasons`, `appReasonsBefore`, `appReasonsAfter`). Both must agree on every
/// combination, or the agent would run what `Explain` says waits, or the reverse.
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

    @Test func appFastPathAndReasonsAgreeOnEveryCombination() {
        let now: UnixTime = 1_700_000_000
        let day = 86_400.0
        let policy = RunWhenEligiblePolicy()
        var checked = 0
        var held = 0
        // Each field on both sides of its rule's edge; the machine-wide rules on and off.
        for (sleeping, globalEnabled) in [(false, true), (true, true), (false, false)] {
            for (onBattery, percentage) in [(nil, nil), (true, 70.0), (true, 15.0), (true, 4.0), (false, 4.0)] as [(Bool?, Double?)] {
                for profile in [PowerProfile.balanced, .powerSaver] {
                    var conditions = Conditions()
                    conditions.onBattery = onBattery
                    conditions.percentage = percentage
                    conditions.powerProfile = profile
                    let context = SchedulingContext(now: now, conditions: conditions, globalEnabled: globalEnabled, sleeping: sleeping)
                    for enabled in [true, false] {
                        for lastUsedAt in [nil, now - 3600, now - 8 * day] as [UnixTime?] {
                            for registeredAt in [now - 9 * day, now - 60] {
                                for (violations, lastViolation) in [(0, nil), (1, now - 60), (1, now - day), (3, now - 3600)] as [(Int, UnixTime?)] {
                                    for (reachable, failure, failures) in [
                                        (true, nil, 0), (false, nil, 0), (true, now - 60, 1), (true, now - 3600, 1), (true, now - 3600, 5),
                                    ] as [(Bool, UnixTime?, Int)] {
                                        for busy in [false, true] {
                                            let app = AppSchedulingState(
                                                record: AppRecord(
                                                    appID: AppID(rawValue: "org.example.App")!, identifiers: ["org.example.App.x"],
                                                    identity: .flatpak, enabled: enabled, registeredAt: registeredAt, lastUsedAt: lastUsedAt),
                                                reachable: reachable, lastDeliveryFailureAt: failure, failedDeliveries: failures, busy: busy,
                                                recentViolations: violations, lastViolationAt: lastViolation)
                                            let fast = RunWhenEligiblePolicy.appConditionsHold(app, context)
                                            let reasons = policy.appReasonsBefore(app, context, words: false)
                                                + policy.appReasonsAfter(app, nil, context, words: false)
                                            #expect(fast == reasons.isEmpty, "\(app) \(conditions) sleeping \(sleeping) global \(globalEnabled)")
                                            checked += 1
                                            if !fast { held += 1 }
                                        }
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
        #expect(checked == 3 * 5 * 2 * 2 * 3 * 2 * 4 * 5 * 2)
        // Both answers occur, so agreement is not agreement on one constant.
        #expect(held > 0 && held < checked)
    }

    @Test func theAppTestAgreesWithTheReasonsWhenThePenaltyEndsEarlyOrLate() {
        // The engine works the penalty's end out from the violations' times: before the count's
        // (an older one ages out during it) or, had anything made it so, after it.
        let policy = RunWhenEligiblePolicy()
        let now: UnixTime = 1_700_000_000
        var conditions = Conditions()
        conditions.onBattery = false
        let context = SchedulingContext(now: now, conditions: conditions)
        var held = 0
        for (violations, lastViolation) in [(1, now - 60), (3, now - 60), (3, now - 7200)] as [(Int, UnixTime)] {
            for endsAt in [nil, now - 1, now, now + 1, now + 30_000] as [UnixTime?] {
                let app = AppSchedulingState(
                    record: AppRecord(
                        appID: AppID(rawValue: "org.example.App")!, identifiers: ["org.example.App.x"],
                        identity: .flatpak, registeredAt: now - 60, lastUsedAt: now - 60),
                    reachable: true, recentViolations: violations, lastViolationAt: lastViolation,
                    overrunPenaltyEndsAt: endsAt)
                let fast = RunWhenEligiblePolicy.appConditionsHold(app, context)
                let reasons = policy.appReasonsBefore(app, context, words: false) + policy.appReasonsAfter(app, nil, context, words: false)
                #expect(fast == reasons.isEmpty, "\(violations) at \(lastViolation), ends at \(String(describing: endsAt))")
                if let endsAt { #expect(fast == (endsAt <= now)) }
                if !fast { held += 1 }
            }
        }
        #expect(held > 0 && held < 15)
    }
}
