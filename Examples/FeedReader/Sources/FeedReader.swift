import BackgroundTasks
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// The app: what it does when the agent launches each of its tasks.
actor FeedReader {
    static let appID = "org.bgpolicy.examples.FeedReader"
    static let refreshIdentifier = "org.bgpolicy.examples.FeedReader.refresh"
    static let cleanupIdentifier = "org.bgpolicy.examples.FeedReader.cleanup"
    /// Refresh no more often than this; the agent may wait longer.
    static let refreshInterval: TimeInterval = 15 * 60
    /// Maintenance is not urgent: not within the first hour.
    static let cleanupDelay: TimeInterval = 60 * 60
    /// The cleanup task keeps this many items.
    static let cacheLimit = 100

    let scheduler: BGTaskScheduler
    let feedPath: String
    let cachePath: String
    let refreshCompleted: AsyncStream<Void>.Continuation
    /// Tasks completed already: the work and the expiration handler race to finish a task, and
    /// only the first may report.
    private var finished: Set<String> = []

    init(scheduler: BGTaskScheduler, feedPath: String, cachePath: String, refreshCompleted: AsyncStream<Void>.Continuation) {
        self.scheduler = scheduler
        self.feedPath = feedPath
        self.cachePath = cachePath
        self.refreshCompleted = refreshCompleted
    }

    // MARK: Requests

    func submitRefresh() async {
        await submit(BGAppRefreshTaskRequest(
            identifier: Self.refreshIdentifier, earliestBeginDate: Date(timeIntervalSinceNow: Self.refreshInterval)))
    }

    func submitCleanup() async {
        await submit(BGProcessingTaskRequest(
            identifier: Self.cleanupIdentifier, earliestBeginDate: Date(timeIntervalSinceNow: Self.cleanupDelay),
            requiresExternalPower: true))
    }

    private func submit(_ request: some BGTaskRequest) async {
        let kind = request is BGProcessingTaskRequest ? "processing" : "refresh"
        do {
            try await scheduler.submit(request)
            EventLog.emit("submitted", ["identifier": request.identifier, "kind": kind])
        } catch let error as BGTaskSchedulerError {
            EventLog.emit("submit-failed", ["identifier": request.identifier, "error": error.code.rawValue, "message": error.message])
            return
        } catch {
            EventLog.emit("submit-failed", ["identifier": request.identifier, "error": "other", "message": "\(error)"])
            return
        }
        await explain(request.identifier)
    }

    /// Asks the agent what the request waits for, as a user's "why has it not refreshed?" would.
    private func explain(_ identifier: String) async {
        do {
            let why = try await scheduler.explain(taskRequestWithIdentifier: identifier)
            EventLog.emit("explained", [
                "identifier": identifier, "state": why.state?.rawValue ?? "", "blocking": why.blocking.joined(separator: ","),
                "message": why.summary,
            ])
        } catch let error as BGTaskSchedulerError {
            EventLog.emit("explain-failed", ["identifier": identifier, "error": error.code.rawValue, "message": error.message])
        } catch {
            EventLog.emit("explain-failed", ["identifier": identifier, "error": "other", "message": "\(error)"])
        }
    }

    // MARK: Tasks

    /// Reads the feed and writes the cache; new-data when the items changed.
    func refresh(_ task: BGTask) async {
        launched(task)
        // Ask for the next refresh first, as iOS apps do: whatever happens below, one stays pending.
        await submitRefresh()
        do {
            let items = try Feed.items(at: feedPath)
            // The agent wants its time back: do not start writing.
            guard !task.isExpired else { return }
            let previous = FeedCache.items(at: cachePath)
            try FeedCache.write(items, to: cachePath, at: Date())
            let result: BGTaskResult = previous == items ? .noData : .newData
            EventLog.emit("refreshed", ["items": "\(items.count)", "result": result.rawValue])
            await finish(task, success: true, result: result)
        } catch {
            EventLog.emit("refresh-failed", ["message": "\(error)"])
            await finish(task, success: false, result: .failed)
        }
    }

    /// Trims the cache to its newest items.
    func cleanup(_ task: BGTask) async {
        launched(task)
        guard let items = FeedCache.items(at: cachePath) else {
            EventLog.emit("cleaned", ["kept": "0", "removed": "0"])
            await finish(task, success: true, result: nil)
            return
        }
        guard !task.isExpired else { return }
        let kept = Array(items.prefix(Self.cacheLimit))
        do {
            if kept.count < items.count { try FeedCache.write(kept, to: cachePath, at: Date()) }
            EventLog.emit("cleaned", ["kept": "\(kept.count)", "removed": "\(items.count - kept.count)"])
            await finish(task, success: true, result: nil)
        } catch {
            EventLog.emit("cleanup-failed", ["message": "\(error)"])
            await finish(task, success: false, result: .failed)
        }
    }

    private func launched(_ task: BGTask) {
        EventLog.emit("launch", ["identifier": task.identifier, "kind": task.kind.rawValue, "task_id": task.taskID])
        // Set first: the agent may warn at any moment. Stop, and report the task as failed.
        task.expirationHandler = { [weak self] in
            EventLog.emit("expired", ["identifier": task.identifier, "task_id": task.taskID])
            Task { await self?.finish(task, success: false, result: .failed) }
        }
    }

    /// Reports the task once, waits for the agent's answer, and counts finished refreshes.
    private func finish(_ task: BGTask, success: Bool, result: BGTaskResult?) async {
        guard finished.insert(task.taskID).inserted else { return }
        let report = result.map { task.setTaskCompleted(success: success, result: $0) } ?? task.setTaskCompleted(success: success)
        do {
            try await report.value
            EventLog.emit("completed", [
                "identifier": task.identifier, "task_id": task.taskID, "success": "\(success)", "result": result?.rawValue ?? "",
            ])
        } catch let error as BGTaskSchedulerError {
            EventLog.emit("complete-failed", [
                "identifier": task.identifier, "task_id": task.taskID, "error": error.code.rawValue, "message": error.message,
            ])
        } catch {
            EventLog.emit("complete-failed", ["identifier": task.identifier, "task_id": task.taskID, "error": "other", "message": "\(error)"])
        }
        if task.kind == .refresh { refreshCompleted.yield() }
    }
}
