/// Many `OnlineLogistic` models over the same features, one per column of a table: the
/// per-app models of `UsagePredictor`. Each learns exactly as an `OnlineLogistic` would, step
/// for step and in the same order of sums, so a replay gives the same figures to the last digit.
///
/// The table is stored feature by feature (`weights[feature * capacity + column]`), not model
/// by model. A window ranks every app on the same few features (the bias, the user's recency,
/// the hour, the day, the slot of the day): stored so, each of those is one run of memory read
/// in order, rather than a scattered cache line in each of a thousand arrays of its own.
struct LogisticTable: Sendable {
    let featureCount: Int
    /// The models in the table: columns `0..<count`.
    private(set) var count = 0
    /// Columns allocated: a row's length.
    private(set) var capacity = 0
    private var weights: [Double] = []
    private var squares: [Double] = []

    init(featureCount: Int) {
        self.featureCount = featureCount
    }

    /// Adds a model that starts from `prior` (a weight per feature), as
    /// `OnlineLogistic(startingFrom:)` does, and returns its column.
    mutating func append(startingFrom prior: [Double]) -> Int {
        precondition(prior.count == featureCount, "a prior has a weight per feature")
        if count == capacity { grow(to: max(16, capacity * 2)) }
        for feature in 0..<featureCount {
            weights[feature * capacity + count] = prior[feature]
            squares[feature * capacity + count] = 1
        }
        count += 1
        return count - 1
    }

    /// Takes the model in `column` out of the table: the models after it move one column to the
    /// left (their owner renumbers them, `UsagePredictor.forget`), and the column freed at the end
    /// is as one never used.
    mutating func remove(column: Int) {
        ColumnRows.removeColumn(column, from: &weights, rows: featureCount, capacity: capacity, count: count, fill: 0)
        ColumnRows.removeColumn(column, from: &squares, rows: featureCount, capacity: capacity, count: count, fill: 1)
        count -= 1
    }

    /// Moves every row to rows of `newCapacity` columns (`ColumnRows.widened`).
    private mutating func grow(to newCapacity: Int) {
        weights = ColumnRows.widened(weights, rows: featureCount, capacity: capacity, count: count, to: newCapacity,
                                     fill: 0)
        squares = ColumnRows.widened(squares, rows: featureCount, capacity: capacity, count: count, to: newCapacity,
                                     fill: 1)
        capacity = newCapacity
    }

    /// The model's score (`OnlineLogistic.score`): its weights of `features`, summed in order.
    func score(_ features: [Int], column: Int) -> Double {
        var sum = 0.0
        for feature in features { sum += weights[feature * capacity + column] }
        return sum
    }

    /// One learning step of the model in `column` (`OnlineLogistic.train`).
    mutating func train(_ features: [Int], _ y: Double, column: Int, rate: Double, l2: Double) {
        let gradient = OnlineLogistic.sigmoid(score(features, column: column)) - y
        for feature in features {
            let at = feature * capacity + column
            let g = gradient + l2 * weights[at]
            squares[at] += g * g
            weights[at] -= rate * g / squares[at].squareRoot()
        }
    }

    /// Reads the weights in place: `body` finds feature `f` of the model in column `c` at
    /// `f * stride + c`, where `stride` is the capacity it is handed.
    func withWeights<R>(_ body: (_ weights: UnsafeBufferPointer<Double>, _ stride: Int) -> R) -> R {
        weights.withUnsafeBufferPointer { body($0, capacity) }
    }
}
