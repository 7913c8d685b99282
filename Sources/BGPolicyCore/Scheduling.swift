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
    /// A slice of this app is running now.
    public var busy: Bool
    /// Violations (overruns, CPU enforcement) in the last 7 days, and when the last one was.
    public var recentViolations: Int
    public var lastViolationAt: UnixTime?

    public init(
        record: AppRecord, reachable: Bool, lastDeliveryFailureAt: UnixTime? = nil, busy: Bool = false,
        recentViolations: Int = 0, lastViolationAt: UnixTime? = nil
    ) {
        self.record = record
        self.reachable = reachable
        self.lastDeliveryFailureAt = lastDeliveryFailureAt
        self.busy = busy
        self.recentViolations = recentViolations
        self.lastViolationAt = lastViolationAt
    }
}

/// The machine-wide facts a decision depends on.
public struct SchedulingContext: Sendable, Equatable {
    public var now: UnixTime
    public var conditions: Conditions
    public var globalEnabled: Bool
    /// Between `PrepareForSleep(true)` and resume: nothing starts.
    public var sleeping: Bool
    public var configuration: PolicyConfiguration

    public init(
        now: UnixTime, conditions: Conditions, globalEnabled: Bool = true, sleeping: Bool = false,
        configuration: PolicyConfiguration = .defaults
    ) {
        self.now = now
        self.conditions = conditions
        self.globalEnabled = globalEnabled
        self.sleeping = sleeping
        self.configuration = configuration
    }
}

/// Work to start now for one app: its requests share one slice of `sliceLength`.
public struct Launch: Sendable, Equatable {
    public var appID: AppID
    public var requests: [TaskRequest]
    public var sliceLength: Duration

    public init(appID: AppID, requests: [TaskRequest], sliceLength: Duration) {
        self.appID = appID
        self.requests = requests
        self.sliceLength = sliceLength
    }
}

/// The answer to "what now?".
public struct SchedulingDecision: Sendable, Equatable {
    /// Start these now, one slice per app.
    public var launches: [Launch]
    /// Ask again at this time even if nothing changes (an `earliest_begin` or a penalty lifts),
    /// or `nil` when only a change of facts can make more work runnable.
    public var nextEvaluation: UnixTime?

    public init(launches: [Launch] = [], nextEvaluation: UnixTime? = nil) {
        self.launches = launches
        self.nextEvaluation = nextEvaluation
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
}

/// Decides when pending work runs. Pure: the same facts give the same decision.
public protocol SchedulingPolicy: Sendable {
    /// What to launch now, given every pending request and the apps they belong to.
    /// Requests of apps missing from `apps` are not launched.
    func decide(pending: [TaskRequest], apps: [AppID: AppSchedulingState], context: SchedulingContext)
        -> SchedulingDecision

    /// Why `request` has not run yet, and when it can.
    func explain(_ request: TaskRequest, app: AppSchedulingState, context: SchedulingContext) -> Explanation

    /// What `GetRefreshStatus` tells the app.
    func refreshStatus(app: AppRecord, context: SchedulingContext) -> RefreshStatus

    /// Why user-started work (`BeginBackgroundTask`) may not start now, or `nil` when it may.
    func backgroundTaskRefusal(context: SchedulingContext) -> BlockingReason?
}
