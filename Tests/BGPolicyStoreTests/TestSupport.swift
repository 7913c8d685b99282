import BGPolicyCore
import Foundation

/// A fresh directory under the system's temporary directory, removed by `remove()`.
struct ScratchDirectory {
    let path: String

    init() throws {
        path = NSTemporaryDirectory() + "bgpolicy-store-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
    }

    func remove() {
        try? FileManager.default.removeItem(atPath: path)
    }

    func exists(_ name: String) -> Bool {
        FileManager.default.fileExists(atPath: path + "/" + name)
    }

    func names() -> [String] {
        ((try? FileManager.default.contentsOfDirectory(atPath: path)) ?? []).sorted()
    }
}

extension AppID {
    /// Test ids are literals, known to be valid.
    init(_ text: String) {
        self.init(rawValue: text)!
    }
}

enum Sample {
    static let maps = AppID("org.gnome.Maps")
    static let feeds = AppID("org.example.Feeds")

    static func app(_ appID: AppID, identifiers: [String]? = nil, registeredAt: UnixTime = 1_000) -> AppRecord {
        AppRecord(
            appID: appID, identifiers: identifiers ?? ["\(appID).refresh", "\(appID).cleanup"],
            identity: .flatpak, registeredAt: registeredAt)
    }

    static func request(
        _ appID: AppID, _ identifier: String, kind: TaskKind = .refresh, submittedAt: UnixTime = 2_000
    ) -> TaskRequest {
        TaskRequest(appID: appID, identifier: identifier, kind: kind, submittedAt: submittedAt)
    }

    static func running(_ taskID: String, _ appID: AppID, _ identifier: String, startedAt: UnixTime = 3_000) -> RunningTaskRecord {
        RunningTaskRecord(
            taskID: taskID, sliceID: "slice-\(taskID)", appID: appID, identifier: identifier, kind: .refresh,
            startedAt: startedAt, deadline: startedAt + 30)
    }

    static func entry(
        _ event: HistoryEvent, at time: UnixTime, app appID: AppID? = Sample.maps, detail: String = "test"
    ) -> HistoryEntry {
        HistoryEntry(time: time, appID: appID, event: event, detail: detail)
    }
}
