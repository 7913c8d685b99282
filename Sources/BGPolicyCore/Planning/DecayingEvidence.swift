/// Trials and successes in which older evidence counts for less: each new trial multiplies
/// what came before by `decay`. The evidence behind `ReuseEstimator` and `FollowEstimator`.
struct DecayingEvidence: Sendable, Equatable {
    var trials = 0.0
    var successes = 0.0

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
