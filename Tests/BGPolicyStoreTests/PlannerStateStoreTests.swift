import BGPolicyCore
@testable import BGPolicyStore
import Testing

@Suite("TaskStore: the refresh planner's state")
struct PlannerStateStoreTests {
    static func snapshot(tokens: Double = 3.75, wakes: [Double] = [1_700_000_000.5, 1_700_003_600.25],
                         lastRefresh: [String: Double] = ["org.gnome.Maps": 1_700_003_600.25, "org.example.Feeds": 1_700_000_000.5])
        -> RefreshPlanner.Snapshot
    {
        RefreshPlanner.Snapshot(
            slotStart: 1_700_003_700, windowThreshold: 0.123456789012345, appThreshold: 0.0098765432109876,
            tokens: tokens, wakes: wakes, lastRefresh: lastRefresh,
            refreshesPaid: DecayingEvidence(trials: 31.0078125, successes: 14.00390625))
    }

    @Test("nothing stored reads as nil; a snapshot round-trips exactly")
    func roundTrip() throws {
        let store = try TaskStore.inMemory()
        #expect(try store.plannerSnapshot() == nil)
        try store.savePlannerSnapshot(Self.snapshot())
        #expect(try store.plannerSnapshot() == Self.snapshot())
    }

    @Test("a new snapshot replaces the stored one whole: wake-ups and refreshes gone from it go")
    func replace() throws {
        let store = try TaskStore.inMemory()
        try store.savePlannerSnapshot(Self.snapshot())
        let newer = Self.snapshot(tokens: 0, wakes: [1_700_003_600.25], lastRefresh: ["org.gnome.Maps": 1_700_003_600.25])
        try store.savePlannerSnapshot(newer)
        #expect(try store.plannerSnapshot() == newer)
        let empty = Self.snapshot(wakes: [], lastRefresh: [:])
        try store.savePlannerSnapshot(empty)
        #expect(try store.plannerSnapshot() == empty)
    }

    @Test("a snapshot survives closing and reopening the file")
    func persistence() throws {
        let scratch = try ScratchDirectory()
        defer { scratch.remove() }
        let path = scratch.path + "/tasks.db"
        do {
            let store = try TaskStore(path: path)
            try store.savePlannerSnapshot(Self.snapshot())
        }
        #expect(try TaskStore(path: path).plannerSnapshot() == Self.snapshot())
    }

    @Test("a file made before the planner's state was stored migrates, and has none")
    func migrateFromV4() throws {
        let scratch = try ScratchDirectory()
        defer { scratch.remove() }
        let path = scratch.path + "/state.sqlite"
        try TaskStore.createFile(path: path, migratedUpTo: "v4-session-started-units", sql: """
            INSERT INTO apps (app_id, identity, registered_at) VALUES ('org.gnome.Maps', 'flatpak', 10);
            """)
        let store = try TaskStore(path: path)
        #expect(try store.plannerSnapshot() == nil)
        #expect(try store.apps().map(\.appID) == [Sample.maps])
        try store.savePlannerSnapshot(Self.snapshot())
        #expect(try store.plannerSnapshot() == Self.snapshot())
    }

    @Test("a snapshot stored before what the refreshes paid was kept reads as none paid yet")
    func migrateFromV6() throws {
        let scratch = try ScratchDirectory()
        defer { scratch.remove() }
        let path = scratch.path + "/state.sqlite"
        try TaskStore.createFile(path: path, migratedUpTo: "v6-cpu-enforcement", sql: """
            INSERT INTO planner_state (id, slot_start, window_threshold, app_threshold, tokens)
                VALUES (1, 1700003700, 0.25, 0.5, 4);
            INSERT INTO planner_wakes (time) VALUES (1700000000.5);
            """)
        let store = try TaskStore(path: path)
        var expected = RefreshPlanner.Snapshot(
            slotStart: 1_700_003_700, windowThreshold: 0.25, appThreshold: 0.5, tokens: 4, wakes: [1_700_000_000.5],
            lastRefresh: [:])
        #expect(try store.plannerSnapshot() == expected)
        #expect(expected.refreshesPaid == DecayingEvidence())
        expected.refreshesPaid = DecayingEvidence(trials: 2, successes: 1)
        try store.savePlannerSnapshot(expected)
        #expect(try store.plannerSnapshot() == expected)
    }

    @Test("a full disk throws .full and keeps the snapshot stored before")
    func fullDisk() throws {
        let scratch = try ScratchDirectory()
        defer { scratch.remove() }
        let store = try TaskStore(path: scratch.path + "/tasks.db")
        try store.savePlannerSnapshot(Self.snapshot())
        try store.capFileSize(extraPages: 0)
        // More refreshes than the page left can hold.
        var many: [String: Double] = [:]
        for k in 0..<2_000 { many["org.example.App\(k)"] = 1_700_000_000 + Double(k) }
        #expect {
            try store.savePlannerSnapshot(Self.snapshot(lastRefresh: many))
        } throws: { error in
            if case .full = error as? StoreError { true } else { false }
        }
        #expect(try store.plannerSnapshot() == Self.snapshot())
    }
}
