import BGPolicyCore
@testable import BGPolicyStore
import Foundation
import GRDB
import Testing

/// Times with a known hour of the week (2024-01-01 was a Monday).
private enum Week {
    static let monday = 1_704_067_200.0  // 2024-01-01T00:00Z
    static let hour = 3_600.0
    static let day = 86_400.0
    /// Monday 10:30 → week hour 10.
    static let monday1030 = monday + 10.5 * hour
    /// Wednesday 15:00 → 2 × 24 + 15 = 63.
    static let wednesday1500 = monday + 2 * day + 15 * hour
    /// Sunday 23:59 → 167.
    static let sunday2359 = monday + 6 * day + 23 * hour + 59 * 60
    /// Nine weeks later, Monday 2024-03-04T10:00 → 10 again; retention reaches back to the
    /// second week.
    static let laterMonday1000 = monday + 9 * 7 * day + 10 * hour
}

@Suite("TaskStore: the usage log, its folding into hours of the week, and its summary")
struct UsageLogTests {
    private func hours(_ counts: [Int: Double]) -> [Double] {
        var all = Array(repeating: 0.0, count: 168)
        for (hour, count) in counts { all[hour] = count }
        return all
    }

    @Test("the hour of the week counts from Monday 00:00 UTC; the epoch was a Thursday")
    func weekHour() {
        #expect(TaskStore.weekHour(of: 0) == 72)
        #expect(TaskStore.weekHour(of: -1) == 71)
        #expect(TaskStore.weekHour(of: -3 * Week.day) == 0)
        #expect(TaskStore.weekHour(of: Week.monday) == 0)
        #expect(TaskStore.weekHour(of: Week.monday1030) == 10)
        #expect(TaskStore.weekHour(of: Week.wednesday1500) == 63)
        #expect(TaskStore.weekHour(of: Week.sunday2359) == 167)
        #expect(TaskStore.weekHour(of: Week.monday + 7 * Week.day) == 0)
        #expect(TaskStore.weekHour(of: .infinity) == 0 && TaskStore.weekHour(of: -.infinity) == 0)
        #expect((0..<168).contains(TaskStore.weekHour(of: 1e300)) && (0..<168).contains(TaskStore.weekHour(of: -1e300)))
    }

    @Test("a batch is appended in one call, in any order, and reads back per app")
    func batchAppend() throws {
        let store = try TaskStore.inMemory()
        try store.appendUsage([])
        try store.appendUsage([
            (Sample.maps, .background, 20), (Sample.feeds, .foreground, 15), (Sample.maps, .foreground, 10),
        ])
        try store.appendUsage(appID: Sample.maps, state: .foreground, at: 30)
        #expect(try store.usage(appID: Sample.maps).map(\.state) == [.foreground, .background, .foreground])
        #expect(try store.usage(appID: Sample.maps).map(\.time) == [10, 20, 30])
        #expect(try store.usage(appID: Sample.feeds).map(\.time) == [15])
    }

    @Test("pruning folds old opens into their hours of the week, deletes only old rows, and is idempotent")
    func pruneFolds() throws {
        let store = try TaskStore.inMemory()
        let now = Week.laterMonday1000 + 60
        try store.appendUsage([
            (Sample.maps, .foreground, Week.monday1030),
            (Sample.maps, .background, Week.monday1030 + 600),
            (Sample.maps, .foreground, Week.monday1030 + 900),
            (Sample.maps, .foreground, Week.wednesday1500),
            (Sample.maps, .foreground, Week.sunday2359),
            (Sample.feeds, .foreground, Week.wednesday1500 + 60),
            (Sample.maps, .foreground, Week.laterMonday1000),
            (Sample.maps, .background, Week.laterMonday1000 + 30),
        ])
        let before = try store.usageSummary(appID: Sample.maps, now: now)
        #expect(before.weekHourOpens == hours([10: 3, 63: 1, 167: 1]))
        #expect(before.opensTotal == 5)
        #expect(before.lastOpen == Week.laterMonday1000)
        #expect(before.opensLast24h == 1)

        let cutoff = now - TaskStore.usageRetention
        #expect(cutoff > Week.sunday2359 && cutoff < Week.laterMonday1000)
        #expect(try store.pruneUsage(olderThan: cutoff) == 6)
        #expect(try store.usage(appID: Sample.maps).map(\.time) == [Week.laterMonday1000, Week.laterMonday1000 + 30])
        #expect(try store.usage(appID: Sample.feeds).isEmpty)
        // Aggregates plus raw: the summary does not change by pruning, or by pruning again.
        #expect(try store.usageSummary(appID: Sample.maps, now: now) == before)
        #expect(try store.pruneUsage(olderThan: cutoff) == 0)
        #expect(try store.usageSummary(appID: Sample.maps, now: now) == before)

        // An app seen only before the cutoff keeps its counts and its last open.
        let feeds = try store.usageSummary(appID: Sample.feeds, now: now)
        #expect(feeds == UsageSummary(
            appID: Sample.feeds, opensTotal: 1, lastOpen: Week.wednesday1500 + 60, opensLast24h: 0,
            weekHourOpens: hours([63: 1])))

        // Later prunes add to the folded counts.
        try store.appendUsage(appID: Sample.maps, state: .foreground, at: Week.monday1030 + 1_200)
        #expect(try store.pruneUsage(olderThan: cutoff) == 1)
        let after = try store.usageSummary(appID: Sample.maps, now: now)
        #expect(after.weekHourOpens == hours([10: 4, 63: 1, 167: 1]))
        #expect(after.opensTotal == 6)
        #expect(after.lastOpen == Week.laterMonday1000)
    }

    @Test("folding in SQL puts every time in the hour the Swift function names, negative times included")
    func foldMatchesSwift() throws {
        let store = try TaskStore.inMemory()
        let times: [UnixTime] = [
            -7_200.5, -3_600, -1, -0.25, 0, 0.5, 3_599.99, 3_600, 86_399, Week.monday - 0.001, Week.monday,
            Week.monday1030, Week.sunday2359, 1_999_999_999.5,
        ]
        try store.appendUsage(times.map { (Sample.maps, UsageState.foreground, $0) })
        #expect(try store.pruneUsage(olderThan: 3_000_000_000) == times.count)
        var expected = Array(repeating: 0.0, count: 168)
        for time in times { expected[TaskStore.weekHour(of: time)] += 1 }
        let summary = try store.usageSummary(appID: Sample.maps, now: 0)
        #expect(summary.weekHourOpens == expected)
        #expect(summary.lastOpen == 1_999_999_999.5)
    }

    @Test("an open stamped after now (the clock was ahead) is no last open and no open yet, until now reaches it")
    func openAfterNow() throws {
        let store = try TaskStore.inMemory()
        let ahead = 1_000_000 + 365 * Week.day
        try store.appendUsage([
            (Sample.maps, .foreground, ahead), (Sample.maps, .foreground, 1_000_000),
            (Sample.maps, .foreground, ahead - 1),
        ])
        let summary = try store.usageSummary(appID: Sample.maps, now: 1_000_100)
        #expect(summary.lastOpen == 1_000_000)
        #expect(summary.opensTotal == 1)
        #expect(summary.weekHourOpens.reduce(0, +) == 1)
        #expect(summary.opensLast24h == 1)
        let later = try store.usageSummary(appID: Sample.maps, now: ahead)
        #expect(later.lastOpen == ahead)
        #expect(later.opensTotal == 3)
    }

    @Test("opens in the last 24 hours count raw foreground events up to now, not later ones")
    func lastDay() throws {
        let store = try TaskStore.inMemory()
        let now = Week.laterMonday1000
        try store.appendUsage([
            (Sample.maps, .foreground, now - Week.day - 1), (Sample.maps, .foreground, now - Week.day + 1),
            (Sample.maps, .background, now - 100), (Sample.maps, .foreground, now),
            (Sample.maps, .foreground, now + 10), (Sample.feeds, .foreground, now - 5),
        ])
        let summary = try store.usageSummary(appID: Sample.maps, now: now)
        #expect(summary.opensLast24h == 2)
        #expect(summary.opensTotal == 3)
        #expect(summary.lastOpen == now)
    }

    @Test("an app never seen gets zeros")
    func unknownApp() throws {
        let store = try TaskStore.inMemory()
        try store.appendUsage(appID: Sample.maps, state: .foreground, at: Week.monday1030)
        let summary = try store.usageSummary(appID: Sample.feeds, now: Week.monday1030)
        #expect(summary == UsageSummary(appID: Sample.feeds))
        #expect(summary.weekHourOpens.count == 168 && summary.lastOpen == nil && summary.opensTotal == 0)
    }

    @Test("events since a time: opens and closes, all apps, the newest `limit`, oldest first")
    func eventsSince() throws {
        let store = try TaskStore.inMemory()
        try store.appendUsage([
            (Sample.maps, .foreground, 50), (Sample.feeds, .foreground, 10), (Sample.maps, .background, 40),
            (Sample.feeds, .foreground, 30), (Sample.maps, .foreground, 20), (Sample.maps, .foreground, 30),
        ])
        try store.execute(sql: "INSERT INTO usage (app_id, state, time) VALUES ('not an id!', 'foreground', 35)")
        try store.execute(sql: "INSERT INTO usage (app_id, state, time) VALUES ('org.example.Feeds', 'minimised', 36)")
        let all = try store.usageEvents(since: 0, limit: 100)
        #expect(all.map(\.time) == [10, 20, 30, 30, 40, 50])
        #expect(all.map(\.appID) == [Sample.feeds, Sample.maps, Sample.feeds, Sample.maps, Sample.maps, Sample.maps])
        #expect(all.map(\.state) == [.foreground, .foreground, .foreground, .foreground, .background, .foreground])
        #expect(try store.usageEvents(since: 20, limit: 100).map(\.time) == [20, 30, 30, 40, 50])
        // The newest four are 35, 36, 40 and 50; the rows with an id or a state this agent
        // rejects are dropped.
        #expect(try store.usageEvents(since: 0, limit: 4).map(\.time) == [40, 50])
        #expect(try store.usageEvents(since: 0, limit: 5).map(\.time) == [30, 40, 50])
        #expect(try store.usageEvents(since: 51, limit: 10).isEmpty)
        #expect(try store.usageEvents(since: 0, limit: 0).isEmpty)
    }

    @Test("every usage statement reads through an index, never a full scan or a sort")
    func queryPlans() throws {
        let plans = try TaskStore.inMemory().usageQueryPlans()
        #expect(plans.count == 6)
        for (name, plan) in plans {
            #expect(plan.contains("INDEX") || plan.contains("PRIMARY KEY"), "\(name): \(plan)")
            #expect(!plan.contains("SCAN usage ") && !plan.hasSuffix("SCAN usage"), "\(name): \(plan)")
        }
        #expect(plans["rawSummary"]?.contains("COVERING INDEX usage_app_state_time") == true, "\(plans["rawSummary"] ?? "")")
        #expect(plans["rawSummary"]?.contains("TEMP B-TREE") == false, "\(plans["rawSummary"] ?? "")")
        #expect(plans["events"]?.contains("usage_time") == true, "\(plans["events"] ?? "")")
        #expect(plans["events"]?.contains("TEMP B-TREE FOR ORDER BY") == true, "the outer re-sort of at most `limit` rows")
        #expect(plans["foldHourly"]?.contains("usage_time") == true, "\(plans["foldHourly"] ?? "")")
    }

    @Test("compacting a file store truncates its WAL; the folded counts survive reopening")
    func compactAndReopen() throws {
        let scratch = try ScratchDirectory()
        defer { scratch.remove() }
        let path = scratch.path + "/state.sqlite"
        let now = Week.laterMonday1000
        var summary: UsageSummary?
        do {
            let store = try TaskStore(path: path)
            var events: [(appID: AppID, state: UsageState, time: UnixTime)] = []
            for i in 0..<5_000 {
                let appID = i % 2 == 0 ? Sample.maps : Sample.feeds
                let state: UsageState = i % 3 == 0 ? .background : .foreground
                events.append((appID, state, Week.monday + Double(i) * 600))
            }
            try store.appendUsage(events)
            #expect(try store.pruneUsage(olderThan: now - TaskStore.usageRetention) > 0)
            summary = try store.usageSummary(appID: Sample.maps, now: now)
            try store.compact()
            let attributes = try FileManager.default.attributesOfItem(atPath: path + "-wal")
            #expect((attributes[.size] as? NSNumber)?.intValue == 0)
        }
        let reopened = try TaskStore(path: path)
        #expect(try reopened.usageSummary(appID: Sample.maps, now: now) == summary)
        #expect(summary?.opensTotal ?? 0 > 0)
        try reopened.compact()
    }

    @Test("compacting does not wait for another process's reader, keeps the busy timeout, and catches up once it is gone")
    func compactBesideAReader() throws {
        let scratch = try ScratchDirectory()
        defer { scratch.remove() }
        let path = scratch.path + "/state.sqlite"
        let store = try TaskStore(path: path)
        try store.appendUsage([(Sample.maps, .foreground, Week.monday)])
        // A user's `sqlite3` in a read transaction on the WAL, as another connection.
        var configuration = Configuration()
        configuration.allowsUnsafeTransactions = true
        let reader = try DatabaseQueue(path: path, configuration: configuration)
        try reader.inDatabase { db in
            try db.beginTransaction(.deferred)
            _ = try Int.fetchOne(db, sql: "SELECT count(*) FROM usage")
        }
        let wal = { (try? FileManager.default.attributesOfItem(atPath: path + "-wal")[.size] as? Int) ?? nil }
        let clock = ContinuousClock()
        let took = try clock.measure { try store.compact() }
        // It waited out the whole 5 s busy timeout before.
        #expect(took < .seconds(2.5), "compact waited \(took) for the reader")
        #expect(wal() ?? 0 > 0, "the reader holds the WAL, which cannot be truncated yet")
        #expect(try store.pragma("busy_timeout") == "5000")
        try reader.inDatabase { db in try db.commit() }
        try store.compact()
        #expect(wal() == 0)
    }

    @Test("a WAL a big transaction grew is cut back to the limit when it is reused")
    func walSizeLimit() throws {
        let scratch = try ScratchDirectory()
        defer { scratch.remove() }
        let path = scratch.path + "/state.sqlite"
        let store = try TaskStore(path: path)
        func walSize() throws -> Int {
            try (FileManager.default.attributesOfItem(atPath: path + "-wal")[.size] as? NSNumber)?.intValue ?? 0
        }
        // About 12 MB in one transaction, then removed, as a prune of a long log does.
        try store.execute(sql: """
            WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 12000)
            INSERT INTO settings (key, value) SELECT 'filler-' || i, zeroblob(1000) FROM n
            """)
        #expect(try walSize() > TaskStore.walSizeLimit)
        // The automatic checkpoint ran after that commit; the next write reuses the WAL.
        try store.setGlobalEnabled(false)
        #expect(try walSize() <= TaskStore.walSizeLimit)
        #expect(try store.pragma("journal_size_limit") == "\(TaskStore.walSizeLimit)")
    }

    @Test("a file made by the first schema migrates, keeping its usage rows")
    func migrateFromV1() throws {
        let scratch = try ScratchDirectory()
        defer { scratch.remove() }
        let path = scratch.path + "/state.sqlite"
        try TaskStore.createFile(path: path, migratedUpTo: "v1", sql: """
            INSERT INTO usage (app_id, state, time) VALUES ('org.gnome.Maps', 'foreground', \(Week.monday1030));
            INSERT INTO usage (app_id, state, time) VALUES ('org.gnome.Maps', 'background', \(Week.monday1030 + 60));
            INSERT INTO usage (app_id, state, time) VALUES ('org.gnome.Maps', 'foreground', \(Week.laterMonday1000));
            """)
        let store = try TaskStore(path: path)
        #expect(try store.usage(appID: Sample.maps).count == 3)
        let now = Week.laterMonday1000
        let before = try store.usageSummary(appID: Sample.maps, now: now)
        #expect(before.weekHourOpens == hours([10: 2]))
        #expect(try store.pruneUsage(olderThan: now - TaskStore.usageRetention) == 2)
        #expect(try store.usageSummary(appID: Sample.maps, now: now) == before)
        #expect(try store.usageQueryPlans()["rawSummary"]?.contains("usage_app_state_time") == true)
    }
}
