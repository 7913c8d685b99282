/// The seam between the agent and the policy that decides when work runs.
///
/// The agent gathers plain facts (pending requests, apps, conditions, switches, the time) and
/// asks a `SchedulingPolicy` what to launch now and when to ask again. The policy does no I/O
/// and reads no clock (STYLE.md examples 1 and 3). Issue 4 ships `RunWhenEligiblePolicy`; the
/// planner replaces it behind the same protocol.

/// A rule that keeps a request from running now. String-backed: `Explain` and `ListPending`
/// carry the raw value as a key, next to the words.
public enum BlockingRule: String, Sendable, CaseIterable, Codable {
    case globalDisabled = "global-disabled"
    case appDisabled = "app-disabled"
    case earliestBegin = "earliest-begin"
    case criticalBattery = "critical-battery"
    case lowBattery = "low-battery"
    case powerSaver = "power-saver"
    case notIdle = "not-idle"
    case noNetwork = "no-network"
    case noExternalPower = "no-external-power"
    case appInactive = "app-inactive"
    case overrunPenalty = "overrun-penalty"
    case unreachable
    case appBusy = "app-busy"
    case sleeping
    /// The planner's rules (`WindowPlanner`): work starts only in a wake window; a refresh waits
    /// for the window before predicted use; at most one refresh per app per interval.
    case nextWindow = "next-window"
    case predictedUse = "predicted-use"
    case refreshInterval = "refresh-interval"
}

extension BlockingRule {
    /// What a request held by this rule waits for, in words that follow "waits for":
    /// `GetStatus`'s summary of what holds the pending work. `inactiveAfter` is
    /// `[limits] inactive_after`, in seconds.
    public func awaited(inactiveAfter: Double) -> String {
        switch self {
        case .globalDisabled: "background work to be switched on"
        case .appDisabled: "their app to be switched on"
        case .earliestBegin: "their earliest begin"
        case .criticalBattery: "the battery to charge above critical"
        case .lowBattery: "the battery to charge (it is low)"
        case .powerSaver: "power saver to be turned off"
        case .notIdle: "the session to be idle"
        case .noNetwork: "a network"
        case .noExternalPower: "external power"
        case .appInactive:
            "their app to be used (unused for \(RunWhenEligiblePolicy.durationWords(inactiveAfter, roundingUp: false)))"
        case .overrunPenalty: "their app's overrun penalty to end"
        case .unreachable: "their app to be reachable on the bus"
        case .appBusy: "their app's running slice to end"
        case .sleeping: "the machine to wake"
        case .nextWindow: "the next wake window"
        case .predictedUse: "the window before their app's predicted use"
        case .refreshInterval: "their app's refresh interval to pass"
        }
    }

    /// "10 wait for the session to be idle; 3 for the next wake window": the counts of
    /// `SchedulingPolicy.holds`, largest first (then in rule order); "" when nothing waits.
    /// `inactiveAfter`: `[limits] inactive_after`, in seconds, for `appInactive`'s words.
    public static func summary(of holds: [BlockingRule: Int], inactiveAfter: Double) -> String {
        let order = Dictionary(uniqueKeysWithValues: allCases.enumerated().map { ($1, $0) })
        let entries = holds.filter { $0.value > 0 }.sorted {
            $0.value != $1.value ? $0.value > $1.value : order[$0.key]! < order[$1.key]!
        }
        return entries.enumerated().map { index, entry in
            "\(entry.value) " + (index == 0 ? (entry.value == 1 ? "waits for " : "wait for ") : "for ") + entry.key.awaited(inactiveAfter: inactiveAfter)
        }.joined(separator: "; ")
    }
}

/// One rule that blocks a request, in words a person can act on, and when it lifts by itself
/// if that is known (a time rule), so the policy can say when the request can run.
public struct BlockingReason: Sendable, Equatable {
    public var rule: BlockingRule
    public var words: String
    /// The time at which this rule stops blocking, when it depends only on time.
    public var liftsAt: UnixTime?

    public init(rule: BlockingRule, words: String, liftsAt: UnixTime? = nil) {
        self.rule = rule
        self.words = words
        self.liftsAt = liftsAt
    }
}

/// What the policy knows about one app besides its record.
public struct AppSchedulingState: Sendable, Equatable {
    public var record: AppRecord
    /// A connection of the app is on the bus, or it registered an activatable `bus_name`.
    public var reachable: Bool
    /// The last delivery failed at this time; the policy waits before trying again.
    public var lastDeliveryFailureAt: UnixTime?
    /// Deliveries that failed in a row, the last at `lastDeliveryFailureAt`: the wait doubles
    /// with each (`RunWhenEligiblePolicy.deliveryRetryDelay(afterFailures:)`; 0 counts as 1).
    public var failedDeliveries: Int
    /// A slice of this app is running now.
    public var busy: Bool
    /// Violations (overruns, CPU enforcement) in the last 7 days, and when the last one was.
    public var recentViolations: Int
    /// Of `recentViolations`, those the CPU monitor's enforcement made; the rest overran their
    /// time. Both count alike; `explain` names which happened.
    public var recentCPUViolations: Int
    public var lastViolationAt: UnixTime?
    /// When the overrun penalty ends (`RunWhenEligiblePolicy.overrunPenaltyEnd`), worked out
    /// from the times of the violations when they are known, so that the hold shortens as the
    /// older ones age out; from the count and the last alone otherwise.
    public var overrunPenaltyEndsAt: UnixTime?

    public init(
        record: AppRecord, reachable: Bool, lastDeliveryFailureAt: UnixTime? = nil, failedDeliveries: Int = 0,
        busy: Bool = false, recentViolations: Int = 0, recentCPUViolations: Int = 0, lastViolationAt: UnixTime? = nil,
        overrunPenaltyEndsAt: UnixTime? = nil
    ) {
        self.record = record
        self.reachable = reachable
        self.lastDeliveryFailureAt = lastDeliveryFailureAt
        self.failedDeliveries = failedDeliveries
        self.busy = busy
        self.recentViolations = recentViolations
        self.recentCPUViolations = recentCPUViolations
        self.lastViolationAt = lastViolationAt
        self.overrunPenaltyEndsAt = overrunPenaltyEndsAt
    }

    /// The state of an app whose violations counting now are `violations`: their count, the
    /// last, and when the overrun penalty they earn under `configuration` ends.
    public init(
        record: AppRecord, reachable: Bool, lastDeliveryFailureAt: UnixTime? = nil, failedDeliveries: Int = 0,
        busy: Bool = false, violations: RecentViolations, configuration: PolicyConfiguration
    ) {
        self.init(
            record: record, reachable: reachable, lastDeliveryFailureAt: lastDeliveryFailureAt,
            failedDeliveries: failedDeliveries, busy: busy, recentViolations: violations.count,
            recentCPUViolations: violations.count(of: .cpu), lastViolationAt: violations.last,
            overrunPenaltyEndsAt: violations.penaltyEnd {
                RunWhenEligiblePolicy.overrunPenalty(violations: $0, configuration)
            })
    }
}

/// Why an opportunistic wake window opened: the machine is awake and in use anyway (SPEC §1,
/// Wake window).
public enum OpportunityReason: String, Sendable, CaseIterable, Codable {
    case unlocked
    case userActive = "user-active"
    case chargerPlugged = "charger-plugged"
    case unmeteredNetwork = "unmetered-network"

    public var words: String {
        switch self {
        case .unlocked: "the session was unlocked"
        case .userActive: "the user became active"
        case .chargerPlugged: "the charger was plugged in"
        case .unmeteredNetwork: "an unmetered network appeared"
        }
    }
}

/// An opportunistic wake window: opened at `at`, for `reason`.
public struct Opportunity: Sendable, Equatable {
    public var at: UnixTime
    public var reason: OpportunityReason

    public init(at: UnixTime, reason: OpportunityReason) {
        self.at = at
        self.reason = reason
    }
}

/// What the planner knows beyond the requests and the machine: its learned state and recent
/// events. Empty for policies that do not plan.
public struct PlanningFacts: Sendable {
    /// The refresh planner, advanced to `now`, or `nil` when the caller keeps none. With
    /// `[refresh] strategy = every-window` it chooses nothing: only its record of each app's
    /// last refresh counts, for `min_interval` (`WindowPlanner.refreshIntervals`).
    public var refresh: RefreshPlanner?
    /// The latest opportunistic window, if one opened.
    public var opportunity: Opportunity?
    /// How much each app's record counts when refreshes are shared out (1 when absent).
    public var refreshWeights: [AppID: Double]
    /// Apps with an undelivered content-available wake.
    public var contentAvailable: Set<AppID>
    /// When the user last opened an app: for a short while after, a window opens for the
    /// refreshes the refresh planner chooses among the apps not in use, and for nothing else
    /// (the user is at work, and apps are often opened one after another).
    public var appOpenedAt: UnixTime?
    /// The app the user last left, and when: for a short while after, a window opens for that
    /// app's refresh, if the refresh planner chooses it (people come back soon to the apps they
    /// switch between).
    public var appLeft: AppLeft?
    /// The window for refreshes only (after an open or after use) that last opened, that is,
    /// started refreshes: for the rest of its span it also takes what a grid window would
    /// (`RefreshPlanner.chooseAlongside`), for a request that comes in it too, and `Explain`
    /// says so.
    public var refreshWindow: WakeWindow?
    /// Apps the user opened and has not left: the window after an open does not refresh them
    /// (the one after they are left may).
    public var appsInUse: Set<AppID>
    /// For `Explain` and `ListPending`: the plan of every app's pending refresh from now, as
    /// `GetTimeline` draws it (`RefreshPlan`), which a refresh's earliest window is read from.
    /// A window's worth is the share of all predicted opens that its chosen apps serve, so the
    /// window a refresh goes in depends on the others; worked out for the refresh alone, the
    /// earliest window named could be one that never opens, or later than the one it goes in.
    /// Nil: the refresh planned alone (the decision itself needs none: it has every app).
    public var refreshPlan: RefreshPlan?

    public init(
        refresh: RefreshPlanner? = nil, opportunity: Opportunity? = nil, refreshWeights: [AppID: Double] = [:],
        contentAvailable: Set<AppID> = [], appOpenedAt: UnixTime? = nil, appLeft: AppLeft? = nil,
        refreshWindow: WakeWindow? = nil, appsInUse: Set<AppID> = [], refreshPlan: RefreshPlan? = nil
    ) {
        self.refreshPlan = refreshPlan
        self.refresh = refresh
        self.opportunity = opportunity
        self.refreshWeights = refreshWeights
        self.contentAvailable = contentAvailable
        self.appOpenedAt = appOpenedAt
        self.appLeft = appLeft
        self.refreshWindow = refreshWindow
        self.appsInUse = appsInUse
    }
}

/// The user left (closed) an app: its unit went away, or it reported itself in the background.
public struct AppLeft: Sendable, Equatable {
    public var appID: AppID
    public var at: UnixTime

    public init(appID: AppID, at: UnixTime) {
        self.appID = appID
        self.at = at
    }
}

/// The machine-wide facts a decision depends on.
public struct SchedulingContext: Sendable {
    public var now: UnixTime
    public var conditions: Conditions
    public var globalEnabled: Bool
    /// Between `PrepareForSleep(true)` and resume: nothing starts.
    public var sleeping: Bool
    public var configuration: PolicyConfiguration
    public var planning: PlanningFacts

    public init(
        now: UnixTime, conditions: Conditions, globalEnabled: Bool = true, sleeping: Bool = false,
        configuration: PolicyConfiguration = .defaults, planning: PlanningFacts = PlanningFacts()
    ) {
        self.now = now
        self.conditions = conditions
        self.globalEnabled = globalEnabled
        self.sleeping = sleeping
        self.configuration = configuration
        self.planning = planning
    }
}

/// Work to start now for one app: its requests share one slice of `sliceLength`.
public struct Launch: Sendable, Equatable {
    public var appID: AppID
    /// A slice of the app's `AppWork.requests`, so that a decision copies no request.
    public var requests: ArraySlice<TaskRequest>
    public var sliceLength: Duration
    /// Deliver the app's undelivered content-available wake in this window too.
    public var contentAvailable: Bool

    public init(appID: AppID, requests: ArraySlice<TaskRequest>, sliceLength: Duration, contentAvailable: Bool = false) {
        self.appID = appID
        self.requests = requests
        self.sliceLength = sliceLength
        self.contentAvailable = contentAvailable
    }
}

/// The answer to "what now?".
public struct SchedulingDecision: Sendable, Equatable {
    /// Start these now, one slice per app.
    public var launches: [Launch]
    /// Ask again at this time even if nothing changes (an `earliest_begin` or a penalty lifts),
    /// or `nil` when only a change of facts can make more work runnable.
    public var nextEvaluation: UnixTime?
    /// The wake window open now, if any.
    public var window: WakeWindow?
    /// The apps whose refresh the refresh planner chose in this window (under every-window, whose
    /// refresh starts in it): the caller records them with `RefreshPlanner.recordWindow` once
    /// launched.
    public var refreshed: [AppID]
    /// The app the user just left, when its refresh goes in the window after use
    /// (`WakeWindow.Kind.afterUse`, at the moment it was left): its launch is in that window,
    /// any other in `window` (the one after an open, when both are open).
    public var leftRefreshed: AppLeft?

    public init(
        launches: [Launch] = [], nextEvaluation: UnixTime? = nil, window: WakeWindow? = nil, refreshed: [AppID] = [],
        leftRefreshed: AppLeft? = nil
    ) {
        self.launches = launches
        self.nextEvaluation = nextEvaluation
        self.window = window
        self.refreshed = refreshed
        self.leftRefreshed = leftRefreshed
    }

    /// The window `appID`'s launch in this decision starts in.
    public func window(of appID: AppID) -> WakeWindow? {
        if let left = leftRefreshed, left.appID == appID { return WakeWindow(at: left.at, kind: .afterUse) }
        return window
    }
}

/// Why one request has not run, for `Explain` and `ListPending`.
public struct Explanation: Sendable, Equatable {
    /// Empty when the request may run at the next evaluation.
    public var blocking: [BlockingReason]
    /// The earliest time it can run, when only time rules block it (or now, when nothing does);
    /// `nil` when it waits for a change of facts (charger, network, idle, a switch).
    public var earliestRun: UnixTime?
    /// One sentence for people.
    public var summary: String

    public init(blocking: [BlockingReason], earliestRun: UnixTime?, summary: String) {
        self.blocking = blocking
        self.earliestRun = earliestRun
        self.summary = summary
    }

    public var runnable: Bool { blocking.isEmpty }

    /// A request held back by `reasons`: the summary lists their words.
    public static func waiting(_ reasons: [BlockingReason], earliestRun: UnixTime?) -> Explanation {
        Explanation(
            blocking: reasons, earliestRun: earliestRun,
            summary: "Waits: " + reasons.map(\.words).joined(separator: "; ") + ".")
    }
}

/// One app and its pending requests, as a decision takes them: grouped by app, so that the
/// app's own rules are judged once, not once per request.
public struct AppWork: Sendable {
    public var app: AppSchedulingState
    /// In launch order (`RunWhenEligiblePolicy.launchOrder`): launches keep it.
    public var requests: [TaskRequest]

    public init(app: AppSchedulingState, requests: [TaskRequest]) {
        self.app = app
        self.requests = requests
    }
}

/// Decides when pending work runs. Pure: the same facts give the same decision.
public protocol SchedulingPolicy: Sendable {
    /// What to launch now, given the apps concerned and their pending requests (an app may have
    /// none: it may still have a content-available wake). Launches come in the order of `work`.
    func decide(work: [AppWork], context: SchedulingContext) -> SchedulingDecision

    /// Why `request` has not run yet, and when it can.
    func explain(_ request: TaskRequest, app: AppSchedulingState, context: SchedulingContext) -> Explanation

    /// What `GetRefreshStatus` tells the app.
    func refreshStatus(app: AppRecord, context: SchedulingContext) -> RefreshStatus

    /// The rules holding those of `work`'s requests that `launched` (the decision's launch for
    /// the app, if any) does not carry, counted per rule: a request held by several rules counts
    /// under each. For `GetStatus`; rule keys only, no words, so that it costs about what the
    /// decision cost.
    func holds(_ work: AppWork, launched: Launch?, context: SchedulingContext) -> [BlockingRule: Int]

    /// Why user-started work (`BeginBackgroundTask`) may not start now, or `nil` when it may.
    func backgroundTaskRefusal(context: SchedulingContext) -> BlockingReason?

    /// The rules that hold back an app's content-available wake now.
    func contentReasons(app: AppSchedulingState, context: SchedulingContext, words: Bool) -> [BlockingReason]

    /// Why the app's undelivered content-available wake has not gone yet, and when it can: as
    /// `explain` says it of a request with no conditions of its own.
    func explainContentWake(app: AppSchedulingState, context: SchedulingContext) -> Explanation

    /// The rules that hold `request` back now, besides the wake windows and the refresh
    /// planner: the machine, the switches, power, use, the request's own conditions, the app's
    /// conduct and reachability. Without the planner's look-ahead, which `explain` runs.
    func ruleReasons(for request: TaskRequest, app: AppSchedulingState, context: SchedulingContext, words: Bool) -> [BlockingReason]
}

extension SchedulingPolicy {
    /// `decide(work:context:)` for requests not yet grouped: every app of `apps`, in app-id
    /// order, with its requests in the order given. Requests of apps missing from `apps` are
    /// not launched.
    public func decide(pending: [TaskRequest], apps: [AppID: AppSchedulingState], context: SchedulingContext)
        -> SchedulingDecision
    {
        var grouped: [AppID: [TaskRequest]] = [:]
        for request in pending where apps[request.appID] != nil { grouped[request.appID, default: []].append(request) }
        let work = apps.keys.sorted().map {
            AppWork(app: apps[$0]!, requests: RunWhenEligiblePolicy.launchOrder(grouped[$0] ?? []))
        }
        return decide(work: work, context: context)
    }
}
