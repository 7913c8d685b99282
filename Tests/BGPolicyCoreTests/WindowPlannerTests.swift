import BGPolicyCore
import Testing

/// The planner with a manual clock: every case sets `now` and the facts, and reads the decision.
/// Times are built from a grid-aligned Monday 00:00 UTC so that grid points are easy to read.
private enum Clock {
    /// Monday 2024-01-08 00:00:00 UTC.
    static let monday: UnixTime = 1_704_672_000
    static func at(day: Int = 0, _ hour: Int, _ minute: Int, _ second: Int = 0) -> UnixTime {
        monday + Double(day * 86_400 + hour * 3600 + minute * 60 + second)
    }
}

private func appState(_ name: String, lastUsed: UnixTime, registered: UnixTime? = nil) -> AppSchedulingState {
    let appID = AppID(rawValue: name)!
    return AppSchedulingState(
        record: AppRecord(
            appID: appID, identifiers: ["\(name).refresh", "\(name).clean"], identity: .flatpak,
            registeredAt: registered ?? lastUsed - 3600, lastUsedAt: lastUsed),
        reachable: true)
}

private func request(_ name: String, _ kind: TaskKind, at time: UnixTime, earliest: UnixTime? = nil) -> TaskRequest {
    TaskRequest(
        appID: AppID(rawValue: name)!, identifier: "\(name).\(kind == .refresh ? "refresh" : "clean")", kind: kind,
        earliestBegin: earliest, submittedAt: time - 60)
}

/// Locked (so processing may run), online, unmetered, battery at 80 %.
private func conditions(onBattery: Bool = true) -> Conditions {
    var c = Conditions()
    c.onBattery = onBattery
    c.percentage = 80
    c.powerProfile = .balanced
    c.connectivity = .full
    c.metered = false
    c.locked = true
    c.idle = true
    return c
}

private func context(
    _ now: UnixTime, onBattery: Bool = true, strategy: RefreshStrategy = .everyWindow,
    planning: PlanningFacts = PlanningFacts()
) -> SchedulingContext {
    var configuration = PolicyConfiguration.defaults
    configuration.refresh.strategy = strategy
    return SchedulingContext(now: now, conditions: conditions(onBattery: onBattery), configuration: configuration, planning: planning)
}

private let mail = "org.example.Mail"
private let news = "org.example.News"

@Suite("WindowPlanner")
struct WindowPlannerTests {
    let planner = WindowPlanner()

    struct GridCase: Sendable, CustomTestStringConvertible {
        var label: String
        var now: UnixTime
        var onBattery: Bool
        /// Launched now, or else the next evaluation.
        var launches: Bool
        var next: UnixTime?
        var testDescription: String { label }
    }

    static let gridCases: [GridCase] = [
        GridCase(label: "on battery, at a grid point", now: Clock.at(10, 15), onBattery: true, launches: true, next: nil),
        GridCase(label: "on battery, 59 s into a window", now: Clock.at(10, 15, 59), onBattery: true, launches: true, next: nil),
        GridCase(label: "on battery, between grid points", now: Clock.at(10, 16, 0), onBattery: true, launches: false,
                 next: Clock.at(10, 30)),
        GridCase(label: "on AC, 5-min grid", now: Clock.at(10, 16, 0), onBattery: false, launches: false, next: Clock.at(10, 20)),
        GridCase(label: "on AC, at a 5-min point", now: Clock.at(10, 20, 0), onBattery: false, launches: true, next: nil),
    ]

    @Test(arguments: gridCases)
    func workStartsOnlyInGridWindowsAndAllAppsTogether(_ c: GridCase) {
        let apps = [mail: appState(mail, lastUsed: c.now - 600), news: appState(news, lastUsed: c.now - 600)]
        let pending = [request(mail, .processing, at: c.now), request(news, .processing, at: c.now),
                       request(news, .refresh, at: c.now)]
        let decision = planner.decide(
            pending: pending, apps: Dictionary(uniqueKeysWithValues: apps.map { (AppID(rawValue: $0.key)!, $0.value) }),
            context: context(c.now, onBattery: c.onBattery))
        if c.launches {
            // Both apps in the same window; News's two requests share one slice.
            #expect(decision.launches.map(\.appID.rawValue) == [mail, news])
            #expect(decision.launches[1].requests.map(\.kind) == [.refresh, .processing])
            #expect(decision.window?.kind == .planned)
        } else {
            #expect(decision.launches.isEmpty)
            #expect(decision.nextEvaluation == c.next)
            let explanation = planner.explain(pending[0], app: apps[mail]!, context: context(c.now, onBattery: c.onBattery))
            #expect(explanation.blocking.map(\.rule) == [.nextWindow])
            #expect(explanation.earliestRun == c.next)
        }
    }

    @Test func earliestBeginsCloseTogetherAreBatchedIntoOneWindow() {
        let now = Clock.at(10, 1)
        let a = request(mail, .processing, at: now, earliest: Clock.at(10, 7))
        let b = request(news, .processing, at: now, earliest: Clock.at(10, 12, 30))
        let apps = [AppID(rawValue: mail)!: appState(mail, lastUsed: now), AppID(rawValue: news)!: appState(news, lastUsed: now)]
        let before = planner.decide(pending: [a, b], apps: apps, context: context(now))
        #expect(before.launches.isEmpty)
        #expect(before.nextEvaluation == Clock.at(10, 15))
        #expect(planner.explain(a, app: apps[a.appID]!, context: context(now)).earliestRun == Clock.at(10, 15))
        let at = planner.decide(pending: [a, b], apps: apps, context: context(Clock.at(10, 15)))
        #expect(at.launches.map(\.appID.rawValue) == [mail, news])
    }

    struct OpportunityCase: Sendable, CustomTestStringConvertible {
        var reason: OpportunityReason
        var age: Double
        var opens: Bool
        var testDescription: String { "\(reason.rawValue), \(Int(age)) s ago" }
    }

    static let opportunityCases: [OpportunityCase] = OpportunityReason.allCases.flatMap {
        [OpportunityCase(reason: $0, age: 5, opens: true), OpportunityCase(reason: $0, age: 61, opens: false)]
    }

    @Test(arguments: opportunityCases)
    func opportunisticWindowsOpenBetweenGridPoints(_ c: OpportunityCase) {
        let now = Clock.at(10, 7)
        let facts = PlanningFacts(opportunity: Opportunity(at: now - c.age, reason: c.reason))
        let pending = [request(mail, .processing, at: now)]
        let apps = [AppID(rawValue: mail)!: appState(mail, lastUsed: now)]
        let decision = planner.decide(pending: pending, apps: apps, context: context(now, planning: facts))
        #expect(decision.launches.count == (c.opens ? 1 : 0))
        #expect(decision.window == (c.opens ? WakeWindow(at: now - c.age, kind: .opportunistic(c.reason)) : nil))
    }

    @Test func opportunitiesComeFromChangesOfConditionsOnly() {
        // The engine's rule, restated in Core terms: see TaskEngine.opportunity(from:to:).
        let planner = WindowPlanner()
        let sleeping = context(Clock.at(10, 15))
        var asleep = sleeping
        asleep.sleeping = true
        #expect(WindowPlanner.openWindow(asleep) == nil)
        #expect(WindowPlanner.openWindow(sleeping) != nil)
        _ = planner
    }

    // MARK: Refresh before predicted use

    /// Mail opened every day at 09:05 for three weeks, News at 19:35: the planner learns both.
    static func routinePlanner(days: Int = 21) -> RefreshPlanner {
        var refresh = RefreshPlanner(registeredAppCount: 2)
        for day in 0..<days {
            refresh.recordOpen(of: mail, at: Clock.at(day: day, 9, 5))
            refresh.recordOpen(of: news, at: Clock.at(day: day, 19, 35))
        }
        return refresh
    }

    /// An afternoon of `day` in which Mail is opened and left six times, 10 minutes apart: a
    /// week of them teaches that the user comes back to Mail within minutes of leaving it.
    static func mailAfternoon(day: Int, _ planner: inout RefreshPlanner) {
        for k in 0..<6 {
            let at = Clock.at(day: day, 14, 0) + Double(k) * 600
            planner.recordOpen(of: mail, at: at)
            planner.recordClose(of: mail, at: at + 120)
        }
    }

    @Test func refreshIsPlannedShortlyBeforeThePredictedOpen() {
        var refresh = Self.routinePlanner()
        let now = Clock.at(day: 21, 6, 0)
        refresh.advance(to: now)
        let facts = PlanningFacts(refresh: refresh)
        let apps = [AppID(rawValue: mail)!: appState(mail, lastUsed: now - 75_000)]
        let pending = [request(mail, .refresh, at: now)]
        let explanation = planner.explain(pending[0], app: apps.first!.value, context: context(now, strategy: .predicted, planning: facts))
        #expect(explanation.blocking.map(\.rule) == [.predictedUse])
        let planned = try! #require(explanation.earliestRun)
        // The window before the 09:05 open: within 20 minutes ahead of it, never after it.
        #expect(planned >= Clock.at(day: 21, 8, 45) && planned <= Clock.at(day: 21, 9, 5), "planned \(planned - Clock.at(day: 21, 0, 0))")
        let decision = planner.decide(pending: pending, apps: apps, context: context(now, strategy: .predicted, planning: facts))
        #expect(decision.launches.isEmpty)
        #expect(decision.nextEvaluation == planned)

        // At the planned window the refresh runs, and the planner records it.
        refresh.advance(to: planned)
        let atWindow = planner.decide(
            pending: pending, apps: apps, context: context(planned, strategy: .predicted, planning: PlanningFacts(refresh: refresh)))
        #expect(atWindow.launches.map(\.appID.rawValue) == [mail])
        #expect(atWindow.refreshed.map(\.rawValue) == [mail])
    }

    /// A refresh held by its `earliest_begin` runs no earlier than the refresh planner's first
    /// window after that: the agent's timer and `Explain` name that window, not the grid point
    /// after the lift, at which the planner would not choose it (a wake-up for nothing, and a
    /// promise not kept). With no window planned after it, neither sets a time.
    @Test func aRefreshHeldByItsEarliestBeginWaitsForThePlannersWindowAfterIt() {
        var refresh = Self.routinePlanner()
        let now = Clock.at(day: 21, 6, 0)
        refresh.advance(to: now)
        let facts = PlanningFacts(refresh: refresh)
        let apps = [AppID(rawValue: mail)!: appState(mail, lastUsed: now - 75_000)]
        let held = request(mail, .refresh, at: now, earliest: Clock.at(day: 21, 7, 2))
        let ctx = context(now, strategy: .predicted, planning: facts)
        let planned = try! #require(refresh.nextWindow(
            after: Clock.at(day: 21, 7, 2), among: [RefreshPlanner.Candidate(appID: mail, weight: 1)])?.time)
        #expect(planned > Clock.at(day: 21, 8, 0), "the window before the 09:05 open, not 07:15")
        let decision = planner.decide(pending: [held], apps: apps, context: ctx)
        #expect(decision.launches.isEmpty)
        #expect(decision.nextEvaluation == planned)
        let explanation = planner.explain(held, app: apps.first!.value, context: ctx)
        #expect(explanation.blocking.map(\.rule) == [.earliestBegin])
        #expect(explanation.earliestRun == planned)

        // Held until 09:00 exactly, the start of the slot whose window serves the 09:05 open:
        // that window, not the next slot's.
        let untilNine = request(mail, .refresh, at: now, earliest: Clock.at(day: 21, 9, 0))
        #expect(planner.decide(pending: [untilNine], apps: apps, context: ctx).nextEvaluation == Clock.at(day: 21, 9, 0))
        #expect(planner.explain(untilNine, app: apps.first!.value, context: ctx).earliestRun == Clock.at(day: 21, 9, 0))
        // Held until half a second into it: the same window, at the lift. A timer at its start,
        // before the lift, found the refresh still held and was set to the same moment again,
        // evaluating every 50 ms until the lift.
        let justAfter = Clock.at(day: 21, 9, 0) + 0.5
        let untilJustAfter = request(mail, .refresh, at: now, earliest: justAfter)
        #expect(planner.decide(pending: [untilJustAfter], apps: apps, context: ctx).nextEvaluation == justAfter)
        #expect(planner.explain(untilJustAfter, app: apps.first!.value, context: ctx).earliestRun == justAfter)
        var atLift = refresh
        atLift.advance(to: justAfter)
        let liftCtx = context(justAfter, strategy: .predicted, planning: PlanningFacts(refresh: atLift))
        #expect(planner.decide(pending: [untilJustAfter], apps: apps, context: liftCtx).refreshed.map(\.rawValue) == [mail])

        // The same request to a planner that has learned nothing and has no budget.
        let cold = PlanningFacts(refresh: RefreshPlanner(registeredAppCount: 1))
        let coldContext = context(now, strategy: .predicted, planning: cold)
        #expect(planner.decide(pending: [held], apps: apps, context: coldContext).nextEvaluation == nil)
        let waiting = planner.explain(held, app: apps.first!.value, context: coldContext)
        #expect(waiting.blocking.map(\.rule) == [.earliestBegin, .predictedUse])
        #expect(waiting.earliestRun == nil)

        // Processing work of the app still wakes at the grid point after its lift.
        let clean = request(mail, .processing, at: now, earliest: Clock.at(day: 21, 7, 2))
        #expect(planner.decide(pending: [held, clean], apps: apps, context: ctx).nextEvaluation == Clock.at(day: 21, 7, 15))
    }

    /// A refresh held by an `earliest_begin` centuries ahead, or past 2^63 s, or that is not a
    /// number (a damaged store, a clock set back years since the request was stored), of an app
    /// in use (so that it never counts as unused): the decision, `Explain` and the plan of every
    /// refresh come back at once. The look-ahead from the lift aged the planner slot by slot up
    /// to it, for ever past 2^63 s, where adding a slot no longer moves the time; and the hour
    /// of day of a time past 10^22 s did not fit an `Int`.
    @Test(arguments: [1e13, 1e19, 1e300, .infinity, -.infinity, .nan])
    func aRefreshHeldUntilADamagedTimeIsDecidedAtOnce(lift: Double) {
        var refresh = Self.routinePlanner()
        let now = Clock.at(day: 21, 6, 0)
        refresh.recordOpen(of: mail, at: now - 60)
        refresh.advance(to: now)
        let apps = [AppID(rawValue: mail)!: appState(mail, lastUsed: now - 60)]
        let held = request(mail, .refresh, at: now, earliest: lift)
        let started = ContinuousClock.now
        let decision = planner.decide(
            pending: [held], apps: apps, context: context(now, strategy: .predicted, planning: PlanningFacts(refresh: refresh)))
        _ = planner.explain(held, app: apps.first!.value, context: context(now, strategy: .predicted, planning: PlanningFacts(refresh: refresh)))
        var plan = RefreshPlan(refresh, from: now, among: [.init(appID: mail)], notBefore: [mail: lift])
        plan.extendForEveryRefresh()
        _ = plan.firstWindow(refreshing: mail, after: lift - 1)
        #expect(ContinuousClock.now - started < .seconds(10))
        // Held for ever: nothing starts, and no timer before the lift.
        if lift > now {
            #expect(decision.launches.isEmpty)
            #expect(decision.nextEvaluation.map { $0 >= lift || $0 <= now + 86_400 } ?? true, "\(String(describing: decision.nextEvaluation))")
        }
        #expect(decision.nextEvaluation?.isNaN != true)
    }

    /// Explain's earliest window is the first that refreshes the request in the plan of every
    /// app's pending refresh (`PlanningFacts.refreshPlan`), as the decision will make it: a
    /// window is worth what all the apps it chooses serve. Mail and News both wait at 06:00;
    /// the 09:00 window, for Mail's open at 09:05, has room for News too (the pool is full), and
    /// the decision there refreshes both. Worked out for News alone, Explain named the window
    /// before its own open at 19:35.
    /// A refresh with no window planned in the day ahead is looked at again when the day is
    /// over: the time alone may bring one. Mail is opened every day at 09:05, and the user set
    /// `[refresh] min_interval` to two days: refreshed this morning, it is due again in the
    /// window before the open the day after tomorrow. From this morning nothing is planned
    /// within the day, and with nothing else happening (a laptop left on its charger) a
    /// decision with no timer would miss that window. Eight days after the last open nothing
    /// can be chosen until the user opens Mail again, and no timer is set.
    @Test func aRefreshWithNoWindowInTheDayAheadIsLookedAtAgainAtItsEnd() throws {
        var refresh = Self.routinePlanner()
        refresh.minRefreshIntervalSeconds = 2 * 86_400
        let candidate = RefreshPlanner.Candidate(appID: mail, weight: 1)
        refresh.advance(to: Clock.at(day: 21, 6, 0))
        let planned = try #require(refresh.nextWindow(after: Clock.at(day: 21, 6, 0), among: [candidate])?.time)
        refresh.advance(to: planned)
        refresh.recordWindow(at: planned, refreshed: [mail])
        let now = Clock.at(day: 21, 10, 0)
        refresh.advance(to: now)

        #expect(refresh.lookAhead(after: now, among: [candidate]) == .beyond(time: now + 86_400))
        let after = try #require(refresh.nextWindow(after: now, among: [candidate], horizon: 3 * 86_400)?.time)
        #expect(after >= Clock.at(day: 23, 8, 45) && after <= Clock.at(day: 23, 9, 5), "planned \(after - Clock.at(day: 23, 0, 0))")

        let apps = [AppID(rawValue: mail)!: appState(mail, lastUsed: Clock.at(day: 20, 9, 5))]
        let pending = [request(mail, .refresh, at: now)]
        let ctx = context(now, strategy: .predicted, planning: PlanningFacts(refresh: refresh))
        let decision = planner.decide(pending: pending, apps: apps, context: ctx)
        #expect(decision.launches.isEmpty)
        #expect(decision.nextEvaluation == now + 86_400)
        // Explain plans as far as the interval reaches, and names that window.
        #expect(planner.explain(pending[0], app: apps.first!.value, context: ctx).earliestRun == after)
        // Held until noon by its `earliest_begin`: looked at again a day after the lift.
        let held = request(mail, .refresh, at: now, earliest: Clock.at(day: 21, 12, 0))
        #expect(planner.decide(pending: [held], apps: apps, context: ctx).nextEvaluation == Clock.at(day: 21, 12, 0) - 1 + 86_400)

        // Mail left (the routine records opens alone: left at a time not known, after its last
        // open) and not used since: an app still open would be in use, never unused.
        var unused = refresh
        unused.recordLeftUnseen(mail)
        let later = Clock.at(day: 29, 10, 0)
        unused.advance(to: later)
        #expect(unused.lookAhead(after: later, among: [candidate]) == .never)
        let unusedDecision = planner.decide(
            pending: [request(mail, .refresh, at: later)], apps: apps,
            context: context(later, strategy: .predicted, planning: PlanningFacts(refresh: unused)))
        #expect(unusedDecision.nextEvaluation == nil)
    }

    @Test func explainNamesTheFirstWindowThatTakesTheRequestAmongEveryAppsRefresh() throws {
        var refresh = Self.routinePlanner()
        let now = Clock.at(day: 21, 6, 0)
        refresh.advance(to: now)
        let apps = [AppID(rawValue: mail)!: appState(mail, lastUsed: now - 75_000),
                    AppID(rawValue: news)!: appState(news, lastUsed: now - 37_000)]
        let pending = [request(mail, .refresh, at: now), request(news, .refresh, at: now)]
        let newsApp = apps[AppID(rawValue: news)!]!
        let alone = planner.explain(pending[1], app: newsApp, context: context(now, strategy: .predicted, planning: PlanningFacts(refresh: refresh)))
        let all = [mail, news].map { RefreshPlanner.Candidate(appID: $0) }
        var plan = RefreshPlan(refresh, from: now, among: all)
        plan.extend(through: now + 86_400)
        let planned = try #require(plan.refreshes[news]?.first)
        let facts = PlanningFacts(refresh: refresh, refreshPlan: plan)
        let explanation = planner.explain(pending[1], app: newsApp, context: context(now, strategy: .predicted, planning: facts))
        let named = try #require(explanation.earliestRun)
        let aloneNamed = try #require(alone.earliestRun, "alone, News' own evening window")
        #expect(aloneNamed > Clock.at(day: 21, 18, 0))
        #expect(explanation.blocking.map(\.rule) == [.predictedUse])
        #expect(named == planned, "the plan's \(planned - Clock.at(day: 21, 0, 0)), named \(named - Clock.at(day: 21, 0, 0))")
        #expect(named < aloneNamed, "with every refresh \(named - Clock.at(day: 21, 0, 0)), alone \(aloneNamed - Clock.at(day: 21, 0, 0))")
        // A plan not yet made that far is made further for the answer: the same.
        let unmade = PlanningFacts(refresh: refresh, refreshPlan: RefreshPlan(refresh, from: now, among: all))
        #expect(planner.explain(pending[1], app: newsApp, context: context(now, strategy: .predicted, planning: unmade)).earliestRun == named)

        // The decision's own timer goes to that window, and the window refreshes News.
        let decision = planner.decide(pending: pending, apps: apps, context: context(now, strategy: .predicted, planning: PlanningFacts(refresh: refresh)))
        #expect(decision.nextEvaluation == named)
        var then = refresh
        then.advance(to: named)
        let window = planner.decide(pending: pending, apps: apps, context: context(named, strategy: .predicted, planning: PlanningFacts(refresh: then)))
        #expect(window.refreshed.map(\.rawValue).contains(news), "refreshed \(window.refreshed)")
    }

    /// A refresh held by a rule that lifts at a known time joins the plan then; Explain names
    /// the plan's first window after the lift that takes it, which the refresh alone would not:
    /// News held until 08:50 goes in Mail's 09:00 window, not before its own open at 19:35.
    @Test func explainOfAHeldRefreshNamesThePlansFirstWindowAfterTheLift() throws {
        var refresh = Self.routinePlanner()
        let now = Clock.at(day: 21, 6, 0)
        refresh.advance(to: now)
        let lift = Clock.at(day: 21, 8, 50)
        let held = request(news, .refresh, at: now, earliest: lift)
        let newsApp = appState(news, lastUsed: now - 37_000)
        let all = [mail, news].map { RefreshPlanner.Candidate(appID: $0) }
        var plan = RefreshPlan(refresh, from: now, among: all, notBefore: [news: lift])
        plan.extend(through: now + 86_400)
        let planned = try #require(plan.refreshes[news]?.first)
        #expect(planned == Clock.at(day: 21, 9, 0))
        let explanation = planner.explain(
            held, app: newsApp, context: context(now, strategy: .predicted, planning: PlanningFacts(refresh: refresh, refreshPlan: plan)))
        #expect(explanation.blocking.map(\.rule) == [.earliestBegin])
        #expect(explanation.earliestRun == planned)
        let alone = planner.explain(held, app: newsApp, context: context(now, strategy: .predicted, planning: PlanningFacts(refresh: refresh)))
        #expect((alone.earliestRun ?? 0) > Clock.at(day: 21, 18, 0))
    }

    /// `[refresh] lead` moves the window by whole 15-min slots: the opens at 09:05 are served by
    /// the 09:00 window with the default 10 min, by 08:45 with 20 or 25 min, by 08:30 with 40 min.
    @Test(arguments: [(10, 0, 9, 0), (14, 0, 9, 0), (20, 900, 8, 45), (25, 900, 8, 45), (40, 1800, 8, 30), (60, 3600, 8, 0)])
    func theLeadMovesTheRefreshWindowBeforeThePredictedOpen(lead: Int, offset: Double, hour: Int, minute: Int) {
        var refresh = Self.routinePlanner()
        refresh.leadSeconds = Double(lead * 60)
        #expect(refresh.predictionOffset == offset)
        let now = Clock.at(day: 21, 6, 0)
        refresh.advance(to: now)
        let apps = [AppID(rawValue: mail)!: appState(mail, lastUsed: now - 75_000)]
        let pending = [request(mail, .refresh, at: now)]
        let decision = planner.decide(
            pending: pending, apps: apps, context: context(now, strategy: .predicted, planning: PlanningFacts(refresh: refresh)))
        let expected = Clock.at(day: 21, hour, minute)
        #expect(decision.nextEvaluation == expected, "planned \((decision.nextEvaluation ?? 0) - Clock.at(day: 21, 0, 0))")
        refresh.advance(to: expected)
        let atWindow = planner.decide(
            pending: pending, apps: apps, context: context(expected, strategy: .predicted, planning: PlanningFacts(refresh: refresh)))
        #expect(atWindow.refreshed.map(\.rawValue) == [mail])
    }

    /// Mail learned at 09:05 local time in winter (UTC+1); when summer time starts (UTC+2) and
    /// the agent sets the new offset, the refresh moves with the local clock: 09:00 local, an
    /// hour earlier in UTC than the habit's last day.
    @Test func learnedHoursFollowTheLocalClockAcrossSummerTime() {
        var refresh = RefreshPlanner(utcOffsetSeconds: 3600, registeredAppCount: 2)
        for day in 0..<21 {
            refresh.recordOpen(of: mail, at: Clock.at(day: day, 8, 5))  // 09:05 at UTC+1
            refresh.recordOpen(of: news, at: Clock.at(day: day, 18, 35))
        }
        let now = Clock.at(day: 21, 4, 0)
        refresh.advance(to: now)
        let apps = [AppID(rawValue: mail)!: appState(mail, lastUsed: now - 75_000)]
        let pending = [request(mail, .refresh, at: now)]
        func planned(_ r: RefreshPlanner) -> UnixTime? {
            planner.decide(pending: pending, apps: apps, context: context(now, strategy: .predicted, planning: PlanningFacts(refresh: r)))
                .nextEvaluation
        }
        #expect(planned(refresh) == Clock.at(day: 21, 8, 0))  // 09:00 at UTC+1
        refresh.utcOffsetSeconds = 7200
        #expect(planned(refresh) == Clock.at(day: 21, 7, 0))  // 09:00 at UTC+2
    }

    /// `GetStatus`'s "waiting": per rule, the requests it holds after a decision; launched
    /// requests are not counted, an app rule counts every request of the app, and a request no
    /// rule blocks waits for the planner.
    @Test func holdsCountTheRequestsEachRuleHolds() {
        var refresh = Self.routinePlanner()
        let between = Clock.at(day: 21, 6, 5)  // between grid points
        refresh.advance(to: between)
        let facts = PlanningFacts(refresh: refresh)
        let mailApp = appState(mail, lastUsed: between - 75_000)
        let work = AppWork(app: mailApp, requests: [request(mail, .refresh, at: between), request(mail, .processing, at: between)])
        var ctx = context(between, strategy: .predicted, planning: facts)
        ctx.conditions.locked = false
        ctx.conditions.idle = false
        #expect(planner.holds(work, launched: nil, context: ctx) == [.predictedUse: 1, .notIdle: 1])
        ctx.conditions.idle = true
        #expect(planner.holds(work, launched: nil, context: ctx) == [.predictedUse: 1, .nextWindow: 1])
        // Power saver holds the app: both requests, and nothing else is said of them.
        ctx.conditions.powerProfile = .powerSaver
        #expect(planner.holds(work, launched: nil, context: ctx) == [.powerSaver: 2])

        // In a window, the launched processing request is not waiting; the refresh still is.
        let window = Clock.at(day: 21, 6, 15)
        refresh.advance(to: window)
        let open = context(window, strategy: .predicted, planning: PlanningFacts(refresh: refresh))
        let decision = planner.decide(work: [work], context: open)
        #expect(decision.launches.first?.requests.map(\.kind) == [.processing])
        #expect(planner.holds(work, launched: decision.launches.first, context: open) == [.predictedUse: 1])

        #expect(BlockingRule.summary(of: [.nextWindow: 3, .notIdle: 10], inactiveAfter: 7 * 86_400) == "10 wait for the session to be idle; 3 for the next wake window")
        #expect(BlockingRule.summary(of: [.nextWindow: 1], inactiveAfter: 7 * 86_400) == "1 waits for the next wake window")
        #expect(BlockingRule.summary(of: [:], inactiveAfter: 7 * 86_400) == "")
        // The configured duration, not a fixed week.
        #expect(BlockingRule.summary(of: [.appInactive: 2], inactiveAfter: 15) == "2 wait for their app to be used (unused for 15 s)")
        #expect(RunWhenEligiblePolicy().holds(work, launched: nil, context: ctx) == [.powerSaver: 2])
    }

    struct SeveralRefreshesCase: Sendable, CustomTestStringConvertible {
        var name: String
        /// When the window is decided, on day 21.
        var hour: Int, minute: Int
        /// Mail refreshed this many minutes before, if at all.
        var refreshedAgo: Double?
        /// Mail opened a minute before and left now (a window after use).
        var left = false
        var launched: [String]
        var refreshed: Bool
        var testDescription: String { name }
    }

    static let severalRefreshesCases: [SeveralRefreshesCase] = [
        .init(name: "chosen before its open: all go together", hour: 9, minute: 0, refreshedAgo: nil,
              launched: ["refresh", "refresh.more", "clean"], refreshed: true),
        .init(name: "no open predicted: none goes", hour: 6, minute: 0, refreshedAgo: nil,
              launched: ["clean"], refreshed: false),
        .init(name: "refreshed 10 minutes ago: none goes", hour: 9, minute: 0, refreshedAgo: 10,
              launched: ["clean"], refreshed: false),
        .init(name: "after use, chosen: all go", hour: 14, minute: 7, refreshedAgo: nil, left: true,
              launched: ["refresh", "refresh.more"], refreshed: true),
        .init(name: "after use, refreshed 5 minutes ago: none goes", hour: 14, minute: 7, refreshedAgo: 5, left: true,
              launched: [], refreshed: false),
    ]

    /// With `[limits] pending_refresh` above 1 an app may have several refreshes pending: they
    /// wait for the refresh planner's choice of the app together, and go together. Only the
    /// first waited: the others ran as plain work in every window, past the prediction, the
    /// budget and the refresh interval.
    @Test(arguments: severalRefreshesCases)
    func anAppsRefreshesAllWaitForItsChoice(_ c: SeveralRefreshesCase) {
        var refresh = Self.routinePlanner()
        for day in 14..<21 { Self.mailAfternoon(day: day, &refresh) }
        let now = Clock.at(day: 21, c.hour, c.minute)
        if let ago = c.refreshedAgo {
            refresh.advance(to: now - ago * 60)
            refresh.recordWindow(at: now - ago * 60, refreshed: [mail])
        }
        var facts = PlanningFacts()
        if c.left {
            refresh.recordOpen(of: mail, at: now - 60)
            refresh.recordClose(of: mail, at: now)
            facts.appLeft = AppLeft(appID: AppID(rawValue: mail)!, at: now)
        }
        refresh.advance(to: now)
        facts.refresh = refresh
        var more = request(mail, .refresh, at: now)
        more.identifier = "\(mail).refresh.more"
        let pending = [request(mail, .refresh, at: now), more, request(mail, .processing, at: now)]
        let apps = [AppID(rawValue: mail)!: appState(mail, lastUsed: now - 60)]
        let decision = planner.decide(pending: pending, apps: apps, context: context(now, strategy: .predicted, planning: facts))
        let launched = decision.launches.flatMap(\.requests).map { String($0.identifier.dropFirst(mail.count + 1)) }
        #expect(launched == c.launched)
        #expect(decision.refreshed.map(\.rawValue) == (c.refreshed ? [mail] : []))
    }

    /// When the user opens an app, a window opens for a minute for the refreshes the planner
    /// chooses among the apps not in use, and for nothing else: Mail, habitually opened at
    /// 09:05, is refreshed right after News is opened at 09:02, unless Mail is in use (opened
    /// and not left: its own window comes when the user leaves it); Mail's processing waits for
    /// the grid.
    @Test(arguments: [false, true])
    func anAppOpenOpensAWindowForChosenRefreshesOfAppsNotInUse(mailInUse: Bool) {
        var refresh = Self.routinePlanner()
        let opened = Clock.at(day: 21, 9, 2)
        refresh.recordOpen(of: news, at: opened)
        let apps = [AppID(rawValue: mail)!: appState(mail, lastUsed: opened - 86_000)]
        let pending = [request(mail, .refresh, at: opened), request(mail, .processing, at: opened)]
        let inUse: Set<AppID> = mailInUse ? [AppID(rawValue: news)!, AppID(rawValue: mail)!] : [AppID(rawValue: news)!]
        func decide(at now: UnixTime, opened: UnixTime? = opened) -> SchedulingDecision {
            var r = refresh
            r.advance(to: now)
            return planner.decide(
                pending: pending, apps: apps,
                context: context(now, strategy: .predicted,
                                 planning: PlanningFacts(refresh: r, appOpenedAt: opened, appsInUse: inUse)))
        }
        let soon = decide(at: opened + 5)
        #expect(soon.launches.map(\.appID.rawValue) == (mailInUse ? [] : [mail]))
        #expect(soon.launches.first?.requests.map(\.kind) == (mailInUse ? nil : [.refresh]))
        #expect(soon.refreshed.map(\.rawValue) == (mailInUse ? [] : [mail]))
        #expect(soon.window == (mailInUse ? nil : WakeWindow(at: opened, kind: .afterOpen)))
        #expect(soon.window(of: AppID(rawValue: mail)!) == soon.window)
        // A minute later the window has closed: nothing starts until the next grid point.
        let later = decide(at: opened + 61)
        #expect(later.launches.isEmpty)
        #expect(later.window == nil)
        // Without an open, the same moment is no window at all.
        #expect(decide(at: opened + 5, opened: nil).launches.isEmpty)
    }

    /// The window after an open refreshes the apps the user goes on to from there, not the apps
    /// the clock favours. Chat is opened three minutes after Mail whenever Mail is opened (at a
    /// different hour each day); News at 09:05 every day, never soon after Mail. When Mail is
    /// opened at 09:02, the window after an open chooses Chat and not News, though the slot
    /// model puts News far ahead of Chat then. (The thresholds are held at their starting
    /// values, as after the usage log is replayed at start: a chance of 0.2 is needed.) The
    /// window opens for Chat, so it also takes what a grid window would take: News, for its
    /// open at 09:05.
    @Test func theWindowAfterAnOpenRefreshesTheAppsTheUserGoesOnTo() {
        let chat = "org.example.Chat"
        var refresh = RefreshPlanner(registeredAppCount: 3)
        refresh.adaptsThresholds = false
        for day in 0..<21 {
            refresh.recordOpen(of: news, at: Clock.at(day: day, 9, 5))
            refresh.recordClose(of: news, at: Clock.at(day: day, 9, 7))
            let mailAt = Clock.at(day: day, 11, 0) + Double(day % 7) * 3600
            refresh.recordOpen(of: mail, at: mailAt)
            refresh.recordClose(of: mail, at: mailAt + 60)
            refresh.recordOpen(of: chat, at: mailAt + 180)
            refresh.recordClose(of: chat, at: mailAt + 240)
        }
        let at = Clock.at(day: 21, 9, 2)
        refresh.recordOpen(of: mail, at: at)
        refresh.advance(to: at + 5)
        let chatFollows = refresh.followProbability(of: chat, at: at + 5)
        let newsFollows = refresh.followProbability(of: news, at: at + 5)
        #expect(chatFollows > 0.4 && newsFollows < 0.2, "Chat \(chatFollows), News \(newsFollows)")
        let slot = refresh.slot(containing: at)
        #expect(refresh.predictor.probability(of: news, inSlotAt: slot) > 5 * refresh.predictor.probability(of: chat, inSlotAt: slot))
        let candidates = [news, chat].map { RefreshPlanner.Candidate(appID: $0) }
        #expect(refresh.chooseAfterOpen(at: at + 5, among: candidates) == [chat])

        // The agent's decision and Explain say the same.
        let chatID = AppID(rawValue: chat)!, newsID = AppID(rawValue: news)!
        let apps = [chatID: appState(chat, lastUsed: at - 80_000), newsID: appState(news, lastUsed: at - 86_000)]
        let pending = [request(chat, .refresh, at: at - 3600), request(news, .refresh, at: at - 3600)]
        let ctx = context(at + 5, strategy: .predicted,
                          planning: PlanningFacts(refresh: refresh, appOpenedAt: at, appsInUse: [AppID(rawValue: mail)!]))
        #expect(refresh.chooseAlongside(at: at + 5, among: [candidates[0]]) == [news])
        let decision = planner.decide(pending: pending, apps: apps, context: ctx)
        #expect(decision.launches.map(\.appID) == [chatID, newsID])
        #expect(decision.window == WakeWindow(at: at, kind: .afterOpen))
        #expect(planner.explain(pending[0], app: apps[chatID]!, context: ctx).blocking.isEmpty)
        // Without Chat's request the window does not open, and News waits for the grid's.
        let alone = planner.decide(pending: [pending[1]], apps: apps, context: ctx)
        #expect(alone.launches.isEmpty)
        #expect(alone.window == nil)
        #expect(planner.explain(pending[1], app: apps[newsID]!, context: ctx).blocking.map(\.rule) == [.predictedUse])
        // Once the window has opened (for Chat's refresh), News' request, coming later in its
        // minute, goes alongside, and Explain says so; after the minute, it waits again.
        var openedFacts = ctx.planning
        openedFacts.refreshWindow = WakeWindow(at: at, kind: .afterOpen)
        for (now, runs) in [(at + 20, true), (at + 61, false)] {
            var later = refresh
            later.advance(to: now)
            openedFacts.refresh = later
            let laterCtx = context(now, strategy: .predicted, planning: openedFacts)
            let decided = planner.decide(pending: [pending[1]], apps: apps, context: laterCtx)
            #expect(decided.launches.map(\.appID) == (runs ? [newsID] : []))
            #expect(decided.window == (runs ? WakeWindow(at: at, kind: .afterOpen) : nil))
            #expect(planner.explain(pending[1], app: apps[newsID]!, context: laterCtx).blocking.isEmpty == runs)
        }
    }

    /// The user switches from Mail to News at 09:02: Mail is left (its window after use) and
    /// News opened (the window after an open) at once. Mail's refresh goes in the first, Chat's
    /// in the second, and each launch says which.
    @Test func leavingOneAppForAnotherOpensBothWindows() {
        var refresh = Self.routinePlanner()
        let chat = "org.example.Chat"
        let at = Clock.at(day: 21, 9, 2)
        for day in 14..<21 {
            // Chat is opened every morning a few minutes after News; Mail is reopened soon after it is left.
            refresh.recordOpen(of: chat, at: Clock.at(day: day, 9, 10))
            for k in 0..<4 {
                refresh.recordOpen(of: mail, at: Clock.at(day: day, 14, 0) + Double(k) * 600)
                refresh.recordClose(of: mail, at: Clock.at(day: day, 14, 2) + Double(k) * 600)
            }
        }
        refresh.recordOpen(of: mail, at: at - 300)
        refresh.recordClose(of: mail, at: at)
        refresh.recordOpen(of: news, at: at)
        refresh.advance(to: at + 5)
        let mailID = AppID(rawValue: mail)!, chatID = AppID(rawValue: chat)!
        let apps = [mailID: appState(mail, lastUsed: at - 300), chatID: appState(chat, lastUsed: at - 86_000)]
        let pending = [request(mail, .refresh, at: at - 3600), request(chat, .refresh, at: at - 3600)]
        let facts = PlanningFacts(refresh: refresh, appOpenedAt: at, appLeft: AppLeft(appID: mailID, at: at),
                                  appsInUse: [AppID(rawValue: news)!])
        let decision = planner.decide(pending: pending, apps: apps, context: context(at + 5, strategy: .predicted, planning: facts))
        #expect(Set(decision.launches.map(\.appID)) == [mailID, chatID])
        #expect(decision.leftRefreshed == AppLeft(appID: mailID, at: at))
        #expect(decision.window(of: mailID) == WakeWindow(at: at, kind: .afterUse))
        #expect(decision.window(of: chatID) == WakeWindow(at: at, kind: .afterOpen))

        // With one refresh left in the pool, Mail's takes it, and the window after the open has
        // none to spend (as in replay, where each window's refreshes are recorded before the
        // next chooses). Each chooser read the pool as if the others had taken nothing, and two
        // refreshes went for one token; the pool's floor at 0 forgave the debt.
        var poor = refresh
        var snapshot = poor.snapshot()!
        snapshot.tokens = 1
        poor.restore(snapshot, at: at + 5)
        #expect(poor.budgetLeft == 1)
        var poorFacts = facts
        poorFacts.refresh = poor
        let one = planner.decide(pending: pending, apps: apps, context: context(at + 5, strategy: .predicted, planning: poorFacts))
        #expect(one.launches.map(\.appID) == [mailID])
        #expect(one.leftRefreshed == AppLeft(appID: mailID, at: at))
    }

    /// When the user leaves an app, a window opens for a minute for that app's refresh, if the
    /// planner chooses it: yes for Mail, which the user keeps coming back to within minutes, and
    /// no for Mail refreshed 5 minutes before (at most one refresh per 15 min). A window that
    /// opens also takes the refreshes a grid window would take then (News: the app threshold is
    /// at its starting value, and the budget is full); one that does not open takes none.
    /// Processing waits for the grid.
    @Test(arguments: [false, true])
    func leavingAnAppOpensAWindowForRefreshesOnly(refreshedBefore: Bool) {
        let left = mail, refreshed = !refreshedBefore
        var refresh = Self.routinePlanner()
        // A week of afternoons: Mail left and reopened every 10 minutes, News read once.
        for day in 14..<21 {
            Self.mailAfternoon(day: day, &refresh)
            refresh.recordOpen(of: news, at: Clock.at(day: day, 15, 30))
            refresh.recordClose(of: news, at: Clock.at(day: day, 15, 35))
        }
        // The user comes back to Mail within minutes, and to News not for hours: learned.
        #expect(refresh.reuseProbability(of: mail) > 0.7)
        #expect(refresh.reuseProbability(of: news) < 0.3)
        let leftAt = Clock.at(day: 21, 14, 2)
        refresh.recordOpen(of: left, at: leftAt - 420)
        if refreshedBefore {
            refresh.advance(to: leftAt - 300)
            refresh.recordWindow(at: leftAt - 300, refreshed: [left])
        }
        refresh.recordClose(of: left, at: leftAt)
        let other = left == mail ? news : mail
        let apps = [AppID(rawValue: left)!: appState(left, lastUsed: leftAt - 120),
                    AppID(rawValue: other)!: appState(other, lastUsed: leftAt - 3600)]
        let pending = [request(left, .refresh, at: leftAt - 3600), request(left, .processing, at: leftAt - 3600),
                       request(other, .refresh, at: leftAt - 3600)]
        let facts = PlanningFacts(refresh: refresh, appLeft: AppLeft(appID: AppID(rawValue: left)!, at: leftAt))
        func decide(at now: UnixTime, _ facts: PlanningFacts = facts) -> SchedulingDecision {
            var facts = facts
            facts.refresh?.advance(to: now)
            return planner.decide(pending: pending, apps: apps, context: context(now, strategy: .predicted, planning: facts))
        }
        let soon = decide(at: leftAt + 5)
        #expect(soon.launches.map(\.appID.rawValue) == (refreshed ? [left, other] : []))
        #expect(soon.launches.map { $0.requests.map(\.kind) } == (refreshed ? [[.refresh], [.refresh]] : []))
        #expect(soon.refreshed.map(\.rawValue) == (refreshed ? [left, other] : []))
        #expect(soon.window == (refreshed ? WakeWindow(at: leftAt, kind: .afterUse) : nil))
        #expect(soon.leftRefreshed == (refreshed ? AppLeft(appID: AppID(rawValue: left)!, at: leftAt) : nil))
        var later = facts.refresh!
        later.advance(to: leftAt + 5)
        let explanation = planner.explain(
            pending[0], app: apps[AppID(rawValue: left)!]!,
            context: context(leftAt + 5, strategy: .predicted, planning: PlanningFacts(
                refresh: later, appLeft: AppLeft(appID: AppID(rawValue: left)!, at: leftAt))))
        #expect((explanation.earliestRun == leftAt + 5) == refreshed)
        // A minute later the window has closed: nothing starts until the next grid point.
        let closed = decide(at: leftAt + 61)
        #expect(closed.launches.isEmpty)
        #expect(closed.window == nil)
        // Without the app left, the same moment is no window at all.
        #expect(decide(at: leftAt + 5, PlanningFacts(refresh: refresh)).launches.isEmpty)
    }

    /// A leave that falls in the open minute of a grid window is still a leave: the app left
    /// gets its own window's say, as in replay, even when the grid's choice is spent (here the
    /// slot already had its window, for News). Its launch says it went in the window after use.
    /// Without the leave, the same moment starts nothing.
    @Test func leavingAnAppDuringAGridWindowStillRefreshesTheAppLeft() {
        var refresh = Self.routinePlanner()
        for day in 14..<21 { Self.mailAfternoon(day: day, &refresh) }
        let grid = Clock.at(day: 21, 16, 0)
        let leftAt = grid + 20
        refresh.recordOpen(of: mail, at: grid - 600)
        refresh.advance(to: grid)
        refresh.recordWindow(at: grid, refreshed: [news])
        refresh.recordClose(of: mail, at: leftAt)
        let mailID = AppID(rawValue: mail)!, newsID = AppID(rawValue: news)!
        let apps = [mailID: appState(mail, lastUsed: grid - 600), newsID: appState(news, lastUsed: grid - 3600)]
        let pending = [request(mail, .refresh, at: grid - 3600)]
        func decide(_ appLeft: AppLeft?) -> SchedulingDecision {
            var facts = PlanningFacts(refresh: refresh, appLeft: appLeft)
            facts.refresh?.advance(to: leftAt + 5)
            return planner.decide(pending: pending, apps: apps, context: context(leftAt + 5, strategy: .predicted, planning: facts))
        }
        let left = decide(AppLeft(appID: mailID, at: leftAt))
        #expect(left.window == WakeWindow(at: grid, kind: .planned))
        #expect(left.launches.map(\.appID) == [mailID])
        #expect(left.refreshed == [mailID])
        #expect(left.leftRefreshed == AppLeft(appID: mailID, at: leftAt))
        #expect(left.window(of: mailID) == WakeWindow(at: leftAt, kind: .afterUse))
        let stayed = decide(nil)
        #expect(stayed.window == WakeWindow(at: grid, kind: .planned))
        #expect(stayed.launches.isEmpty)
    }

    @Test func theRefreshPlannersSlotsAreWindowsOnAGridThatDoesNotDivideThem() {
        var configuration = PolicyConfiguration.defaults
        configuration.windows.gridOnBattery = .seconds(7 * 60)
        let refresh = RefreshPlanner()
        let slot = Clock.at(10, 15)  // a 15-min slot start, not on the 7-min grid
        var ctx = SchedulingContext(now: slot + 10, conditions: conditions(), configuration: configuration,
                                    planning: PlanningFacts(refresh: refresh))
        #expect(WindowPlanner.openWindow(ctx) == WakeWindow(at: slot, kind: .planned))
        ctx.configuration.refresh.strategy = .everyWindow
        #expect(WindowPlanner.openWindow(ctx) == nil)
    }

    @Test func aNeverOpenedAppGetsNoPredictedRefresh() {
        var refresh = Self.routinePlanner(days: 8)
        let now = Clock.at(day: 8, 9, 0)
        refresh.advance(to: now)
        let other = "org.example.Unused"
        let app = appState(other, lastUsed: now - 60)
        let explanation = planner.explain(
            request(other, .refresh, at: now), app: app,
            context: context(now, strategy: .predicted, planning: PlanningFacts(refresh: refresh)))
        #expect(explanation.blocking.map(\.rule) == [.predictedUse])
        #expect(explanation.earliestRun == nil)
    }

    struct StandingCase: Sendable, CustomTestStringConvertible {
        var noData: Int
        var violations: Int
        var weight: Double
        var testDescription: String { "\(noData) no-data, \(violations) violations" }
    }

    static let standingCases: [StandingCase] = [
        StandingCase(noData: 0, violations: 0, weight: 1),
        StandingCase(noData: 1, violations: 0, weight: 1),
        StandingCase(noData: 3, violations: 0, weight: 0.5),
        StandingCase(noData: 5, violations: 0, weight: 0.25),
        StandingCase(noData: 0, violations: 1, weight: 0.5),
        StandingCase(noData: 3, violations: 2, weight: 0.125),
        StandingCase(noData: 40, violations: 9, weight: 0.125),
    ]

    /// Budgets shrink after `no-data` and overruns: a smaller weight ranks the app lower and
    /// stretches its minimum gap between refreshes (15 min / weight).
    @Test(arguments: standingCases)
    func budgetsShrinkAfterNoDataAndOverruns(_ c: StandingCase) {
        var refresh = Self.routinePlanner()
        let window = Clock.at(day: 21, 9, 0)
        refresh.advance(to: window)
        refresh.recordWindow(at: window, refreshed: [mail])
        let candidate = RefreshPlanner.Candidate(appID: mail, weight: c.weight)
        let until = window + 900 / c.weight
        #expect(refresh.ineligibility(of: candidate, at: window + 60) == .tooSoon(until: until))
        #expect(refresh.ineligibility(of: candidate, at: until) == nil)
        // The agent's formula for the weight (TaskEngine.refreshWeight) is checked in the agent's
        // tests; the table here gives the values it must produce.
        #expect(c.weight >= RefreshPlanner.minimumWeight)
    }

    /// The interval after a refresh holds where the planner chooses, not only where it explains:
    /// Mail, refreshed at 08:50, sits out its usual 09:00 window and may go again from 09:05.
    /// A refresh recorded before an app's first open holds too (the planner keeps it for the
    /// model the open creates).
    @Test func aRecentRefreshKeepsTheAppOutOfTheChoice() {
        let nine = Clock.at(day: 21, 9, 0)
        var usual = Self.routinePlanner()
        var refreshed = usual
        usual.advance(to: nine)
        #expect(usual.choose(at: nine, among: [.init(appID: mail)]) == [mail])
        refreshed.advance(to: nine - 600)
        refreshed.recordWindow(at: nine - 600, refreshed: [mail])
        refreshed.advance(to: nine)
        #expect(refreshed.choose(at: nine, among: [.init(appID: mail)]).isEmpty)
        #expect(refreshed.choose(at: nine + 300, among: [.init(appID: mail)], opportunistic: true) == [mail])

        // Notes was refreshed before its first open (`recordWindow` takes any app): the
        // refresh holds from that open on, where the planner finds the model as where it
        // explains.
        let notes = "org.example.Notes"
        var unrefreshed = Self.routinePlanner()
        var early = unrefreshed
        unrefreshed.advance(to: nine - 60)
        unrefreshed.recordOpen(of: notes, at: nine - 60)
        unrefreshed.advance(to: nine)
        #expect(unrefreshed.choose(at: nine, among: [.init(appID: notes)]) == [notes])
        early.advance(to: nine - 600)
        early.recordWindow(at: nine - 600, refreshed: [notes])
        early.recordOpen(of: notes, at: nine - 60)
        early.advance(to: nine)
        #expect(early.ineligibility(of: .init(appID: notes), at: nine) == .tooSoon(until: nine + 300))
        #expect(early.choose(at: nine, among: [.init(appID: notes)]).isEmpty)
    }

    /// A refresh that did not run (the app could not be reached) is taken back: the app may be
    /// chosen again at once, as before it, with its token back in the pool. A refresh since is
    /// not taken back by an older one's failure.
    @Test func aRefreshThatDidNotRunIsTakenBack() {
        let nine = Clock.at(day: 21, 9, 0)
        var refresh = Self.routinePlanner()
        refresh.advance(to: nine - 600)
        // Four refreshes at 08:50 leave less than a token of the day's 4.4 (2.2 for each of two apps).
        refresh.recordWindow(at: nine - 600, refreshed: [mail, news, "org.example.A", "org.example.B"])
        refresh.advance(to: nine)
        #expect(refresh.choose(at: nine, among: [.init(appID: mail)]).isEmpty)
        // Mail's did not run: it is chosen at 09:00 as usual, which needs its interval gone and a
        // token back.
        refresh.refreshDidNotRun(mail, recordedAt: nine - 600)
        #expect(refresh.ineligibility(of: .init(appID: mail), at: nine) == nil)
        #expect(refresh.choose(at: nine, among: [.init(appID: mail)]) == [mail])
        // Taken back once only, and only the refresh it names.
        refresh.recordWindow(at: nine, refreshed: [mail])
        refresh.refreshDidNotRun(mail, recordedAt: nine - 600)
        #expect(refresh.ineligibility(of: .init(appID: mail), at: nine + 60) == .tooSoon(until: nine + 900))
    }

    struct EveryWindowIntervalCase: Sendable, CustomTestStringConvertible {
        var label: String
        var onBattery: Bool
        /// `[refresh] min_interval`, in seconds.
        var minInterval: Double
        /// Mail's standing (`PlanningFacts.refreshWeights`).
        var weight: Double
        /// The minutes after 09:00 at which Mail's refresh starts, up to 10:00.
        var refreshes: [Int]
        var testDescription: String { label }
    }

    static let everyWindowIntervalCases: [EveryWindowIntervalCase] = [
        .init(label: "on AC (5-min grid), 15-min interval", onBattery: false, minInterval: 900, weight: 1,
              refreshes: [0, 15, 30, 45, 60]),
        .init(label: "on battery (15-min grid), 15-min interval", onBattery: true, minInterval: 900, weight: 1,
              refreshes: [0, 15, 30, 45, 60]),
        .init(label: "on AC, 12-min interval: the window after it ends", onBattery: false, minInterval: 720, weight: 1,
              refreshes: [0, 15, 30, 45, 60]),
        .init(label: "on AC, 10-min interval", onBattery: false, minInterval: 600, weight: 1,
              refreshes: [0, 10, 20, 30, 40, 50, 60]),
        .init(label: "on AC, 5-min interval: every window", onBattery: false, minInterval: 300, weight: 1,
              refreshes: Array(stride(from: 0, through: 60, by: 5))),
        .init(label: "on AC, a poor record (weight 0.5): twice the interval", onBattery: false, minInterval: 900, weight: 0.5,
              refreshes: [0, 30, 60]),
    ]

    /// Under `[refresh] strategy = every-window` a refresh still waits for its app's refresh
    /// interval (SPEC §2: at most one refresh per app per 15 min), from the refresh planner's
    /// record of its last refresh, which the caller keeps as under `predicted`: the decision
    /// names the refreshes that start (`refreshed`), and `Explain` and `holds` name
    /// `refresh-interval` with the window it lifts in. Processing is not held. Mail resubmits its
    /// refresh after every refresh, as apps do: it ran in every window, every 5 min on AC.
    @Test(arguments: everyWindowIntervalCases)
    func everyWindowRefreshesAnAppAtMostOncePerInterval(_ c: EveryWindowIntervalCase) {
        let mailID = AppID(rawValue: mail)!
        var refresh = RefreshPlanner()
        refresh.minRefreshIntervalSeconds = c.minInterval
        let start = Clock.at(9, 0)
        let apps = [mailID: appState(mail, lastUsed: start - 600)]
        // Always pending: each is submitted again as soon as it starts.
        let pending = [request(mail, .refresh, at: start), request(mail, .processing, at: start)]
        let grid = c.onBattery ? 15 : 5
        var refreshedAt: [Int] = []
        for minute in 0...60 {
            let now = start + Double(minute * 60)
            refresh.advance(to: now)
            var ctx = context(now, onBattery: c.onBattery,
                              planning: PlanningFacts(refresh: refresh, refreshWeights: c.weight < 1 ? [mailID: c.weight] : [:]))
            ctx.configuration.refresh.minInterval = .seconds(c.minInterval)
            let decision = planner.decide(pending: pending, apps: apps, context: ctx)
            let kinds = decision.launches.first?.requests.map(\.kind) ?? []
            if kinds.contains(.refresh) { refreshedAt.append(minute) }
            #expect(decision.refreshed == (kinds.contains(.refresh) ? [mailID] : []), "at 09:\(minute)")
            // Processing runs in every window, the interval or not.
            #expect(kinds.contains(.processing) == (minute % grid == 0), "at 09:\(minute)")
            refresh.recordWindow(at: now, refreshed: decision.refreshed.map(\.rawValue))
            guard minute % grid == 0, !kinds.contains(.refresh),
                let next = c.refreshes.first(where: { $0 > minute }).map({ start + Double($0 * 60) })
            else { continue }
            // Held by the interval: looked at again in the window it lifts in, and said so.
            #expect(decision.nextEvaluation == next, "at 09:\(minute)")
            let explanation = planner.explain(pending[0], app: apps[mailID]!, context: ctx)
            #expect(explanation.blocking.map(\.rule) == [.refreshInterval], "at 09:\(minute)")
            #expect(explanation.blocking.first?.liftsAt == next)
            #expect(explanation.earliestRun == next)
            #expect(explanation.summary.contains("\(mail) was refreshed recently; the next refresh may come in"))
            let launched = decision.launches.first { $0.appID == mailID }
            #expect(planner.holds(AppWork(app: apps[mailID]!, requests: pending), launched: launched, context: ctx)
                == [.refreshInterval: 1])
        }
        #expect(refreshedAt == c.refreshes)
    }

    @Test func anAppWithAPoorRecordRanksBelowOneInGoodStanding() throws {
        // Three apps with the same history, opened together every day at 09:05: equally likely
        // to be opened. A window takes two refreshes for three apps (its share, 2.2 a day each
        // over 21 windows, rounded up, is one; it takes at least two), so the weight decides
        // which two.
        let third = "org.example.Third"
        var refresh = RefreshPlanner(registeredAppCount: 3)
        #expect(refresh.refreshesPerWindow == 2)
        for day in 0..<21 {
            for app in [mail, news, third] { refresh.recordOpen(of: app, at: Clock.at(day: day, 9, 5)) }
        }
        let noon = Clock.at(day: 21, 0, 0)
        refresh.advance(to: noon + 1)
        func window(poor: String) throws -> [String] {
            try #require(refresh.nextWindow(
                after: noon, among: [mail, news, third].map { .init(appID: $0, weight: $0 == poor ? 0.125 : 1) })).apps
        }
        #expect(try window(poor: mail) == [news, third])
        #expect(try window(poor: news) == [mail, third])
        #expect(try window(poor: third) == [mail, news])
    }

    // MARK: Content-available

    @Test func contentAvailableWakesGoOutInTheNextWindowWithTheirOwnSlice() {
        let off = Clock.at(10, 7)
        let facts = PlanningFacts(contentAvailable: [AppID(rawValue: mail)!])
        let apps = [AppID(rawValue: mail)!: appState(mail, lastUsed: off - 60)]
        let waiting = planner.decide(pending: [], apps: apps, context: context(off, planning: facts))
        #expect(waiting.launches.isEmpty)
        #expect(waiting.nextEvaluation == Clock.at(10, 15))
        let window = planner.decide(pending: [], apps: apps, context: context(Clock.at(10, 15), planning: facts))
        #expect(window.launches == [Launch(appID: AppID(rawValue: mail)!, requests: [], sliceLength: .seconds(30), contentAvailable: true)])
    }

    @Test func contentAvailableWakesWaitForPowerSaverAndTheSwitches() {
        let now = Clock.at(10, 15)
        let facts = PlanningFacts(contentAvailable: [AppID(rawValue: mail)!])
        var app = appState(mail, lastUsed: now - 60)
        var saver = context(now, planning: facts)
        saver.conditions.powerProfile = .powerSaver
        #expect(planner.decide(pending: [], apps: [app.record.appID: app], context: saver).launches.isEmpty)
        #expect(planner.contentReasons(app: app, context: saver).map(\.rule) == [.powerSaver])
        app.record.enabled = false
        #expect(planner.contentReasons(app: app, context: context(now, planning: facts)).map(\.rule) == [.appDisabled])
    }

    /// A wake held by a rule that lifts by time alone (here the wait after a failed delivery)
    /// is looked at again in the window after it lifts. With no request of the app pending,
    /// nothing else set a timer for it, and it waited for some unrelated event.
    @Test func aContentWakeHeldByTheWaitAfterAFailedDeliveryIsLookedAtAgainWhenItEnds() {
        let failed = Clock.at(10, 3)
        let facts = PlanningFacts(contentAvailable: [AppID(rawValue: mail)!])
        var app = appState(mail, lastUsed: failed - 600)
        app.lastDeliveryFailureAt = failed
        app.failedDeliveries = 1
        let apps = [app.record.appID: app]
        let lift = failed + RunWhenEligiblePolicy.deliveryRetryDelay(afterFailures: 1)
        let held = planner.decide(pending: [], apps: apps, context: context(Clock.at(10, 4), planning: facts))
        #expect(held.launches.isEmpty)
        #expect(planner.contentReasons(app: app, context: context(Clock.at(10, 4), planning: facts)).map(\.rule) == [.unreachable])
        #expect(held.nextEvaluation == WindowPlanner.gridPoint(atOrAfter: lift, grid: 900))
        #expect(held.nextEvaluation == Clock.at(10, 15))
        let then = planner.decide(pending: [], apps: apps, context: context(Clock.at(10, 15), planning: facts))
        #expect(then.launches.map(\.appID) == [app.record.appID])
        #expect(then.launches.first?.contentAvailable == true)
        // Explained (ListPending), it waits for the wait to end, then for the window after it:
        // the one the decision runs it in.
        let why = planner.explainContentWake(app: app, context: context(Clock.at(10, 4), planning: facts))
        #expect(why.blocking.map(\.rule) == [.unreachable])
        #expect(why.earliestRun == Clock.at(10, 15))
    }

    @Test func aWakeNothingHoldsIsExplainedAsWaitingForTheNextWindowOrRunningInTheOpenOne() {
        let facts = PlanningFacts(contentAvailable: [AppID(rawValue: mail)!])
        let app = appState(mail, lastUsed: Clock.at(10, 0))
        let between = planner.explainContentWake(app: app, context: context(Clock.at(10, 7), planning: facts))
        #expect(between.blocking.map(\.rule) == [.nextWindow])
        #expect(between.earliestRun == Clock.at(10, 15))
        let open = planner.explainContentWake(app: app, context: context(Clock.at(10, 15), planning: facts))
        #expect(open.blocking.isEmpty)
        #expect(open.earliestRun == Clock.at(10, 15))
        // A switch, which no time lifts: no earliest window.
        var off = app
        off.record.enabled = false
        let held = planner.explainContentWake(app: off, context: context(Clock.at(10, 7), planning: facts))
        #expect(held.blocking.map(\.rule) == [.appDisabled])
        #expect(held.earliestRun == nil)
    }

    // MARK: Gates and Explain

    struct GateCase: Sendable, CustomTestStringConvertible {
        var label: String
        var rule: BlockingRule
        var change: @Sendable (inout SchedulingContext, inout AppSchedulingState) -> Void
        var testDescription: String { label }
    }

    static let gateCases: [GateCase] = [
        GateCase(label: "unused for 8 days", rule: .appInactive) { c, app in app.record.lastUsedAt = c.now - 8 * 86_400
            app.record.registeredAt = c.now - 9 * 86_400 },
        GateCase(label: "battery at 15 %", rule: .lowBattery) { c, _ in c.conditions.percentage = 15 },
        GateCase(label: "battery at 5 %", rule: .criticalBattery) { c, _ in c.conditions.percentage = 5 },
        GateCase(label: "power saver", rule: .powerSaver) { c, _ in c.conditions.powerProfile = .powerSaver },
        GateCase(label: "all switched off", rule: .globalDisabled) { c, _ in c.globalEnabled = false },
        GateCase(label: "the app switched off", rule: .appDisabled) { _, app in app.record.enabled = false },
    ]

    /// The gates hold in a window too, for every kind, and Explain names them, not the window.
    @Test(arguments: gateCases)
    func gatesHoldInWindowsAndExplainNamesThem(_ c: GateCase) {
        let now = Clock.at(10, 15)
        var ctx = context(now)
        var app = appState(mail, lastUsed: now - 60)
        c.change(&ctx, &app)
        for kind in [TaskKind.refresh, .processing] {
            let r = request(mail, kind, at: now)
            #expect(planner.decide(pending: [r], apps: [app.record.appID: app], context: ctx).launches.isEmpty)
            #expect(planner.explain(r, app: app, context: ctx).blocking.map(\.rule) == [c.rule])
        }
        // And off the grid, the gate is what Explain names: the window is not the obstacle.
        ctx.now = Clock.at(10, 20)
        #expect(planner.explain(request(mail, .processing, at: now), app: app, context: ctx).blocking.map(\.rule) == [c.rule])
    }

    @Test func processingRunsOnlyWhileIdle() {
        let now = Clock.at(10, 15)
        var ctx = context(now)
        ctx.conditions.locked = false
        ctx.conditions.idle = false
        let app = appState(mail, lastUsed: now - 60)
        let r = request(mail, .processing, at: now)
        #expect(planner.decide(pending: [r], apps: [app.record.appID: app], context: ctx).launches.isEmpty)
        #expect(planner.explain(r, app: app, context: ctx).blocking.map(\.rule) == [.notIdle])
    }

    /// `[limits] inactive_after` of 15 s. Mail, opened a minute ago and still open, is in use:
    /// neither `app-inactive` (the agent's record has it used now) nor the planner holds it as
    /// unused, and no words say so. Left 20 s ago it is unused, and the words give the limit
    /// configured, not 7 days. (Left 20 s ago, `app-inactive` holds it first; the planner's own
    /// words are read here with a record that says used.)
    @Test func anAppInUseIsNotHeldAsUnusedAndTheWordsGiveTheLimit() {
        let now = Clock.at(day: 21, 9, 1)
        var refresh = RefreshPlanner(registeredAppCount: 1)
        refresh.inactiveAfterSeconds = 15
        refresh.recordOpen(of: mail, at: now - 60)
        refresh.advance(to: now)
        let r = request(mail, .refresh, at: now)
        func ctx(_ planner: RefreshPlanner, inUse: Set<AppID>) -> SchedulingContext {
            var ctx = context(now, strategy: .predicted, planning: PlanningFacts(refresh: planner, appsInUse: inUse))
            ctx.configuration.limits.inactiveAfter = .seconds(15)
            return ctx
        }
        let open = planner.explain(r, app: appState(mail, lastUsed: now), context: ctx(refresh, inUse: [AppID(rawValue: mail)!]))
        #expect(!open.blocking.map(\.rule).contains(.appInactive))
        #expect(!open.blocking.contains { $0.words.contains("not been used") })

        // (The record is not looked at by the planner's rule: a record used now, the planner's
        // words alone.)
        var left = refresh
        left.recordClose(of: mail, at: now - 20)
        let unused = planner.explain(r, app: appState(mail, lastUsed: now), context: ctx(left, inUse: []))
        #expect(unused.blocking.map(\.rule) == [.predictedUse])
        #expect(unused.blocking.last?.words == "the planner last saw \(mail) used 20 s ago (the limit is 15 s), so no use is "
            + "predicted (its use just now was not an open the planner saw): refresh is planned once the app is opened")
    }

    struct UnusedCase: Sendable, CustomTestStringConvertible {
        var label: String
        /// When the refresh planner saw the app opened and left, before now; nil: never.
        var plannerOpenedAgo: Double?
        /// The record's last use and registration, before now.
        var recordUsedAgo: Double?
        var registeredAgo: Double
        var words: String
        var testDescription: String { label }
    }

    static let day = 86_400.0
    static let unusedCases: [UnusedCase] = [
        UnusedCase(
            label: "registered background_only yesterday, never opened", plannerOpenedAgo: nil, recordUsedAgo: nil,
            registeredAgo: day,
            words: "no open of \(mail) has been seen yet, so no use can be predicted: refresh is planned once the app is opened"),
        UnusedCase(
            label: "used a minute ago by its own word, never seen opened", plannerOpenedAgo: nil, recordUsedAgo: 60,
            registeredAgo: day,
            words: "no open of \(mail) has been seen yet, so no use can be predicted (its use 1 min ago was not an open "
                + "the planner saw): refresh is planned once the app is opened"),
        UnusedCase(
            label: "unused for 8 days, registered again yesterday", plannerOpenedAgo: 8 * day, recordUsedAgo: 8 * day,
            registeredAgo: day,
            words: "\(mail) has not been used for 8 days (the limit is 7 days), so no use is predicted: "
                + "refresh is planned once the app is opened"),
        UnusedCase(
            label: "seen used 8 days ago, used a minute ago unseen", plannerOpenedAgo: 8 * day, recordUsedAgo: 60,
            registeredAgo: 30 * day,
            words: "the planner last saw \(mail) used 8 days ago (the limit is 7 days), so no use is predicted "
                + "(its use 1 min ago was not an open the planner saw): refresh is planned once the app is opened"),
    ]

    /// The refresh planner holds a refresh the record's own rule (`app-inactive`) lets through:
    /// the words say whether it never saw the app opened, or saw it used too long ago, and when
    /// the record knows of a newer use it did not see. The planner's view decides (see
    /// `WindowPlanner.unusedWords`).
    @Test(arguments: unusedCases)
    func theWordsSayWhyNoUseIsPredicted(_ c: UnusedCase) {
        let now = Clock.at(day: 21, 9, 1)
        var refresh = RefreshPlanner(registeredAppCount: 1)
        if let ago = c.plannerOpenedAgo {
            refresh.recordOpen(of: mail, at: now - ago - 60)
            refresh.recordClose(of: mail, at: now - ago)
        }
        refresh.advance(to: now)
        let app = AppSchedulingState(
            record: AppRecord(
                appID: AppID(rawValue: mail)!, identifiers: ["\(mail).refresh"], identity: .flatpak, backgroundOnly: true,
                registeredAt: now - c.registeredAgo, lastUsedAt: c.recordUsedAgo.map { now - $0 }),
            reachable: true)
        let ctx = context(now, strategy: .predicted, planning: PlanningFacts(refresh: refresh))
        let r = request(mail, .refresh, at: now)
        let explanation = planner.explain(r, app: app, context: ctx)
        #expect(explanation.blocking.map(\.rule) == [.predictedUse])
        #expect(explanation.blocking.last?.words == c.words)
        #expect(planner.decide(pending: [r], apps: [app.record.appID: app], context: ctx).launches.isEmpty)
    }

    /// Both rules count an app unused at exactly `[limits] inactive_after` after its last use,
    /// and used a second before: the record's `app-inactive` and the refresh planner agree.
    @Test(arguments: [(Self.day * 7, true), (Self.day * 7 - 1, false)])
    func theSevenDayBoundaryIsTheSameForBothRules(_ ago: Double, unused: Bool) {
        let now = Clock.at(day: 21, 9, 1)
        var refresh = RefreshPlanner(registeredAppCount: 1)
        refresh.recordOpen(of: mail, at: now - ago - 60)
        refresh.recordClose(of: mail, at: now - ago)
        refresh.advance(to: now)
        let app = appState(mail, lastUsed: now - ago, registered: now - 30 * Self.day)
        let ctx = context(now, strategy: .predicted, planning: PlanningFacts(refresh: refresh))
        let r = request(mail, .refresh, at: now)
        let rules = RunWhenEligiblePolicy().explain(r, app: app, context: ctx)
        #expect(rules.blocking.map(\.rule) == (unused ? [.appInactive] : []))
        if unused {
            #expect(rules.blocking.first?.words
                == "\(mail) has not been used for 7 days (the limit is 7 days): it runs once you open the app")
        }
        let candidate = RefreshPlanner.Candidate(appID: mail)
        #expect(refresh.ineligibility(of: candidate, at: now) == (unused ? .inactive(lastUse: now - ago) : nil))
    }
}
