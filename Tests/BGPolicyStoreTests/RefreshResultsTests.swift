import BGPolicyCore
import BGPolicyStore
import Testing

@Suite("refreshResults: the answers the planner reads back at start")
struct RefreshResultsTests {
    @Test func onlyCompletedRefreshesSinceTheTimeOldestFirst() throws {
        let store = try TaskStore.inMemory()
        func entry(_ time: UnixTime, _ app: AppID, _ event: HistoryEvent, _ kind: DeliveryKind, _ result: TaskResult?) -> HistoryEntry {
            HistoryEntry(time: time, appID: app, identifier: "\(app).x", taskID: "t\(time)", event: event, kind: kind,
                         result: result, detail: "")
        }
        for e in [
            entry(5, Sample.maps, .completed, .refresh, .newData),  // before `since`
            entry(20, Sample.maps, .completed, .refresh, .noData),
            entry(15, Sample.feeds, .completed, .refresh, .newData),
            entry(16, Sample.feeds, .completed, .processing, .noData),  // not a refresh
            entry(17, Sample.feeds, .expired, .refresh, nil),  // not completed
            entry(30, Sample.feeds, .completed, .refresh, .noData),
        ] {
            _ = try store.append(e)
        }
        let results = try store.refreshResults(since: 10)
        #expect(results.map(\.appID) == [Sample.feeds, Sample.maps, Sample.feeds])
        #expect(results.map(\.result) == [.newData, .noData, .noData])
        #expect(try store.refreshResults(since: 31).isEmpty)
    }
}
