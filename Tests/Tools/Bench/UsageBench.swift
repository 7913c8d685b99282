import BGPolicyCore
import BGPolicyStore
import GRDB
import Glibc

// The usage log (BGPolicyStore's TaskStore+Usage.swift), without a bus or an agent:
//   ingest   events/s appended through `TaskStore.appendUsage(_:)` in batches of 1,000 to a
//            fresh file store, against the same rows through one prepared INSERT into a bare
//            table of the same columns with no index (GRDB, same journal settings), same run
//   summary  p50 and p99 of `usageSummary(appID:now:)`, the per-app prediction query, with
//            `usageEvents` events in the log (1,000 apps over 8 weeks), against
//            `SELECT count(*) FROM usage WHERE app_id = ?` on the same file, interleaved

/// What the usage section measured.
struct UsageResults: Sendable {
    var ingestEvents = 0
    var ingestBatch = 1_000
    var storeIngestSeconds = 0.0
    var bareIngestSeconds = 0.0

    var events = 0
    var apps = 0
    var logFile = ""
    /// Whether the log file was built in this run (else reused from the cache).
    var built = false
    var buildSeconds = 0.0
    var fileBytes = 0
    /// Opening the store on the big file: quick_check and migrations included.
    var openSeconds = 0.0
    var summary = Samples()
    var count = Samples()
    /// An example summary, to show that the query did real work.
    var sampleOpens = 0.0
    var sampleLast24h = 0
    /// The agent's start-up replay: `usageEvents(since: 8 weeks ago, limit: 500,000)`, once.
    var warmEvents = 0
    var warmSeconds = 0.0

    static let summaryTargetMS = 5.0

    var storeRate: Double { Double(ingestEvents) / storeIngestSeconds }
    var bareRate: Double { Double(ingestEvents) / bareIngestSeconds }

    func table() -> String {
        let ms = { (ns: Double) in Format.fixed(ns / 1e6, 3) }
        let n = Format.thousands(events)
        let header = ["figure", "TaskStore", "baseline", "baseline is", "ratio", "target", "met"]
        let met = { (ns: Double) in ns / 1e6 <= Self.summaryTargetMS ? "yes" : "NO" }
        let body: [[String]] = [
            [
                "ingest, batches of \(Format.thousands(ingestBatch)) (events/s)", Format.rounded(storeRate),
                Format.rounded(bareRate), "prepared INSERT, bare table, no index",
                Format.fixed(storeRate / bareRate * 100, 0) + " %", "—", "—",
            ],
            [
                "usageSummary p50, \(n) events (ms)", ms(summary.median), ms(count.median),
                "SELECT count(*) … WHERE app_id = ?", Format.ratio(summary.median, count.median),
                "≤ \(Format.fixed(Self.summaryTargetMS, 0)) ms", met(summary.median),
            ],
            [
                "usageSummary p99, \(n) events (ms)", ms(summary.percentile(99)), ms(count.percentile(99)),
                "SELECT count(*) … WHERE app_id = ?", Format.ratio(summary.percentile(99), count.percentile(99)),
                "≤ \(Format.fixed(Self.summaryTargetMS, 0)) ms", met(summary.percentile(99)),
            ],
        ]
        return Format.table(header, body)
    }

    func details() -> String {
        let source = built ? "built in \(Format.fixed(buildSeconds, 1)) s" : "reused from an earlier run"
        return [
            "Usage ingest: \(Format.thousands(ingestEvents)) events into an empty file store in \(Format.fixed(storeIngestSeconds, 2)) s "
                + "(TaskStore: WAL, synchronous=NORMAL, two indexes besides the rowid), the bare table in \(Format.fixed(bareIngestSeconds, 2)) s "
                + "(same journal settings). Batches mix 1,000 apps, so each commit rewrites about one page of the per-app index per event.",
            "Usage log: \(Format.thousands(events)) events, \(Format.thousands(apps)) apps over 8 weeks, \(Format.thousands(fileBytes / 1_048_576)) MiB "
                + "at \(logFile) (\(source)); opening it as a TaskStore (quick_check, migrations) took \(Format.fixed(openSeconds, 2)) s.",
            "Usage summary: \(Format.thousands(summary.count)) queries of random apps, each followed by the baseline count on the same app; "
                + "mean \(Format.fixed(summary.mean / 1e6, 3)) / \(Format.fixed(count.mean / 1e6, 3)) ms, "
                + "max \(Format.fixed(summary.percentile(100) / 1e6, 3)) / \(Format.fixed(count.percentile(100) / 1e6, 3)) ms; "
                + "e.g. one app: \(Format.fixed(sampleOpens, 0)) opens in all, \(sampleLast24h) in the last 24 h.",
            "Usage replay at the agent's start: usageEvents(since: 8 weeks ago, limit: 500,000) returned \(Format.thousands(warmEvents)) events "
                + "in \(Format.fixed(warmSeconds, 2)) s.",
        ].joined(separator: "\n")
    }

    func json() -> String {
        func samples(_ s: Samples) -> String {
            JSON.object([
                ("count", "\(s.count)"), ("p50_ms", JSON.number(s.median / 1e6)), ("p99_ms", JSON.number(s.percentile(99) / 1e6)),
                ("mean_ms", JSON.number(s.mean / 1e6)), ("max_ms", JSON.number(s.percentile(100) / 1e6)),
            ])
        }
        return JSON.object([
            (
                "ingest",
                JSON.object([
                    ("events", "\(ingestEvents)"), ("batch", "\(ingestBatch)"),
                    ("store_events_per_second", JSON.number(storeRate)), ("bare_table_events_per_second", JSON.number(bareRate)),
                    ("ratio", JSON.number(storeRate / bareRate)),
                ])
            ),
            (
                "summary",
                JSON.object([
                    ("events", "\(events)"), ("apps", "\(apps)"), ("file_bytes", "\(fileBytes)"),
                    ("built_this_run", built ? "true" : "false"), ("build_seconds", JSON.number(buildSeconds)),
                    ("open_seconds", JSON.number(openSeconds)),
                    ("warm_events", "\(warmEvents)"), ("warm_seconds", JSON.number(warmSeconds)),
                    ("usage_summary", samples(summary)), ("count_baseline", samples(count)),
                    ("p50_ratio", JSON.number(summary.median / count.median)),
                    ("p99_ratio", JSON.number(summary.percentile(99) / count.percentile(99))),
                    ("target_ms", JSON.number(Self.summaryTargetMS)),
                    ("met", summary.percentile(99) / 1e6 <= Self.summaryTargetMS ? "true" : "false"),
                ])
            ),
        ])
    }
}

/// A small deterministic generator (SplitMix64), so that every run builds the same log.
struct SplitMix64 {
    var state: UInt64

    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }

    /// Uniform in 0..<1.
    mutating func unit() -> Double {
        Double(next() >> 11) / Double(1 << 53)
    }

    mutating func below(_ n: Int) -> Int {
        Int(next() % UInt64(n))
    }
}

struct UsageBench {
    let options: Options

    /// Bump when the generated log changes, so that a cached file is built again.
    static let logVersion = 1
    /// The log's last instant, fixed so that a cached file stays valid: 2026-01-05T00:00Z.
    static let end: UnixTime = 1_767_571_200
    static let span = 8 * 7 * 86_400.0

    func run() throws -> UsageResults {
        var results = UsageResults()
        try ingest(&results)
        try summary(&results)
        return results
    }

    // MARK: Ingest

    private func ingest(_ results: inout UsageResults) throws {
        let events = options.usageIngestEvents
        let batch = 1_000
        results.ingestEvents = events
        results.ingestBatch = batch
        let directory = try temporaryDirectory()
        defer { removeTree(directory) }
        progress("usage ingest: \(Format.thousands(events)) events in batches of \(batch), TaskStore then a bare table")

        let apps = (0..<1_000).map(Self.appID)
        var random = SplitMix64(state: 1)
        let step = Self.span / Double(events)
        func batchAt(_ start: Int) -> [(appID: AppID, state: UsageState, time: UnixTime)] {
            (start..<min(start + batch, events)).map { i in
                (apps[random.below(apps.count)], i % 2 == 0 ? .foreground : .background, Self.end - Self.span + Double(i) * step)
            }
        }
        var batches: [[(appID: AppID, state: UsageState, time: UnixTime)]] = []
        for start in stride(from: 0, to: events, by: batch) { batches.append(batchAt(start)) }

        let store = try TaskStore(path: directory + "/store.sqlite")
        var t0 = Clock.nanoseconds()
        for events in batches { try store.appendUsage(events) }
        results.storeIngestSeconds = Double(Clock.nanoseconds() - t0) / 1e9

        // The same journal settings as the store: WAL, which GRDB pairs with synchronous=NORMAL.
        var configuration = Configuration()
        configuration.journalMode = .wal
        let bare = try DatabaseQueue(path: directory + "/bare.sqlite", configuration: configuration)
        try bare.write { db in
            try db.execute(sql: "CREATE TABLE usage (id INTEGER PRIMARY KEY, app_id TEXT NOT NULL, state TEXT NOT NULL, time REAL NOT NULL)")
        }
        t0 = Clock.nanoseconds()
        for events in batches {
            try bare.write { db in
                let insert = try db.cachedStatement(sql: "INSERT INTO usage (app_id, state, time) VALUES (?, ?, ?)")
                for event in events {
                    try insert.execute(arguments: [event.appID.rawValue, event.state.rawValue, event.time])
                }
            }
        }
        results.bareIngestSeconds = Double(Clock.nanoseconds() - t0) / 1e9
        try bare.close()
    }

    // MARK: Summary

    private func summary(_ results: inout UsageResults) throws {
        let events = options.usageEvents
        let apps = 1_000
        results.events = events
        results.apps = apps
        var scratch: String?
        defer { if let scratch { removeTree(scratch) } }
        let path: String
        if let file = options.usageFile, !options.quick {
            path = file
        } else {
            let directory = try temporaryDirectory()
            scratch = directory
            path = directory + "/usage.sqlite"
        }
        results.logFile = path
        let key = "v\(Self.logVersion) events=\(events) apps=\(apps)"
        if try cachedKey(path) != key {
            progress("usage log: building \(Format.thousands(events)) events at \(path)")
            let t0 = Clock.nanoseconds()
            try build(path: path, events: events, apps: apps, key: key)
            results.buildSeconds = Double(Clock.nanoseconds() - t0) / 1e9
            results.built = true
        } else {
            progress("usage log: reusing \(path) (\(key))")
        }
        var info = stat()
        if stat(path, &info) == 0 { results.fileBytes = Int(info.st_size) }

        let t0 = Clock.nanoseconds()
        let store = try TaskStore(path: path)
        results.openSeconds = Double(Clock.nanoseconds() - t0) / 1e9
        let baseline = try DatabaseQueue(path: path, configuration: Self.readOnly)
        defer { try? baseline.close() }

        let queries = options.usageQueries
        progress("usage summary: \(Format.thousands(queries)) queries of random apps, each against count(*)")
        var random = SplitMix64(state: 2)
        var summarySamples = Samples()
        var countSamples = Samples()
        summarySamples.values.reserveCapacity(queries)
        countSamples.values.reserveCapacity(queries)
        let warmup = min(100, queries)
        for i in 0..<(warmup + queries) {
            let appID = Self.appID(random.below(apps))
            var t = Clock.nanoseconds()
            let summary = try store.usageSummary(appID: appID, now: Self.end)
            let summaryNS = Clock.nanoseconds() - t
            t = Clock.nanoseconds()
            let count = try baseline.read { db in
                try Int.fetchOne(db, sql: "SELECT count(*) FROM usage WHERE app_id = ?", arguments: [appID.rawValue]) ?? 0
            }
            let countNS = Clock.nanoseconds() - t
            if count == 0 || summary.opensTotal == 0 { throw BenchFailure("usage log: app \(appID) has no events; rebuild \(path)") }
            guard i >= warmup else { continue }
            summarySamples.values.append(summaryNS)
            countSamples.values.append(countNS)
            results.sampleOpens = summary.opensTotal
            results.sampleLast24h = summary.opensLast24h
        }
        results.summary = summarySamples
        results.count = countSamples

        let t1 = Clock.nanoseconds()
        results.warmEvents = try store.usageEvents(since: Self.end - TaskStore.usageRetention, limit: 500_000).count
        results.warmSeconds = Double(Clock.nanoseconds() - t1) / 1e9
    }

    static var readOnly: Configuration {
        var configuration = Configuration()
        configuration.readonly = true
        return configuration
    }

    static func appID(_ i: Int) -> AppID {
        let digits = String(i)
        return AppID(rawValue: "org.bench.App" + String(repeating: "0", count: max(0, 4 - digits.count)) + digits)!
    }

    /// The key stored in the file by `build`, or nil when there is no usable file.
    private func cachedKey(_ path: String) throws -> String? {
        guard access(path, R_OK) == 0 else { return nil }
        do {
            let queue = try DatabaseQueue(path: path, configuration: Self.readOnly)
            defer { try? queue.close() }
            return try queue.read { db in
                guard try db.tableExists("bench_usage_log") else { return nil }
                return try String.fetchOne(db, sql: "SELECT key FROM bench_usage_log")
            }
        } catch {
            return nil
        }
    }

    /// Creates the store (schema by TaskStore's own migrations), then fills it through a
    /// connection of its own with synchronous=OFF and a big cache: a machine crash during the
    /// build loses only this cache file, which has no key until the end and is built again.
    /// Events go in time order, as the agent appends them: per app, opens spread over the 8
    /// weeks with a daily rhythm, each followed by its close 1 to 30 minutes later.
    private func build(path: String, events: Int, apps: Int, key: String) throws {
        for suffix in ["", "-wal", "-shm"] { unlink(path + suffix) }
        do { _ = try TaskStore(path: path) }

        var configuration = Configuration()
        configuration.prepareDatabase { db in
            try db.execute(sql: "PRAGMA synchronous = OFF; PRAGMA cache_size = -524288")
        }
        let queue = try DatabaseQueue(path: path, configuration: configuration)
        defer { try? queue.close() }

        // Every app's opens, then one merge by time. 16 bytes per event.
        let perApp = events / apps
        var random = SplitMix64(state: 3)
        var all: [(time: Double, app: Int32, open: Bool)] = []
        all.reserveCapacity(apps * perApp)
        let start = Self.end - Self.span
        for app in 0..<apps {
            // Each app has a favourite hour; its opens cluster around it, some anywhere.
            let favourite = Double(random.below(24)) * 3_600
            for _ in 0..<(perApp / 2) {
                let day = Double(random.below(56)) * 86_400
                let offset = random.unit() < 0.7 ? favourite + (random.unit() - 0.5) * 7_200 : random.unit() * 86_400
                let open = min(max(start, start + day + offset), Self.end - 1_801)
                all.append((open, Int32(app), true))
                all.append((open + 60 + random.unit() * 1_740, Int32(app), false))
            }
        }
        all.sort { $0.time < $1.time }
        let names = (0..<apps).map { Self.appID($0).rawValue }
        let chunk = 500_000
        for first in stride(from: 0, to: all.count, by: chunk) {
            try queue.write { db in
                let insert = try db.makeStatement(sql: "INSERT INTO usage (app_id, state, time) VALUES (?, ?, ?)")
                for event in all[first..<min(first + chunk, all.count)] {
                    try insert.execute(arguments: [names[Int(event.app)], event.open ? "foreground" : "background", event.time])
                }
            }
            progress("usage log: \(Format.thousands(min(first + chunk, all.count))) of \(Format.thousands(all.count))")
        }
        try queue.write { db in
            try db.execute(sql: "CREATE TABLE bench_usage_log (key TEXT NOT NULL)")
            try db.execute(sql: "INSERT INTO bench_usage_log (key) VALUES (?)", arguments: [key])
        }
        try queue.writeWithoutTransaction { db in
            try db.execute(sql: "PRAGMA wal_checkpoint(TRUNCATE)")
        }
    }

    private func temporaryDirectory() throws -> String {
        let base = getenv("TMPDIR").map { String(cString: $0) } ?? "/tmp"
        var template = Array((base + "/bgpolicy-bench-usage-XXXXXX").utf8CString)
        guard let made = template.withUnsafeMutableBufferPointer({ buffer in buffer.baseAddress.flatMap { mkdtemp($0) } }) else {
            throw BenchFailure("cannot create a temporary folder under \(base)")
        }
        return String(cString: made)
    }

    private func removeTree(_ directory: String) {
        // Only the files this section creates: a store or table and their WAL and shm.
        for name in ["store.sqlite", "bare.sqlite", "usage.sqlite"] {
            for suffix in ["", "-wal", "-shm"] { unlink(directory + "/" + name + suffix) }
        }
        rmdir(directory)
    }
}
