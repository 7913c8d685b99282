/// Decides which apps refresh in a wake window: the part of the planner that learns. The agent
/// and `bgpolicy replay` run this same code; the replay drives it on a virtual clock
/// (`PredictivePolicy`), the agent on the real one (`WindowPlanner`). Pure: time is passed in.
///
/// - **Slots.** Time is cut into 15-min slots aligned to the Unix epoch. `advance(to:)` closes
///   every slot that has ended (the predictor learns whether each app was opened in it) and
///   adapts the thresholds to the wake-ups the slot had.
/// - **Whether to refresh in a window.** A window's value is the expected share of the coming
///   slot's opens it would serve: the probability that the user opens some app in the slot
///   (`UsagePredictor.probabilityOfAnyOpen`, the user-level model) times the share of the apps'
///   predicted opens that the apps it can afford carry. Refreshes go out when the value reaches a
///   threshold that adapts online so that about `targetWakesPerDay` wake-ups carry refreshes per
///   day, or fewer when the budget could not fill them (an online quantile: raised a step for
///   each wake-up, lowered a little after each slot), and never more than `maxWakesPerDay` in
///   any 24 hours. It is not lowered after a slot in which the pool held less than one refresh,
///   or that ended `awaySeconds` or more after the user's last open of any app: then the empty
///   budget or the user's absence kept the machine asleep, not the threshold, and every step
///   it fell would cost a wake-up over the target to climb back (on one trace, two weeks away
///   cost 260 wake-ups in the first week back, 48 on the first day). It starts at
///   `initialWindowThreshold(budgetPerDay:targetWakesPerDay:)`, for the same reason. Neither
///   threshold adapts while no refresh waits for the planner (`refreshesWaiting`), and each
///   stays within its range (`windowThresholdRange`, `appThresholdRange`). Every
///   wake-up counts, whatever window it came in, refreshes within 60 s of a
///   wake-up's first being that wake-up (as replay's figure counts them): several in a slot
///   count several. So refresh windows go to the moments after recent use, the
///   times of day and the days when opens are likeliest, and likeliest to be of apps the budget
///   can cover, whatever this user's pattern is; an active user gets many windows in a row, a
///   sleeping one none.
/// - **Which apps.** Candidates in order of their own probability of being opened in the slot,
///   weighed by their standing (`Candidate.weight`: apps that keep answering `no-data`, overrun
///   or burn CPU count for less), while the budget lasts, and only those whose score reaches a
///   second threshold that keeps the budget for the likeliest refreshes: it adapts online so
///   that about half a day's budget stays in the pool (raised a little after each slot in which
///   less is left, lowered after each in which more is). A user whose opens are few and come in
///   sessions then gets refreshes in the sessions rather than one app at a time all day.
/// - **Opportunistic windows.** The caller may ask in any window, not only at slot starts (the
///   agent when the session is unlocked, the charger plugged in, and so on): an opportunistic
///   one is not limited to one window per slot, and is weighed the same way.
/// - **After use.** When the user leaves an app (`recordClose`), the caller may ask whether to
///   refresh that app alone, then (`choosesAfterUse`): yes when `ReuseEstimator`'s learned
///   chance that the user comes back to it within 15 min reaches the window's threshold, and the
///   app threshold or what the planner's other refreshes have paid (`refreshYield`), whichever
///   is lower; so such a refresh competes for the same budget and wake-ups as the others. A
///   user who switches between a few apps keeps them fresh this way; on a trace where apps are
///   rarely reopened soon, the chance is learned to be small and no such window opens. The app
///   threshold alone turned these away where they paid best: in sessions the pool runs low, and
///   the threshold climbs until nothing passes it (past 1, on the dense traces), while the
///   refreshes it keeps the pool for, the grid's and those after opens, paid 0.45 and those
///   after use 0.65 (Docs/Replay.md).
/// - **After an open.** When the user opens an app, the caller may ask which of the apps not in
///   use to refresh then (`chooseAfterOpen`): those whose learned chance of being opened within
///   15 min of another app's open (`FollowEstimator`) reaches both thresholds, likeliest first,
///   as many as the pool holds. The slot model does not rank these: it learns at slot starts,
///   where a moment-old open is seldom the situation.
/// - **Alongside.** A window after use or after an open that opens (it chose a refresh) may
///   also take what a grid window would take then (`chooseAlongside`), without weighing its
///   worth again: it is the same wake-up. Where the budget is large (many apps registered, a
///   few in use), wake-ups bind rather than refreshes, and this makes each serve more.
/// - **Budget.** A shared pool accrues `refreshesPerAppPerDay` refreshes a day for every known
///   app, up to one day's worth; a refresh spends one, and a window spends at most its share,
///   the daily accrual over `targetWakesPerDay` rounded up, and never fewer than two
///   (`refreshesPerWindow`; the window after an open has no share: the thresholds keep the
///   reserve there). `periodic:60m` spends 24 a day per app, so
///   over a span of D days this spends at most 2.2·(D+1)/(24·D) of it: under 10 % once D ≥ 11.
/// - **Eligible.** The app was opened within the last 7 days (SPEC §2) and was not refreshed in
///   the last 15 minutes (SPEC §2), a span that grows as its weight shrinks.
/// - **Restarts.** The predictor and the estimators learn again from the usage log; what the
///   log cannot give back (the last refreshes, the day's wake-ups, the pool, the thresholds,
///   what the refreshes paid) goes through a `Snapshot` the agent stores.
public struct RefreshPlanner: Sendable {
    /// A refresh the caller could start in this window, and how much the app's record counts.
    public struct Candidate: Sendable, Equatable {
        public var appID: String
        /// 1 for an app in good standing, down to `minimumWeight` for one that wastes its slices.
        public var weight: Double

        public init(appID: String, weight: Double = 1) {
            self.appID = appID
            self.weight = weight
        }

        /// The weight a candidate's chance is multiplied by: `weight`, kept within
        /// `minimumWeight`…1.
        var standing: Double { min(max(weight, RefreshPlanner.minimumWeight), 1) }
    }

    public var slotSeconds: Double
    public var targetWakesPerDay: Double = 21
    /// A safety bound: never more refresh windows than this in any 24 hours.
    public var maxWakesPerDay = RefreshPlanner.wakesPerDayBound
    /// `maxWakesPerDay` unless a test sets another: the most `[refresh] windows_per_day` may be.
    public static let wakesPerDayBound = 48
    /// `[refresh] budget`. Lowered, the pool keeps at most a day of the new budget.
    public var refreshesPerAppPerDay: Double = 2.2 {
        didSet { if refreshesPerAppPerDay < oldValue { tokens = min(tokens, budgetPerDay) } }
    }
    /// `[limits] inactive_after`, in seconds: no window for an app unused this long, and its
    /// model stops training then too (`UsagePredictor.dormantAfter`).
    public var inactiveAfterSeconds: Double = 7 * 86_400 {
        didSet { predictor.dormantAfter = inactiveAfterSeconds }
    }
    public var minRefreshIntervalSeconds: Double = 900
    /// `[refresh] lead`: how long before a predicted open its refresh should come. A refresh at
    /// a slot start serves the opens of a whole slot, so the lead moves the slot it serves by
    /// whole slots (`predictionOffset`): with the default 10 min it is the slot the window opens
    /// (the opens come 0–15 min after the refresh).
    public var leadSeconds: Double = 600
    /// Apps registered with the agent (in replay, the apps of the trace): the budget is per app
    /// known, registered or seen opened, whichever is more. An app that becomes known after the
    /// planner was made brings half a day of its budget into the pool (`fundNewApps`).
    public var registeredAppCount: Int {
        didSet { fundNewApps() }
    }
    /// The apps known whose share is in the pool: those known when the planner was made (a
    /// replay's, with the pool empty), and each one known since (`fundNewApps`).
    private var fundedApps: Int

    /// Takes the knobs of `configuration` that the planner acts on: `[refresh] lead`,
    /// `min_interval`, `budget` and `windows_per_day`, and `[limits] inactive_after`; the agent at
    /// its start and at each reload, and a replay given a configuration file. `[refresh]
    /// strategy` is the caller's to apply: it decides what the planner learns
    /// (`adaptsThresholds`, `keepsOnlyLastRefreshes`).
    public mutating func configure(_ configuration: PolicyConfiguration) {
        minRefreshIntervalSeconds = configuration.refresh.minInterval.seconds
        leadSeconds = configuration.refresh.lead.seconds
        inactiveAfterSeconds = configuration.limits.inactiveAfter.seconds
        refreshesPerAppPerDay = configuration.refresh.budget
        targetWakesPerDay = Double(configuration.refresh.windowsPerDay)
    }

    public static let minimumWeight = 0.125
    /// Step of the threshold's online quantile, in log units.
    static let thresholdStep = 0.02

    /// How far after a window the slot starts whose opens its refreshes serve: the whole number
    /// of slots that brings the mean lead (the offset and half a slot) nearest to `leadSeconds`.
    /// With 15-min slots: 0 for a lead under 15 min (the opens come 0–15 min after the
    /// refresh), 15 min for a lead of 15–30 min (they come 15–30 min after it), and so on.
    public var predictionOffset: Double {
        (max(0, leadSeconds - slotSeconds / 2) / slotSeconds).rounded() * slotSeconds
    }

    public private(set) var predictor: UsagePredictor

    /// The local time's offset from UTC, for the predictor's hours and days (see
    /// `UsagePredictor.utcOffsetSeconds`).
    public var utcOffsetSeconds: Double {
        get { predictor.utcOffsetSeconds }
        set { predictor.utcOffsetSeconds = newValue }
    }
    private var lastRefresh: [String: Double] = [:]
    /// `lastRefresh` of each app the predictor knows, by its model's position
    /// (`UsagePredictor.position(of:)`): a decision finds it with the model, hashing each
    /// candidate's id once rather than twice.
    private var lastRefreshByPosition: [Double?] = []
    /// Each app's refresh before its latest (nil inside: none), for `refreshDidNotRun`.
    private var refreshBefore: [String: Double?] = [:]
    private var reuse = ReuseEstimator()
    /// Whether each refresh the planner made, other than those after use, was followed by an
    /// open of its app within 15 min: what a token spent elsewhere buys (`refreshYield`).
    private var paid = ReuseEstimator()
    private var follow = FollowEstimator()
    private var recentWakes: [Double] = []
    /// Set at the first slot (`initialWindowThreshold`), or by `restore`.
    private var logThreshold = ReplayMath.log(0.4)
    /// Where the window threshold starts, at the planner's first slot, with the apps known then.
    /// - Where the wake-up target binds (the budget could fill more windows a day than
    ///   `targetWakesPerDay`): 0.4. The thresholds the replay traces settle at lie between 0.1
    ///   and 0.6; every step of 0.02 in log units that it must climb costs one wake-up over the
    ///   target. From 0.2, a trace whose models grow confident over a busy fortnight woke up to
    ///   26 times a day on 21-day traces, over `periodic:60m`'s 24 (Docs/Replay.md).
    /// - Where the budget binds (fewer than ten apps): 0.2. The budget alone then holds the
    ///   wake-ups under the target, and the threshold only picks the slots it goes to; but it
    ///   falls by its step times the target per slot, which with one app's 2.2 a day takes some
    ///   two weeks from 0.4 to 0.2; meanwhile every slot whose chance of an open is under 0.4
    ///   is refused, while the pool fills up and what it would gain is lost.
    static func initialWindowThreshold(budgetPerDay: Double, targetWakesPerDay: Double) -> Double {
        budgetPerDay < targetWakesPerDay ? 0.2 : 0.4
    }
    /// How long after the user's last open of any app the window threshold stops falling.
    static let awaySeconds: Double = 2 * 86_400
    /// The latest open of any app, for `awaySeconds`.
    private var lastOpenOfAnyApp: Double?
    /// The threshold a window's worth must reach now (see "Whether to refresh in a window").
    var windowThreshold: Double { ReplayMath.exp(logThreshold) }
    /// The least score an app must have to be refreshed (see "Which apps").
    private var logAppThreshold = ReplayMath.log(0.01)
    /// Step of the app threshold's adaptation per slot, in log units, and the share of a day's
    /// budget it keeps in the pool.
    static let appThresholdStep = 0.02
    static let poolTarget = 0.5
    /// The range each threshold is kept in, in log units, as it adapts and when restored: what a
    /// window or an app can score lies in 0…1, and beyond these the threshold only takes longer
    /// to come back. The replay traces' window thresholds stay within 0.0005–0.75, their app
    /// thresholds within 0.00005–4.6 (Docs/Replay.md). Unbounded, the app threshold fell 0.01
    /// a slot for as long as the pool stayed full (to 10^-11 in three weeks where the window
    /// threshold was what held refreshes back), and a damaged store could restore 10^-300. The
    /// app threshold's floor lets an app join a window with the pool full at a score of 10^-6
    /// (News, opened at 19:35 each day, scores under 10^-5 at 09:00 in `WindowPlannerTests`).
    static let windowThresholdRange = ReplayMath.log(1e-4)...0
    static let appThresholdRange = ReplayMath.log(1e-6)...ReplayMath.log(10)
    private var tokens: Double = 0
    /// Whether closing a slot adapts the two thresholds (see above). Off while the agent replays
    /// its usage log at start: that history holds no windows, and adapting to it would take
    /// both thresholds down to nothing (weeks of slots without a refresh), so that for days
    /// after a restart every slot would wake the machine. With it off they keep their starting
    /// values, or what they were, and adapt again from then on; the agent then restores the
    /// values it stored (`restore(_:at:)`).
    public var adaptsThresholds = true
    /// Whether the planner keeps only each app's last refresh (`recordWindow`), for its
    /// interval: set under `[refresh] strategy = every-window`, which predicts nothing and
    /// refreshes every app in every window its interval allows. The budget, the wake-ups and the
    /// refreshes' yield are then left as they were: spent and judged by every-window's refreshes,
    /// they would hold back the predicted strategy for days after a switch to it.
    public var keepsOnlyLastRefreshes = false
    /// Whether some refresh waits for the planner's choice: pending, and held by no rule of the
    /// caller's (power saver, the switches, a low battery, an `earliest_begin`), or chosen in the
    /// caller's last decision. The caller sets it after each decision; it stands until set again.
    /// Closing a slot adapts the two thresholds only while it is true: with nothing to choose,
    /// the slot's want of wake-ups says nothing of the threshold, and the pool fills. Lowered
    /// then, a week of power saver took the window threshold down some 20 times (and the app
    /// threshold 0.01 a slot, in log units), and the machine woke at the bound of
    /// `maxWakesPerDay` for days after, while they climbed back a step per wake-up.
    public var refreshesWaiting = true
    /// The start of the slot being watched, once the first slot has started.
    private var currentSlot: Double?
    /// Whether a window with refreshes opened in the current slot.
    private var wokeInSlot = false
    /// The wake-ups (`recentWakes`) in the current slot.
    private var wakesInSlot = 0

    public init(slotSeconds: Double = 900, utcOffsetSeconds: Double = 0, registeredAppCount: Int = 0) {
        self.slotSeconds = slotSeconds
        self.registeredAppCount = registeredAppCount
        fundedApps = registeredAppCount
        predictor = UsagePredictor(slotSeconds: slotSeconds, utcOffsetSeconds: utcOffsetSeconds)
        reuse = ReuseEstimator(span: slotSeconds)
        paid = ReuseEstimator(span: slotSeconds)
        follow = FollowEstimator(span: slotSeconds)
    }

    /// The start of the slot holding `time`.
    public func slot(containing time: Double) -> Double {
        (time / slotSeconds).rounded(.down) * slotSeconds
    }

    /// Records an open. Opens must arrive in time order; slots before it are closed first.
    public mutating func recordOpen(of appID: String, at time: Double) {
        advance(to: time)
        lastOpenOfAnyApp = max(lastOpenOfAnyApp ?? time, time)
        reuse.recordOpen(of: appID, at: time)
        paid.recordOpen(of: appID, at: time)
        follow.recordOpen(of: appID, at: time)
        predictor.recordOpen(of: appID, at: time)
        // A new model takes the next position.
        if predictor.appIDs.count > lastRefreshByPosition.count {
            lastRefreshByPosition.append(lastRefresh[appID])
            fundNewApps()
        }
    }

    /// Records that the user left (closed) an app, in time order with the opens.
    public mutating func recordClose(of appID: String, at time: Double) {
        advance(to: time)
        reuse.recordClose(of: appID, at: time)
        follow.recordClose(of: appID, at: time)
        predictor.recordClose(of: appID, at: time)
    }

    /// Records that the user left an app at a time not known (it was closed while the caller
    /// was not watching): it is no longer in use, and nothing is learned of the leave.
    public mutating func recordLeftUnseen(_ appID: String) {
        follow.recordLeftUnseen(appID)
        predictor.recordClose(of: appID)
    }

    /// Records that the user opened an app at a time not known (it was found open): it is in
    /// use, and nothing is learned of the open.
    public mutating func recordOpenedUnseen(_ appID: String) {
        follow.recordOpenedUnseen(appID)
        predictor.recordOpenedUnseen(of: appID)
    }

    /// Forgets `appID` (the user asked the agent to forget the app): its model in the
    /// predictor, what the estimators learned of it, and its refreshes. It no longer counts
    /// toward the pool: set `registeredAppCount` without it first, and the pool's daily gain and
    /// cap fall by its share (what is left is cut to the new cap), and the share funded for it
    /// goes back, so that the app known again later brings its share anew (`fundNewApps`), as a
    /// new app does, and starts from the shared prior. What every app learned together (the
    /// thresholds, what the refreshes paid, the user's activity) stays: it names no app.
    public mutating func forget(_ appID: String) {
        if let position = predictor.position(of: appID) { lastRefreshByPosition.remove(at: position) }
        predictor.forget(appID)
        lastRefresh[appID] = nil
        refreshBefore[appID] = nil
        reuse.forget(appID)
        paid.forget(appID)
        follow.forget(appID)
        fundedApps = min(fundedApps, knownApps)
        tokens = min(tokens, budgetPerDay)
    }

    /// Whether to refresh `candidate` alone in a window at `time` just after the user left it:
    /// eligible, a token and room for a wake-up left, and the learned chance of a reopen within
    /// 15 min (`reuseProbability`, weighed by its standing) at the window's threshold and at the
    /// app threshold or `refreshYield`, whichever is lower: a refresh that pays what the pool's
    /// others do is worth its token, however low the pool. Does not change the state: call
    /// `recordWindow` (with `afterUse`) if it was started.
    public func choosesAfterUse(_ candidate: Candidate, at time: Double) -> Bool {
        guard mayOpenWindow(opportunistic: true), ineligibility(of: candidate, at: time) == nil else { return false }
        let value = reuseProbability(of: candidate.appID) * candidate.standing
        return value >= min(ReplayMath.exp(logAppThreshold), refreshYield) && value >= ReplayMath.exp(logThreshold)
    }

    /// The share of the planner's refreshes, other than those after use, that were followed by an
    /// open of their app within 15 min, recent ones counting more (one half before any).
    public var refreshYield: Double { paid.all.rate }

    /// How many refreshes `refreshYield` was learned from, older ones counting for less: 0
    /// before any (it is then one half, its prior), about 33 at most.
    public var refreshesJudged: Double { paid.all.trials }

    /// The learned chance that the user opens `appID` again within 15 min of leaving it.
    public func reuseProbability(of appID: String) -> Double { reuse.probability(of: appID) }

    /// The apps among `candidates` to refresh in a window at `time` just after the user opened
    /// an app (the candidates are the apps not in use): the eligible ones whose learned chance
    /// of an open within 15 min (`followProbability`, weighed by their standing) reaches both
    /// thresholds, likeliest first, as many as the pool holds. Does not change the state: call
    /// `recordWindow` with what was started.
    public func chooseAfterOpen(at time: Double, among candidates: [Candidate]) -> [String] {
        chooseAfterOpenIndices(at: time, among: candidates).map { candidates[$0].appID }
    }

    /// `chooseAfterOpen`, as indices into `candidates`, in the order chosen; `skip`, `located`
    /// and `spent` as for `chooseIndices`.
    func chooseAfterOpenIndices(at time: Double, among candidates: [Candidate], skip: [Bool]? = nil,
                                located: [Located?]? = nil, spent: Int = 0) -> [Int] {
        guard mayOpenWindow(opportunistic: true), tokensLeft(spent) > 0 else { return [] }
        let eligible = eligibleCandidates(at: time, among: candidates, skip: skip, located: located)
        guard !eligible.isEmpty else { return [] }
        let threshold = max(ReplayMath.exp(logAppThreshold), ReplayMath.exp(logThreshold))
        let scores = eligible.map { i, _ in
            follow.probability(of: candidates[i].appID, at: time) * candidates[i].standing
        }
        // No share per window: the user is here now, and the thresholds keep the pool's reserve.
        let chosen = Self.best(tokensLeft(spent), of: eligible.count) { a, b in
            if scores[a] != scores[b] { return scores[a] > scores[b] }
            return candidates[eligible[a].candidate].appID < candidates[eligible[b].candidate].appID
        }
        return chosen.filter { scores[$0] >= threshold }.map { eligible[$0].candidate }
    }

    /// The learned chance that `appID`, if another app is opened at `time`, is opened within
    /// 15 min of it.
    public func followProbability(of appID: String, at time: Double) -> Double {
        follow.probability(of: appID, at: time)
    }

    /// Closes every slot that ended by `time` and starts the one holding it. Catches up any
    /// number of slots (the agent sleeps through slots in which nothing is due), at most a
    /// week's worth of them one by one: older ones only age the budget and the threshold.
    public mutating func advance(to time: Double) {
        let target = slot(containing: time)
        guard let current = currentSlot else {
            logThreshold = ReplayMath.log(
                Self.initialWindowThreshold(budgetPerDay: budgetPerDay, targetWakesPerDay: targetWakesPerDay))
            startSlot(at: target)
            return
        }
        guard target > current else { return }
        var next = current + slotSeconds
        let skipped = ((target - next) / slotSeconds).rounded(.down)
        if skipped > 7 * 96 {
            // Nothing was learned while the agent was gone: jump without training per slot.
            closeSlot()
            next = target
        }
        while next <= target {
            closeSlot()
            startSlot(at: next)
            next += slotSeconds
        }
    }

    private mutating func closeSlot() {
        guard let closing = currentSlot else { return }
        defer {
            wokeInSlot = false
            wakesInSlot = 0
        }
        guard adaptsThresholds, refreshesWaiting else { return }
        let known = Double(knownApps)
        let q = min(targetWakesPerDay, refreshesPerAppPerDay * known) * slotSeconds / 86_400
        let lowering = Double(wakesInSlot) < q
        let away = lastOpenOfAnyApp.map { closing + slotSeconds - $0 >= Self.awaySeconds } ?? true
        // See "Whether to refresh in a window": what kept the machine asleep was not the threshold.
        if !(lowering && (tokens < 1 || away)) {
            logThreshold = Self.clamp(logThreshold + Self.thresholdStep * (Double(wakesInSlot) - q), to: Self.windowThresholdRange)
        }
        let daily = refreshesPerAppPerDay * known
        if daily > 0 {
            logAppThreshold = Self.clamp(logAppThreshold + Self.appThresholdStep * (Self.poolTarget - tokens / daily),
                                         to: Self.appThresholdRange)
        }
    }

    static func clamp(_ value: Double, to range: ClosedRange<Double>) -> Double {
        min(max(value, range.lowerBound), range.upperBound)
    }

    private mutating func startSlot(at time: Double) {
        reuse.expire(before: time)
        paid.expire(before: time)
        follow.expire(before: time)
        predictor.startSlot(at: time)
        if let currentSlot {
            let daily = refreshesPerAppPerDay * Double(knownApps)
            tokens = min(daily, tokens + daily * max(time - currentSlot, 0) / 86_400)
        }
        currentSlot = time
        while let first = recentWakes.first, first <= time - 86_400 { recentWakes.removeFirst() }
    }

    private var knownApps: Int { max(predictor.appIDs.count, registeredAppCount) }

    /// Each app known since the last call (registered, or first seen opened) brings
    /// `poolTarget` of a day of its budget into the pool at once, up to the pool's cap: without
    /// it a first start, with an empty pool, waited 24 / 2.2 hours for one app's first refresh,
    /// and the pool gained nothing for an app added to many. A restart gives its apps nothing:
    /// `restore` puts back the pool as it was.
    private mutating func fundNewApps() {
        let known = knownApps
        guard known > fundedApps else { return }
        let share = Double(known - fundedApps) * refreshesPerAppPerDay * Self.poolTarget
        tokens = min(budgetPerDay, tokens + share)
        fundedApps = known
    }

    /// The most refreshes a window of its own, or those alongside a window after use or an open,
    /// may take: its share of a day's budget, rounded up, and at least two. With fewer than ten
    /// apps the share is under one, and a cap of one let two habits in the same quarter hour
    /// (the news and the chat at 12:30) get one refresh between them; two gained 0.016 of
    /// `freshness_15m` on the routine traces and moved no other (Docs/Replay.md).
    public var refreshesPerWindow: Int {
        max(2, Int((budgetPerDay / targetWakesPerDay).rounded(.up)))
    }

    /// Refreshes left in the pool, as at the start of the slot under way.
    public var budgetLeft: Double { tokens }

    /// What the pool gains a day (and holds at most): `refreshesPerAppPerDay` for every app known.
    public var budgetPerDay: Double { refreshesPerAppPerDay * Double(knownApps) }

    /// The wake-ups with refreshes in the 24 hours up to `time`.
    public func wakeUps(inDayUpTo time: Double) -> Int {
        recentWakes.count(where: { $0 > time - 86_400 && $0 <= time })
    }

    /// Why a candidate cannot refresh at `time` whatever the prediction says, if it cannot.
    public enum Ineligibility: Sendable, Equatable {
        /// Never seen opened (`lastUse` nil), or not used (opened, in use or left) for
        /// `inactiveAfterSeconds` since `lastUse`.
        case inactive(lastUse: Double?)
        /// Refreshed too recently: the next refresh may come at `until`.
        case tooSoon(until: Double)
    }

    public func ineligibility(of candidate: Candidate, at time: Double) -> Ineligibility? {
        let lastUse = predictor.lastUse(of: candidate.appID)
        guard let span = eligibleSpan(of: candidate, lastUse: lastUse, refreshed: lastRefresh[candidate.appID]),
            time < span.until
        else { return .inactive(lastUse: lastUse) }
        return time < span.from ? .tooSoon(until: span.from) : nil
    }

    /// When `candidate` may be refreshed: from the end of its refresh interval (15 min, longer
    /// as its weight shrinks; `-infinity` when never refreshed) until `inactiveAfterSeconds`
    /// after its last use (`UsagePredictor.lastUse`: its last open or leave; no end while it is
    /// in use); `nil` when it was never opened. The one statement of the rule that
    /// `ineligibility`, `choose` and `nextWindow` apply.
    private func eligibleSpan(of candidate: Candidate, lastUse: Double?, refreshed: Double?)
        -> (from: Double, until: Double)?
    {
        guard let lastUse else { return nil }
        let from = refreshed.map { intervalEnd(after: $0, weight: candidate.weight) } ?? -.infinity
        return (from, lastUse + inactiveAfterSeconds)
    }

    /// The end of the refresh interval after a refresh at `refreshed`: `minRefreshIntervalSeconds`,
    /// longer as the app's `weight` shrinks.
    private func intervalEnd(after refreshed: Double, weight: Double) -> Double {
        refreshed + minRefreshIntervalSeconds / max(weight, Self.minimumWeight)
    }

    /// When `candidate`'s refresh interval ends (as `eligibleSpan` has it), or nil when it was
    /// never refreshed: the interval alone, with no use asked for. `[refresh] strategy =
    /// every-window` predicts nothing but keeps SPEC §2's "at most one refresh per app per
    /// 15 min" by it, from the same record of the app's last refresh (`recordWindow`).
    public func refreshIntervalEnd(of candidate: Candidate) -> Double? {
        lastRefresh[candidate.appID].map { intervalEnd(after: $0, weight: candidate.weight) }
    }

    /// The apps among `candidates` that refresh in a window at `time` (the slot holding `time`
    /// must have been reached with `advance(to:)`). Does not change the state: call
    /// `recordWindow` with what was started.
    public func choose(at time: Double, among candidates: [Candidate], opportunistic: Bool = false) -> [String] {
        chooseIndices(at: time, among: candidates, opportunistic: opportunistic).map { candidates[$0].appID }
    }

    /// The apps among `candidates` to refresh alongside the refreshes of a window after an open
    /// or after use that is opening anyway (it chose some): ranked and limited as `choose` ranks
    /// and limits them (the slot model, a window's share of the budget, the app threshold), but
    /// the window's worth is not weighed again, and it counts as no second window: the machine
    /// is awake for it already. When the refresh budget is plentiful (many apps registered, a
    /// few in use), wake-ups are what binds, and these make each one serve more. Does not change
    /// the state: call `recordWindow` with what was started.
    public func chooseAlongside(at time: Double, among candidates: [Candidate]) -> [String] {
        chooseAlongsideIndices(at: time, among: candidates).map { candidates[$0].appID }
    }

    /// What a window must pass before its candidates are ranked.
    enum WindowGate {
        /// A window of its own: the budget, the wake-up bound, one a slot unless opportunistic,
        /// and the window's worth against the threshold.
        case window(opportunistic: Bool)
        /// Refreshes that join a window opening anyway: a token left, nothing more.
        case alongside
    }

    /// `choose`, as indices into `candidates`, in the order chosen. Candidates whose `skip` entry
    /// is true are left out, as if absent. An `opportunistic` window may open in a slot that
    /// already had one. `located`, when given, is `locate(_:)` of the same candidates (worked
    /// out once for a decision and its look-ahead). `spent`: refreshes another window of the
    /// same decision chose and that are not recorded yet (`recordWindow`), whose tokens are
    /// not this window's to spend.
    func chooseIndices(at time: Double, among candidates: [Candidate], skip: [Bool]? = nil,
                       located: [Located?]? = nil, opportunistic: Bool = false, spent: Int = 0) -> [Int] {
        rankedChoice(at: time, among: candidates, skip: skip, located: located, gate: .window(opportunistic: opportunistic),
                     spent: spent)
    }

    /// `chooseAlongside`, as indices into `candidates`; `skip`, `located` and `spent` as for
    /// `chooseIndices`.
    func chooseAlongsideIndices(at time: Double, among candidates: [Candidate], skip: [Bool]? = nil,
                                located: [Located?]? = nil, spent: Int = 0) -> [Int] {
        rankedChoice(at: time, among: candidates, skip: skip, located: located, gate: .alongside, spent: spent)
    }

    /// Whole refreshes left in the pool once `spent` are taken out.
    private func tokensLeft(_ spent: Int) -> Int {
        max(Int(tokens.rounded(.down)) - spent, 0)
    }

    /// The one chooser behind `chooseIndices` and `chooseAlongsideIndices`.
    private func rankedChoice(at time: Double, among candidates: [Candidate], skip: [Bool]?, located: [Located?]?,
                              gate: WindowGate, spent: Int = 0) -> [Int] {
        switch gate {
        case .window(let opportunistic): guard mayOpenWindow(opportunistic: opportunistic) else { return [] }
        case .alongside: break
        }
        guard tokensLeft(spent) > 0 else { return [] }
        // The cheap tests first: is anyone eligible, is the window worth it; then rank. Looking
        // ahead (`nextWindow`) tries many slots, and most fail the threshold.
        let eligible = eligibleCandidates(at: time, among: candidates, skip: skip, located: located)
        guard !eligible.isEmpty else { return [] }
        // The chance of an open in the slot and the threshold, for a window of its own.
        var worth: (anyOpen: Double, threshold: Double)?
        if case .window = gate {
            guard let chance = openChance(at: time) else { return [] }
            worth = chance
        }
        // The slot whose opens this window's refreshes serve: this one, or a later one for a
        // long `[refresh] lead`.
        let target = time + predictionOffset
        // The predicted opens of every app in use, candidate or not (in app order).
        let predicted = predictor.probabilitiesOfActiveApps(inSlotAt: target, inactiveAfter: inactiveAfterSeconds)
        var total = 0.0
        for position in predictor.positionsInAppOrder { total += predicted[position] ?? 0 }
        var scores: [Double] = []
        var opens: [Double] = []
        scores.reserveCapacity(eligible.count)
        opens.reserveCapacity(eligible.count)
        for (i, position) in eligible {
            let weight = candidates[i].standing
            let p = predicted[position] ?? predictor.probability(of: candidates[i].appID, inSlotAt: target)
            scores.append(weight * p)
            opens.append(p)
        }
        // Ranked by score, then app id: only as many as the window may take are picked out.
        let perWake = refreshesPerWindow
        let appThreshold = ReplayMath.exp(logAppThreshold)
        var chosen = Self.best(min(perWake, tokensLeft(spent)), of: eligible.count) { a, b in
            if scores[a] != scores[b] { return scores[a] > scores[b] }
            return candidates[eligible[a].candidate].appID < candidates[eligible[b].candidate].appID
        }
        chosen.removeAll { scores[$0] < appThreshold }
        guard !chosen.isEmpty else { return [] }
        // A window opening anyway is not weighed again.
        guard let (anyOpen, threshold) = worth else { return chosen.map { eligible[$0].candidate } }
        // The window is worth what it serves: the chance of an open in the slot, times the share
        // of the apps' predicted opens that the chosen apps carry.
        let served = chosen.reduce(0.0) { $0 + opens[$1] }
        guard total > 0, anyOpen * min(served / total, 1) >= threshold else { return [] }
        return chosen.map { eligible[$0].candidate }
    }

    /// The candidates eligible at `time` (as `ineligibility` tests), with their models'
    /// positions: one pass that finds each candidate's model and tests it.
    private func eligibleCandidates(at time: Double, among candidates: [Candidate], skip: [Bool]?,
                                    located: [Located?]?) -> [(candidate: Int, position: Int)] {
        let located = located ?? locate(candidates)
        var eligible: [(candidate: Int, position: Int)] = []
        eligible.reserveCapacity(candidates.count)
        // By index, not by element: a candidate's id is not needed here, so it is not copied.
        for i in candidates.indices {
            if let skip, skip[i] { continue }
            guard let found = located[i],
                let span = eligibleSpan(of: candidates[i], lastUse: predictor.lastUse(at: found.position),
                                        refreshed: found.refreshed),
                span.from <= time, time < span.until
            else { continue }
            eligible.append((i, found.position))
        }
        return eligible
    }

    /// Whether the budget and the wake-up bound leave room for a window now: a token, fewer than
    /// `maxWakesPerDay` windows in the last 24 hours, and (unless `opportunistic`) none yet in
    /// this slot.
    private func mayOpenWindow(opportunistic: Bool) -> Bool {
        tokens >= 1 && recentWakes.count < maxWakesPerDay && (opportunistic || !wokeInSlot)
    }

    /// The probability of some open in the slot a window at `time` serves, and the threshold a
    /// window's value must reach, when that probability reaches it (a window's value is at most
    /// it, so most slots fail here); else nil.
    private func openChance(at time: Double) -> (anyOpen: Double, threshold: Double)? {
        let threshold = ReplayMath.exp(logThreshold)
        let anyOpen = predictor.probabilityOfAnyOpen(inSlotAt: time + predictionOffset)
        return anyOpen >= threshold ? (anyOpen, threshold) : nil
    }

    /// The first `count` of `0..<n` in the strict total order `precedes`, in that order: what
    /// sorting all of them and taking a prefix gives, for the cost of a heap of `count` (a window
    /// takes about a tenth of the apps, and most candidates are turned away at its root).
    static func best(_ count: Int, of n: Int, by precedes: (Int, Int) -> Bool) -> [Int] {
        guard count > 0 else { return [] }
        if count >= n { return (0..<n).sorted(by: precedes) }
        // A heap whose root is the last of those kept: a newcomer that precedes it takes its place.
        var heap: [Int] = []
        heap.reserveCapacity(count)
        func siftDown(_ start: Int) {
            var parent = start
            while true {
                let left = 2 * parent + 1, right = left + 1
                var last = parent
                if left < heap.count, precedes(heap[last], heap[left]) { last = left }
                if right < heap.count, precedes(heap[last], heap[right]) { last = right }
                if last == parent { return }
                heap.swapAt(parent, last)
                parent = last
            }
        }
        for i in 0..<n {
            if heap.count < count {
                heap.append(i)
                var child = heap.count - 1
                while child > 0 {
                    let parent = (child - 1) / 2
                    guard precedes(heap[parent], heap[child]) else { break }
                    heap.swapAt(parent, child)
                    child = parent
                }
            } else if precedes(i, heap[0]) {
                heap[0] = i
                siftDown(0)
            }
        }
        heap.sort(by: precedes)
        return heap
    }

    /// A candidate's model in the predictor (`UsagePredictor.position(of:)`) and its last
    /// refresh: what its eligibility needs, found by its id.
    struct Located {
        var position: Int
        var refreshed: Double?
    }

    /// Each candidate located (nil for an app never opened): for `chooseIndices` and
    /// `nextWindow`, so that one decision and its look-ahead find each app once, not once per
    /// slot tried. Candidates in id order, as a decision has them, are found without hashing,
    /// beside `UsagePredictor.idsInAppOrder`.
    func locate(_ candidates: [Candidate]) -> [Located?] {
        // A walk beside the predictor's ids in the same order: every id before `cursor` is less
        // than a candidate in increasing order, which is found at or after it. Any other is
        // looked up by its id.
        let ids = predictor.idsInAppOrder
        let positions = predictor.positionsInAppOrder
        var found: [Located?] = []
        found.reserveCapacity(candidates.count)
        var cursor = 0
        for i in candidates.indices {
            guard cursor == 0 || ids[cursor - 1] < candidates[i].appID else {
                found.append(locate(candidates[i]))
                continue
            }
            while cursor < ids.count, ids[cursor] < candidates[i].appID { cursor += 1 }
            guard cursor < ids.count, ids[cursor] == candidates[i].appID else {
                found.append(nil)
                continue
            }
            found.append(Located(position: positions[cursor], refreshed: lastRefreshByPosition[positions[cursor]]))
        }
        return found
    }

    private func locate(_ candidate: Candidate) -> Located? {
        predictor.position(of: candidate.appID).map { Located(position: $0, refreshed: lastRefreshByPosition[$0]) }
    }

    /// Sets `app`'s last refresh (nil: none), and its copy by model position.
    private mutating func setLastRefresh(of app: String, to time: Double?) {
        lastRefresh[app] = time
        if let position = predictor.position(of: app) { lastRefreshByPosition[position] = time }
    }

    /// Records the refreshes started in a window at `time`; `afterUse`, the one among them
    /// that the user's leaving its app chose (`choosesAfterUse`), if any. The others count
    /// toward `refreshYield`.
    public mutating func recordWindow(at time: Double, refreshed: [String], afterUse: String? = nil) {
        guard !refreshed.isEmpty else { return }
        for app in refreshed {
            refreshBefore[app] = .some(lastRefresh[app])
            setLastRefresh(of: app, to: time)
            if app != afterUse, !keepsOnlyLastRefreshes { paid.startTrial(of: app, at: time) }
        }
        guard !keepsOnlyLastRefreshes else { return }
        tokens = max(tokens - Double(refreshed.count), 0)
        if recentWakes.last.map({ time - $0 >= 60 }) ?? true {
            recentWakes.append(time)
            wakesInSlot += 1
        }
        wokeInSlot = true
    }

    /// Takes back a refresh recorded at `time` that did not run (the app could not be reached,
    /// or its request went before it was delivered): the app is as before it (its last refresh,
    /// so its interval), and its token goes back to the pool. The wake-up stays counted: the
    /// machine did wake. Nothing changes if the app was refreshed again since. `time` is in the
    /// clock's present scale: after a step (`wallClockStepped`), the recorded time plus the step.
    /// It is matched to within a second, so that steps summed in another order still find it
    /// (an app's refreshes are a refresh interval apart, minutes at the least).
    public mutating func refreshDidNotRun(_ appID: String, recordedAt time: Double) {
        guard let last = lastRefresh[appID], abs(last - time) < 1,
            let before = refreshBefore.removeValue(forKey: appID)
        else { return }
        setLastRefresh(of: appID, to: before)
        guard !keepsOnlyLastRefreshes else { return }
        paid.cancelTrial(of: appID, startedAt: time)
        tokens = min(tokens + 1, refreshesPerAppPerDay * Double(knownApps))
    }

    /// The wall clock was set, `step` seconds forward (or back, when negative): an NTP client
    /// stepped it, or the user changed the time. The times that measure how long ago something
    /// happened (each app's last refresh, for its interval; the wake-ups, for the bound on a
    /// day's; the last open of any app, for the user's absence) move with it, so that they stay
    /// as long ago as they were: a clock set back an hour does not hold an app's next refresh for
    /// an hour more, nor one set forward free it. What was learned stays as it was. `now` is the
    /// time after the step.
    public mutating func wallClockStepped(by step: Double, now: Double) {
        guard step.isFinite, now.isFinite, step != 0 else { return }
        for (app, time) in lastRefresh { setLastRefresh(of: app, to: time + step) }
        for (app, before) in refreshBefore {
            if let time = before { refreshBefore.updateValue(time + step, forKey: app) }
        }
        recentWakes = recentWakes.map { $0 + step }
        lastOpenOfAnyApp = lastOpenOfAnyApp.map { $0 + step }
        // Set back, the slot under way goes back too, with everything the models measure from
        // (the opens, the trials under way): slots are closed from there as time passes, as
        // before the step. Left where it was, no slot would close, no budget accrue and nothing
        // be learned until the clock came back to it (a day, for a clock set back a day). Set
        // forward, the slots between close as if the time had passed: the user away, the
        // budget accrued up to its cap of a day. It goes back to the slot holding the time now,
        // so a step back within the slot (an NTP client's 50 ms) leaves it as it was. The slot's
        // start moved by the step went back a slot for any step, and the slot under way was
        // closed twice: the threshold adapted twice, the pool gained a slot's worth, and a
        // second planned window could open in it.
        if step < 0, let current = currentSlot {
            let moved = min(current, slot(containing: now))
            currentSlot = moved
            predictor.wallClockStepped(by: step, slotStart: moved)
            reuse.wallClockStepped(by: step)
            paid.wallClockStepped(by: step)
            follow.wallClockStepped(by: step)
        }
    }

    /// The first slot start after `time`, within `horizon` seconds, at which `choose` would pick
    /// some of `candidates` if nothing else happened meanwhile (no open, no other window): the
    /// planned refresh window. The threshold and the budget are aged as `advance` would age them;
    /// the predictor's own learning from empty slots is not simulated, so the plan is re-made
    /// when the time comes.
    public func nextWindow(after time: Double, among candidates: [Candidate], horizon: Double = 86_400)
        -> (time: Double, apps: [String])?
    {
        nextWindow(after: time, among: candidates, skip: nil, horizon: horizon)
    }

    /// `nextWindow`, leaving out the candidates whose `skip` entry is true (those chosen in the
    /// window open now), without building a new list of the others.
    func nextWindow(after time: Double, among candidates: [Candidate], skip: [Bool]?, located: [Located?]? = nil,
                    horizon: Double = 86_400) -> (time: Double, apps: [String])?
    {
        guard case .window(let at, let apps) = lookAhead(after: time, among: candidates, skip: skip, located: located, horizon: horizon)
        else { return nil }
        return (at, apps)
    }

    /// What a look-ahead over the next `horizon` seconds found.
    public enum LookAhead: Equatable, Sendable {
        /// The planned window, and the apps it refreshes.
        case window(time: Double, apps: [String])
        /// No window within the horizon, though one may come after it: the time and the budget
        /// change the answer by themselves (a day of the week the user opens the app on, the
        /// budget refilled), so the look-ahead is to be made again at `time`, the horizon's end.
        case beyond(time: Double)
        /// None can ever be chosen without news (an open, a new request): no candidate has an
        /// open on record, or each is past its `inactive_after` days from its last open.
        case never
    }

    /// `nextWindow`, telling a look-ahead that found nothing within its horizon from one that
    /// can find nothing at all: a timer is owed to the first, and none to the second.
    public func lookAhead(after time: Double, among candidates: [Candidate], horizon: Double = 86_400) -> LookAhead {
        lookAhead(after: time, among: candidates, skip: nil, horizon: horizon)
    }

    /// `lookAhead`, leaving out the candidates whose `skip` entry is true, as `nextWindow` does.
    func lookAhead(after time: Double, among candidates: [Candidate], skip: [Bool]?, located: [Located?]? = nil,
                   horizon: Double = 86_400) -> LookAhead
    {
        // A time that is not a number (a damaged `earliest_begin`) has no slot, nor any window after it.
        guard time.isFinite, !horizon.isNaN else { return .never }
        let located = located ?? locate(candidates)
        // When each candidate can be chosen at all: from the end of its refresh interval until
        // `inactiveAfterSeconds` after its last use. Worked out once, so that a slot in which nobody is
        // eligible, or the window is not worth it, costs no ranking: a lookahead over 1,000
        // candidates and 96 slots stays cheap.
        var spans: [(from: Double, until: Double)] = []
        spans.reserveCapacity(candidates.count)
        for i in candidates.indices {
            if let skip, skip[i] { continue }
            guard let found = located[i],
                let span = eligibleSpan(of: candidates[i], lastUse: predictor.lastUse(at: found.position),
                                        refreshed: found.refreshed),
                span.from < span.until
            else { continue }
            spans.append(span)
        }
        guard !spans.isEmpty else { return .never }
        spans.sort { $0.from < $1.from }
        var next = 0
        var latestUntil = -Double.infinity

        var future = self
        var slotStart = slot(containing: time) + slotSeconds
        let end = time + horizon
        while slotStart <= end, slotStart.isFinite {
            // Far from the epoch (past 2^63 s) adding a slot no longer moves the time: the look-ahead
            // ends there rather than trying the same slot for ever.
            defer { slotStart = slotStart + slotSeconds > slotStart ? slotStart + slotSeconds : .infinity }
            while next < spans.count, spans[next].from <= slotStart {
                latestUntil = max(latestUntil, spans[next].until)
                next += 1
            }
            // Every span has begun and ended: none can be chosen from here on. (A plan asked
            // days ahead, past the 7 days after the last opens, would age the planner slot by
            // slot to its end for nothing.)
            if next == spans.count, latestUntil <= slotStart { return .never }
            future.ageWithoutLearning(to: slotStart)
            // The cheap tests of `chooseIndices`, before its pass over the candidates.
            guard latestUntil > slotStart, future.mayOpenWindow(opportunistic: false),
                future.openChance(at: slotStart) != nil
            else { continue }
            let chosen = future.chooseIndices(at: slotStart, among: candidates, skip: skip, located: located)
            if !chosen.isEmpty { return .window(time: slotStart, apps: chosen.map { candidates[$0].appID }) }
        }
        return .beyond(time: end)
    }

    /// A window of a plan looked ahead (`RefreshPlan`), made at `time`: the
    /// budget and the threshold aged to it as `advance` ages them, without the predictor's
    /// training on the slots in between (their opens are not known, and the plan is made again
    /// when the time comes; training 1,000 apps' models at each slot of a day was most of a
    /// plan's cost), then the window recorded.
    public mutating func planWindow(at time: Double, refreshing apps: [String]) {
        ageWithoutLearning(to: time)
        recordWindow(at: time, refreshed: apps)
    }

    // MARK: Across restarts

    /// What the planner must not forget when the agent restarts, and cannot learn again from
    /// the usage log: when each app was last refreshed (its refresh interval), the wake-ups of
    /// the last 24 hours (the bound on them), the refresh budget left, the two thresholds, and
    /// what its refreshes paid.
    /// The agent stores one after every window and at stop (advanced to then), and hands it
    /// back at start (`restore(_:at:)`), after replaying the usage log.
    public struct Snapshot: Sendable, Equatable {
        /// The start of the slot the planner was in: the pool is as it was then.
        public var slotStart: Double
        /// The threshold a window's worth must reach (see "Whether to refresh in a window").
        public var windowThreshold: Double
        /// The least score an app must have to be refreshed (see "Which apps").
        public var appThreshold: Double
        /// Refreshes left in the pool.
        public var tokens: Double
        /// The wake-ups (the first refresh of each) of the last 24 hours, oldest first.
        public var wakes: [Double]
        /// Each app's last refresh, for those that can still hold its next (see `snapshot()`).
        public var lastRefresh: [String: Double]
        /// What the refreshes other than those after use paid (`refreshYield`): those followed
        /// by an open of their app within 15 min, older ones counting for less. None: one half.
        public var refreshesPaid: DecayingEvidence

        public init(slotStart: Double, windowThreshold: Double, appThreshold: Double, tokens: Double,
                    wakes: [Double], lastRefresh: [String: Double], refreshesPaid: DecayingEvidence = DecayingEvidence()) {
            self.slotStart = slotStart
            self.windowThreshold = windowThreshold
            self.appThreshold = appThreshold
            self.tokens = tokens
            self.wakes = wakes
            self.lastRefresh = lastRefresh
            self.refreshesPaid = refreshesPaid
        }
    }

    /// The planner's state that a restart must keep (`Snapshot`), as of the slot it was last
    /// advanced to; nil before its first slot. A refresh is left out once no interval can look
    /// back to it: after a day, or the longest interval if longer (`minRefreshIntervalSeconds`
    /// for an app in the worst standing; 2 h by default).
    public func snapshot() -> Snapshot? {
        guard let currentSlot else { return nil }
        let kept = max(86_400, minRefreshIntervalSeconds / Self.minimumWeight)
        return Snapshot(
            slotStart: currentSlot, windowThreshold: ReplayMath.exp(logThreshold),
            appThreshold: ReplayMath.exp(logAppThreshold), tokens: tokens, wakes: recentWakes,
            lastRefresh: lastRefresh.filter { $0.value > currentSlot - kept }, refreshesPaid: paid.all)
    }

    /// Takes back what a `snapshot` kept, at `now`, once the planner has learned from the usage
    /// log and been advanced to `now`.
    /// - The thresholds are as they were: they adapt to the wake-ups of the time the agent runs,
    ///   and it did not run meanwhile (the user was logged out, or the machine off). A value
    ///   that is not a positive number (a damaged file) leaves the starting one, and one out of
    ///   the thresholds' range is taken at its nearest end.
    /// - The pool is what was left, with what accrued since (at most a day's worth), as a
    ///   planner that had run throughout would have it.
    /// - The wake-ups of the last 24 hours and the last refreshes count as if this planner had
    ///   made them. One stamped after `now` (the clock was set back since) counts as made now.
    /// - What the refreshes paid is as it was (trials under way when it was taken are lost); a
    ///   value that could not have been learned leaves what this planner has.
    public mutating func restore(_ snapshot: Snapshot, at now: Double) {
        if snapshot.windowThreshold.isFinite, snapshot.windowThreshold > 0 {
            logThreshold = Self.clamp(ReplayMath.log(snapshot.windowThreshold), to: Self.windowThresholdRange)
        }
        if snapshot.appThreshold.isFinite, snapshot.appThreshold > 0 {
            logAppThreshold = Self.clamp(ReplayMath.log(snapshot.appThreshold), to: Self.appThresholdRange)
        }
        if snapshot.refreshesPaid.isValid { paid.all = snapshot.refreshesPaid }
        let daily = refreshesPerAppPerDay * Double(knownApps)
        fundedApps = max(fundedApps, knownApps)
        if snapshot.tokens.isFinite {
            let accrued = daily * max(slot(containing: now) - snapshot.slotStart, 0) / 86_400
            tokens = min(daily, max(snapshot.tokens, 0) + accrued)
        }
        recentWakes = snapshot.wakes.filter(\.isFinite).map { min($0, now) }.filter { $0 > now - 86_400 }.sorted()
        for (app, time) in snapshot.lastRefresh where time.isFinite {
            let refreshed = min(time, now)
            guard refreshed > (lastRefresh[app] ?? -.infinity) else { continue }
            setLastRefresh(of: app, to: refreshed)
        }
        // The slot under way: its wake-ups, for the threshold, and whether it had a window.
        if let currentSlot {
            wakesInSlot = recentWakes.count(where: { $0 >= currentSlot })
            wokeInSlot = wakesInSlot > 0 || lastRefresh.values.contains { $0 >= currentSlot }
        }
    }

    /// `advance` without the predictor's training: for looking ahead. Like `advance`, it ages
    /// at most a week's worth of slots one by one, and jumps over more: a look-ahead from a time
    /// years away (an `earliest_begin` from a damaged store, or a clock set back years since it
    /// was stored) went over every slot up to it, and from near 9e18 on, where adding a slot
    /// no longer changes the time, for ever.
    private mutating func ageWithoutLearning(to time: Double) {
        let target = slot(containing: time)
        guard let current = currentSlot, target.isFinite, target > current else { return }
        var next = current + slotSeconds
        if ((target - next) / slotSeconds).rounded(.down) > 7 * 96 {
            closeSlot()
            next = target
        }
        while true {
            closeSlot()
            let daily = refreshesPerAppPerDay * Double(knownApps)
            tokens = min(daily, tokens + daily * (next - (currentSlot ?? next)) / 86_400)
            currentSlot = next
            while let first = recentWakes.first, first <= next - 86_400 { recentWakes.removeFirst() }
            guard next < target else { return }
            next += slotSeconds
        }
    }
}
