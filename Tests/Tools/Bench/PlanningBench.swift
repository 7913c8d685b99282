import BGPolicyCore
import Glibc

// The planner's decision for one wake window, without a bus or an agent: 1,000 registered apps,
// each with 1 refresh and 10 processing requests pending (the most SPEC §2 allows), a refresh
// planner that has learned two weeks of their use, on battery, session locked, at a grid point.
// `WindowPlanner.decide` is timed against issue 4's `RunWhenEligiblePolicy.decide` on the same
// facts (the same rules without windows or predictions), interleaved, in the same run.

/// What the planning section measured (nanoseconds per decision).
struct PlanningResults: Sendable {
    var apps = 0
    var requests = 0
    var decisions = 0
    var planner = Samples()
    var baseline = Samples()
    /// Slices the planner's decision started, and refreshes among them.
    var launches = 0
    var refreshes = 0
    /// `Explain` of one app's refresh between windows: with every app's refresh pending, as the
    /// agent asks it (the plan of them all, made up to the first window that takes it), and
    /// alone.
    var explainAll = Samples()
    var explainAlone = Samples()
    /// `ListPending`'s earliest windows of every app's refresh: read from one plan of them all,
    /// made once, as the agent does; and each refresh planned alone, as it did.
    var listPending = Samples()
    var listPendingAlone = Samples()
    var listPendingRefreshes = 0

    static let p99TargetNanoseconds = 1_000_000.0
}

enum PlanningBench {
    static func run(apps appCount: Int, decisions: Int) -> PlanningResults {
        var results = PlanningResults()
        results.apps = appCount
        results.decisions = decisions
        let day = 86_400.0
        // A grid point on a Monday, two weeks after the history starts.
        let now = (1_704_672_000.0 + 14 * day + 10 * 3600).rounded(.down)
        var refresh = RefreshPlanner(registeredAppCount: appCount)
        var apps: [AppID: AppSchedulingState] = [:]
        var pending: [TaskRequest] = []
        var opens: [(time: Double, app: String)] = []
        var seed: UInt64 = 20_261_122
        func random() -> Double {
            seed = seed &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
            return Double(seed >> 11) / Double(1 << 53)
        }
        for index in 0..<appCount {
            let name = "org.example.App\(index)"
            guard let appID = AppID(rawValue: name) else { continue }
            // Each app is opened 0–4 times a day at its own habitual hours.
            let perDay = Int(random() * 5)
            let hours = (0..<perDay).map { _ in 7 + random() * 15 }
            for d in 0..<14 {
                for hour in hours { opens.append((now - 14 * day + Double(d) * day + hour * 3600, name)) }
            }
            let identifiers = ["\(name).refresh"] + (0..<10).map { "\(name).job\($0)" }
            apps[appID] = AppSchedulingState(
                record: AppRecord(
                    appID: appID, identifiers: identifiers, identity: .flatpak, registeredAt: now - 15 * day,
                    lastUsedAt: now - 3600),
                reachable: true)
            pending.append(TaskRequest(appID: appID, identifier: identifiers[0], kind: .refresh, submittedAt: now - 600))
            for job in identifiers.dropFirst() {
                pending.append(TaskRequest(appID: appID, identifier: job, kind: .processing, submittedAt: now - 600))
            }
        }
        opens.sort { ($0.time, $0.app) < ($1.time, $1.app) }
        for open in opens where open.time < now { refresh.recordOpen(of: open.app, at: open.time) }
        refresh.advance(to: now)
        results.requests = pending.count

        var conditions = Conditions()
        conditions.onBattery = true
        conditions.percentage = 70
        conditions.powerProfile = .balanced
        conditions.connectivity = .full
        conditions.metered = false
        conditions.locked = true
        conditions.idle = false
        var configuration = PolicyConfiguration.defaults
        configuration.refresh.strategy = .predicted
        let context = SchedulingContext(
            now: now, conditions: conditions, configuration: configuration, planning: PlanningFacts(refresh: refresh))
        let planner = WindowPlanner()
        let baseline = RunWhenEligiblePolicy()
        // Grouped by app, in app-id order, as the engine hands them over.
        var grouped: [AppID: [TaskRequest]] = [:]
        for request in pending { grouped[request.appID, default: []].append(request) }
        let work = apps.keys.sorted().map { AppWork(app: apps[$0]!, requests: RunWhenEligiblePolicy.launchOrder(grouped[$0] ?? [])) }

        func time(_ body: () -> Int) -> UInt64 {
            let start = Clock.nanoseconds()
            let launches = body()
            let elapsed = Clock.nanoseconds() - start
            if launches < 0 { progress("impossible") }  // keeps the result alive
            return elapsed
        }
        // Warm-up, then interleaved pairs so that both see the same machine.
        for _ in 0..<5 {
            _ = planner.decide(work: work, context: context)
            _ = baseline.decide(work: work, context: context)
        }
        for _ in 0..<decisions {
            results.planner.values.append(time { planner.decide(work: work, context: context).launches.count })
            results.baseline.values.append(time { baseline.decide(work: work, context: context).launches.count })
        }
        let decision = planner.decide(work: work, context: context)
        results.launches = decision.launches.count
        results.refreshes = decision.refreshed.count

        // Explain, five minutes after the window, of the refresh of the app in the middle.
        let between = now + 300
        let everyRefresh = work.map { RefreshPlanner.Candidate(appID: $0.app.record.appID.rawValue) }
        let alone = SchedulingContext(
            now: between, conditions: conditions, configuration: configuration, planning: PlanningFacts(refresh: refresh))
        func withPlan(_ plan: RefreshPlan) -> SchedulingContext {
            SchedulingContext(
                now: between, conditions: conditions, configuration: configuration,
                planning: PlanningFacts(refresh: refresh, refreshPlan: plan))
        }
        let asked = work[work.count / 2]
        if let request = asked.requests.first(where: { $0.kind == .refresh }) {
            for _ in 0..<max(decisions / 10, 5) {
                results.explainAll.values.append(time {
                    // As the agent's Explain: the plan made up to the first window that takes the app.
                    var plan = RefreshPlan(refresh, from: between, among: everyRefresh)
                    plan.extend(through: between + day, stoppingAfter: request.appID.rawValue)
                    return planner.explain(request, app: asked.app, context: withPlan(plan)).blocking.count
                })
                results.explainAlone.values.append(time { planner.explain(request, app: asked.app, context: alone).blocking.count })
            }
        }

        // ListPending: the earliest window of every app's refresh. The words and the D-Bus
        // dictionaries are left out: the same for both.
        let refreshes = work.compactMap { entry in entry.requests.first { $0.kind == .refresh }.map { (entry.app, $0) } }
        func earliestWindows(_ context: (() -> SchedulingContext)) -> Int {
            let context = context()
            var named = 0
            for (app, request) in refreshes where planner.explain(request, app: app, context: context).earliestRun != nil {
                named += 1
            }
            return named
        }
        for round in 0..<max(decisions / 30, 3) {
            results.listPending.values.append(time {
                earliestWindows {
                    var plan = RefreshPlan(refresh, from: between, among: everyRefresh)
                    plan.extendForEveryRefresh()
                    return withPlan(plan)
                }
            })
            // Each alone costs seconds: twice is enough to see it.
            if round < 2 { results.listPendingAlone.values.append(time { earliestWindows { alone } }) }
        }
        results.listPendingRefreshes = refreshes.count
        return results
    }
}

extension PlanningResults {
    func table() -> String {
        let us = { (ns: Double) in Format.fixed(ns / 1e3, 0) }
        let ms = { (ns: Double) in Format.fixed(ns / 1e6, 1) }
        let met = { (ns: Double) in ns <= Self.p99TargetNanoseconds ? "yes" : "NO" }
        let header = ["figure", "WindowPlanner", "baseline", "baseline is", "ratio", "target", "met"]
        let what = "RunWhenEligiblePolicy: the same rules, no windows or predictions"
        let body: [[String]] = [
            ["decision p50, \(Format.thousands(apps)) apps × 11 (µs)", us(planner.median), us(baseline.median), what,
             Format.ratio(planner.median, baseline.median), "—", "—"],
            ["decision p99, \(Format.thousands(apps)) apps × 11 (µs)", us(planner.percentile(99)), us(baseline.percentile(99)), what,
             Format.ratio(planner.percentile(99), baseline.percentile(99)), "≤ 1000 µs", met(planner.percentile(99))],
            ["Explain of a refresh, \(Format.thousands(apps)) apps' pending, p50 (µs)", us(explainAll.median), us(explainAlone.median),
             "Explain of the refresh alone", Format.ratio(explainAll.median, explainAlone.median), "—", "—"],
            ["ListPending's windows of \(Format.thousands(listPendingRefreshes)) refreshes, p50 (ms)", ms(listPending.median),
             ms(listPendingAlone.median), "each refresh planned alone", Format.ratio(listPending.median, listPendingAlone.median), "—", "—"],
        ]
        return Format.table(header, body)
    }

    func details() -> String {
        "Planning: \(Format.thousands(requests)) pending requests of \(Format.thousands(apps)) apps with two weeks of learned use, "
            + "on battery, session locked, at a grid point; \(decisions) decisions each, interleaved. The decision started "
            + "\(launches) slices, \(refreshes) of them with a refresh the planner chose; it also looks ahead for the next "
            + "refresh window of the others. max \(Format.fixed(planner.percentile(100) / 1e3, 0)) / "
            + "\(Format.fixed(baseline.percentile(100) / 1e3, 0)) µs."
    }

    func json() -> String {
        JSON.object([
            ("apps", "\(apps)"), ("requests", "\(requests)"), ("decisions", "\(decisions)"),
            ("planner_p50_us", JSON.number(planner.median / 1e3)), ("planner_p99_us", JSON.number(planner.percentile(99) / 1e3)),
            ("baseline_p50_us", JSON.number(baseline.median / 1e3)), ("baseline_p99_us", JSON.number(baseline.percentile(99) / 1e3)),
            ("launches", "\(launches)"), ("refreshes", "\(refreshes)"),
            ("explain_all_p50_us", JSON.number(explainAll.median / 1e3)),
            ("explain_alone_p50_us", JSON.number(explainAlone.median / 1e3)),
            ("list_pending_refreshes", "\(listPendingRefreshes)"),
            ("list_pending_p50_us", JSON.number(listPending.median / 1e3)),
            ("list_pending_alone_p50_us", JSON.number(listPendingAlone.median / 1e3)),
        ])
    }
}
