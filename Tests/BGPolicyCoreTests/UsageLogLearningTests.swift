import BGPolicyCore
import Testing

/// The agent learns its usage log again at every start (`RefreshPlanner.learn`): what it learns
/// must be what the running agent learned from the same events.
@Suite("RefreshPlanner.learn: the usage log at start")
struct UsageLogLearningTests {
    /// Monday 2024-01-08 00:00:00 UTC.
    static let monday: Double = 1_704_672_000
    static let day: Double = 86_400
    static let mail = "org.example.Mail"

    static func planner() -> RefreshPlanner {
        RefreshPlanner(slotSeconds: 900, utcOffsetSeconds: 0, registeredAppCount: 1)
    }

    /// Mail, opened at 09:00, left at 09:10, opened again at 09:15 and left at 09:30, every day
    /// for two weeks; with `strays`, the log also has a close of Mail at 12:00 each day, when it
    /// is not in use (the end of a launch the agent made, or Mail saying it is in the background).
    static func twoWeeks(strays: Bool) -> [UsageEvent] {
        var log: [UsageEvent] = []
        for d in 0..<14 {
            let nine = monday + Double(d) * day + 9 * 3600
            log += [
                .init(time: nine, appID: mail, kind: .open), .init(time: nine + 600, appID: mail, kind: .close),
                .init(time: nine + 900, appID: mail, kind: .open), .init(time: nine + 1800, appID: mail, kind: .close),
            ]
            if strays { log.append(.init(time: nine + 3 * 3600, appID: mail, kind: .close)) }
        }
        return log
    }

    /// A close of an app not in use is no leave, as for the running agent (`noteLeft`): learned
    /// as one, each started a trial of the user coming back that failed, and every restart
    /// lowered the app's chance of a refresh after use.
    @Test func aCloseOfAnAppNotInUseIsNoLeave() {
        var clean = Self.planner(), stray = Self.planner()
        let end = Self.monday + 14 * Self.day
        #expect(clean.learn(Self.twoWeeks(strays: false), localOffset: { _ in 0 }).isEmpty)
        #expect(stray.learn(Self.twoWeeks(strays: true), localOffset: { _ in 0 }).isEmpty)
        clean.advance(to: end)
        stray.advance(to: end)
        #expect(clean.reuseProbability(of: Self.mail) > 0.3)
        #expect(stray.reuseProbability(of: Self.mail) == clean.reuseProbability(of: Self.mail))
    }

    @Test func theAppsLeftInUseAreThoseOpenedAndNotLeft() {
        var planner = Self.planner()
        let log: [UsageEvent] = [
            .init(time: Self.monday, appID: Self.mail, kind: .open),
            .init(time: Self.monday + 60, appID: "org.example.News", kind: .open),
            .init(time: Self.monday + 120, appID: Self.mail, kind: .close),
            .init(time: Self.monday + 180, appID: "org.example.Maps", kind: .close),
        ]
        #expect(planner.learn(log, localOffset: { _ in 0 }) == ["org.example.News"])
    }

    /// Mail opened at 08:00 local time every day for three weeks, across the change to summer
    /// time at the end of the second (UTC+1, then UTC+2: 07:00 UTC, then 06:00 UTC). Learned
    /// with each event's offset, 08:00 is the habit; learned with today's offset alone, as at
    /// start before, the first two weeks taught 09:00, and 09:00 came out likelier.
    @Test func eachEventIsLearnedInTheLocalTimeOfItsDay() {
        let change = Self.monday + 14 * Self.day
        func offset(_ t: Double) -> Double { t < change ? 3600 : 7200 }
        let log = (0..<21).map { d -> UsageEvent in
            let midnight = Self.monday + Double(d) * Self.day
            return .init(time: midnight + 8 * 3600 - offset(midnight), appID: Self.mail, kind: .open)
        }
        let end = Self.monday + 21 * Self.day
        let eight = end + 8 * 3600 - 7200, nine = eight + 3600

        var followed = Self.planner()
        _ = followed.learn(log, localOffset: offset)
        #expect(followed.utcOffsetSeconds == 7200)
        followed.advance(to: end)
        let atEight = followed.predictor.probability(of: Self.mail, inSlotAt: eight)
        let atNine = followed.predictor.probability(of: Self.mail, inSlotAt: nine)
        #expect(atEight > 2 * atNine, "08:00 \(atEight), 09:00 \(atNine)")

        var fixed = Self.planner()
        _ = fixed.learn(log, localOffset: { _ in 7200 })
        fixed.advance(to: end)
        let fixedEight = fixed.predictor.probability(of: Self.mail, inSlotAt: eight)
        let fixedNine = fixed.predictor.probability(of: Self.mail, inSlotAt: nine)
        #expect(fixedNine > fixedEight, "with one offset for all: 08:00 \(fixedEight), 09:00 \(fixedNine)")
    }
}
