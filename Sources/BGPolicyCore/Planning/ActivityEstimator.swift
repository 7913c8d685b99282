/// Estimates the probability that the user opens some app in a coming slot, from counts: how
/// often a slot was used before, given the time since the user's last open (in bins), the hour
/// of day, and whether it is a weekend.
///
/// The estimate backs off from the finest context to coarser ones, each a smoothed rate whose
/// prior is the next coarser rate (`(hits + k·prior) / (slots + k)`):
/// recency → recency × hour → recency × hour × weekend. Counts decay by `dailyDecay` every day,
/// so that old habits fade. Recency carries most of the signal: a user who just opened
/// something is likely to open something again soon, and when, depends on the person and on
/// the hour; the table learns both without assuming a shape.
public struct ActivityEstimator: Sendable {
    public var smoothing: Double = 20
    public var dailyDecay: Double = 0.99
    /// The rate a cold user starts from: some open in one slot of six.
    public var prior: Double = 1.0 / 6

    struct Context: Hashable, Sendable {
        let age: Int
        let hour: Int  // -1: any hour
        let weekend: Int  // -1: either
    }

    private var hits: [Context: Double] = [:]
    private var slots: [Context: Double] = [:]
    private var lastDay: Int?

    public init() {}

    /// The contexts of a slot, coarsest first.
    static func contexts(age: Double?, hour: Int, weekend: Bool) -> [Context] {
        let bin = UsagePredictor.ageBin(age)
        return [Context(age: bin, hour: -1, weekend: -1),
                Context(age: bin, hour: hour, weekend: -1),
                Context(age: bin, hour: hour, weekend: weekend ? 1 : 0)]
    }

    public func probability(age: Double?, hour: Int, weekend: Bool) -> Double {
        var p = prior
        for context in Self.contexts(age: age, hour: hour, weekend: weekend) {
            p = ((hits[context] ?? 0) + smoothing * p) / ((slots[context] ?? 0) + smoothing)
        }
        return p
    }

    /// Records the outcome of one slot; `day` (days since the epoch) drives the decay.
    public mutating func record(age: Double?, hour: Int, weekend: Bool, opened: Bool, day: Int) {
        if let lastDay, day > lastDay {
            var factor = 1.0
            for _ in 0..<min(day - lastDay, 365) { factor *= dailyDecay }
            for key in Array(slots.keys) { slots[key]! *= factor }
            for key in Array(hits.keys) { hits[key]! *= factor }
        }
        lastDay = max(lastDay ?? day, day)
        for context in Self.contexts(age: age, hour: hour, weekend: weekend) {
            slots[context, default: 0] += 1
            if opened { hits[context, default: 0] += 1 }
        }
    }
}
