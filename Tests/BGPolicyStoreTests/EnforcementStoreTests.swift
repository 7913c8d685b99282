import BGPolicyCore
@testable import BGPolicyStore
import Testing

@Suite("TaskStore: the CPU monitor's enforcement left to undo")
struct EnforcementStoreTests {
    static let records = [
        EnforcementRecord(sliceID: "s1", appID: "org.example.Burner", action: .throttled(unit: "app-gnome-org.example.Burner-42.scope", quotaBefore: 500_000), since: 100),
        EnforcementRecord(sliceID: "s2", appID: "org.example.Frozen", action: .frozen(unit: "app-org.example.Frozen@1.service"), since: 200.5),
        EnforcementRecord(sliceID: "s3", appID: "org.example.Stopped", action: .stopped(pid: 4242, processStarted: 1234.56), since: 300),
    ]

    @Test("each kind round-trips, oldest first; an undone one is forgotten")
    func roundTrip() throws {
        let store = try TaskStore.inMemory()
        #expect(try store.enforcementsLeft() == [])
        for record in Self.records.reversed() { try store.recordEnforcement(record) }
        #expect(try store.enforcementsLeft() == Self.records)
        try store.removeEnforcement(sliceID: "s2")
        #expect(try store.enforcementsLeft() == [Self.records[0], Self.records[2]])
        try store.removeEnforcement(sliceID: "s-unknown")
        #expect(try store.enforcementsLeft().count == 2)
    }

    @Test("a throttle keeps the quota its unit had before: a limit, none (UInt64.max), or not known")
    func quotaBefore() throws {
        let store = try TaskStore.inMemory()
        let records = [UInt64(500_000), UInt64.max, UInt64(1) << 63, nil].enumerated().map { index, quota in
            EnforcementRecord(
                sliceID: "s\(index)", appID: "org.example.Burner",
                action: .throttled(unit: "app-org.example.Burner@\(index).service", quotaBefore: quota), since: Double(index))
        }
        for record in records { try store.recordEnforcement(record) }
        #expect(try store.enforcementsLeft() == records)
    }

    @Test("a throttle stored before the quota was (no quota_before) reads as one whose quota is not known")
    func throttleOfThePreviousRelease() throws {
        let scratch = try ScratchDirectory()
        defer { scratch.remove() }
        let path = scratch.path + "/state.sqlite"
        try TaskStore.createFile(path: path, migratedUpTo: "v7-refresh-yield", sql: """
            INSERT INTO cpu_enforcement (slice_id, app_id, action, unit, pid, process_started, since) VALUES
                ('a', 'org.example.A', 'throttled', 'app-org.example.A@1.service', NULL, NULL, 1);
            """)
        let store = try TaskStore(path: path)
        #expect(try store.enforcementsLeft() == [
            EnforcementRecord(sliceID: "a", appID: "org.example.A", action: .throttled(unit: "app-org.example.A@1.service", quotaBefore: nil), since: 1),
        ])
    }

    @Test("rows this agent cannot read are left out, and stay stored")
    func unreadableRows() throws {
        let scratch = try ScratchDirectory()
        defer { scratch.remove() }
        let path = scratch.path + "/state.sqlite"
        try TaskStore.createFile(path: path, migratedUpTo: "v6-cpu-enforcement", sql: """
            INSERT INTO cpu_enforcement (slice_id, app_id, action, unit, pid, process_started, since) VALUES
                ('a', 'org.example.A', 'paused', 'x.scope', NULL, NULL, 1),
                ('b', 'org.example.B', 'stopped', NULL, 1, 10, 2),
                ('c', 'org.example.C', 'stopped', NULL, 77, NULL, 3),
                ('d', 'org.example.D', 'frozen', NULL, NULL, NULL, 4),
                ('e', 'org.example.E', 'stopped', NULL, 77, 9.5, 5);
            """)
        let store = try TaskStore(path: path)
        #expect(try store.enforcementsLeft() == [
            EnforcementRecord(sliceID: "e", appID: "org.example.E", action: .stopped(pid: 77, processStarted: 9.5), since: 5),
        ])
        try store.removeEnforcement(sliceID: "e")
        try store.recordEnforcement(Self.records[0])
        #expect(try store.enforcementsLeft() == [Self.records[0]])
    }

    @Test("a file made before enforcement was stored migrates, and has none")
    func migrateFromV5() throws {
        let scratch = try ScratchDirectory()
        defer { scratch.remove() }
        let path = scratch.path + "/state.sqlite"
        try TaskStore.createFile(path: path, migratedUpTo: "v5-planner-state", sql: """
            INSERT INTO apps (app_id, identity, registered_at) VALUES ('org.gnome.Maps', 'flatpak', 10);
            """)
        let store = try TaskStore(path: path)
        #expect(try store.enforcementsLeft() == [])
        #expect(try store.apps().map(\.appID) == [Sample.maps])
        try store.recordEnforcement(Self.records[2])
        #expect(try store.enforcementsLeft() == [Self.records[2]])
    }
}
