/// Learns, for each app, how likely the user is to open it soon after opening some other app:
/// the probability that an app not in use when another is opened at t is opened within `span`
/// (15 min) of t.
///
/// That is the value of a refresh in the window after an open, which serves the opens of the
/// next 15 minutes. People open a few apps one after another when they sit down to work, so
/// the apps they usually go on to are worth refreshing then. The slot model cannot say which:
/// it learns at slot starts, where "an app was opened a moment ago" is seldom the situation,
/// and its chances there were no higher than at any grid point (0.01–0.07 on the sparse
/// desktop traces, where almost half the opens came within 10 min of another). This learns
/// the chance at that very moment, from the past only:
/// - An open of any app starts a trial for every other app it knows that is not in use (opened
///   and not left) and not in a trial already. The app's next open ends its trial as a success
///   if it came within `span`; a trial with no open within `span` ends as a failure once time
///   has passed it (`expire(before:)`). An open stamped before the trial began (the clock went
///   back) ends it without a verdict.
/// - Two situations are told apart, as they differ most: the app was used (opened or left)
///   within `recentUse` (30 min) before the trial, so it belongs to what the user is doing now,
///   or it was not. An app in the middle of a session is likely to come back; one unused
///   since yesterday is likely only if it is one the user goes on to.
/// - Each app's estimate in a situation is its own successes and trials there, with evidence
///   decaying by `decay` per trial, shrunk towards all apps' estimate in that situation, which
///   a cold app starts from (and which starts at one half).
///
/// Pure: time is passed in. Each open costs one pass over the apps known.
public struct FollowEstimator: Sendable, Equatable {
    /// How soon after another app's open an open must come to count: the span a refresh serves.
    public var span: Double
    /// An app used within this long before a trial is in the recent-use situation.
    public static let recentUse: Double = 1800
    /// Each trial multiplies the evidence before it by this.
    public static let decay = 0.97
    /// How many trials' worth the all-apps estimate counts for in an app's own.
    static let priorWeight = 2.0

    // One entry per app known, by `index` (struct of arrays: an open looks at every app, and
    // these stay contiguous, so that a thousand apps cost about a microsecond).
    private var index: [String: Int] = [:]
    private var inUse: [Bool] = []
    /// The last open or leave.
    private var lastUse: [Double] = []
    /// The start of the trial under way, if any, and whether the app had been used recently then.
    private var trialStart: [Double?] = []
    private var trialRecent: [Bool] = []
    /// By app and situation, at `2 * index + situation` (0: not used recently, 1: used recently).
    private var evidence: [DecayingEvidence] = []
    /// All apps' evidence, by situation.
    private var all = [DecayingEvidence](repeating: DecayingEvidence(), count: 2)
    /// The start of the oldest trial under way, if any: nothing expires before `span` after it.
    private var oldestTrial: Double?

    public init(span: Double = 900) {
        self.span = span
    }

    /// The user opened `appID` at `time`: its trial ends, and every other app known and not
    /// in use starts one. Times must not go backwards.
    public mutating func recordOpen(of appID: String, at time: Double) {
        expire(before: time)
        let opened = position(of: appID)
        if let start = trialStart[opened] {
            trialStart[opened] = nil
            if time >= start { learn(opened, recent: trialRecent[opened], success: time - start <= span) }
        }
        for i in inUse.indices where i != opened && !inUse[i] && trialStart[i] == nil {
            trialStart[i] = time
            trialRecent[i] = time - lastUse[i] <= Self.recentUse
            oldestTrial = min(oldestTrial ?? time, time)
        }
        inUse[opened] = true
        lastUse[opened] = time
    }

    /// The user left `appID` at `time`.
    public mutating func recordClose(of appID: String, at time: Double) {
        expire(before: time)
        let left = position(of: appID)
        inUse[left] = false
        lastUse[left] = time
    }

    /// The user left `appID` at a time not known: it is no longer in use, and its last use is
    /// what it was.
    public mutating func recordLeftUnseen(_ appID: String) {
        if let i = index[appID] { inUse[i] = false }
    }

    /// The user opened `appID` at a time not known: it is in use, and a trial it was in ends
    /// without a verdict.
    public mutating func recordOpenedUnseen(_ appID: String) {
        let i = position(of: appID)
        inUse[i] = true
        trialStart[i] = nil
    }

    /// Forgets `appID`: its entry, its evidence and any trial it is in; the apps after it move
    /// up one place. The evidence of all apps together keeps its share, as it names no app.
    public mutating func forget(_ appID: String) {
        guard let i = index.removeValue(forKey: appID) else { return }
        inUse.remove(at: i)
        lastUse.remove(at: i)
        trialStart.remove(at: i)
        trialRecent.remove(at: i)
        evidence.removeSubrange((2 * i)..<(2 * i + 2))
        for (id, position) in index where position > i { index[id] = position - 1 }
    }

    /// Ends, as failures, the trials whose span has passed by `time`. (They are all failures,
    /// so the order they end in does not change what is learned.)
    /// The wall clock was set `step` seconds forward (or back): the last uses and the trials
    /// under way move with it, so that each is as long ago as it was
    /// (`RefreshPlanner.wallClockStepped`).
    public mutating func wallClockStepped(by step: Double) {
        for i in lastUse.indices { lastUse[i] += step }
        for i in trialStart.indices { trialStart[i]? += step }
        oldestTrial? += step
    }

    public mutating func expire(before time: Double) {
        guard let oldest = oldestTrial, time - oldest > span else { return }
        oldestTrial = nil
        for i in trialStart.indices {
            guard let start = trialStart[i] else { continue }
            if time - start > span {
                trialStart[i] = nil
                learn(i, recent: trialRecent[i], success: false)
            } else {
                oldestTrial = min(oldestTrial ?? start, start)
            }
        }
    }

    /// The app's entry, added (never used, in no trial) if it is new.
    private mutating func position(of appID: String) -> Int {
        if let i = index[appID] { return i }
        let i = inUse.count
        index[appID] = i
        inUse.append(false)
        lastUse.append(-.infinity)
        trialStart.append(nil)
        trialRecent.append(false)
        evidence += [DecayingEvidence(), DecayingEvidence()]
        return i
    }

    private mutating func learn(_ i: Int, recent: Bool, success: Bool) {
        let situation = recent ? 1 : 0
        evidence[2 * i + situation].learn(success, decay: Self.decay)
        all[situation].learn(success, decay: Self.decay)
    }

    /// The probability that `appID`, if another app is opened at `time`, is opened within
    /// `span` of it.
    public func probability(of appID: String, at time: Double) -> Double {
        let i = index[appID]
        let recent = i.map { time - lastUse[$0] <= Self.recentUse } ?? false
        let situation = recent ? 1 : 0
        return (i.map { evidence[2 * $0 + situation] } ?? DecayingEvidence())
            .rate(shrunkTowards: all[situation].rate, priorWeight: Self.priorWeight)
    }
}
