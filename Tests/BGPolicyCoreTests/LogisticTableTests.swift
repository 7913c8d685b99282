@testable import BGPolicyCore
import Testing

/// `LogisticTable` holds the per-app models of `UsagePredictor`, feature by feature; each column
/// must learn exactly as an `OnlineLogistic` of its own would, to the last bit, or replays would
/// change with the layout.
@Suite("LogisticTable")
struct LogisticTableTests {
    /// A deterministic stream of small integers (a linear congruential generator).
    struct Stream {
        var state: UInt64
        mutating func next(_ bound: Int) -> Int {
            state = state &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
            return Int((state >> 33) % UInt64(bound))
        }
    }

    @Test func everyColumnLearnsAsAnOnlineLogisticOfItsOwn() {
        let featureCount = 40
        var table = LogisticTable(featureCount: featureCount)
        var models: [OnlineLogistic] = []
        var stream = Stream(state: 7)
        // Columns join as training goes on, past several doublings of the table (16, 32, 64),
        // each from a prior of its own.
        for step in 0..<3_000 {
            if step % 60 == 0 {
                let prior = (0..<featureCount).map { Double(($0 * 7 + step) % 11) / 10 - 0.5 }
                let column = table.append(startingFrom: prior)
                #expect(column == models.count)
                models.append(OnlineLogistic(startingFrom: prior))
            }
            let column = stream.next(models.count)
            // A one-hot vector as the predictor's, a repeated feature now and then.
            var features = [0, 1 + stream.next(9), 10 + stream.next(10), 20 + stream.next(20)]
            if stream.next(10) == 0 { features.append(features[2]) }
            let y: Double = stream.next(4) == 0 ? 1 : 0
            table.train(features, y, column: column, rate: 0.5, l2: 1e-4)
            models[column].train(features, y, rate: 0.5, l2: 1e-4)
        }
        #expect(table.count == models.count)
        #expect(table.capacity >= 64)
        table.withWeights { weights, stride in
            for (column, model) in models.enumerated() {
                let stored = (0..<featureCount).map { weights[$0 * stride + column] }
                #expect(stored == model.weights, "column \(column)")
            }
        }
        for (column, model) in models.enumerated() {
            let features = [0, 5, 15, 33]
            #expect(table.score(features, column: column) == model.score(features))
        }
    }
}
