import BGPolicyCore
@testable import BGPolicyStore
import Testing

@Suite("TaskStore: what it stores and how it reads back")
struct TaskStoreTests {
    // MARK: Apps and switches

    @Test("an app round-trips, for every identity source", arguments: IdentitySource.allCases)
    func appRoundTrip(identity: IdentitySource) throws {
        let store = try TaskStore.inMemory()
        let full = AppRecord(
            appID: Sample.maps, identifiers: ["org.gnome.Maps.z", "org.gnome.Maps.a"], busName: "org.gnome.Maps",
            identity: identity, backgroundOnly: true, enabled: false, registeredAt: 1_700_000_000.25,
            lastUsedAt: 1_700_000_100.5)
        let bare = AppRecord(appID: Sample.feeds, identifiers: [], identity: identity, registeredAt: 12)
        try store.saveApp(full)
        try store.saveApp(bare)
        #expect(try store.apps() == [bare, full])
        #expect(try store.apps().last?.identifiers == ["org.gnome.Maps.a", "org.gnome.Maps.z"])
    }

    @Test("saving an app again replaces it, identifiers included, and keeps its pending requests")
    func appUpsert() throws {
        let store = try TaskStore.inMemory()
        try store.saveApp(Sample.app(Sample.maps, identifiers: ["a", "b"]))
        try store.savePending(Sample.request(Sample.maps, "a"))
        var again = Sample.app(Sample.maps, identifiers: ["b", "c"], registeredAt: 5_000)
        again.enabled = false
        again.busName = "org.gnome.Maps"
        try store.saveApp(again)
        #expect(try store.apps() == [again])
        // An INSERT OR REPLACE would have deleted the row, and the request with it.
        #expect(try store.pendingRequests().map(\.identifier) == ["a"])
    }

    @Test("the global switch is on until set, then holds what was set")
    func globalSwitch() throws {
        let store = try TaskStore.inMemory()
        #expect(try store.globalEnabled())
        try store.setGlobalEnabled(false)
        #expect(try !store.globalEnabled())
        try store.setGlobalEnabled(true)
        #expect(try store.globalEnabled())
    }

    // MARK: Pending requests

    @Test("a pending request round-trips, for every kind", arguments: TaskKind.allCases)
    func pendingRoundTrip(kind: TaskKind) throws {
        let store = try TaskStore.inMemory()
        try store.saveApp(Sample.app(Sample.maps))
        let full = TaskRequest(
            appID: Sample.maps, identifier: "org.gnome.Maps.full", kind: kind, earliestBegin: 1_700_000_500.5,
            requiresNetwork: true, requiresExternalPower: true, expectedDuration: UInt32.max, submittedAt: 10,
            deliveryAttempts: 3, lastAttemptAt: 11.5, lastAttemptError: "org.freedesktop.DBus.Error.ServiceUnknown")
        let bare = TaskRequest(appID: Sample.maps, identifier: "org.gnome.Maps.bare", kind: kind, submittedAt: 20)
        try store.savePending(full)
        try store.savePending(bare)
        #expect(try store.pendingRequests() == [full, bare])
    }

    /// A damaged or hand-edited file can hold infinity, NaN or 1e300 in a time column. Read
    /// as it was, the agent's planner went slot by slot towards it, and `ListPending` trapped
    /// converting it to whole seconds.
    @Test("times that are no times (infinite, NaN, absurdly far) are read as no time, or the epoch")
    func timesThatAreNoTimes() throws {
        let store = try TaskStore.inMemory()
        try store.saveApp(Sample.app(Sample.maps))
        try store.execute(sql: """
            INSERT INTO pending (app_id, identifier, kind, earliest_begin, submitted_at, last_attempt_at)
            VALUES ('org.gnome.Maps', 'inf', 'refresh', 9e999, -9e999, 1e300);
            INSERT INTO pending (app_id, identifier, kind, earliest_begin, submitted_at)
            VALUES ('org.gnome.Maps', 'far', 'processing', 1e300, 20);
            INSERT INTO pending (app_id, identifier, kind, earliest_begin, submitted_at)
            VALUES ('org.gnome.Maps', 'fine', 'processing', 1700000000, 30);
            UPDATE apps SET last_used_at = 9e999, registered_at = -1e300;
            """)
        let read = Dictionary(uniqueKeysWithValues: try store.pendingRequests().map { ($0.identifier, $0) })
        #expect(read["inf"]?.earliestBegin == nil)
        #expect(read["inf"]?.submittedAt == 0)
        #expect(read["inf"]?.lastAttemptAt == nil)
        #expect(read["far"]?.earliestBegin == nil)
        #expect(read["fine"]?.earliestBegin == 1_700_000_000)
        let app = try #require(try store.apps().first)
        #expect(app.lastUsedAt == nil && app.registeredAt == 0)
    }

    @Test("pending requests come ordered by app id, then submission time")
    func pendingOrder() throws {
        let store = try TaskStore.inMemory()
        try store.saveApp(Sample.app(Sample.maps))
        try store.saveApp(Sample.app(Sample.feeds))
        try store.savePending(Sample.request(Sample.maps, "m.late", submittedAt: 30))
        try store.savePending(Sample.request(Sample.maps, "m.early", submittedAt: 10))
        try store.savePending(Sample.request(Sample.feeds, "f.late", submittedAt: 20))
        try store.savePending(Sample.request(Sample.feeds, "f.early", submittedAt: 5))
        let order = try store.pendingRequests().map { "\($0.appID)/\($0.identifier)" }
        #expect(order == ["org.example.Feeds/f.early", "org.example.Feeds/f.late", "org.gnome.Maps/m.early", "org.gnome.Maps/m.late"])
    }

    @Test("resubmitting an identifier replaces its request; deletes remove one or all of an app's")
    func pendingUpsertAndDelete() throws {
        let store = try TaskStore.inMemory()
        try store.saveApp(Sample.app(Sample.maps))
        try store.saveApp(Sample.app(Sample.feeds))
        try store.savePending(Sample.request(Sample.maps, "a", kind: .refresh, submittedAt: 1))
        var replacement = Sample.request(Sample.maps, "a", kind: .processing, submittedAt: 2)
        replacement.requiresNetwork = true
        replacement.deliveryAttempts = 1
        try store.savePending(replacement)
        #expect(try store.pendingRequests() == [replacement])

        try store.savePending(Sample.request(Sample.maps, "b"))
        try store.savePending(Sample.request(Sample.feeds, "c"))
        try store.deletePending(appID: Sample.maps, identifier: "a")
        try store.deletePending(appID: Sample.maps, identifier: "never-submitted")
        #expect(try store.pendingRequests().map(\.identifier) == ["c", "b"])
        let cancelled = HistoryEntry(time: 3, appID: Sample.maps, event: .cancelled, detail: "all cancelled")
        try store.deleteAllPending(appID: Sample.maps, history: cancelled)
        #expect(try store.pendingRequests().map(\.identifier) == ["c"])
        // In the same transaction as the deletion.
        #expect(try store.history(since: 0, limit: 10, appID: Sample.maps).map(\.detail) == ["all cancelled"])
    }

    @Test("a request for an app never saved is refused")
    func pendingNeedsApp() throws {
        let store = try TaskStore.inMemory()
        #expect {
            try store.savePending(Sample.request(Sample.maps, "a"))
        } throws: { error in
            guard case .io(let message) = error as? StoreError else { return false }
            return message.contains("FOREIGN KEY")
        }
    }

    // MARK: Running tasks

    @Test("a running task round-trips, for every delivery kind", arguments: DeliveryKind.allCases)
    func runningRoundTrip(kind: DeliveryKind) throws {
        let store = try TaskStore.inMemory()
        try store.saveApp(Sample.app(Sample.maps))
        var task = Sample.running("t1", Sample.maps, "org.gnome.Maps.refresh", startedAt: 1_700_000_000.75)
        task.kind = kind
        try store.startTasks([task], history: [])
        #expect(try store.runningTasks() == [task])
    }

    @Test("startTasks removes the pending requests, inserts the running rows and appends history together")
    func startTasks() throws {
        let store = try TaskStore.inMemory()
        try store.saveApp(Sample.app(Sample.maps))
        try store.savePending(Sample.request(Sample.maps, "a"))
        try store.savePending(Sample.request(Sample.maps, "b"))
        try store.savePending(Sample.request(Sample.maps, "c"))
        let tasks = [Sample.running("t1", Sample.maps, "a", startedAt: 100), Sample.running("t2", Sample.maps, "b", startedAt: 101)]
        let delivered = tasks.map { HistoryEntry(time: 100, appID: $0.appID, identifier: $0.identifier, taskID: $0.taskID, event: .delivered, kind: .refresh, detail: "delivered") }
        try store.startTasks(tasks, history: delivered)
        #expect(try store.pendingRequests().map(\.identifier) == ["c"])
        #expect(try store.runningTasks() == tasks)
        #expect(try store.history(since: 0, limit: 10).map(\.taskID) == ["t1", "t2"])
    }

    @Test("a startTasks that fails half-way leaves nothing of itself behind")
    func startTasksAtomic() throws {
        let store = try TaskStore.inMemory()
        try store.saveApp(Sample.app(Sample.maps))
        try store.savePending(Sample.request(Sample.maps, "a"))
        try store.savePending(Sample.request(Sample.maps, "b"))
        try store.startTasks([Sample.running("t0", Sample.maps, "x")], history: [])
        // The second task reuses a task id: the insert fails after "a" was already taken off.
        #expect(throws: StoreError.self) {
            try store.startTasks(
                [Sample.running("t1", Sample.maps, "a"), Sample.running("t0", Sample.maps, "b")],
                history: [Sample.entry(.delivered, at: 1)])
        }
        #expect(try store.pendingRequests().map(\.identifier) == ["a", "b"])
        #expect(try store.runningTasks().map(\.taskID) == ["t0"])
        #expect(try store.history(since: 0, limit: 10).isEmpty)
    }

    @Test("finishTask removes the running row and appends the entry, even for a task already gone")
    func finishTask() throws {
        let store = try TaskStore.inMemory()
        try store.saveApp(Sample.app(Sample.maps))
        try store.startTasks([Sample.running("t1", Sample.maps, "a"), Sample.running("t2", Sample.maps, "b")], history: [])
        let done = HistoryEntry(
            time: 50, appID: Sample.maps, identifier: "a", taskID: "t1", event: .completed, kind: .refresh,
            result: .newData, detail: "done", cpuSeconds: 0.5, duration: 12)
        try store.finishTask(taskID: "t1", history: done)
        try store.finishTask(taskID: "t1", history: Sample.entry(.completed, at: 51))
        #expect(try store.runningTasks().map(\.taskID) == ["t2"])
        let history = try store.history(since: 0, limit: 10)
        #expect(history.count == 2)
        var expected = done
        expected.id = history.first?.id
        #expect(history.first == expected)
    }

    @Test("recoverInterrupted closes every running row as interrupted, once")
    func recoverInMemory() throws {
        let store = try TaskStore.inMemory()
        try store.saveApp(Sample.app(Sample.maps))
        try store.startTasks([Sample.running("t2", Sample.maps, "b", startedAt: 20), Sample.running("t1", Sample.maps, "a", startedAt: 10)], history: [])
        let recovered = try store.recoverInterrupted(now: 99)
        #expect(recovered.map(\.taskID) == ["t1", "t2"])
        #expect(recovered.allSatisfy { $0.event == .interrupted && $0.time == 99 && $0.appID == Sample.maps && $0.kind == .refresh && $0.id != nil })
        #expect(recovered.first?.detail.contains("agent stopped") == true)
        #expect(try store.history(since: 0, limit: 10) == recovered)
        #expect(try store.runningTasks().isEmpty)
        #expect(try store.recoverInterrupted(now: 100).isEmpty)
    }

    // MARK: History

    @Test("a history entry round-trips, for every event", arguments: HistoryEvent.allCases)
    func historyRoundTrip(event: HistoryEvent) throws {
        let store = try TaskStore.inMemory()
        let full = HistoryEntry(
            time: 1_700_000_000.125, appID: Sample.maps, identifier: "org.gnome.Maps.refresh", taskID: "t1",
            event: event, kind: .contentAvailable, result: .failed, detail: "in words, with ünïcode",
            cpuSeconds: 1.5, duration: 29.75)
        let bare = HistoryEntry(time: 1_700_000_001, appID: nil, event: event, detail: "")
        var expected = [full, bare]
        expected[0].id = try store.append(full)
        expected[1].id = try store.append(bare)
        #expect(try store.history(since: 0, limit: 10) == expected)
    }

    @Test("every result and delivery kind round-trips in history")
    func historyResultsAndKinds() throws {
        let store = try TaskStore.inMemory()
        for (index, result) in TaskResult.allCases.enumerated() {
            try store.append(HistoryEntry(time: Double(index), appID: Sample.maps, event: .completed, result: result, detail: ""))
        }
        for (index, kind) in DeliveryKind.allCases.enumerated() {
            try store.append(HistoryEntry(time: 100 + Double(index), appID: Sample.maps, event: .delivered, kind: kind, detail: ""))
        }
        let history = try store.history(since: 0, limit: 100)
        #expect(history.prefix(TaskResult.allCases.count).map(\.result) == TaskResult.allCases)
        #expect(history.suffix(DeliveryKind.allCases.count).map(\.kind) == DeliveryKind.allCases)
    }

    @Test("history gives the newest entries since a time, oldest first, by app when asked")
    func historyWindow() throws {
        let store = try TaskStore.inMemory()
        // Appended out of time order, with a tie at 30 broken by id.
        for (time, app) in [(30.0, Sample.maps), (10, Sample.maps), (20, Sample.feeds), (40, Sample.feeds), (30, Sample.feeds), (5, Sample.maps)] {
            try store.append(Sample.entry(.submitted, at: time, app: app, detail: "\(app)@\(time)"))
        }
        try store.append(Sample.entry(.globalDisabled, at: 35, app: nil, detail: "global"))
        let since10 = try store.history(since: 10, limit: 100).map(\.detail)
        #expect(since10 == ["org.gnome.Maps@10.0", "org.example.Feeds@20.0", "org.gnome.Maps@30.0", "org.example.Feeds@30.0", "global", "org.example.Feeds@40.0"])
        #expect(try store.history(since: 10, limit: 3).map(\.detail) == ["org.example.Feeds@30.0", "global", "org.example.Feeds@40.0"])
        #expect(try store.history(since: 0, limit: 2, appID: Sample.maps).map(\.detail) == ["org.gnome.Maps@10.0", "org.gnome.Maps@30.0"])
        #expect(try store.history(since: 41, limit: 10).isEmpty)
        #expect(try store.history(since: 0, limit: 0).isEmpty)
        let ids = try store.history(since: 0, limit: 100).compactMap(\.id)
        #expect(ids.count == 7 && Set(ids).count == 7)
    }

    @Test("violations gives the times of the app's violating events since a time, oldest first")
    func violations() throws {
        let store = try TaskStore.inMemory()
        #expect(try store.violations(appID: Sample.maps, since: 0).map(\.time).isEmpty)
        var time = 0.0
        for event in HistoryEvent.allCases {
            time += 1
            try store.append(Sample.entry(event, at: time))
            try store.append(Sample.entry(event, at: time, app: Sample.feeds))
        }
        let violating = HistoryEvent.allCases.filter(\.isViolation)
        #expect(violating.count == 6)
        let all = try store.violations(appID: Sample.maps, since: 0).map(\.time)
        #expect(all.count == violating.count)
        #expect(all.last == Double(HistoryEvent.allCases.lastIndex { $0.isViolation }! + 1))
        let expiredAt = Double(HistoryEvent.allCases.firstIndex(of: .expired)! + 1)
        let later = try store.violations(appID: Sample.maps, since: expiredAt + 1).map(\.time)
        #expect(later.count == violating.count - 1)
    }

    @Test("the tasks of one slice that overran, written at one time, are one violation")
    func oneViolationPerSlice() throws {
        let store = try TaskStore.inMemory()
        // One slice of three tasks expired, then throttled in another slice, then one more expiry.
        for _ in 0..<3 { try store.append(Sample.entry(.expired, at: 10)) }
        for _ in 0..<2 { try store.append(Sample.entry(.cpuThrottled, at: 20)) }
        try store.append(Sample.entry(.expired, at: 30))
        let counted = try store.violations(appID: Sample.maps, since: 0).map(\.time)
        #expect(counted == [10, 20, 30])
        // With their kinds, so that explain can say the app used too much CPU, not that it overran.
        let kinds = try store.violations(appID: Sample.maps, since: 0)
        #expect(kinds.map(\.time) == [10, 20, 30] && kinds.map(\.kind) == [.overrun, .cpu, .overrun])
    }

    @Test("each violating event reads back with its kind", arguments: HistoryEvent.allCases.filter(\.isViolation))
    func violationKinds(_ event: HistoryEvent) throws {
        let store = try TaskStore.inMemory()
        try store.append(Sample.entry(event, at: 10))
        let expected: ViolationKind = event.rawValue.hasPrefix("cpu-") ? .cpu : .overrun
        #expect(try store.violations(appID: Sample.maps, since: 0).map(\.kind) == [expected])
    }

    @Test("pruning drops the entries before a time and keeps the ids of the rest")
    func prune() throws {
        let store = try TaskStore.inMemory()
        for time in [1.0, 2, 3, 4] {
            try store.append(Sample.entry(.submitted, at: time))
        }
        let before = try store.history(since: 0, limit: 10)
        try store.pruneHistory(before: 3)
        #expect(try store.history(since: 0, limit: 10) == Array(before.suffix(2)))
        // AUTOINCREMENT: a new entry never takes a pruned id.
        let next = try store.append(Sample.entry(.submitted, at: 0.5))
        #expect(next > before.last!.id!)
    }

    @Test("pruning keeps at most a number of entries per app, the newest, and leaves the other apps' alone")
    func prunePerApp() throws {
        let store = try TaskStore.inMemory()
        // The flooding app: 8 entries, two of them at the same time (the id breaks the tie).
        for time in [1.0, 2, 3, 3, 5, 6, 7, 8] { try store.append(Sample.entry(.submitted, at: time, app: Sample.maps)) }
        for time in [1.5, 2.5] { try store.append(Sample.entry(.submitted, at: time, app: Sample.feeds)) }
        for time in [0.5, 9] { try store.append(Sample.entry(.globalDisabled, at: time, app: nil)) }
        let all = try store.history(since: 0, limit: 100)
        let trimmed = try store.pruneHistory(before: 0, perApp: 3)
        #expect(trimmed == 5)
        let kept = try store.history(since: 0, limit: 100)
        #expect(kept.filter { $0.appID == Sample.maps }.map(\.time) == [6, 7, 8])
        #expect(kept.filter { $0.appID == Sample.feeds } == all.filter { $0.appID == Sample.feeds })
        #expect(kept.filter { $0.appID == nil } == all.filter { $0.appID == nil })
        // Under the limit, nothing more goes.
        #expect(try store.pruneHistory(before: 0, perApp: 3) == 0)
        #expect(try store.history(since: 0, limit: 100) == kept)
    }

    /// Submit writes a row each time and has no rate limit: an app that resubmits 20,001 times
    /// in a loop made the next prune take its oldest rows whatever they were, and with them
    /// the violations and refresh answers the agent reads back at start to penalise it.
    @Test("an app's flood of other entries leaves the violations and refresh answers the agent reads back")
    func pruneKeepsWhatTheAgentReadsBack() throws {
        let store = try TaskStore.inMemory()
        try store.append(Sample.entry(.expired, at: 10))
        try store.append(Sample.entry(.cpuThrottled, at: 11))
        try store.append(
            HistoryEntry(
                time: 12, appID: Sample.maps, identifier: "org.gnome.Maps.refresh", taskID: "t1", event: .completed,
                kind: .refresh, result: .noData, detail: ""))
        for n in 0...TaskStore.historyPerAppLimit {
            try store.append(Sample.entry(.replaced, at: 20 + UnixTime(n)))
        }
        // Only the oldest `replaced` goes: the cap holds the flood to its own kind.
        #expect(try store.pruneHistory(before: 0) == 1)
        #expect(try store.violations(appID: Sample.maps, since: 0).map(\.time) == [10, 11])
        let results = try store.refreshResults(since: 0)
        #expect(results.map(\.appID) == [Sample.maps] && results.map(\.result) == [.noData])
        let replaced = try store.history(since: 0, limit: 2 * TaskStore.historyPerAppLimit).filter { $0.event == .replaced }
        #expect(replaced.count == TaskStore.historyPerAppLimit && replaced.first?.time == 21)
    }

    @Test("violations, refresh answers and the other entries are each capped apart, the newest kept")
    func prunePerKind() throws {
        let store = try TaskStore.inMemory()
        func refresh(_ time: UnixTime, _ kind: DeliveryKind = .refresh) -> HistoryEntry {
            HistoryEntry(
                time: time, appID: Sample.maps, identifier: "org.gnome.Maps.x", taskID: "t\(time)", event: .completed,
                kind: kind, result: .newData, detail: "")
        }
        for time in [1.0, 2, 3] { try store.append(Sample.entry(.backgroundTaskExpired, at: time)) }
        for time in [4.0, 5, 6] { try store.append(refresh(time)) }
        // A processing task's answer is not what the planner reads back: one of the rest.
        try store.append(refresh(7, .processing))
        for time in [8.0, 9] { try store.append(Sample.entry(.submitted, at: time)) }
        #expect(try store.pruneHistory(before: 0, perApp: 2) == 3)
        #expect(try store.history(since: 0, limit: 100).map(\.time) == [2, 3, 5, 6, 8, 9])
        #expect(try store.pruneHistory(before: 0, perApp: 2) == 0)
    }

    // MARK: Usage

    @Test("usage records every state, per app, oldest first")
    func usage() throws {
        let store = try TaskStore.inMemory()
        try store.appendUsage(appID: Sample.maps, state: .background, at: 20)
        try store.appendUsage(appID: Sample.feeds, state: .foreground, at: 15)
        try store.appendUsage(appID: Sample.maps, state: .foreground, at: 10)
        let maps = try store.usage(appID: Sample.maps)
        #expect(maps.map(\.state) == [.foreground, .background])
        #expect(maps.map(\.time) == [10, 20])
        #expect(Set(UsageState.allCases) == Set(try store.usage(appID: Sample.maps).map(\.state)))
    }

    // MARK: Words from a newer agent

    @Test("words this agent does not know are skipped or read conservatively, never trapped on")
    func unknownWords() throws {
        let store = try TaskStore.inMemory()
        try store.saveApp(Sample.app(Sample.maps))
        try store.execute(sql: """
            INSERT INTO apps (app_id, identity, registered_at) VALUES ('org.example.Future', 'attested-by-tpm', 1);
            INSERT INTO apps (app_id, identity, registered_at) VALUES ('not an id!', 'flatpak', 1);
            INSERT INTO pending (app_id, identifier, kind, submitted_at) VALUES ('org.gnome.Maps', 'future', 'teleport', 1);
            INSERT INTO pending (app_id, identifier, kind, submitted_at, expected_duration) VALUES ('org.gnome.Maps', 'huge', 'refresh', 2, 99999999999);
            INSERT INTO running (task_id, slice_id, app_id, identifier, kind, started_at, deadline) VALUES ('tf', 's', 'org.gnome.Maps', 'future', 'teleport', 1, 2);
            INSERT INTO history (time, app_id, event, detail) VALUES (1, 'org.gnome.Maps', 'quantum-leap', 'x');
            INSERT INTO history (time, app_id, event, kind, result, detail) VALUES (2, 'org.gnome.Maps', 'completed', 'teleport', 'maybe', 'y');
            INSERT INTO settings (key, value) VALUES ('global_enabled', 'sometimes');
            INSERT INTO usage (app_id, state, time) VALUES ('org.gnome.Maps', 'minimised', 1);
            """)
        let apps = try store.apps()
        #expect(apps.map(\.appID) == [AppID("org.example.Future"), Sample.maps])
        #expect(apps.first?.identity == .unverified)
        #expect(try store.pendingRequests().map(\.identifier) == ["huge"])
        #expect(try store.pendingRequests().first?.expectedDuration == nil)
        #expect(try store.runningTasks().isEmpty)
        let history = try store.history(since: 0, limit: 10)
        #expect(history.map(\.detail) == ["y"])
        #expect(history.first?.kind == nil && history.first?.result == nil)
        #expect(try store.globalEnabled())
        #expect(try store.usage(appID: Sample.maps).isEmpty)
        // The unknown running task is still closed at start-up.
        let recovered = try store.recoverInterrupted(now: 5)
        #expect(recovered.map(\.taskID) == ["tf"])
        #expect(recovered.first?.kind == nil)
    }
}
