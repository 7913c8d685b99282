@testable import BGPolicyCore
import Testing

/// SPEC §2: an app not used for 7 days (`[limits] inactive_after`) gets no background launches
/// until it is used again. An app the user has open is in use, however long ago it was opened,
/// and was used until the moment it was left: the refresh planner's rule counts from its last
/// open or leave, not from its last open alone.
@Suite("RefreshPlanner: inactive counts from the last use")
struct InactiveAfterUseTests {
    static let mail = "org.example.Mail"
    static let opened: Double = 1_704_672_000
    static let candidate = RefreshPlanner.Candidate(appID: mail)

    static func planner() -> RefreshPlanner {
        var planner = RefreshPlanner(registeredAppCount: 1)
        planner.inactiveAfterSeconds = 15
        planner.recordOpen(of: mail, at: opened)
        return planner
    }

    @Test func anAppInUseIsNotInactiveHoweverLongAgoItWasOpened() {
        var planner = Self.planner()
        planner.advance(to: Self.opened + 3600)
        #expect(planner.predictor.lastUse(of: Self.mail) == .infinity)
        #expect(planner.ineligibility(of: Self.candidate, at: Self.opened + 3600) == nil)
        let position = try! #require(planner.predictor.position(of: Self.mail))
        #expect(planner.predictor.probabilitiesOfActiveApps(inSlotAt: Self.opened + 3600, inactiveAfter: 15)[position] != nil)
    }

    @Test func anAppLeftIsInactiveOnlyTheLimitAfterTheLeave() {
        var planner = Self.planner()
        let left = Self.opened + 17
        planner.recordClose(of: Self.mail, at: left)
        #expect(planner.predictor.lastUse(of: Self.mail) == left)
        #expect(planner.ineligibility(of: Self.candidate, at: left + 1) == nil)
        #expect(planner.ineligibility(of: Self.candidate, at: left + 16) == .inactive(lastUse: left))
        let position = try! #require(planner.predictor.position(of: Self.mail))
        #expect(planner.predictor.probabilitiesOfActiveApps(inSlotAt: left + 1, inactiveAfter: 15)[position] != nil)
        #expect(planner.predictor.probabilitiesOfActiveApps(inSlotAt: left + 16, inactiveAfter: 15)[position] == nil)
    }

    /// Left at a time not known (closed while the agent was not watching): its last known use is its open.
    @Test func anAppLeftUnseenCountsFromItsOpen() {
        var planner = Self.planner()
        planner.recordLeftUnseen(Self.mail)
        #expect(planner.predictor.lastUse(of: Self.mail) == Self.opened)
        #expect(planner.ineligibility(of: Self.candidate, at: Self.opened + 16) == .inactive(lastUse: Self.opened))
    }

    /// A wall clock set back moves the leave with it, as it moves the opens.
    @Test func aClockSetBackMovesTheLeave() {
        var planner = Self.planner()
        planner.recordClose(of: Self.mail, at: Self.opened + 17)
        planner.wallClockStepped(by: -3600, now: Self.opened + 18 - 3600)
        #expect(planner.predictor.lastUse(of: Self.mail) == Self.opened + 17 - 3600)
    }

    /// The app's model learns for as long as `[limits] inactive_after` lets it be refreshed, not
    /// a fixed 7 days: with 30 days, the slot it was opened in keeps learning, day after day,
    /// that it holds no open; with 2 days, it stops after 2.
    @Test(arguments: [(30.0, true), (2.0, false)])
    func theModelLearnsUntilInactiveAfter(days: Double, learnsOnDayNine: Bool) throws {
        func rate(afterDays end: Double) throws -> Double {
            var planner = RefreshPlanner(registeredAppCount: 1)
            planner.inactiveAfterSeconds = days * 86_400
            // Known from the day before, so that the slot of its open on the first day is one
            // its model watches.
            planner.advance(to: Self.opened - 86_400)
            planner.recordOpen(of: Self.mail, at: Self.opened - 86_400 + 1)
            planner.recordClose(of: Self.mail, at: Self.opened - 86_400 + 60)
            planner.advance(to: Self.opened)
            planner.recordOpen(of: Self.mail, at: Self.opened + 1)
            planner.recordClose(of: Self.mail, at: Self.opened + 60)
            var time = Self.opened
            while time < Self.opened + end * 86_400 {
                time = min(time + 86_400, Self.opened + end * 86_400)
                planner.advance(to: time)
            }
            let slot = planner.predictor.slotOfDay(at: Self.opened)
            return try #require(planner.predictor.historyRate(of: Self.mail, slotOfDay: slot))
        }
        let eight = try rate(afterDays: 8.5)
        let nine = try rate(afterDays: 9.5)
        #expect((nine < eight) == learnsOnDayNine, "rate after 8.5 days \(eight), after 9.5 days \(nine)")
    }
}
