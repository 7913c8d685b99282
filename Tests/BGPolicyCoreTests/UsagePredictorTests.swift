@testable import BGPolicyCore
import Testing

@Suite("UsagePredictor")
struct UsagePredictorTests {
    static let day: Double = 86_400
    /// Monday 2024-01-01 00:00 UTC.
    static let monday: Double = 1_704_067_200

    /// Feeds opens (sorted) and closes every 15-min slot up to `end`, as the replay does.
    static func feed(_ predictor: inout UsagePredictor, opens: [(Double, String)], from start: Double, to end: Double) {
        var index = 0
        var slot = start
        while slot <= end {
            while index < opens.count, opens[index].0 < slot {
                predictor.recordOpen(of: opens[index].1, at: opens[index].0)
                index += 1
            }
            predictor.startSlot(at: slot)
            slot += 900
        }
    }

    @Test func aColdAppHasThePrior() {
        let predictor = UsagePredictor()
        #expect(predictor.probability(of: "org.example.New", inSlotAt: Self.monday) == UsagePredictor.priorPerSlot)
        #expect(abs(predictor.probabilityOfAnyOpen(inSlotAt: Self.monday) - 1.0 / 6) < 1e-12)
        #expect(predictor.appIDs.isEmpty)
    }

    @Test func learnsTheHourAnAppIsOpened() {
        // Opened every day at 08:05 for three weeks.
        var predictor = UsagePredictor()
        let opens = (0..<21).map { (Self.monday + Double($0) * Self.day + 8 * 3600 + 300, "org.example.News") }
        Self.feed(&predictor, opens: opens, from: Self.monday, to: Self.monday + 21 * Self.day)
        let morning = predictor.probability(of: "org.example.News", inSlotAt: Self.monday + 21 * Self.day + 8 * 3600)
        let evening = predictor.probability(of: "org.example.News", inSlotAt: Self.monday + 21 * Self.day + 20 * 3600)
        #expect(morning > 3 * evening, "morning \(morning), evening \(evening)")
        #expect(morning > UsagePredictor.priorPerSlot)
    }

    @Test func learnsTheQuarterHourOfARoutine() {
        // Opened every day at 08:40 for three weeks: of the four slots of that hour, the one
        // holding 08:40 (08:30–08:45) stands out. The hour's features are the same in all four,
        // and so is the app's recency in the first three (the last open 23 to 24 hours before),
        // so only the slot of the day tells those apart (08:45 is just over a day after it).
        var predictor = UsagePredictor()
        let opens = (0..<21).map { (Self.monday + Double($0) * Self.day + 8 * 3600 + 2400, "org.example.Mail") }
        let hour = Self.monday + 21 * Self.day + 8 * 3600
        Self.feed(&predictor, opens: opens, from: Self.monday, to: hour - 900)
        let slots = (0..<4).map { predictor.probability(of: "org.example.Mail", inSlotAt: hour + Double($0) * 900) }
        for other in [0, 1, 3] {
            #expect(slots[2] > 2 * slots[other], "08:30 \(slots[2]) against \(slots[other]) in slot \(other)")
        }
        // In another time zone the routine keeps its local minutes.
        var east = UsagePredictor(utcOffsetSeconds: 3600)
        let local = opens.map { ($0.0 - 3600, $0.1) }
        Self.feed(&east, opens: local, from: Self.monday, to: hour - 3600 - 900)
        let shifted = (0..<4).map { east.probability(of: "org.example.Mail", inSlotAt: hour - 3600 + Double($0) * 900) }
        for other in [0, 1, 3] {
            #expect(shifted[2] > 2 * shifted[other], "08:30 local \(shifted[2]) against \(shifted[other]) in slot \(other)")
        }
    }

    @Test func learnsThatOneOpenFollowsAnother() {
        // Sessions: every day at 09:00, 13:00 and 19:00 an open, and another 20 minutes later.
        var opens: [(Double, String)] = []
        for d in 0..<21 {
            for hour in [9.0, 13, 19] {
                let t = Self.monday + Double(d) * Self.day + hour * 3600 + 120
                opens += [(t, "org.example.Chat"), (t + 1200, "org.example.Mail")]
            }
        }
        var predictor = UsagePredictor()
        Self.feed(&predictor, opens: opens, from: Self.monday, to: Self.monday + 21 * Self.day + 16 * 3600)
        // At 16:00 of day 22 nothing happened for hours; just after an open at 16:02 the next
        // slots are likelier than the same slots with the user idle.
        let idle = predictor.probabilityOfAnyOpen(inSlotAt: Self.monday + 21 * Self.day + 16 * 3600 + 900)
        predictor.recordOpen(of: "org.example.Chat", at: Self.monday + 21 * Self.day + 16 * 3600 + 120)
        let active = predictor.probabilityOfAnyOpen(inSlotAt: Self.monday + 21 * Self.day + 16 * 3600 + 900)
        #expect(active > 2 * idle, "active \(active), idle \(idle)")
    }

    @Test func weekendsDifferFromWeekdays() {
        // Opened at 10:00 on weekdays only, for four weeks.
        var opens: [(Double, String)] = []
        for d in 0..<28 where d % 7 < 5 {
            opens.append((Self.monday + Double(d) * Self.day + 10 * 3600 + 60, "org.example.Work"))
        }
        var predictor = UsagePredictor()
        Self.feed(&predictor, opens: opens, from: Self.monday, to: Self.monday + 28 * Self.day)
        let weekday = predictor.probability(of: "org.example.Work", inSlotAt: Self.monday + 28 * Self.day + 10 * 3600)
        let saturday = predictor.probability(of: "org.example.Work", inSlotAt: Self.monday + 33 * Self.day + 10 * 3600)
        #expect(weekday > 2 * saturday, "weekday \(weekday), saturday \(saturday)")
    }
}
