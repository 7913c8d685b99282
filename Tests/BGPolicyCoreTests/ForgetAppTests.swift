@testable import BGPolicyCore
import Testing

/// Forgetting an app (`Admin1.ForgetApp`): the planner keeps nothing of it. It stops counting
/// toward the refresh pool, its model goes (the other apps' are untouched, though their columns
/// move), and known again it starts cold, as an app never seen does.
@Suite("Forgetting an app in the refresh planner")
struct ForgetAppTests {
    static let day: Double = 86_400
    static let monday = WakeUpCountTests.monday
    static let mail = "org.example.Mail"
    static let news = "org.example.News"
    static let notes = "org.example.Notes"

    /// Three apps registered and used for two weeks: Mail at 08:05 and News at 12:35 every day,
    /// Notes every 4 hours from 10:10, each left 10 minutes after it was opened. Mail is the first model
    /// (opened first), so forgetting it moves the others' columns.
    static func usedPlanner() -> RefreshPlanner {
        var planner = RefreshPlanner(registeredAppCount: 3)
        var events: [(Double, String, Bool)] = []
        for day in 0..<14 {
            let start = monday + Double(day) * Self.day
            events.append((start + 8 * 3600 + 300, mail, true))
            events.append((start + 12 * 3600 + 2100, news, true))
            for hour in stride(from: 10, to: 24, by: 4) { events.append((start + Double(hour) * 3600 + 600, notes, true)) }
        }
        events += events.map { ($0.0 + 600, $0.1, false) }
        events.sort { $0.0 < $1.0 }
        for (time, app, opened) in events {
            if opened { planner.recordOpen(of: app, at: time) } else { planner.recordClose(of: app, at: time) }
        }
        planner.advance(to: monday + 14 * day + 6 * 3600)
        return planner
    }

    @Test func aForgottenAppNoLongerCountsTowardThePool() {
        var planner = Self.usedPlanner()
        #expect(abs(planner.budgetPerDay - 6.6) < 1e-9)
        #expect(abs(planner.budgetLeft - 6.6) < 1e-9, "two weeks fill the pool to its cap")
        // The agent's order: the registrations without it, then the planner forgets it.
        planner.registeredAppCount = 2
        planner.forget(Self.mail)
        #expect(planner.predictor.appIDs == [Self.news, Self.notes])
        #expect(abs(planner.budgetPerDay - 4.4) < 1e-9)
        #expect(abs(planner.budgetLeft - 4.4) < 1e-9, "what is left is cut to the new cap")
        // Without the forget, the predictor's model alone keeps it counted.
        var kept = Self.usedPlanner()
        kept.registeredAppCount = 2
        #expect(abs(kept.budgetPerDay - 6.6) < 1e-9)
    }

    @Test func theOtherAppsPredictionsAreUntouched() {
        var planner = Self.usedPlanner()
        let at = Self.monday + 14 * Self.day + 12 * 3600 + 1800
        let before = [Self.news, Self.notes].map { planner.predictor.probability(of: $0, inSlotAt: at) }
        let reuseBefore = [Self.news, Self.notes].map { planner.reuseProbability(of: $0) }
        let followBefore = [Self.news, Self.notes].map { planner.followProbability(of: $0, at: at) }
        planner.registeredAppCount = 2
        planner.forget(Self.mail)
        #expect([Self.news, Self.notes].map { planner.predictor.probability(of: $0, inSlotAt: at) } == before)
        #expect([Self.news, Self.notes].map { planner.reuseProbability(of: $0) } == reuseBefore)
        #expect([Self.news, Self.notes].map { planner.followProbability(of: $0, at: at) } == followBefore)
        // The moved columns are still where a decision finds them: every app's chance in one
        // pass (by position) is the chance asked by id.
        let all = planner.predictor.probabilitiesOfActiveApps(inSlotAt: at, inactiveAfter: 7 * Self.day)
        for app in [Self.news, Self.notes] {
            let position = try! #require(planner.predictor.position(of: app))
            #expect(all[position] == planner.predictor.probability(of: app, inSlotAt: at))
        }
        // And it goes on learning: two more days of slots, with opens.
        planner.recordOpen(of: Self.news, at: at + 60)
        planner.advance(to: at + 2 * Self.day)
        #expect(planner.predictor.appIDs == [Self.news, Self.notes])
    }

    @Test func knownAgainItStartsColdAsANewAppDoes() throws {
        var planner = Self.usedPlanner()
        let now = Self.monday + 14 * Self.day + 6 * 3600
        let morning = now + 2 * 3600
        #expect(planner.predictor.probability(of: Self.mail, inSlotAt: morning) > 4 * UsagePredictor.priorPerSlot)
        planner.recordWindow(at: now, refreshed: [Self.mail])
        planner.registeredAppCount = 2
        planner.forget(Self.mail)
        #expect(planner.predictor.probability(of: Self.mail, inSlotAt: morning) == UsagePredictor.priorPerSlot)
        #expect(planner.predictor.lastOpen(of: Self.mail) == nil)
        #expect(planner.snapshot()?.lastRefresh[Self.mail] == nil)
        // Registered again: it brings its share, as a new app does.
        let left = planner.budgetLeft
        planner.registeredAppCount = 3
        #expect(abs(planner.budgetLeft - min(left + 1.1, 6.6)) < 1e-9)
        // Opened again, alongside an app never seen, at the same moment: the two look alike.
        planner.recordOpen(of: Self.mail, at: now + 60)
        planner.recordOpen(of: "org.example.Unseen", at: now + 60)
        planner.advance(to: now + 900)
        let mail = planner.predictor.probability(of: Self.mail, inSlotAt: morning)
        let unseen = planner.predictor.probability(of: "org.example.Unseen", inSlotAt: morning)
        #expect(abs(mail - unseen) < 1e-12, "mail \(mail), an app never seen \(unseen)")
        #expect(planner.reuseProbability(of: Self.mail) == planner.reuseProbability(of: "org.example.Unseen"))
        // Its refresh an hour ago is forgotten too: nothing holds its next.
        #expect(planner.ineligibility(of: .init(appID: Self.mail), at: now + 600) == nil)
    }

    @Test func forgettingAnAppNeverSeenChangesNothing() {
        var planner = Self.usedPlanner()
        let before = planner.snapshot()
        planner.forget("org.example.Nobody")
        #expect(planner.snapshot() == before)
        #expect(planner.predictor.appIDs == [Self.mail, Self.news, Self.notes])
    }

    @Test func theTablesDropAColumnAndKeepTheOthers() {
        var table = LogisticTable(featureCount: 3)
        for k in 0..<3 { _ = table.append(startingFrom: [Double(k), Double(k) + 0.5, Double(k) + 0.25]) }
        table.remove(column: 1)
        #expect(table.count == 2)
        #expect(table.score([0, 1, 2], column: 0) == 0.75)
        #expect(table.score([0, 1, 2], column: 1) == 6.75)
        // The freed column is as one never used: a new model starting from zeros scores zero.
        let column = table.append(startingFrom: [0, 0, 0])
        #expect(column == 2 && table.score([0, 1, 2], column: 2) == 0)

        var history = SlotHistoryTable(slotsPerDay: 2)
        for _ in 0..<3 { _ = history.append() }
        history.learn(column: 0, slot: 1, opened: true)
        history.learn(column: 2, slot: 1, opened: false)
        history.remove(column: 0)
        #expect(history.count == 2)
        #expect(history.rate(column: 0, slot: 1) == nil)
        #expect(history.rate(column: 1, slot: 1) == 0)
        #expect(history.append() == 2 && history.rate(column: 2, slot: 1) == nil && history.bin(column: 2, slot: 1) == 0)
    }
}
