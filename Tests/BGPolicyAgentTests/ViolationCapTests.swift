@testable import BGPolicyAgent
import BGPolicyCore
import BGPolicyStore
import Glibc
import Testing

/// The agent kept every violation of the last 7 days in memory, while the store keeps only the
/// newest `TaskStore.historyPerAppLimit` of an app's: an app that lets 16 background tasks
/// expire every 30 s makes some 46,000 a day, each evaluation of it read them all
/// (`penaltyEnd`), and a restart read back fewer than the running agent counted, so its penalty
/// could differ. Now the running agent keeps as many as the store.
@Suite("An app's violations in memory are capped as in the store")
struct ViolationCapTests {
    @Test func theNewestAreKept() async throws {
        let harness = try await TestEngine(store: try TaskStore.inMemory())
        defer { harness.close() }
        let appID = try await harness.appThatLeft("org.example.Expirer")
        let limit = TaskStore.historyPerAppLimit
        // 50 more than the store keeps, 10 s apart, all within the last 7 days.
        let now = Double(time(nil))
        let times = (0..<(limit + 50)).map { now - 10 * Double(limit + 50 - 1 - $0) }
        await harness.engine.noteViolations(of: appID, at: times)

        let counted = await harness.engine.recentViolations(of: appID, at: now)
        #expect(counted.count == limit)
        #expect(counted.times.first == times[50] && counted.last == times.last)
        // The penalty is the newest's (one second per violation here), as a restart that reads
        // back the newest `limit` has it.
        #expect(counted.penaltyEnd { Double($0) } == now + Double(limit))
        let asARestartReadsThem = counted == RecentViolations(times.suffix(limit), now: now)
        #expect(asARestartReadsThem)
    }
}

extension TaskEngine {
    fileprivate func noteViolations(of appID: AppID, at times: [UnixTime]) {
        for time in times { noteViolation(of: appID, at: time, kind: .overrun) }
    }
}
