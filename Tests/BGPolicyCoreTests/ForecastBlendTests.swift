@testable import BGPolicyCore
import Testing

@Suite("ForecastBlend: the last step of an app's forecast")
struct ForecastBlendTests {
    /// A small deterministic generator (a 64-bit LCG), so that the data are the same each run.
    struct Draws {
        var state: UInt64
        mutating func next() -> Double {
            state = state &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
            return Double(state >> 11) / Double(1 << 53)
        }
    }

    static func logit(_ p: Double) -> Double { OnlineLogistic.logit(p) }

    @Test func aFreshBlendIsTheAppsModelAlone() {
        let blend = ForecastBlend()
        for (score, history) in [(-4.0, 2.0), (0.0, -6.0), (1.5, nil), (-13.0, 0.5)] {
            let x = ForecastBlend.Inputs(modelScore: score, historyLogit: history)
            #expect(abs(blend.probability(x) - OnlineLogistic.sigmoid(score)) < 1e-12)
        }
    }

    /// A slot never seen has no rate: the history input is the model's own, not the prior's
    /// (a new app is not "never opened at this time"). The model's log-odds are clamped.
    @Test func anUnseenSlotReadsAsTheModelAndScoresAreClamped() {
        #expect(ForecastBlend.Inputs(modelScore: -2.5, historyLogit: nil).history == -2.5)
        #expect(ForecastBlend.Inputs(modelScore: 50, historyLogit: nil) == .init(modelScore: ForecastBlend.maximumLogOdds, historyLogit: ForecastBlend.maximumLogOdds))
        #expect(ForecastBlend.Inputs(modelScore: -50, historyLogit: 1).model == -ForecastBlend.maximumLogOdds)
        // The rate is shrunk by a day of the prior: one open in one day is 0.5, not 1.
        #expect(abs(ForecastBlend.historyLogit(opens: 1, days: 1) - Self.logit((1 + 0.005) / 2)) < 1e-12)
        #expect(ForecastBlend.historyLogit(opens: 0, days: 10) < Self.logit(0.001))
    }

    /// Routines: whether the app is opened follows its rate on past days (a slot opened on 80 %
    /// of days, or on 2 %), while the model, unsure, says about 0.1 everywhere. The blend learns
    /// to lean on the rate: after a few thousand slots (a dozen apps for a week) the routine's
    /// slot reads near 0.8 and the rest near 0.02, where the model alone said 0.1 for both.
    @Test func whereUseFollowsTheClockTheRateIsLearnedToCount() {
        var blend = ForecastBlend()
        var draws = Draws(state: 7)
        let routine = ForecastBlend.Inputs(modelScore: Self.logit(0.12), historyLogit: Self.logit(0.8))
        let rest = ForecastBlend.Inputs(modelScore: Self.logit(0.08), historyLogit: Self.logit(0.02))
        for k in 0..<8000 {
            let x = k % 4 == 0 ? routine : rest
            blend.train(x, opened: draws.next() < (k % 4 == 0 ? 0.8 : 0.02))
        }
        #expect(blend.historyWeight > 0.5, "history weight \(blend.historyWeight)")
        #expect(blend.probability(routine) > 0.6, "routine \(blend.probability(routine))")
        #expect(blend.probability(rest) < 0.05, "rest \(blend.probability(rest))")
    }

    /// Sessions: the model knows (an open comes right after another, p 0.6; otherwise 0.01),
    /// and the rate on past days is noise about the mean. The blend keeps to the model: the
    /// rate's weight stays near zero, and the forecasts stay near the model's.
    @Test func whereUseDoesNotFollowTheClockTheModelKeepsItsSay() {
        var blend = ForecastBlend()
        var draws = Draws(state: 11)
        for _ in 0..<8000 {
            let afterAnOpen = draws.next() < 0.1
            let p = afterAnOpen ? 0.6 : 0.01
            let rate = 0.02 + 0.1 * draws.next()
            let x = ForecastBlend.Inputs(modelScore: Self.logit(p), historyLogit: Self.logit(rate))
            blend.train(x, opened: draws.next() < p)
        }
        #expect(abs(blend.historyWeight) < 0.15, "history weight \(blend.historyWeight)")
        #expect(blend.modelWeight > 0.8, "model weight \(blend.modelWeight)")
        let after = ForecastBlend.Inputs(modelScore: Self.logit(0.6), historyLogit: Self.logit(0.07))
        #expect(abs(blend.probability(after) - 0.6) < 0.1, "after an open \(blend.probability(after))")
    }

    /// The predictor trains its blend on every app's slots. Twelve routines (three apps, four
    /// times of day each), kept on four days in five: after three weeks the rate counts, and a
    /// routine's slot reads higher than the app's model alone says, a quiet one lower.
    @Test func thePredictorLearnsItsBlendFromEveryAppsSlots() throws {
        let day = UsagePredictorTests.day, monday = UsagePredictorTests.monday
        let apps = ["org.example.Mail", "org.example.News", "org.example.Photos"]
        var opens: [(Double, String)] = []
        for d in 0..<21 {
            for (a, app) in apps.enumerated() {
                for (h, hour) in [8.0, 12, 17, 21].enumerated() where (d + a + h) % 5 != 0 {
                    opens.append((monday + Double(d) * day + hour * 3600 + Double(a) * 1200 + 300, app))
                }
            }
        }
        opens.sort { $0.0 < $1.0 }
        var predictor = UsagePredictor()
        let end = monday + 21 * day
        UsagePredictorTests.feed(&predictor, opens: opens, from: monday, to: end)
        let blend = predictor.forecastBlend
        #expect(blend.historyWeight > 0.2, "history weight \(blend.historyWeight)")
        // News's 12:25 routine is in the slot 12:15–12:30; at 15:00 it has never been opened.
        let routine = end + 12 * 3600 + 900, quiet = end + 15 * 3600
        let modelAlone = ForecastBlend()
        let routineInputs = try #require(predictor.blendInputs(of: "org.example.News", inSlotAt: routine))
        let quietInputs = try #require(predictor.blendInputs(of: "org.example.News", inSlotAt: quiet))
        let blended = (routine: predictor.probability(of: "org.example.News", inSlotAt: routine),
                       quiet: predictor.probability(of: "org.example.News", inSlotAt: quiet))
        #expect(blended.routine == blend.probability(routineInputs))
        // 0.37 against the model's 0.22 when written; 0.0008 against 0.004.
        #expect(blended.routine > modelAlone.probability(routineInputs) + 0.1,
                "routine \(blended.routine), model alone \(modelAlone.probability(routineInputs))")
        #expect(blended.quiet < modelAlone.probability(quietInputs) / 2,
                "quiet \(blended.quiet), model alone \(modelAlone.probability(quietInputs))")
    }
}
