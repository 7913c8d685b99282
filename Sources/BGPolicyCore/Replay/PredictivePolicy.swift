/// The `bgpolicy` refresh policy in replay: refreshes apps shortly before the opens that
/// `UsagePredictor` expects, in few coalesced wake windows, within a refresh budget.
///
/// - **Grid.** Windows can open only on the 15-min grid (SPEC §2, on battery; aligned to the Unix
///   epoch). A refresh at a grid point serves opens in the next 15 minutes, so its lead before a
///   predicted open is 0–15 min, 7.5 min on average (SPEC §2's 10-min lead is the middle of the
///   window it aims at).
/// - **Whether to wake.** At each grid point the predictor gives the probability that the user
///   opens some app in the coming slot (`UsagePredictor.probabilityOfAnyOpen`). The policy wakes
///   when it reaches a threshold that adapts online so that about `targetWakesPerDay` windows open
///   per day, or fewer when the budget could not fill them (an online quantile: raised after a
///   wake, lowered a little after each slot without one), and never more than `maxWakesPerDay`
///   in any 24 hours. So the windows go to the hours, days and moments after recent use when
///   opens are likeliest, whatever this user's pattern is.
/// - **Which apps.** In a window, eligible apps in order of probability, those with at least
///   `minProbability`, while the budget lasts.
/// - **Budget.** A shared pool accrues `refreshesPerAppPerDay` (2.2) refreshes a day for every
///   registered app (or every app seen opened, if more), up to one day's worth; a refresh spends
///   one, and a window spends at most its share, the daily accrual over `targetWakesPerDay`.
///   `periodic:60m` spends 24 a day per app, so over a scored span of D days this policy spends
///   at most 2.2·(D+1)/(24·D) of it: under 10 % once D ≥ 11.
/// - **Eligible.** The app has a pending refresh request (it resubmits after each open and each
///   refresh), was opened within the last 7 days (SPEC §2), and was not refreshed in the last
///   15 minutes (SPEC §2).
public struct PredictivePolicy: ReplayPolicy {
    public var gridSeconds: Double = 900
    public var targetWakesPerDay: Double = 22
    /// A safety bound: never more windows than this in any 24 hours. A busy day may open more
    /// windows than a quiet one (that is where the opens are); the threshold keeps the average.
    public var maxWakesPerDay = 48
    public var refreshesPerAppPerDay: Double = 2.2
    public var minProbability: Double = 0
    public var inactiveAfterSeconds: Double = 7 * 86_400
    public var minRefreshIntervalSeconds: Double = 900

    private var predictor: UsagePredictor
    private var pending: Set<String> = []
    private var lastRefresh: [String: Double] = [:]
    private var recentWakes: [Double] = []
    private var logThreshold = ReplayMath.log(0.2)
    private var tokens: Double = 0
    private var lastGrid: Double?

    /// Step of the threshold's online quantile, in log units.
    static let thresholdStep = 0.01

    /// Apps registered with the agent: the budget is per registered app, as the agent knows its
    /// registered apps before any of them is opened. In replay, the apps of the trace, the same
    /// set `periodic` gives a timer each.
    public var registeredAppCount: Int

    public init(registeredAppCount: Int = 0) {
        predictor = UsagePredictor(slotSeconds: 900)
        self.registeredAppCount = registeredAppCount
    }

    public mutating func observe(_ event: UsageEvent) {
        if event.kind == .open { predictor.recordOpen(of: event.appID, at: event.time) }
    }

    public mutating func resubmitted(appID: String, at time: Double) {
        pending.insert(appID)
    }

    public mutating func nextWake(after time: Double) -> Double? {
        var grid = (time / gridSeconds).rounded(.down) * gridSeconds
        while grid <= time { grid += gridSeconds }
        return grid
    }

    public mutating func wake(at time: Double) -> [String] {
        predictor.startSlot(at: time)
        let known = Double(max(predictor.appIDs.count, registeredAppCount))
        if let lastGrid {
            let daily = refreshesPerAppPerDay * known
            tokens = min(daily, tokens + daily * (time - lastGrid) / 86_400)
        }
        lastGrid = time
        while let first = recentWakes.first, first <= time - 86_400 { recentWakes.removeFirst() }

        var candidates: [(app: String, p: Double)] = []
        for app in pending {
            guard let opened = predictor.lastOpen(of: app), time - opened < inactiveAfterSeconds else { continue }
            if let refreshed = lastRefresh[app], time - refreshed < minRefreshIntervalSeconds { continue }
            candidates.append((app, predictor.probability(of: app, inSlotAt: time)))
        }
        candidates.sort { ($0.p, $1.app) > ($1.p, $0.app) }
        candidates.removeAll { $0.p < minProbability }
        let anyOpen = candidates.isEmpty ? 0 : predictor.probabilityOfAnyOpen(inSlotAt: time)

        var chosen: [String] = []
        if anyOpen >= ReplayMath.exp(logThreshold), recentWakes.count < maxWakesPerDay {
            let perWake = (refreshesPerAppPerDay * known / targetWakesPerDay).rounded(.up)
            for candidate in candidates.prefix(Int(perWake)) where tokens >= 1 {
                chosen.append(candidate.app)
                tokens -= 1
            }
        }
        // With few apps the budget, not the wake target, bounds the windows worth opening.
        let q = min(targetWakesPerDay, refreshesPerAppPerDay * known) * gridSeconds / 86_400
        logThreshold += Self.thresholdStep * ((chosen.isEmpty ? 0 : 1) - q)
        if !chosen.isEmpty { recentWakes.append(time) }
        for app in chosen {
            pending.remove(app)
            lastRefresh[app] = time
        }
        return chosen
    }
}
