@testable import BGPolicyCore
import Testing

@Suite("FollowEstimator")
struct FollowEstimatorTests {
    static let mail = "org.example.Mail", chat = "org.example.Chat", news = "org.example.News"
    static let start = 1_700_000_000.0

    @Test func aColdAppStartsAtOneHalf() {
        let estimator = FollowEstimator()
        #expect(estimator.probability(of: Self.mail, at: Self.start) == 0.5)
    }

    /// Each row: how long after Mail's open Chat is opened, on each of 20 mornings (nil: not
    /// that morning), and the range Chat's estimate must end in. News, never opened after Mail,
    /// ends low whatever Chat does.
    @Test(arguments: [
        ([Double?](repeating: 180, count: 20), 0.85...1.0),
        ([Double?](repeating: 899, count: 20), 0.85...1.0),
        ([Double?](repeating: 901, count: 20), 0.0...0.15),
        ([Double?](repeating: nil, count: 20), 0.0...0.15),
        ((0..<20).map { $0 % 2 == 0 ? 300 : nil }, 0.35...0.65),
    ] as [([Double?], ClosedRange<Double>)])
    func learnsWhichAppsTheUserGoesOnTo(after: [Double?], expected: ClosedRange<Double>) {
        var estimator = FollowEstimator()
        var time = Self.start
        // Each app is seen once, the day before.
        for app in [Self.mail, Self.chat, Self.news] {
            estimator.recordOpen(of: app, at: time - 86_400)
            estimator.recordClose(of: app, at: time - 86_400 + 60)
        }
        for delay in after {
            estimator.recordOpen(of: Self.mail, at: time)
            estimator.recordClose(of: Self.mail, at: time + 60)
            if let delay {
                estimator.recordOpen(of: Self.chat, at: time + delay)
                estimator.recordClose(of: Self.chat, at: time + delay + 60)
            }
            time += 86_400
        }
        estimator.expire(before: time)
        let chat = estimator.probability(of: Self.chat, at: time)
        #expect(expected.contains(chat), "\(chat)")
        #expect(estimator.probability(of: Self.news, at: time) < 0.15)
    }

    /// An app in use (opened and not left) is in no trial: it cannot be opened, so its staying
    /// open teaches nothing. The app opened is in none either.
    @Test func appsInUseAndTheAppOpenedAreNotTried() {
        var estimator = FollowEstimator()
        estimator.recordOpen(of: Self.news, at: Self.start)
        estimator.recordOpen(of: Self.chat, at: Self.start + 10)
        estimator.recordClose(of: Self.chat, at: Self.start + 20)
        // Chat's trial starts at Mail's open; News is still in use.
        estimator.recordOpen(of: Self.mail, at: Self.start + 100)
        let later = Self.start + 2_000
        estimator.expire(before: later)
        estimator.recordClose(of: Self.mail, at: later)
        estimator.recordClose(of: Self.news, at: later)
        // One trial ended, Chat's, as a failure. Mail and News have no evidence of their own:
        // both stand at all apps' estimate for an app used recently, which learned Chat's
        // failure; Chat's own failure puts it below them.
        let mail = estimator.probability(of: Self.mail, at: later + 10)
        let news = estimator.probability(of: Self.news, at: later + 10)
        let chat = estimator.probability(of: Self.chat, at: Self.start + 120)
        #expect(mail == news)
        #expect(news < 0.5)
        #expect(chat < news)
    }

    /// An app left at a time not known (closed while nobody watched) is no longer in use: the
    /// next open of another app starts its trial, and it learns again.
    @Test func anAppLeftUnseenIsTriedAgain() {
        var estimator = FollowEstimator()
        estimator.recordOpen(of: Self.chat, at: Self.start)
        estimator.recordOpen(of: Self.mail, at: Self.start + 100)
        estimator.expire(before: Self.start + 2_000)
        // Chat was in use: no trial, nothing learned.
        #expect(estimator.probability(of: Self.chat, at: Self.start + 4_000) == 0.5)
        estimator.recordLeftUnseen(Self.chat)
        estimator.recordOpen(of: Self.mail, at: Self.start + 5_000)
        estimator.expire(before: Self.start + 6_000)
        #expect(estimator.probability(of: Self.chat, at: Self.start + 6_000) < 0.5)
    }

    /// An app found open (opened while nobody watched) is in use: its trial ends without a
    /// verdict, and the next open of another app starts none for it.
    @Test func anAppOpenedUnseenIsNotTried() {
        var estimator = FollowEstimator()
        estimator.recordOpen(of: Self.chat, at: Self.start)
        estimator.recordClose(of: Self.chat, at: Self.start + 60)
        estimator.recordOpen(of: Self.mail, at: Self.start + 100)  // Chat's trial starts
        estimator.recordOpenedUnseen(Self.chat)
        estimator.recordClose(of: Self.mail, at: Self.start + 200)
        estimator.recordOpen(of: Self.news, at: Self.start + 3_000)  // Mail's trial starts, not Chat's
        estimator.expire(before: Self.start + 5_000)
        // Mail failed its trial; Chat learned nothing of its own, so it stands where an app
        // never seen does, at all apps' estimate.
        let later = Self.start + 5_000
        let chat = estimator.probability(of: Self.chat, at: later)
        #expect(chat == estimator.probability(of: "org.example.Photos", at: later))
        #expect(estimator.probability(of: Self.mail, at: later) < chat)
    }

    /// The app used in the last half hour and the app not used since yesterday are told apart:
    /// Chat, which the user keeps going back to within a session but never starts a day with,
    /// is likely in the first case and not in the second.
    @Test func recentUseIsItsOwnSituation() {
        var estimator = FollowEstimator()
        var time = Self.start
        for _ in 0..<20 {
            // Mail first thing: Chat, unused since yesterday, is not opened after it.
            estimator.recordOpen(of: Self.mail, at: time)
            estimator.recordClose(of: Self.mail, at: time + 60)
            // An hour later a session: Chat, then News, then Chat again two minutes later.
            estimator.recordOpen(of: Self.chat, at: time + 3600)
            estimator.recordClose(of: Self.chat, at: time + 3660)
            estimator.recordOpen(of: Self.news, at: time + 3700)
            estimator.recordClose(of: Self.news, at: time + 3760)
            estimator.recordOpen(of: Self.chat, at: time + 3820)
            estimator.recordClose(of: Self.chat, at: time + 3880)
            time += 86_400
        }
        estimator.expire(before: time)
        let inSession = estimator.probability(of: Self.chat, at: time - 86_400 + 3760)
        let firstThing = estimator.probability(of: Self.chat, at: time)
        #expect(inSession > 0.8, "\(inSession)")
        #expect(firstThing < 0.2, "\(firstThing)")
    }

    /// A clock that goes back: an open stamped before the trial began teaches nothing.
    @Test func aClockGoingBackTeachesNothing() {
        var estimator = FollowEstimator()
        estimator.recordOpen(of: Self.chat, at: 5_000)
        estimator.recordClose(of: Self.chat, at: 5_060)
        estimator.recordOpen(of: Self.mail, at: 10_000)
        estimator.recordOpen(of: Self.chat, at: 9_500)
        #expect(estimator.probability(of: Self.chat, at: 9_600) == 0.5)
        // Nor does a trial end early.
        estimator.recordClose(of: Self.chat, at: 9_600)
        estimator.recordOpen(of: Self.news, at: 9_700)
        estimator.expire(before: 9_800)
        #expect(estimator.probability(of: Self.chat, at: 9_800) == 0.5)
        estimator.expire(before: 10_700)
        #expect(estimator.probability(of: Self.chat, at: 10_700) < 0.5)
    }
}
