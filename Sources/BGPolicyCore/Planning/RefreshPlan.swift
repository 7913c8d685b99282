/// The refresh windows the planner will make from a moment on if nothing else happens (no open,
/// no change of conditions, no new request) and each app submits its refresh again after every
/// one, as apps do: `RefreshPlanner.nextWindow` one window after another, each recorded as made
/// (`planWindow(at:refreshing:)`), so that the refresh intervals and the budget of those it took
/// hold for the next. A refresh held by a rule that lifts at a known time joins the plan then.
///
/// `GetTimeline` draws it, and `Explain` and `ListPending` name a refresh's earliest window
/// from it (`PlanningFacts.refreshPlan`), so that the three agree. A window is worth the share
/// of all predicted opens its chosen apps serve, so the window a refresh goes in depends on the
/// others pending: worked out for each refresh alone, the window named could be one that never
/// opens, or later than the one it goes in, and cost a look-ahead for each (3.7 ms with 1,000
/// apps, seconds for a `ListPending` of them all).
///
/// The plan is made as far as it is asked (`extend(through:stoppingAfter:after:)`) and goes on
/// from where it stopped, so what it says does not depend on how far it was made:
/// `firstWindow(refreshing:after:)` plans a copy further when it must.
public struct RefreshPlan: Sendable {
    /// A planned window and the apps it refreshes.
    public struct Window: Sendable, Equatable {
        public var time: Double
        public var apps: [String]

        public init(time: Double, apps: [String]) {
            self.time = time
            self.apps = apps
        }
    }

    /// The windows planned so far, in time order.
    public private(set) var windows: [Window] = []
    /// Each app's planned refreshes, in time order.
    public private(set) var refreshes: [String: [Double]] = [:]
    /// Every window up to this time is in `windows`.
    public private(set) var plannedThrough: Double

    /// The planner as the windows so far left it.
    private var planner: RefreshPlanner
    private let candidates: [RefreshPlanner.Candidate]
    /// When each candidate comes free (`-infinity`: free from the start), and those times in
    /// order: the candidates free are found again only when one passes.
    private let liftOf: [Double]
    private let lifts: [Double]
    /// When the plan starts.
    private let start: Double
    /// The next window is looked for after `time`, among the candidates free then (`free`, in
    /// app-id order); `lifts[nextLift]` is the next lift.
    private var time: Double
    private var free: [RefreshPlanner.Candidate]
    private var nextLift: Int

    /// A plan from `now` on, nothing planned yet. `candidates` in app-id order, as `nextWindow`
    /// takes them; `notBefore`, when those held by a rule that lifts by time come free.
    public init(_ planner: RefreshPlanner, from now: Double, among candidates: [RefreshPlanner.Candidate],
                notBefore: [String: Double] = [:]) {
        self.planner = planner
        self.candidates = candidates
        // Most often none is held: then no id is looked up, nor the list copied.
        let liftOf = notBefore.isEmpty
            ? [Double](repeating: -.infinity, count: candidates.count) : candidates.map { notBefore[$0.appID] ?? -.infinity }
        self.liftOf = liftOf
        lifts = Set(liftOf.filter(\.isFinite)).sorted()
        start = now
        time = now
        plannedThrough = now
        // One held until a time that is not a number, or for ever (a damaged store), is never
        // free: it was planned as free when no other was held until a time.
        free = notBefore.isEmpty ? candidates : candidates.indices.filter { liftOf[$0] <= now }.map { candidates[$0] }
        nextLift = lifts.firstIndex { $0 > now } ?? lifts.count
        // Grown one app at a time, the table hashed every id again at each doubling.
        refreshes.reserveCapacity(candidates.count)
    }

    /// Plans every window up to `end` (one starting then included), or up to the first after
    /// `time` that refreshes `appID`, when given: `Explain` of one request needs no more.
    /// (No window comes more than `[limits] inactive_after` after the last open of an app: the
    /// plan has no opens.)
    public mutating func extend(through end: Double, stoppingAfter appID: String? = nil, after time: Double = -.infinity) {
        // Through for ever (a window asked for after a damaged time) there is no end to plan to.
        guard end > plannedThrough, end.isFinite else { return }
        // Each turn makes a window (after the last, so one a slot at most) or frees those held
        // until the next lift (each lift once): this bounds the turns, in case of a mistake.
        let slots = Int(min((end - self.time) / planner.slotSeconds, 1e7).rounded(.up)) + 1
        for _ in 0..<(2 * (slots + lifts.count) + 2) {
            // No slot starts in what is left to plan: no window can (and `nextWindow` would
            // first go over every candidate to find so). Nor past 2^63 s (a damaged lift), where
            // adding a slot no longer moves the time: the same window was found again and again.
            let nextSlot = planner.slot(containing: self.time) + planner.slotSeconds
            guard nextSlot <= end, nextSlot > self.time else { break }
            let nextFree = planner.nextWindow(after: self.time, among: free, horizon: end - self.time)
            // One held comes free before that window: look again from then (a window just then
            // included, as the decision's timer counts it).
            if nextLift < lifts.count, lifts[nextLift] <= (nextFree?.time ?? end) {
                let lift = lifts[nextLift]
                nextLift += 1
                free = candidates.indices.filter { liftOf[$0] <= lift }.map { candidates[$0] }
                self.time = lift - 1
                continue
            }
            guard let next = nextFree else { break }
            planner.planWindow(at: next.time, refreshing: next.apps)
            // A lift within a second of a window's start brings the window back (as it takes
            // that refresh when it opens): the same window, with one more app.
            if let last = windows.indices.last, windows[last].time == next.time {
                windows[last].apps += next.apps
            } else {
                windows.append(Window(time: next.time, apps: next.apps))
            }
            for app in next.apps { refreshes[app, default: []].append(next.time) }
            self.time = next.time
            if let appID, next.time > time, next.apps.contains(appID) {
                plannedThrough = max(plannedThrough, next.time)
                return
            }
        }
        plannedThrough = end
    }

    /// Plans through the day after the last pending refresh may come free: the latest lift, or
    /// the end of the longest refresh interval, and the slot after. The earliest window of each
    /// (`firstWindow`, within a day of then) is then read from this plan, not from a copy
    /// planned further for each: what `ListPending` asks of it.
    public mutating func extendForEveryRefresh() {
        let longestInterval = planner.minRefreshIntervalSeconds / RefreshPlanner.minimumWeight
        let lastFree = max(lifts.last ?? start, start + longestInterval) + planner.slotSeconds
        extend(through: lastFree + 86_400)
    }

    /// The first planned window after `time`, and within `horizon` seconds of it, that refreshes
    /// `appID`; nil when none does. Where the plan stops short of that, a copy is planned
    /// further, from where it stopped: the answer is the same however far the plan was made.
    public func firstWindow(refreshing appID: String, after time: Double, horizon: Double = 86_400) -> Double? {
        let end = time + horizon
        func first(in plan: RefreshPlan) -> Double? {
            guard let found = plan.refreshes[appID]?.first(where: { $0 > time }) else { return nil }
            return found <= end ? found : nil
        }
        if let found = first(in: self) { return found }
        guard end > plannedThrough else { return nil }
        var rest = self
        rest.extend(through: end, stoppingAfter: appID, after: time)
        return first(in: rest)
    }
}
