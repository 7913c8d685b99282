/// The last step of an app's forecast in `UsagePredictor`: a small logistic model, one for the
/// user and trained on every app's slots, over two inputs: the log-odds that the app's own model
/// gives, and the log-odds of the app's rate in the same slot of the day on past days
/// (`SlotHistoryTable.rateLogit`).
///
/// Why a second step. Each app's model weighs some four hundred one-hot features with steps
/// that must stay small, and where the user keeps routines (the same app at the same minutes on
/// most days) it stays less sure than the routine deserves, while it spreads some chance over
/// the rest of the day. The rate of past days alone (opens over days, shrunk towards
/// `priorRate`) scores better there, and worse where use is not tied to the clock (sessions,
/// apps used a few times a month), where the app's model knows what the rate cannot (recency,
/// whether the user is active). Three weights, learned by all apps together, find in a few days
/// how much this user's use follows the clock, and correct the models' confidence as well:
/// on the routine traces the rate's weight grows to about that of the model, on session traces
/// it stays near zero and the model's weight settles a little under 1 (Docs/Replay.md).
///
/// It starts as the app's model alone (weights 0, 1, 0), and learns by AdaGrad steps, each
/// input's step shrinking with the squared gradients it has had.
struct ForecastBlend: Sendable {
    /// What the blend weighs for one app in one slot.
    struct Inputs: Sendable, Equatable {
        /// The app's model's score (log-odds), clamped to ±`maximumLogOdds`.
        var model: Double
        /// The log-odds of the app's rate in the slot on past days; the model's own when no day
        /// of the slot has been seen since the app's first open (its rate is unknown, not 0).
        var history: Double

        init(modelScore: Double, historyLogit: Double?) {
            model = min(max(modelScore, -ForecastBlend.maximumLogOdds), ForecastBlend.maximumLogOdds)
            history = historyLogit ?? model
        }
    }

    /// AdaGrad's base step.
    static let learningRate = 0.1
    /// A slot's rate is shrunk towards this, by `priorDays` days' worth: one open on the only
    /// day seen reads as 0.5, not 1, and none on ten days as 0.0005, not 0.
    static let priorRate = 0.005
    static let priorDays = 1.0
    /// The model's log-odds are clamped to this (a probability within 1e-6 of 0 or 1).
    static let maximumLogOdds = 13.8

    private(set) var bias = 0.0
    private(set) var modelWeight = 1.0
    private(set) var historyWeight = 0.0
    private var squares = (bias: 1e-6, model: 1e-6, history: 1e-6)

    /// The log-odds of a slot's rate, from its decayed opens and days (`SlotHistoryTable`).
    static func historyLogit(opens: Double, days: Double) -> Double {
        OnlineLogistic.logit((opens + priorDays * priorRate) / (days + priorDays))
    }

    /// The blended probability of an open.
    func probability(_ x: Inputs) -> Double { OnlineLogistic.sigmoid(score(x)) }

    func score(_ x: Inputs) -> Double { bias + modelWeight * x.model + historyWeight * x.history }

    /// One step towards the outcome of a slot whose inputs were `x`.
    mutating func train(_ x: Inputs, opened: Bool) {
        let gradient = probability(x) - (opened ? 1 : 0)
        step(&bias, &squares.bias, gradient)
        step(&modelWeight, &squares.model, gradient * x.model)
        step(&historyWeight, &squares.history, gradient * x.history)
    }

    private func step(_ weight: inout Double, _ square: inout Double, _ g: Double) {
        square += g * g
        weight -= Self.learningRate * g / square.squareRoot()
    }
}
