import BGPolicyCore
import Testing

/// One request of one app, and the machine around it; every case starts runnable and changes
/// only what it tests.
private struct Setup: Sendable {
    static let now: UnixTime = 1_700_000_000
    static let appID = AppID(rawValue: "org.example.App")!

    var request = TaskRequest(appID: appID, identifier: "org.example.App.refresh", kind: .refresh, submittedAt: now - 120)
    var app = AppSchedulingState(
        record: AppRecord(
            appID: appID, identifiers: ["org.example.App.refresh"], identity: .flatpak,
            registeredAt: now - 3600, lastUsedAt: now - 60),
        reachable: true)
    var context = SchedulingContext(now: now, conditions: Setup.goodConditions)

    /// On AC, online, session locked: nothing blocks anything.
    static var goodConditions: Conditions {
        var conditions = Conditions()
        conditions.onBattery = false
        conditions.percentage = 80
        conditions.powerProfile = .balanced
        conditions.connectivity = .full
        conditions.locked = true
        conditions.idle = false
        return conditions
    }

    func explain() -> Explanation { RunWhenEligiblePolicy().explain(request, app: app, context: context) }
    func decide() -> SchedulingDecision {
        RunWhenEligiblePolicy().decide(pending: [request], apps: [app.record.appID: app], context: context)
    }
}

/// A rule: what makes it block, what lifts it, and what `Explain` must say meanwhile.
private struct RuleCase: Sendable, CustomTestStringConvertible {
    var rule: BlockingRule
    var label: String
    /// A fragment of the words, enough to show they name the cause and the way out.
    var words: String
    var liftsAt: UnixTime?
    var block: @Sendable (inout Setup) -> Void
    var lift: @Sendable (inout Setup) -> Void

    var testDescription: String { "\(rule.rawValue): \(label)" }
}

private let now = Setup.now

private let ruleCases: [RuleCase] = [
    RuleCase(
        rule: .sleeping, label: "between PrepareForSleep and resume", words: "nothing starts until it resumes",
        block: { $0.context.sleeping = true }, lift: { $0.context.sleeping = false }),
    RuleCase(
        rule: .globalDisabled, label: "the global switch", words: "`bgpolicy enable --all` switches it on",
        block: { $0.context.globalEnabled = false }, lift: { $0.context.globalEnabled = true }),
    RuleCase(
        rule: .appDisabled, label: "the app's switch", words: "`bgpolicy enable org.example.App` switches it on",
        block: { $0.app.record.enabled = false }, lift: { $0.app.record.enabled = true }),
    RuleCase(
        rule: .criticalBattery, label: "8 % discharging",
        words: "the battery is at 8 %, below the critical 10 %: nothing new starts until it charges",
        block: {
            $0.context.conditions.onBattery = true
            $0.context.conditions.percentage = 8
        },
        lift: { $0.context.conditions.onBattery = false }),
    RuleCase(
        rule: .lowBattery, label: "15.5 % discharging",
        words: "the battery is at 15.5 %, below the low 20 %: only work the user started runs until it charges",
        block: {
            $0.context.conditions.onBattery = true
            $0.context.conditions.percentage = 15.5
        },
        lift: { $0.context.conditions.percentage = 20 }),
    RuleCase(
        rule: .powerSaver, label: "power saver", words: "the power-saver profile is on",
        block: { $0.context.conditions.powerProfile = .powerSaver },
        lift: { $0.context.conditions.powerProfile = .performance }),
    RuleCase(
        rule: .appInactive, label: "not used for 8 days",
        words: "org.example.App has not been used for 8 days (the limit is 7 days): it runs once you open the app",
        block: {
            $0.app.record.registeredAt = now - 30 * 86_400
            $0.app.record.lastUsedAt = now - 8 * 86_400
        },
        lift: { $0.app.record.lastUsedAt = now }),
    RuleCase(
        rule: .appInactive, label: "never used, registered 8 days ago", words: "has not been used for 8 days",
        block: {
            $0.app.record.registeredAt = now - 8 * 86_400
            $0.app.record.lastUsedAt = nil
        },
        lift: { $0.app.record.registeredAt = now }),
    RuleCase(
        rule: .earliestBegin, label: "10 minutes ahead", words: "no earlier than 10 min from now", liftsAt: now + 600,
        block: { $0.request.earliestBegin = now + 600 }, lift: { $0.context.now = now + 600 }),
    RuleCase(
        rule: .notIdle, label: "processing while in use", words: "and the session is in use",
        block: {
            $0.request.kind = .processing
            $0.context.conditions.locked = false
        },
        lift: { $0.context.conditions.idle = true }),
    RuleCase(
        rule: .notIdle, label: "processing with no session source",
        words: "whether the session is idle is unknown (neither logind nor an idle monitor is live), which counts as not idle",
        block: {
            $0.request.kind = .processing
            $0.context.conditions.locked = nil
            $0.context.conditions.idle = nil
        },
        lift: { $0.context.conditions.locked = true; $0.context.conditions.idle = false }),
    RuleCase(
        rule: .noNetwork, label: "captive portal", words: "it needs the network, and the network is behind a captive portal",
        block: {
            $0.request.requiresNetwork = true
            $0.context.conditions.connectivity = .portal
        },
        lift: { $0.context.conditions.connectivity = .full }),
    RuleCase(
        rule: .noNetwork, label: "connectivity unknown", words: "unknown, which counts as offline",
        block: {
            $0.request.requiresNetwork = true
            $0.context.conditions.connectivity = .unknown
        },
        lift: { $0.context.conditions.connectivity = .full }),
    RuleCase(
        rule: .noExternalPower, label: "on battery at 80 %",
        words: "it needs external power, and the machine is on battery: it runs once the charger is plugged in",
        block: {
            $0.request.requiresExternalPower = true
            $0.context.conditions.onBattery = true
        },
        lift: { $0.context.conditions.onBattery = false }),
    RuleCase(
        rule: .noExternalPower, label: "power unknown", words: "unknown, which counts as on battery",
        block: {
            $0.request.requiresExternalPower = true
            $0.context.conditions.onBattery = nil
        },
        lift: { $0.context.conditions.onBattery = false }),
    RuleCase(
        rule: .overrunPenalty, label: "2 violations: 30 min",
        words: "org.example.App overran its time 2 times in the last 7 days, so it waits 30 min after the last overrun: another 29 min",
        liftsAt: now - 60 + 1800,
        block: {
            $0.app.recentViolations = 2
            $0.app.lastViolationAt = now - 60
        },
        lift: { $0.context.now = now - 60 + 1800 }),
    RuleCase(
        rule: .unreachable, label: "not on the bus, no bus_name",
        words: "no connection of the app is on the bus and it registered no bus_name; it runs when the app registers again",
        block: { $0.app.reachable = false }, lift: { $0.app.reachable = true }),
    RuleCase(
        rule: .unreachable, label: "the last delivery failed 50 s ago",
        words: "the last delivery to the app failed 50 s ago (no reply); retrying in 4 min 10 s", liftsAt: now + 250,
        block: {
            $0.app.lastDeliveryFailureAt = now - 50
            $0.request.lastAttemptError = "no reply"
        },
        lift: { $0.context.now = now + 250 }),
    RuleCase(
        rule: .appBusy, label: "a slice is running", words: "a slice of org.example.App is running",
        block: { $0.app.busy = true }, lift: { $0.app.busy = false }),
]

@Suite("RunWhenEligiblePolicy")
struct RunWhenEligiblePolicyTests {
    // MARK: Every rule

    @Test("nothing blocks the baseline")
    func baseline() {
        let setup = Setup()
        let explanation = setup.explain()
        #expect(explanation.runnable)
        #expect(explanation.earliestRun == Setup.now)
        #expect(explanation.summary == "Runs at the next opportunity.")
        #expect(setup.decide() == SchedulingDecision(
            launches: [Launch(appID: Setup.appID, requests: [setup.request], sliceLength: .seconds(30))]))
    }

    @Test("each rule blocks with its key and words, and lifts", arguments: ruleCases)
    fileprivate func ruleBlocksAndLifts(_ rule: RuleCase) {
        var setup = Setup()
        rule.block(&setup)

        let blocked = setup.explain()
        #expect(blocked.blocking.map(\.rule) == [rule.rule])
        #expect(!blocked.runnable)
        let words = blocked.blocking.first?.words ?? ""
        #expect(words.contains(rule.words), "\(words)")
        #expect(blocked.blocking.first?.liftsAt == rule.liftsAt)
        #expect(blocked.earliestRun == rule.liftsAt)
        #expect(blocked.summary == "Waits: \(words).")
        #expect(setup.decide() == SchedulingDecision(launches: [], nextEvaluation: rule.liftsAt))

        rule.lift(&setup)
        let lifted = setup.explain()
        #expect(lifted.blocking.isEmpty, "\(lifted.summary)")
        #expect(lifted.earliestRun == setup.context.now)
        #expect(setup.decide().launches.map(\.appID) == [Setup.appID])
    }

    /// Every rule but the planner's own (windows, predicted use, refresh interval), which
    /// WindowPlannerTests cover.
    @Test("every rule has a case")
    func everyRuleCovered() {
        let plannerRules: Set<BlockingRule> = [.nextWindow, .predictedUse, .refreshInterval]
        #expect(Set(ruleCases.map(\.rule)) == Set(BlockingRule.allCases).subtracting(plannerRules))
    }

    // MARK: Edges of the rules

    @Test("battery rules need a known level while on battery", arguments: [
        (Bool?.some(true), Double?.some(9.99), [BlockingRule.criticalBattery]),
        (true, 10, [.lowBattery]),
        (true, 19.9, [.lowBattery]),
        (true, 20, []),
        (true, nil, []),
        (false, 5, []),
        (nil, 5, []),
    ])
    func batteryLevels(onBattery: Bool?, percentage: Double?, expected: [BlockingRule]) {
        var setup = Setup()
        setup.context.conditions.onBattery = onBattery
        setup.context.conditions.percentage = percentage
        #expect(setup.explain().blocking.map(\.rule) == expected)
    }

    @Test("a level just under the threshold never reads as the threshold")
    func percentTruncated() {
        var setup = Setup()
        setup.context.conditions.onBattery = true
        setup.context.conditions.percentage = 9.96
        #expect(setup.explain().blocking.first?.words.hasPrefix("the battery is at 9.9 %, below the critical 10 %") == true)
    }

    @Test("inactive means last use (or registration, if later) the limit ago or more", arguments: [
        // (registered days ago, last used days ago, blocked)
        // Unused at exactly 7 days, as the refresh planner counts (`RefreshPlanner.eligibleSpan`).
        (30.0, Double?.some(7), true),
        (30, 6.999, false),
        (30, 7.001, true),
        (30, nil, true),
        (7, nil, true),
        (6, nil, false),
        // A use recorded before the last registration does not count against it.
        (1, 20, false),
    ])
    func inactive(registeredDaysAgo: Double, lastUsedDaysAgo: Double?, blocked: Bool) {
        var setup = Setup()
        setup.app.record.registeredAt = now - registeredDaysAgo * 86_400
        setup.app.record.lastUsedAt = lastUsedDaysAgo.map { now - $0 * 86_400 }
        #expect(setup.explain().blocking.map(\.rule) == (blocked ? [.appInactive] : []))
    }

    @Test("earliest_begin blocks only while in the future")
    func earliestBeginEdge() {
        var setup = Setup()
        setup.request.earliestBegin = now
        #expect(setup.explain().runnable)
        setup.request.earliestBegin = now - 10
        #expect(setup.explain().runnable)
    }

    @Test("not-idle applies to processing only")
    func idleOnlyForProcessing() {
        var setup = Setup()
        setup.context.conditions.locked = false
        setup.context.conditions.idle = false
        #expect(setup.explain().runnable)
        setup.request.kind = .processing
        #expect(setup.explain().blocking.map(\.rule) == [.notIdle])
    }

    /// (violations, penalty in seconds)
    static let penalties: [(Int, Double)] = [
        (1, 900), (2, 1800), (3, 3600), (4, 7200), (6, 28_800), (7, 28_800), (10_000, 28_800),
    ]

    @Test("the penalty doubles per violation from refresh.min_interval, capped at 8 h", arguments: penalties)
    func penalty(violations: Int, seconds: Double) {
        var setup = Setup()
        setup.app.recentViolations = violations
        setup.app.lastViolationAt = now - 1
        let explanation = setup.explain()
        #expect(explanation.blocking.map(\.rule) == [.overrunPenalty])
        #expect(explanation.earliestRun == now - 1 + seconds)

        setup.context.now = now - 1 + seconds
        #expect(setup.explain().runnable)
    }

    @Test("the penalty ends early when an older violation ages out during it")
    func penaltyShortensAsViolationsAgeOut() {
        var setup = Setup()
        // Three overruns: the oldest 7 days less 10 min before the last two, a minute ago.
        // Three earn 1 h; 10 min after the last the oldest stops counting, and two earn 30 min.
        let last = now - 60
        let violations = RecentViolations([last - 7 * 86_400 + 600, last - 1, last], now: now)
        setup.app = AppSchedulingState(
            record: setup.app.record, reachable: true, violations: violations, configuration: setup.context.configuration)
        let explanation = setup.explain()
        #expect(explanation.blocking.map(\.rule) == [.overrunPenalty])
        #expect(explanation.earliestRun == last + 1800)
        #expect(explanation.blocking.first?.liftsAt == last + 1800)
        #expect(explanation.blocking.first?.words.contains("waits 30 min after the last overrun (the oldest stop counting meanwhile)") == true)
        // The decision's next evaluation is at that end, not at the three's hour.
        #expect(setup.decide().nextEvaluation == last + 1800)

        setup.context.now = last + 1800
        #expect(setup.explain().runnable)
        #expect(setup.decide().launches.count == 1)
    }

    @Test("the penalty's words name what the app did: overran its time, used too much CPU, or both", arguments: [
        // (violations, seconds before now: kind; the words)
        ([(60.0, ViolationKind.cpu)],
         "org.example.App used too much CPU once in the last 7 days, so it waits 15 min after the last time: another 14 min"),
        ([(3600, .overrun), (60, .overrun)],
         "org.example.App overran its time 2 times in the last 7 days, so it waits 30 min after the last overrun: another 29 min"),
        ([(7200, .overrun), (3600, .cpu), (60, .cpu)],
         "org.example.App overran its time once and used too much CPU 2 times in the last 7 days, "
            + "so it waits 1 h after the last of these: another 59 min"),
        // The same slice overran and was throttled: two violations, one of each.
        ([(60, .overrun), (60, .cpu)],
         "org.example.App overran its time once and used too much CPU once in the last 7 days, "
            + "so it waits 30 min after the last of these: another 29 min"),
    ])
    func penaltyWordsNameTheViolations(_ violations: [(ago: Double, kind: ViolationKind)], words: String) {
        var setup = Setup()
        setup.app = AppSchedulingState(
            record: setup.app.record, reachable: true,
            violations: RecentViolations(violations.map { (time: now - $0.ago, kind: $0.kind) }, now: now),
            configuration: setup.context.configuration)
        let explanation = setup.explain()
        #expect(explanation.blocking.map(\.rule) == [.overrunPenalty])
        #expect(explanation.blocking.first?.words == words)
        // The kinds change the words alone: the hold is that of as many overruns.
        let asOverruns = RecentViolations(violations.map { now - $0.ago }, now: now)
        #expect(explanation.earliestRun == asOverruns.penaltyEnd { RunWhenEligiblePolicy.overrunPenalty(violations: $0, setup.context.configuration) })
    }

    @Test("the penalty follows the configured interval")
    func penaltyFromConfiguration() {
        var setup = Setup()
        setup.context.configuration.refresh.minInterval = .seconds(60)
        setup.app.recentViolations = 3
        setup.app.lastViolationAt = now
        #expect(setup.explain().earliestRun == now + 240)
    }

    @Test("no penalty without a time of the last violation")
    func penaltyNeedsTime() {
        var setup = Setup()
        setup.app.recentViolations = 3
        #expect(setup.explain().runnable)
    }

    @Test("a failed delivery is retried after deliveryRetryDelay")
    func deliveryRetry() {
        #expect(RunWhenEligiblePolicy.deliveryRetryDelay == .seconds(300))
        var setup = Setup()
        setup.app.lastDeliveryFailureAt = now - 300
        #expect(setup.explain().runnable)
        setup.app.lastDeliveryFailureAt = now - 299
        #expect(setup.explain().earliestRun == now + 1)
    }

    @Test("failures in a row double the wait, up to 6 hours")
    func deliveryRetryDoubles() {
        let minutes = (0...9).map { RunWhenEligiblePolicy.deliveryRetryDelay(afterFailures: $0) / 60 }
        #expect(minutes == [5, 5, 10, 20, 40, 80, 160, 320, 360, 360])
        var setup = Setup()
        setup.app.failedDeliveries = 3
        setup.app.lastDeliveryFailureAt = now - 1199
        let held = setup.explain()
        #expect(held.earliestRun == now + 1)
        #expect(held.blocking.map(\.rule) == [.unreachable])
        #expect(held.blocking.first?.words.contains("3 failures in a row") == true)
        setup.app.lastDeliveryFailureAt = now - 1200
        #expect(setup.explain().runnable)
    }

    @Test("unreachable without a bus name outranks a recent delivery failure")
    func unreachableOnce() {
        var setup = Setup()
        setup.app.reachable = false
        setup.app.lastDeliveryFailureAt = now - 10
        let explanation = setup.explain()
        #expect(explanation.blocking.map(\.rule) == [.unreachable])
        #expect(explanation.earliestRun == nil)
    }

    // MARK: Several reasons

    @Test("several reasons: listed in order, joined in one sentence")
    func severalReasons() {
        var setup = Setup()
        setup.context.globalEnabled = false
        setup.request.requiresNetwork = true
        setup.context.conditions.connectivity = .none
        let explanation = setup.explain()
        #expect(explanation.blocking.map(\.rule) == [.globalDisabled, .noNetwork])
        #expect(explanation.earliestRun == nil)
        #expect(explanation.summary == """
            Waits: background work is switched off for all apps; `bgpolicy enable --all` switches it on; \
            it needs the network, and the machine is offline: it runs once the machine is fully online.
            """)
    }

    @Test("earliestRun is the latest lift when only time rules block")
    func earliestRunIsLatestLift() {
        var setup = Setup()
        setup.request.earliestBegin = now + 100
        setup.app.lastDeliveryFailureAt = now
        setup.app.recentViolations = 1
        setup.app.lastViolationAt = now - 600
        let explanation = setup.explain()
        #expect(explanation.blocking.map(\.rule) == [.earliestBegin, .overrunPenalty, .unreachable])
        #expect(explanation.earliestRun == now + 300)

        setup.app.busy = true
        #expect(setup.explain().earliestRun == nil)
    }

    // MARK: decide

    private static func request(
        _ app: String, _ identifier: String, _ kind: TaskKind, submitted: UnixTime, earliestBegin: UnixTime? = nil,
        requiresNetwork: Bool = false
    ) -> TaskRequest {
        TaskRequest(
            appID: AppID(rawValue: app)!, identifier: identifier, kind: kind, earliestBegin: earliestBegin,
            requiresNetwork: requiresNetwork, submittedAt: submitted)
    }

    private static func state(_ app: String) -> AppSchedulingState {
        AppSchedulingState(
            record: AppRecord(appID: AppID(rawValue: app)!, identifiers: [], identity: .snap, registeredAt: now),
            reachable: true)
    }

    @Test("runnable requests share one slice per app, refresh first, apps in order")
    func grouping() {
        let pending = [
            Self.request("org.b.App", "b.refresh", .refresh, submitted: now - 5),
            Self.request("org.a.App", "a.proc.late", .processing, submitted: now - 10),
            Self.request("org.a.App", "a.refresh", .refresh, submitted: now - 1),
            Self.request("org.a.App", "a.proc.early", .processing, submitted: now - 50),
            Self.request("org.a.App", "a.later", .processing, submitted: now - 60, earliestBegin: now + 60),
            Self.request("org.gone.App", "gone.refresh", .refresh, submitted: now - 100),
        ]
        let apps = Dictionary(uniqueKeysWithValues: ["org.a.App", "org.b.App"].map { (AppID(rawValue: $0)!, Self.state($0)) })
        let decision = RunWhenEligiblePolicy().decide(
            pending: pending, apps: apps, context: SchedulingContext(now: now, conditions: Setup.goodConditions))

        #expect(decision.launches.map(\.appID.rawValue) == ["org.a.App", "org.b.App"])
        #expect(decision.launches[0].requests.map(\.identifier) == ["a.refresh", "a.proc.early", "a.proc.late"])
        #expect(decision.launches[0].sliceLength == .seconds(600))
        #expect(decision.launches[1].requests.map(\.identifier) == ["b.refresh"])
        #expect(decision.launches[1].sliceLength == .seconds(30))
        #expect(decision.nextEvaluation == now + 60)
    }

    @Test("the slice length follows the configuration", arguments: [
        ([TaskKind.refresh], Duration.seconds(45)), ([.processing], .seconds(20)), ([.refresh, .processing], .seconds(45)),
    ])
    func sliceLength(kinds: [TaskKind], expected: Duration) {
        var configuration = PolicyConfiguration()
        configuration.slices.refresh = .seconds(45)
        configuration.slices.processing = .seconds(20)
        let pending = kinds.enumerated().map { Self.request("org.a.App", "t\($0.offset)", $0.element, submitted: now) }
        let decision = RunWhenEligiblePolicy().decide(
            pending: pending, apps: [AppID(rawValue: "org.a.App")!: Self.state("org.a.App")],
            context: SchedulingContext(now: now, conditions: Setup.goodConditions, configuration: configuration))
        #expect(decision.launches.map(\.sliceLength) == [expected])
    }

    @Test("nextEvaluation: the earliest time a request blocked only by time rules can run")
    func nextEvaluation() {
        var penalised = Self.state("org.p.App")
        penalised.recentViolations = 1
        penalised.lastViolationAt = now - 600  // lifts at now + 300
        let apps: [AppID: AppSchedulingState] = [
            AppID(rawValue: "org.a.App")!: Self.state("org.a.App"),
            AppID(rawValue: "org.p.App")!: penalised,
        ]
        let context = SchedulingContext(now: now, conditions: Setup.goodConditions)
        let policy = RunWhenEligiblePolicy()
        let pending = [
            // Waits for a change of facts too: never sets the next evaluation.
            Self.request("org.a.App", "net", .refresh, submitted: now, earliestBegin: now + 10, requiresNetwork: true),
            Self.request("org.a.App", "later", .processing, submitted: now, earliestBegin: now + 600),
            // Both rules must lift: the later one counts.
            Self.request("org.p.App", "soon", .refresh, submitted: now, earliestBegin: now + 100),
            // An unknown app never sets it.
            Self.request("org.gone.App", "gone", .refresh, submitted: now, earliestBegin: now + 1),
        ]
        var offline = context
        offline.conditions.connectivity = .none
        let decision = policy.decide(pending: pending, apps: apps, context: offline)
        #expect(decision.launches.isEmpty)
        #expect(decision.nextEvaluation == now + 300)

        #expect(policy.decide(pending: [pending[0]], apps: apps, context: offline).nextEvaluation == nil)
        #expect(policy.decide(pending: [], apps: apps, context: context) == SchedulingDecision())
    }

    // MARK: GetRefreshStatus and BeginBackgroundTask

    @Test("refresh status", arguments: [
        // (app enabled, global, power saver, on battery, percentage, expected)
        (true, true, false, Bool?.some(false), 5.0, RefreshStatus.available),
        (true, true, false, true, 50, .available),
        (true, true, false, nil, 5, .available),
        (false, true, false, false, 80, .denied),
        (false, false, true, true, 5, .denied),
        (true, false, false, false, 80, .restricted),
        (true, true, true, false, 80, .restricted),
        (true, true, false, true, 19, .restricted),
        (true, true, false, true, 5, .restricted),
    ])
    func refreshStatus(
        enabled: Bool, global: Bool, powerSaver: Bool, onBattery: Bool?, percentage: Double, expected: RefreshStatus
    ) {
        var setup = Setup()
        setup.app.record.enabled = enabled
        setup.context.globalEnabled = global
        setup.context.conditions.powerProfile = powerSaver ? .powerSaver : .balanced
        setup.context.conditions.onBattery = onBattery
        setup.context.conditions.percentage = percentage
        #expect(RunWhenEligiblePolicy().refreshStatus(app: setup.app.record, context: setup.context) == expected)
    }

    @Test("user-started work is refused only while sleeping or on a critical battery", arguments: [
        // (sleeping, global, power saver, on battery, percentage, expected)
        (false, true, false, Bool?.some(false), 80.0, BlockingRule?.none),
        (false, false, true, true, 15, nil),
        (false, true, false, false, 5, nil),
        (false, true, false, true, 5, .criticalBattery),
        (true, true, false, false, 80, .sleeping),
        (true, true, false, true, 5, .sleeping),
    ])
    func backgroundTaskRefusal(
        sleeping: Bool, global: Bool, powerSaver: Bool, onBattery: Bool?, percentage: Double, expected: BlockingRule?
    ) {
        var setup = Setup()
        setup.context.sleeping = sleeping
        setup.context.globalEnabled = global
        setup.context.conditions.powerProfile = powerSaver ? .powerSaver : .balanced
        setup.context.conditions.onBattery = onBattery
        setup.context.conditions.percentage = percentage
        let refusal = RunWhenEligiblePolicy().backgroundTaskRefusal(context: setup.context)
        #expect(refusal?.rule == expected)
        #expect(refusal?.liftsAt == nil)
        if expected == .criticalBattery {
            #expect(refusal?.words == "the battery is at 5 %, below the critical 10 %: nothing new starts until it charges")
        }
    }
}
