@testable import BGPolicyAgent
import BGPolicyCore
import BGPolicyStore
import Glibc
import Testing

/// What the engine learns from the usage log and the apps' records at start: which apps the
/// user still has open.
@Suite("Apps in use at start")
struct WarmPlannerTests {
    /// An app left (its unit went) keeps the leave as its last use, at the time of the close
    /// the log holds. An app with no open in the log has its last use counted as one (a
    /// database from before registrations were logged), and that open, of the same time as the
    /// close, sorted after it: a restart held the app in use, and the windows after an open
    /// skipped it, until the user opened and left it again (one start in three, in
    /// test_usage_log.py).
    @Test func aLastUseThatIsTheLogsLastCloseIsNoOpen() async throws {
        let store = try TaskStore.inMemory()
        let now = UnixTime(time(nil))
        let left = try #require(AppID(rawValue: "org.kde.konsole"))
        let old = try #require(AppID(rawValue: "org.example.Old"))
        try store.saveApp(AppRecord(
            appID: left, identifiers: ["org.kde.konsole.refresh"], identity: .unverified, registeredAt: now - 600,
            lastUsedAt: now - 60))
        try store.appendUsage(appID: left, state: .background, at: now - 60)
        // Its last use, with nothing logged: an open, as before.
        try store.saveApp(AppRecord(
            appID: old, identifiers: ["org.example.Old.refresh"], identity: .unverified, registeredAt: now - 900,
            lastUsedAt: now - 120))
        let harness = try await TestEngine(store: store)
        defer { harness.close() }
        #expect(await harness.engine.appsInUse == [old])
    }
}
