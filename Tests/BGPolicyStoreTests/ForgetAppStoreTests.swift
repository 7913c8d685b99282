import BGPolicyCore
@testable import BGPolicyStore
import Testing

/// `TaskStore.forgetApp`: every row that names the app goes, in one transaction; the other
/// apps' rows stay.
@Suite("TaskStore: forgetting an app")
struct ForgetAppStoreTests {
    static let mapsUnit = "app-flatpak-org.gnome.Maps-1234.scope"
    static let feedsUnit = "app-flatpak-org.example.Feeds-99.scope"

    /// Something of `appID` in every per-app table (and a session unit of it).
    static func fill(_ store: TaskStore, _ appID: AppID, at time: UnixTime) throws {
        try store.saveApp(Sample.app(appID))
        try store.savePending(Sample.request(appID, "\(appID).refresh"))
        try store.startTasks(
            [Sample.running("t-\(appID)", appID, "\(appID).cleanup")],
            history: [Sample.entry(.delivered, at: time, app: appID)])
        try store.append(Sample.entry(.expired, at: time + 1, app: appID))
        try store.saveContentWake(
            ContentWakeRecord(appID: appID, payload: [1], payloadEncoding: "test", receivedAt: time, firstReceivedAt: time,
                              notificationCount: 1),
            bucket: ContentAvailableBucket(charges: [time]))
        try store.recordEnforcement(EnforcementRecord(
            sliceID: "slice-\(appID)", appID: appID.rawValue, action: .throttled(unit: "app-\(appID).scope", quotaBefore: nil), since: time))
        // An old open (folded into the aggregates) and recent ones (raw).
        try store.appendUsage(appID: appID, state: .foreground, at: time - 100 * 86_400)
        try store.pruneUsage(olderThan: time - 60 * 86_400)
        try store.appendUsage(appID: appID, state: .foreground, at: time)
        try store.appendUsage(appID: appID, state: .background, at: time + 60)
    }

    static func plannerSnapshot(lastRefresh: [String: Double]) -> RefreshPlanner.Snapshot {
        RefreshPlanner.Snapshot(
            slotStart: 1_700_000_000, windowThreshold: 0.3, appThreshold: 0.02, tokens: 2.5, wakes: [1_699_999_000],
            lastRefresh: lastRefresh)
    }

    static let now: UnixTime = 1_700_000_000

    @Test func everythingOfTheAppGoesAndTheOtherAppsStay() throws {
        let store = try TaskStore.inMemory()
        try Self.fill(store, Sample.maps, at: Self.now)
        try Self.fill(store, Sample.feeds, at: Self.now)
        try store.append(Sample.entry(.globalDisabled, at: Self.now, app: nil))
        try store.setSessionStartedUnits([Self.feedsUnit, Self.mapsUnit])
        try store.savePlannerSnapshot(Self.plannerSnapshot(lastRefresh: [Sample.maps.rawValue: 1, Sample.feeds.rawValue: 2]))
        let feedsBefore = try Self.everything(of: Sample.feeds, in: store)

        let forgotten = try store.forgetApp(
            Sample.maps, plannerSnapshot: Self.plannerSnapshot(lastRefresh: [Sample.feeds.rawValue: 2]))

        var expected = ForgottenRows()
        expected.registration = 1
        expected.identifiers = 2
        expected.pending = 1
        expected.running = 1
        expected.history = 2
        expected.usageEvents = 2
        expected.usageAggregates = 2
        expected.contentWakes = 1
        expected.contentBuckets = 1
        expected.cpuEnforcements = 1
        expected.plannerRefreshes = 0  // the snapshot given replaced the stored one first
        expected.sessionUnits = 1
        #expect(forgotten == expected)
        #expect(forgotten.total == 15)

        // Nothing names it any more, in any table.
        for (table, rows) in try store.rowsNaming(Sample.maps) {
            #expect(rows.isEmpty, "\(table) still has rows of the forgotten app")
        }
        #expect(try store.sessionStartedUnits() == [Self.feedsUnit])
        let summary = try store.usageSummary(appID: Sample.maps, now: Self.now + 100)
        #expect(summary == UsageSummary(appID: Sample.maps), "the predictor's summary of it is a new app's")
        #expect(try store.plannerSnapshot()?.lastRefresh == [Sample.feeds.rawValue: 2])
        // The other app, and the history of no app, are as they were.
        #expect(try Self.everything(of: Sample.feeds, in: store) == feedsBefore)
        #expect(try store.history(since: 0, limit: 100).contains { $0.event == .globalDisabled && $0.appID == nil })
    }

    @Test func withoutASnapshotThePlannersRowOfTheAppGoes() throws {
        let store = try TaskStore.inMemory()
        try store.saveApp(Sample.app(Sample.maps))
        try store.savePlannerSnapshot(Self.plannerSnapshot(lastRefresh: [Sample.maps.rawValue: 1, Sample.feeds.rawValue: 2]))
        let forgotten = try store.forgetApp(Sample.maps)
        #expect(forgotten.plannerRefreshes == 1 && forgotten.registration == 1)
        #expect(try store.plannerSnapshot() == Self.plannerSnapshot(lastRefresh: [Sample.feeds.rawValue: 2]))
    }

    @Test func anAppNeverStoredForgetsNothing() throws {
        let store = try TaskStore.inMemory()
        try Self.fill(store, Sample.feeds, at: Self.now)
        #expect(try store.forgetApp(Sample.maps) == ForgottenRows())
        #expect(try store.apps().map(\.appID) == [Sample.feeds])
    }

    @Test func aFailureForgetsNothing() throws {
        let store = try TaskStore.inMemory()
        try Self.fill(store, Sample.maps, at: Self.now)
        try store.setSessionStartedUnits([Self.mapsUnit])
        let snapshot = Self.plannerSnapshot(lastRefresh: [Sample.maps.rawValue: 1])
        try store.savePlannerSnapshot(snapshot)
        let before = try Self.everything(of: Sample.maps, in: store)
        // The last table emptied fails (as a write on a full disk would), after every other
        // delete and the snapshot's replacement were made in the transaction.
        let last = try #require(TaskStore.perAppTables.last?.table)
        try store.execute(sql: """
            CREATE TRIGGER refuse BEFORE DELETE ON \(last) BEGIN SELECT RAISE(ABORT, 'database or disk is full'); END
            """)
        #expect(throws: StoreError.self) {
            try store.forgetApp(Sample.maps, plannerSnapshot: Self.plannerSnapshot(lastRefresh: [:]))
        }
        #expect(try Self.everything(of: Sample.maps, in: store) == before)
        #expect(try store.plannerSnapshot() == snapshot)
        #expect(try store.sessionStartedUnits() == [Self.mapsUnit])
        // Once it can, it forgets it all.
        try store.execute(sql: "DROP TRIGGER refuse")
        #expect(try store.forgetApp(Sample.maps).registration == 1)
        #expect(try Self.everything(of: Sample.maps, in: store) == Self.everything(of: AppID("org.example.Nobody"), in: store))
    }

    @Test func aFullDiskForgetsNothing() throws {
        let scratch = try ScratchDirectory()
        defer { scratch.remove() }
        let store = try TaskStore(path: scratch.path + "/tasks.db")
        try Self.fill(store, Sample.maps, at: Self.now)
        let before = try Self.everything(of: Sample.maps, in: store)
        try store.capFileSize(extraPages: 0)
        // A snapshot bigger than the room left: the transaction's first write fails.
        var many: [String: Double] = [:]
        for k in 0..<2_000 { many["org.example.App\(k)"] = Self.now + Double(k) }
        #expect {
            try store.forgetApp(Sample.maps, plannerSnapshot: Self.plannerSnapshot(lastRefresh: many))
        } throws: { error in
            if case .full = error as? StoreError { true } else { false }
        }
        #expect(try Self.everything(of: Sample.maps, in: store) == before)
    }

    @Test func perAppTablesNamesEveryTableWithAnAppColumn() throws {
        let store = try TaskStore.inMemory()
        #expect(try store.tablesWithAnAppColumn() == TaskStore.perAppTables.map(\.table).sorted())
    }

    static func everything(of appID: AppID, in store: TaskStore) throws -> [String: [String]] {
        try store.rowsNaming(appID)
    }
}
