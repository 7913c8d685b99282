import BGPolicyCore

/// Background tasks: work the user started in the app, finished after the user leaves it
/// (`BeginBackgroundTask`), with their own expiry.
extension TaskEngine {
    func beginBackgroundTask(caller: String, name: String) throws(SchedulerError) -> (token: String, seconds: UInt32) {
        let appID = try app(of: caller)
        if name.utf8.count > 255 { throw .invalid("the background task name is at most 255 bytes long") }
        if let refusal = policy.backgroundTaskRefusal(context: context(now: Self.wallNow())) {
            throw SchedulerError(.unavailable, refusal.words)
        }
        // Each lasts a slice at most, but one app calling in a loop would otherwise hold
        // thousands, each with its timer and its history.
        let under = backgroundTasks.values.count(where: { $0.appID == appID })
        if under >= Self.maximumBackgroundTasks {
            throw SchedulerError(
                .limitsExceeded,
                "\(appID) already has \(under) background tasks under way (the limit is \(Self.maximumBackgroundTasks)): end one with EndBackgroundTask first")
        }
        let token = Self.newID("b")
        let length = configuration.slices.completion
        let warning = configuration.slices.expirationWarning
        var task = BackgroundTask(token: token, appID: appID, name: name, connection: caller, startedAt: Self.wallNow())
        task.timer = Task {
            do { try await AgentExecutor.sleep(for: max(.zero, length - warning)) } catch { return }
            self.warnBackgroundTask(token)
            do { try await AgentExecutor.sleep(for: warning) } catch { return }
            self.expireBackgroundTask(token)
        }
        backgroundTasks[token] = task
        appendHistory(HistoryEntry(
            time: task.startedAt, appID: appID, identifier: name, taskID: token, event: .backgroundTaskBegan,
            detail: "background task '\(name)' began: \(Int(length.seconds)) s to finish"))
        return (token, UInt32(length.seconds.rounded()))
    }

    /// Background tasks one app may have under way at once.
    static let maximumBackgroundTasks = 16

    func warnBackgroundTask(_ token: String) {
        guard let task = backgroundTasks[token] else { return }
        sendExpire(token, to: task.connection)
    }

    func expireBackgroundTask(_ token: String) {
        guard let task = backgroundTasks.removeValue(forKey: token) else { return }
        appendHistory(HistoryEntry(
            time: Self.wallNow(), appID: task.appID, identifier: task.name, taskID: token, event: .backgroundTaskExpired,
            result: .failed, detail: "background task '\(task.name)' was not ended in time: a violation",
            duration: Self.wallNow() - task.startedAt))
    }

    /// A background task under way as the machine goes to sleep: told to wrap up
    /// (`ExpireTask`, as slices are) and closed as `sleep-expired`, not a violation. It ran on
    /// after the resume with what was left of its 30 s, the app's work cut off mid-way
    /// without a word (a connection dropped by the sleep, a save half written).
    func expireBackgroundTaskForSleep(_ token: String) {
        guard let task = backgroundTasks.removeValue(forKey: token) else { return }
        task.timer?.cancel()
        sendExpireExpectingNoReply(token, to: task.connection)
        appendHistory(HistoryEntry(
            time: Self.wallNow(), appID: task.appID, identifier: task.name, taskID: token, event: .sleepExpired,
            result: .failed,
            detail: "background task '\(task.name)' expired because the machine went to sleep (ExpireTask sent); not a violation",
            duration: Self.wallNow() - task.startedAt))
    }

    func endBackgroundTask(caller: String, token: String) throws(SchedulerError) {
        let appID = try app(of: caller)
        guard let task = backgroundTasks[token], task.appID == appID else {
            throw SchedulerError(.unknownTask, "\(appID) has no background task '\(SchedulerError.shown(token))'; it may have expired already")
        }
        task.timer?.cancel()
        backgroundTasks[token] = nil
        appendHistory(HistoryEntry(
            time: Self.wallNow(), appID: appID, identifier: task.name, taskID: token, event: .backgroundTaskEnded,
            detail: "background task '\(task.name)' ended", duration: Self.wallNow() - task.startedAt))
    }
}
