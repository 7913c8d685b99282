/// Issue 4's policy: a request runs as soon as nothing blocks it. No planning, no coalescing
/// beyond "everything of one app that is runnable now shares one slice"; the planner replaces it
/// behind `SchedulingPolicy`.
///
/// Every rule is one entry of `blockingReasons(for:app:context:)`, which both `decide` and
/// `explain` use, so that what the agent does and what `bgpolicy explain` says cannot drift apart.
public struct RunWhenEligiblePolicy: SchedulingPolicy {
    /// How long after a failed delivery the app is tried again: long enough not to hammer an app
    /// that is wedged or being restarted, short enough that a refresh is not lost for long.
    public static let deliveryRetryDelay: Duration = .seconds(300)
    /// The longest wait after failures in a row (`deliveryRetryDelay(afterFailures:)`).
    public static let maximumDeliveryRetryDelay: Duration = .seconds(6 * 3600)

    /// The wait after `failures` failed deliveries in a row: `deliveryRetryDelay` after the
    /// first, doubling with each more, up to `maximumDeliveryRetryDelay` (5, 10, 20, 40, 80,
    /// 160, 320 min, then 6 h). An app that refuses every `RunTask` (no handler for the
    /// identifier, no `Client1`) then costs a few wake-ups a day, not one every 5 minutes for
    /// good; it registering again starts the count afresh.
    public static func deliveryRetryDelay(afterFailures failures: Int) -> Double {
        let doublings = min(max(failures, 1) - 1, 7)
        return min(deliveryRetryDelay.seconds * Double(1 << doublings), maximumDeliveryRetryDelay.seconds)
    }

    /// The overrun penalty never grows past this, so an app that misbehaved once a day still gets
    /// a few chances a day.
    public static let maximumPenalty: Duration = .seconds(8 * 3600)

    public init() {}

    public func decide(work: [AppWork], context: SchedulingContext) -> SchedulingDecision {
        var launches: [Launch] = []
        var nextEvaluation: UnixTime?
        for index in work.indices {
            let (runnable, lifts) = runnableRequests(of: work, at: index, context: context)
            if let lifts { nextEvaluation = min(nextEvaluation ?? lifts, lifts) }
            guard !runnable.isEmpty else { continue }
            launches.append(Launch(
                appID: work[index].app.record.appID, requests: runnable,
                sliceLength: Self.sliceLength(for: runnable, context.configuration)))
        }
        return SchedulingDecision(launches: launches, nextEvaluation: nextEvaluation)
    }

    /// The app's requests that nothing blocks, in launch order, and the earliest time at which a
    /// blocked one is freed by time alone. The app's own rules are judged once.
    ///
    /// Marked for inlining into each policy's loop over the apps (the 1,000-app planning
    /// decision of `make bench` measured about a tenth faster so), and given the array and an
    /// index rather than the app's work: an element passed on its own was copied, every field
    /// retained and released (another tenth); its fields read in place are not.
    @inline(__always)
    func runnableRequests(
        of work: [AppWork], at index: Int, context: SchedulingContext
    ) -> (runnable: ArraySlice<TaskRequest>, lifts: UnixTime?) {
        // Most often no app rule holds: tested on the app's fields, which copies nothing (passing
        // the app itself to the reason builders copied all of it, a tenth of a decision).
        let appBlocks =
            Self.appConditionsHold(
                enabled: work[index].app.record.enabled, lastUsedAt: work[index].app.record.lastUsedAt,
                registeredAt: work[index].app.record.registeredAt, recentViolations: work[index].app.recentViolations,
                lastViolationAt: work[index].app.lastViolationAt,
                overrunPenaltyEndsAt: work[index].app.overrunPenaltyEndsAt, reachable: work[index].app.reachable,
                lastDeliveryFailureAt: work[index].app.lastDeliveryFailureAt,
                failedDeliveries: work[index].app.failedDeliveries, busy: work[index].app.busy, context)
            ? []
            : appReasonsBefore(work[index].app, context, words: false) + appReasonsAfter(work[index].app, nil, context, words: false)
        var lifts: UnixTime?
        if !appBlocks.isEmpty {
            // Blocked as an app: only when every app rule lifts by time can a request be freed.
            guard let appLifts = Self.timeAllLift(appBlocks) else { return ([], nil) }
            for request in work[index].requests {
                let own = requestReasons(request, context, words: false)
                if own.isEmpty {
                    lifts = min(lifts ?? appLifts, appLifts)
                } else if let ownLifts = Self.timeAllLift(own) {
                    let both = max(appLifts, ownLifts)
                    lifts = min(lifts ?? both, both)
                }
            }
            return ([], lifts)
        }
        // Most often nothing of the app's own is blocked: then its requests go as they came,
        // without a copy.
        var blocked: [Bool]?
        let requests = work[index].requests
        // Read in place: the usual request passes on four fields, with nothing copied.
        let mayBeBlocked: [Int] = requests.withUnsafeBufferPointer { buffer in
            var indices: [Int] = []
            for index in buffer.indices
            where !Self.ownConditionsHold(
                kind: buffer[index].kind, earliestBegin: buffer[index].earliestBegin,
                requiresNetwork: buffer[index].requiresNetwork, requiresExternalPower: buffer[index].requiresExternalPower,
                context)
            {
                indices.append(index)
            }
            return indices
        }
        for index in mayBeBlocked {
            let own = requestReasons(requests[index], context, words: false)
            guard !own.isEmpty else { continue }
            if blocked == nil { blocked = [Bool](repeating: false, count: requests.count) }
            blocked![index] = true
            if let ownLifts = Self.timeAllLift(own) { lifts = min(lifts ?? ownLifts, ownLifts) }
        }
        guard let blocked else { return (requests[...], lifts) }
        var runnable: [TaskRequest] = []
        for index in requests.indices where !blocked[index] { runnable.append(requests[index]) }
        return (runnable[...], lifts)
    }

    /// Refresh first (the short, latency-sensitive work the user sees), then by submission, then
    /// by identifier: the order `AppWork.requests` comes in, and slices deliver in.
    public static func launchOrder(_ requests: [TaskRequest]) -> [TaskRequest] {
        guard requests.count > 1 else { return requests }
        return requests.sorted { a, b in
            if (a.kind == .refresh) != (b.kind == .refresh) { return a.kind == .refresh }
            if a.submittedAt != b.submittedAt { return a.submittedAt < b.submittedAt }
            return a.identifier < b.identifier
        }
    }

    public func explain(_ request: TaskRequest, app: AppSchedulingState, context: SchedulingContext) -> Explanation {
        let reasons = blockingReasons(for: request, app: app, context: context)
        if reasons.isEmpty {
            return Explanation(blocking: [], earliestRun: context.now, summary: "Runs at the next opportunity.")
        }
        return .waiting(reasons, earliestRun: Self.timeAllLift(reasons))
    }

    public func refreshStatus(app: AppRecord, context: SchedulingContext) -> RefreshStatus {
        if !app.enabled { return .denied }
        let conditions = context.conditions
        let battery = context.configuration.battery
        if !context.globalEnabled || conditions.powerProfile == .powerSaver
            || Self.batteryBelow(battery.low, conditions) != nil || Self.batteryBelow(battery.critical, conditions) != nil
        {
            return .restricted
        }
        return .available
    }

    /// Those of a plain request with no conditions of its own (the switches, battery, power
    /// saver, use, conduct, reachability).
    public func contentReasons(app: AppSchedulingState, context: SchedulingContext, words: Bool = true) -> [BlockingReason] {
        appReasonsBefore(app, context, words: words) + appReasonsAfter(app, nil, context, words: words)
    }

    public func explainContentWake(app: AppSchedulingState, context: SchedulingContext) -> Explanation {
        let reasons = contentReasons(app: app, context: context)
        if reasons.isEmpty {
            return Explanation(blocking: [], earliestRun: context.now, summary: "Runs at the next opportunity.")
        }
        return .waiting(reasons, earliestRun: Self.timeAllLift(reasons))
    }

    public func backgroundTaskRefusal(context: SchedulingContext) -> BlockingReason? {
        // User-started work ignores the switches, power saver and low battery, as on iOS: only
        // sleep and a nearly empty battery stop it.
        if context.sleeping { return Self.sleepingReason }
        return criticalBatteryReason(context)
    }

    public func holds(_ work: AppWork, launched: Launch?, context: SchedulingContext) -> [BlockingRule: Int] {
        holds(work, launched: launched, context: context) { _ in nil }
    }

    /// `holds`, with `unblocked` naming the rule that holds a request no rule of this policy
    /// blocks (the planner's windows and predictions), or nil to leave it uncounted.
    func holds(
        _ work: AppWork, launched: Launch?, context: SchedulingContext, unblocked: (TaskRequest) -> BlockingRule?
    ) -> [BlockingRule: Int] {
        var counts: [BlockingRule: Int] = [:]
        let started = Set(launched?.requests.map(\.identifier) ?? [])
        let waiting = work.requests.filter { !started.contains($0.identifier) }
        guard !waiting.isEmpty else { return counts }
        // An app rule holds every waiting request of the app.
        let appRules =
            Self.appConditionsHold(work.app, context)
            ? [] : (appReasonsBefore(work.app, context, words: false) + appReasonsAfter(work.app, nil, context, words: false)).map(\.rule)
        for rule in appRules { counts[rule, default: 0] += waiting.count }
        for request in waiting {
            var held = !appRules.isEmpty
            if !Self.ownConditionsHold(
                kind: request.kind, earliestBegin: request.earliestBegin, requiresNetwork: request.requiresNetwork,
                requiresExternalPower: request.requiresExternalPower, context)
            {
                for reason in requestReasons(request, context, words: false) {
                    counts[reason.rule, default: 0] += 1
                    held = true
                }
            }
            if !held, let rule = unblocked(request) { counts[rule, default: 0] += 1 }
        }
        return counts
    }

    /// Every rule that keeps `request` from running at `context.now`, in the order people read
    /// them: the machine, the switches, power, whether the app is used, the request's own
    /// conditions, then the app's recent conduct and reachability.
    func blockingReasons(
        for request: TaskRequest, app: AppSchedulingState, context: SchedulingContext
    ) -> [BlockingReason] {
        ruleReasons(for: request, app: app, context: context, words: true)
    }

    public func ruleReasons(
        for request: TaskRequest, app: AppSchedulingState, context: SchedulingContext, words: Bool
    ) -> [BlockingReason] {
        appReasonsBefore(app, context, words: words) + requestReasons(request, context, words: words)
            + appReasonsAfter(app, request, context, words: words)
    }

    /// The app-level rules that come before the request's own: sleep, the switches, the battery,
    /// power saver, use. With `words: false` the reasons carry no words (for decisions, which
    /// need only whether and until when; `Explain` asks for the words).
    func appReasonsBefore(_ app: AppSchedulingState, _ context: SchedulingContext, words: Bool) -> [BlockingReason] {
        let now = context.now
        let conditions = context.conditions
        let configuration = context.configuration
        let appID = app.record.appID
        var reasons: [BlockingReason] = []

        if context.sleeping { reasons.append(Self.sleepingReason) }
        if !context.globalEnabled {
            reasons.append(BlockingReason(
                rule: .globalDisabled,
                words: words ? "background work is switched off for all apps; `bgpolicy enable --all` switches it on" : ""))
        }
        if !app.record.enabled {
            reasons.append(BlockingReason(
                rule: .appDisabled,
                words: words ? "background work is switched off for \(appID); `bgpolicy enable \(appID)` switches it on" : ""))
        }

        // Refresh and processing are not user-started, so both battery levels stop them. Below the
        // critical level only that reason is given: it is the one that says more.
        if let critical = criticalBatteryReason(context) {
            reasons.append(critical)
        } else if let level = Self.batteryBelow(configuration.battery.low, conditions) {
            reasons.append(BlockingReason(
                rule: .lowBattery,
                words: words
                    ? "the battery is at \(Self.percentWords(level)), below the low \(configuration.battery.low.value) %: "
                        + "only work the user started runs until it charges" : ""))
        }
        if conditions.powerProfile == .powerSaver {
            reasons.append(BlockingReason(
                rule: .powerSaver,
                words: words ? "the power-saver profile is on: background refresh and processing wait until it is switched off" : ""))
        }

        let lastUsed = max(app.record.lastUsedAt ?? app.record.registeredAt, app.record.registeredAt)
        let inactiveAfter = configuration.limits.inactiveAfter.seconds
        // Unused at exactly the limit, as the refresh planner counts (`RefreshPlanner.eligibleSpan`).
        if now >= lastUsed + inactiveAfter {
            // No liftsAt: only the user opening the app lifts it.
            reasons.append(BlockingReason(
                rule: .appInactive,
                words: words
                    ? "\(appID) has not been used for \(Self.durationWords(now - lastUsed, roundingUp: false)) "
                        + "(the limit is \(Self.durationWords(inactiveAfter, roundingUp: false))): it runs once you open the app"
                    : ""))
        }
        return reasons
    }

    /// Whether no app-level rule holds the app: the same tests as `appReasonsBefore` and
    /// `appReasonsAfter`, on its fields alone, without building a reason (the common case in a
    /// decision). Only fields of plain types are read, so nothing of the app is copied.
    @inline(__always)
    static func appConditionsHold(_ app: AppSchedulingState, _ context: SchedulingContext) -> Bool {
        appConditionsHold(
            enabled: app.record.enabled, lastUsedAt: app.record.lastUsedAt, registeredAt: app.record.registeredAt,
            recentViolations: app.recentViolations, lastViolationAt: app.lastViolationAt,
            overrunPenaltyEndsAt: app.overrunPenaltyEndsAt, reachable: app.reachable,
            lastDeliveryFailureAt: app.lastDeliveryFailureAt, failedDeliveries: app.failedDeliveries, busy: app.busy, context)
    }

    /// `appConditionsHold` on the fields it reads, each of a plain type: read in place from an
    /// array's element, none of them copies the element (the app itself, passed on, was copied
    /// whole, every field retained and released).
    @inline(__always)
    static func appConditionsHold(
        enabled: Bool, lastUsedAt: UnixTime?, registeredAt: UnixTime, recentViolations: Int, lastViolationAt: UnixTime?,
        overrunPenaltyEndsAt: UnixTime?, reachable: Bool, lastDeliveryFailureAt: UnixTime?, failedDeliveries: Int,
        busy: Bool, _ context: SchedulingContext
    ) -> Bool {
        let now = context.now
        let conditions = context.conditions
        let configuration = context.configuration
        if context.sleeping || !context.globalEnabled || !enabled { return false }
        if batteryBelow(configuration.battery.critical, conditions) != nil
            || batteryBelow(configuration.battery.low, conditions) != nil
        {
            return false
        }
        if conditions.powerProfile == .powerSaver { return false }
        if now >= max(lastUsedAt ?? registeredAt, registeredAt) + configuration.limits.inactiveAfter.seconds {
            return false
        }
        if let end = overrunPenaltyEnd(
            recentViolations: recentViolations, lastViolationAt: lastViolationAt, endsAt: overrunPenaltyEndsAt, configuration),
            now < end
        {
            return false
        }
        if !reachable { return false }
        if let lastDeliveryFailureAt, now < lastDeliveryFailureAt + deliveryRetryDelay(afterFailures: failedDeliveries) {
            return false
        }
        return !busy
    }

    /// Whether none of the request's own rules holds it: the same tests as `requestReasons`, on
    /// its fields alone, without building a reason (the common case in a decision).
    @inline(__always)
    static func ownConditionsHold(
        kind: TaskKind, earliestBegin: UnixTime?, requiresNetwork: Bool, requiresExternalPower: Bool,
        _ context: SchedulingContext
    ) -> Bool {
        if let earliestBegin, earliestBegin > context.now { return false }
        if kind == .processing, context.conditions.isIdleForProcessing != true { return false }
        if requiresNetwork, context.conditions.connectivity != .full { return false }
        if requiresExternalPower, context.conditions.onBattery != false { return false }
        return true
    }

    /// The request's own conditions: `earliest_begin`, idle for processing, network, AC.
    func requestReasons(_ request: TaskRequest, _ context: SchedulingContext, words: Bool) -> [BlockingReason] {
        let now = context.now
        let conditions = context.conditions
        var reasons: [BlockingReason] = []
        if let earliestBegin = request.earliestBegin, earliestBegin > now {
            reasons.append(BlockingReason(
                rule: .earliestBegin,
                words: words ? "the app asked for it to start no earlier than \(Self.durationWords(earliestBegin - now)) from now" : "",
                liftsAt: earliestBegin))
        }
        if request.kind == .processing, conditions.isIdleForProcessing != true {
            var text = ""
            if words {
                let state =
                    conditions.isIdleForProcessing == nil
                    ? "whether the session is idle is unknown (neither logind nor an idle monitor is live), "
                        + "which counts as not idle"
                    : "the session is in use"
                text = "processing work runs only while the session is locked or idle (no input for a while), and \(state)"
            }
            reasons.append(BlockingReason(rule: .notIdle, words: text))
        }
        if request.requiresNetwork, conditions.connectivity != .full {
            var text = ""
            if words {
                let state =
                    switch conditions.connectivity {
                    case .none: "the machine is offline"
                    case .portal: "the network is behind a captive portal"
                    case .limited: "the network has limited connectivity"
                    case .unknown, .full: "whether the machine is online is unknown, which counts as offline"
                    }
                text = "it needs the network, and \(state): it runs once the machine is fully online"
            }
            reasons.append(BlockingReason(rule: .noNetwork, words: text))
        }
        if request.requiresExternalPower, conditions.onBattery != false {
            var text = ""
            if words {
                let state =
                    conditions.onBattery == nil
                    ? "whether the machine is on AC is unknown, which counts as on battery"
                    : "the machine is on battery"
                text = "it needs external power, and \(state): it runs once the charger is plugged in"
            }
            reasons.append(BlockingReason(rule: .noExternalPower, words: text))
        }
        return reasons
    }

    /// The app-level rules that come after the request's own: the overrun penalty,
    /// reachability, a running slice. `request` only lends its last delivery error to the words.
    func appReasonsAfter(
        _ app: AppSchedulingState, _ request: TaskRequest?, _ context: SchedulingContext, words: Bool
    ) -> [BlockingReason] {
        let now = context.now
        let appID = app.record.appID
        var reasons: [BlockingReason] = []
        if let lastViolation = app.lastViolationAt,
            let end = Self.overrunPenaltyEnd(
                recentViolations: app.recentViolations, lastViolationAt: lastViolation,
                endsAt: app.overrunPenaltyEndsAt, context.configuration)
        {
            // Shorter than the count's penalty when older violations age out during it.
            let penalty = end - lastViolation
            if now < end {
                var text = ""
                if words {
                    let (what, last) = Self.violationWords(
                        overruns: app.recentViolations - app.recentCPUViolations, cpu: app.recentCPUViolations)
                    text = "\(appID) \(what) in the last 7 days, so it waits "
                        + (penalty < Self.overrunPenalty(violations: app.recentViolations, context.configuration)
                            ? "\(Self.durationWords(penalty)) after \(last) (the oldest stop counting meanwhile): "
                            : "\(Self.durationWords(penalty)) after \(last): ")
                        + "another \(Self.durationWords(end - now))"
                }
                reasons.append(BlockingReason(rule: .overrunPenalty, words: text, liftsAt: end))
            }
        }
        if !app.reachable {
            reasons.append(BlockingReason(
                rule: .unreachable,
                words: words
                    ? "no connection of the app is on the bus and it registered no bus_name; "
                        + "it runs when the app registers again" : ""))
        } else if let failure = app.lastDeliveryFailureAt,
            now < failure + Self.deliveryRetryDelay(afterFailures: app.failedDeliveries)
        {
            let retry = failure + Self.deliveryRetryDelay(afterFailures: app.failedDeliveries)
            var text = ""
            if words {
                var error = ""
                if let message = request?.lastAttemptError, !message.isEmpty { error = " (\(message))" }
                let streak = app.failedDeliveries > 1 ? " (\(app.failedDeliveries) failures in a row: the wait doubles with each)" : ""
                text = "the last delivery to the app failed \(Self.durationWords(now - failure, roundingUp: false)) ago"
                    + "\(error); retrying in \(Self.durationWords(retry - now))\(streak)"
            }
            reasons.append(BlockingReason(rule: .unreachable, words: text, liftsAt: retry))
        }
        if app.busy {
            reasons.append(BlockingReason(
                rule: .appBusy,
                words: words ? "a slice of \(appID) is running: the request waits for it to end" : ""))
        }
        return reasons
    }

    /// What an app under the overrun penalty did, and how to name the last of it: it overran
    /// its time, or used so much CPU that the CPU monitor stepped in, or both. Both count
    /// alike; a person acts on them differently (finish sooner, or do less).
    static func violationWords(overruns: Int, cpu: Int) -> (what: String, last: String) {
        func times(_ n: Int) -> String { n == 1 ? "once" : "\(n) times" }
        switch (overruns > 0, cpu > 0) {
        case (true, true): return ("overran its time \(times(overruns)) and used too much CPU \(times(cpu))", "the last of these")
        case (false, true): return ("used too much CPU \(times(cpu))", "the last time")
        default: return ("overran its time \(times(overruns))", "the last overrun")
        }
    }

    // MARK: Rules shared by several answers

    private static let sleepingReason = BlockingReason(
        rule: .sleeping, words: "the machine is going to sleep: nothing starts until it resumes")

    private func criticalBatteryReason(_ context: SchedulingContext) -> BlockingReason? {
        let critical = context.configuration.battery.critical
        guard let level = Self.batteryBelow(critical, context.conditions) else { return nil }
        return BlockingReason(
            rule: .criticalBattery,
            words: "the battery is at \(Self.percentWords(level)), below the critical \(critical.value) %: "
                + "nothing new starts until it charges")
    }

    /// The battery level when the machine runs on its battery below `threshold`, else `nil`.
    /// An unknown level blocks nothing: machines without a battery report none.
    private static func batteryBelow(_ threshold: Percentage, _ conditions: Conditions) -> Double? {
        guard conditions.onBattery == true, let level = conditions.percentage, level < Double(threshold.value) else {
            return nil
        }
        return level
    }

    /// When the overrun penalty of an app with `recentViolations`, the last at
    /// `lastViolationAt`, ends: `endsAt` when the engine worked it out from the violations'
    /// times (`RecentViolations.penaltyEnd`), else the last plus the count's penalty. Nil with
    /// no violation.
    @inline(__always)
    static func overrunPenaltyEnd(
        recentViolations: Int, lastViolationAt: UnixTime?, endsAt: UnixTime?, _ configuration: PolicyConfiguration
    ) -> UnixTime? {
        guard recentViolations > 0, let lastViolationAt else { return nil }
        return endsAt ?? lastViolationAt + overrunPenalty(violations: recentViolations, configuration)
    }

    /// refresh.minInterval doubled for each violation after the first, capped.
    public static func overrunPenalty(violations: Int, _ configuration: PolicyConfiguration) -> Double {
        // 2^(n-1) as a Double cannot overflow: it becomes infinity, and the cap takes over.
        let factor = Double(sign: .plus, exponent: max(violations - 1, 0), significand: 1)
        return min(configuration.refresh.minInterval.seconds * factor, maximumPenalty.seconds)
    }

    /// The slice requests share: the longest their kinds get; zero for none.
    public static func sliceLength(for requests: ArraySlice<TaskRequest>, _ configuration: PolicyConfiguration) -> Duration {
        var refresh = false, processing = false
        for index in requests.indices {
            if requests[index].kind == .refresh { refresh = true } else { processing = true }
            if refresh && processing { break }
        }
        var length = Duration.zero
        if refresh { length = max(length, configuration.slices.refresh) }
        if processing { length = max(length, configuration.slices.processing) }
        return length
    }

    static func slice(for kind: TaskKind, _ configuration: PolicyConfiguration) -> Duration {
        switch kind {
        case .refresh: configuration.slices.refresh
        case .processing: configuration.slices.processing
        }
    }

    /// When every reason has lifted, if each lifts by time alone.
    public static func timeAllLift(_ reasons: [BlockingReason]) -> UnixTime? {
        var latest: UnixTime?
        for reason in reasons {
            guard let liftsAt = reason.liftsAt else { return nil }
            latest = max(latest ?? liftsAt, liftsAt)
        }
        return latest
    }

    // MARK: Words

    /// "8 %", "9.5 %": truncated, not rounded, so that 9.96 % never reads "10 %, below 10 %".
    static func percentWords(_ level: Double) -> String {
        let tenths = Int((level * 10).rounded(.down))
        return tenths % 10 == 0 ? "\(tenths / 10) %" : "\(tenths / 10).\(tenths % 10) %"
    }

    /// "45 s", "4 min 10 s", "2 h 5 min", "9 days": the largest unit and the next one. Waits round
    /// up, so that one never reads "0 s"; ages round down.
    public static func durationWords(_ seconds: Double, roundingUp: Bool = true) -> String {
        let rounded = roundingUp ? seconds.rounded(.up) : seconds.rounded(.down)
        let total = rounded.isFinite ? Int(min(max(rounded, 0), 1e15)) : 0
        let units: [(size: Int, singular: String, plural: String)] = [
            (86_400, "1 day", "days"), (3600, "1 h", "h"), (60, "1 min", "min"), (1, "1 s", "s"),
        ]
        func words(_ count: Int, _ unit: (size: Int, singular: String, plural: String)) -> String {
            count == 1 ? unit.singular : "\(count) \(unit.plural)"
        }
        for (index, unit) in units.enumerated() where total >= unit.size || unit.size == 1 {
            let count = total / unit.size
            var text = words(count, unit)
            if index + 1 < units.count {
                let next = units[index + 1]
                let rest = (total % unit.size) / next.size
                if rest > 0 { text += " " + words(rest, next) }
            }
            return text
        }
        return "0 s"
    }
}
