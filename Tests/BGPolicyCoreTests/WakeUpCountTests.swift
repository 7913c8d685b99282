@testable import BGPolicyCore
import Testing

/// The refresh planner holds its wake-ups near `targetWakesPerDay` by counting every one, and
/// makes each serve more by adding to a window that opens anyway.
@Suite("Wake-up count")
struct WakeUpCountTests {
    /// Monday 2024-01-08 00:00:00 UTC.
    static let monday = 1_704_672_000.0
    static let mail = "org.example.Mail", news = "org.example.News"

    /// Two apps used every day for three weeks: Mail at 09:05, News at 19:35.
    static func planner() -> RefreshPlanner {
        var planner = RefreshPlanner(registeredAppCount: 2)
        for day in 0..<21 {
            planner.recordOpen(of: mail, at: monday + Double(day) * 86_400 + 9 * 3600 + 300)
            planner.recordOpen(of: news, at: monday + Double(day) * 86_400 + 19 * 3600 + 2100)
        }
        return planner
    }

    /// Eight slots after 10:00 on day 21, each with windows at the given offsets into the slot
    /// (one app each, alternating), then the slot after them begun.
    static func threshold(afterWindowsAt offsets: [Double]) -> Double {
        var planner = planner()
        let start = monday + 21 * 86_400 + 10 * 3600
        for slot in 0..<8 {
            for (k, offset) in offsets.enumerated() {
                let time = start + Double(slot) * 900 + offset
                planner.advance(to: time)
                planner.recordWindow(at: time, refreshed: [k % 2 == 0 ? mail : news])
            }
        }
        planner.advance(to: start + 8 * 900)
        return planner.windowThreshold
    }

    /// The threshold rises by a step for each wake-up, so three a slot raise it twice as many
    /// steps more than one a slot; refreshes within 60 s of a wake-up's first are that wake-up.
    @Test func everyWakeUpCountsTowardTheTarget() {
        let one = Self.threshold(afterWindowsAt: [0])
        let three = Self.threshold(afterWindowsAt: [0, 300, 600])
        let threeAtOnce = Self.threshold(afterWindowsAt: [0, 30, 59])
        let expected = one * ReplayMath.exp(RefreshPlanner.thresholdStep * 2 * 8)
        #expect(abs(three / expected - 1) < 1e-9, "one \(one), three \(three)")
        #expect(abs(threeAtOnce / one - 1) < 1e-9, "one \(one), three within a minute \(threeAtOnce)")
    }

    /// At 08:30 an open in the slot is too unlikely for a window of its own, but a window that
    /// opens anyway (after an open or after use) takes Mail, for its open at 09:05, as a grid
    /// window would: the window's worth is not weighed again. It is the same wake-up.
    @Test func aWindowThatOpensAnywayTakesWhatAGridWindowWould() {
        var planner = Self.planner()
        let at = Self.monday + 21 * 86_400 + 8 * 3600 + 1800
        planner.advance(to: at)
        let mail = RefreshPlanner.Candidate(appID: Self.mail)
        #expect(planner.choose(at: at, among: [mail], opportunistic: true).isEmpty)
        #expect(planner.chooseAlongside(at: at, among: [mail]) == [Self.mail])
        // Not when Mail is not eligible: refreshed 5 minutes ago.
        var refreshed = planner
        refreshed.recordWindow(at: at - 300, refreshed: [Self.mail])
        #expect(refreshed.chooseAlongside(at: at, among: [mail]).isEmpty)
        // A window of News' and Mail alongside it are one wake-up, counted once.
        var joined = planner
        joined.recordWindow(at: at, refreshed: [Self.news])
        joined.recordWindow(at: at, refreshed: [Self.mail])
        var alone = planner
        alone.recordWindow(at: at, refreshed: [Self.news])
        joined.advance(to: at + 900)
        alone.advance(to: at + 900)
        #expect(joined.windowThreshold == alone.windowThreshold)
    }
}
