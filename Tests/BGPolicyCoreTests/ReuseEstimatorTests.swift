import BGPolicyCore
import Testing

@Suite("ReuseEstimator")
struct ReuseEstimatorTests {
    @Test func aColdAppStartsAtOneHalf() {
        let estimator = ReuseEstimator()
        #expect(estimator.probability(of: "org.example.Mail") == 0.5)
    }

    /// Each row: how soon the app is opened again after each of 20 closes (nil: not for an
    /// hour), and the range its estimate must end in.
    @Test(arguments: [
        ([Double?](repeating: 120, count: 20), 0.85...1.0),
        ([Double?](repeating: 899, count: 20), 0.85...1.0),
        ([Double?](repeating: 901, count: 20), 0.0...0.15),
        ([Double?](repeating: nil, count: 20), 0.0...0.15),
        ((0..<20).map { $0 % 2 == 0 ? 300 : nil }, 0.35...0.65),
    ] as [([Double?], ClosedRange<Double>)])
    func learnsHowSoonTheUserComesBack(returns: [Double?], expected: ClosedRange<Double>) {
        var estimator = ReuseEstimator()
        var time = 1_700_000_000.0
        for back in returns {
            estimator.recordClose(of: "org.example.Mail", at: time)
            if let back { estimator.recordOpen(of: "org.example.Mail", at: time + back) }
            time += 3600
        }
        estimator.expire(before: time)
        #expect(expected.contains(estimator.probability(of: "org.example.Mail")), "\(estimator.probability(of: "org.example.Mail"))")
    }

    /// Recent habits count more: after 30 quick returns, 30 closes without one bring the estimate
    /// down to the new habit.
    @Test func oldEvidenceFades() {
        var estimator = ReuseEstimator()
        var time = 1_700_000_000.0
        for k in 0..<60 {
            estimator.recordClose(of: "org.example.Mail", at: time)
            if k < 30 { estimator.recordOpen(of: "org.example.Mail", at: time + 60) }
            time += 3600
        }
        estimator.expire(before: time)
        #expect(estimator.probability(of: "org.example.Mail") < 0.35)
    }

    /// A new app starts from what all apps have shown, not from one half.
    @Test func aNewAppStartsFromWhatAllAppsShowed() {
        var estimator = ReuseEstimator()
        var time = 1_700_000_000.0
        for k in 0..<40 {
            let app = k % 2 == 0 ? "org.example.Mail" : "org.example.Chat"
            estimator.recordClose(of: app, at: time)
            estimator.recordOpen(of: app, at: time + 60)
            time += 3600
        }
        #expect(estimator.probability(of: "org.example.Notes") > 0.8)
    }

    /// A clock that goes back: an open stamped before the close teaches nothing, and no trial
    /// ends early.
    @Test func aClockGoingBackTeachesNothing() {
        var estimator = ReuseEstimator()
        estimator.recordClose(of: "org.example.A", at: 10_000)
        estimator.recordOpen(of: "org.example.A", at: 9_500)
        estimator.recordClose(of: "org.example.B", at: 10_000)
        estimator.expire(before: 5_000)
        #expect(estimator.probability(of: "org.example.A") == 0.5)
        #expect(estimator.probability(of: "org.example.B") == 0.5)
        // B's trial is still running: it ends as a failure once its span has passed.
        estimator.expire(before: 10_901)
        #expect(estimator.probability(of: "org.example.B") < 0.5)
    }
}
