/// A small online logistic regression over sparse one-hot features: the model behind the
/// user-level prediction (`ActivityEstimator`) and the prior all apps share in `UsagePredictor`;
/// `LogisticTable` holds the per-app ones, each learning exactly as this does.
///
/// A feature vector is a list of indices of the features that are on (each worth 1); the score
/// is the sum of their weights, the probability its sigmoid. Learning takes one AdaGrad step per
/// example (per-feature step sizes that shrink with the squared gradients seen so far) with a
/// little L2, which also makes old evidence fade slowly. Memory: two doubles per feature.
struct OnlineLogistic: Sendable {
    var weights: [Double]
    var squares: [Double]

    init(count: Int, bias: Double = 0) {
        weights = [Double](repeating: 0, count: count)
        weights[0] = bias
        squares = [Double](repeating: 1, count: count)
    }

    /// A fresh learner that starts from `weights` (a prior learned elsewhere).
    init(startingFrom weights: [Double]) {
        self.weights = weights
        squares = [Double](repeating: 1, count: weights.count)
    }

    func score(_ features: [Int]) -> Double {
        var sum = 0.0
        for f in features { sum += weights[f] }
        return sum
    }

    func probability(_ features: [Int]) -> Double { Self.sigmoid(score(features)) }

    mutating func train(_ features: [Int], _ y: Double, rate: Double, l2: Double) {
        let gradient = probability(features) - y
        for f in features {
            let g = gradient + l2 * weights[f]
            squares[f] += g * g
            weights[f] -= rate * g / squares[f].squareRoot()
        }
    }

    static func sigmoid(_ x: Double) -> Double { 1 / (1 + ReplayMath.exp(-x)) }
    static func logit(_ p: Double) -> Double { ReplayMath.log(p / (1 - p)) }
}
