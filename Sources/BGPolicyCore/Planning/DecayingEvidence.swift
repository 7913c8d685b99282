/// Trials and successes in which older evidence counts for less: each new trial multiplies
/// what came before by `decay`. The evidence behind `ReuseEstimator` and `FollowEstimator`, and
/// what a restart keeps of what the refresh planner's refreshes paid
/// (`RefreshPlanner.Snapshot.refreshesPaid`).
public struct DecayingEvidence: Sendable, Equatable {
    public var trials = 0.0
    public var successes = 0.0

    public init(trials: Double = 0, successes: Double = 0) {
        self.trials = trials
        self.successes = successes
    }

    /// Whether these could have been learned: finite, successes within 0…trials.
    public var isValid: Bool {
        trials.isFinite && successes.isFinite && successes >= 0 && successes <= trials
    }

    mutating func learn(_ success: Bool, decay: Double) {
        trials = trials * decay + 1
        successes = successes * decay + (success ? 1 : 0)
    }

    /// The rate with one success in two trials added: one half with no evidence.
    var rate: Double { (successes + 1) / (trials + 2) }

    /// The rate of this evidence shrunk towards `prior`, which counts for `priorWeight` trials.
    func rate(shrunkTowards prior: Double, priorWeight: Double) -> Double {
        (successes + priorWeight * prior) / (trials + priorWeight)
    }
}
