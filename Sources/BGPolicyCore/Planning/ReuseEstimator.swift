/// Learns, for each app, how likely the user is to come back to it soon after leaving it: the
/// probability that an app closed (left) at time t is opened again within `span` (15 min) of t.
///
/// That is the value of a refresh right after the user leaves an app, which serves the opens
/// of the next 15 minutes. People switch between a few apps while they work, so for some apps
/// that moment is the best there is; for others (and on coarse traces, where an app seen on one
/// snapshot is rarely seen on the next) it is worthless. The estimator learns which, from the
/// past only:
/// - A close starts a trial for the app; the app's next open ends it as a success if it came
///   within `span`, and a trial with no open within `span` ends as a failure once time has
///   passed it (`expire(before:)`). An open stamped before the close (the clock went back)
///   ends the trial without a verdict.
/// - Each app's estimate is its own successes and trials, with evidence decaying by
///   `decay` per trial (recent habits count more), shrunk towards the estimate of all apps
///   together, which a cold app starts from (and which starts at one half).
///
/// The same measure serves the planner's own refreshes (`RefreshPlanner`): a trial started at a
/// refresh (`startTrial`) succeeds if the app is opened within `span` of it, and the evidence of
/// all apps together (`all`) is then what its refreshes have paid.
///
/// Pure: time is passed in.
public struct ReuseEstimator: Sendable, Equatable {
    /// How soon a reopen must come to count: the span a refresh serves.
    public var span: Double
    /// Each trial multiplies the evidence before it by this.
    public static let decay = 0.97
    /// How many trials' worth the all-apps estimate counts for in an app's own.
    static let priorWeight = 2.0

    private var apps: [String: DecayingEvidence] = [:]
    /// The evidence of all apps together: the prior every app's estimate is shrunk towards.
    var all = DecayingEvidence()
    /// Apps left and not yet opened again, with when they were left.
    private var open: [String: Double] = [:]

    public init(span: Double = 900) {
        self.span = span
    }

    /// The user left `appID` at `time`. Times must not go backwards.
    public mutating func recordClose(of appID: String, at time: Double) {
        startTrial(of: appID, at: time)
    }

    /// Starts a trial for `appID` at `time`: it succeeds if the app is opened within `span`.
    /// Times must not go backwards.
    public mutating func startTrial(of appID: String, at time: Double) {
        expire(before: time)
        // A second start without an open between (for a close: a lost event) restarts the trial.
        open[appID] = time
    }

    /// Ends, without a verdict, the trial `appID` started at `time` (to within a second), if it
    /// is still under way: the moment it stood for did not happen (a refresh that did not run).
    public mutating func cancelTrial(of appID: String, startedAt time: Double) {
        if let start = open[appID], abs(start - time) < 1 { open[appID] = nil }
    }

    /// The user opened `appID` at `time`: a trial it was in ends.
    public mutating func recordOpen(of appID: String, at time: Double) {
        expire(before: time)
        if let left = open.removeValue(forKey: appID), time >= left { learn(appID, time - left <= span) }
    }

    /// Forgets `appID`: its own evidence and any trial it is in. The evidence of all apps
    /// together (`all`) keeps its share, as it names no app.
    public mutating func forget(_ appID: String) {
        apps[appID] = nil
        open[appID] = nil
    }

    /// The wall clock was set `step` seconds forward (or back): the trials under way move with
    /// it, so that each is as long under way as it was (`RefreshPlanner.wallClockStepped`).
    public mutating func wallClockStepped(by step: Double) {
        for (appID, start) in open { open[appID] = start + step }
    }

    /// Ends, as failures, the trials whose span has passed by `time`. (They are all failures,
    /// so the order they end in does not change what is learned.)
    public mutating func expire(before time: Double) {
        guard open.values.contains(where: { time - $0 > span }) else { return }
        for (appID, _) in open.filter({ time - $0.value > span }) {
            open[appID] = nil
            learn(appID, false)
        }
    }

    private mutating func learn(_ appID: String, _ success: Bool) {
        apps[appID, default: DecayingEvidence()].learn(success, decay: Self.decay)
        all.learn(success, decay: Self.decay)
    }

    /// The probability that `appID`, left now, is opened again within `span`.
    public func probability(of appID: String) -> Double {
        (apps[appID] ?? DecayingEvidence()).rate(shrunkTowards: all.rate, priorWeight: Self.priorWeight)
    }
}
