import BGPolicyCore
import BGPolicyDBus
import BGPolicyStore
import Logging

/// What a delivery that fails does: its requests go back to pending, written first (spending
/// the store's reserve on a full disk), with the attempt and the reason recorded.
extension TaskEngine {
    /// Puts undelivered tasks back: pending again (written first, so a crash in between
    /// leaves the request pending rather than lost), then the running rows removed.
    func unstart(_ members: [Slice.Member], sliceID: String, reason: String) {
        let now = Self.wallNow()
        for member in members {
            returnToPending(member, sliceID: sliceID, reason: reason, sent: true, now: now)
        }
        if let appID = members.first?.request.appID {
            noteDeliveryFailure(of: appID, at: now)
        }
    }

    /// One task of `unstart` or `returnUnsent`. `sent`: its `RunTask` was sent and failed, an
    /// attempt that counts (`failedAttempt`); else it was never sent, and goes back as it was.
    func returnToPending(_ member: Slice.Member, sliceID: String, reason: String, sent: Bool, now: UnixTime) {
        let outcome = sent ? "RunTask failed" : "RunTask not sent"
        if member.kind == .contentAvailable {
            putBack(member, sliceID: sliceID, reason: reason, outcome: outcome, now: now)
            return
        }
        // The app submitted the identifier again while RunTask was on its way (an app
        // started for its work submits at start): the newer request stands, with its own
        // options and earliest_begin, and its write is done or queued. Put back, the old one
        // replaced it in memory and on disk.
        let newer = pending[member.request.appID]?[member.request.identifier]
        // The app registered again without the identifier while RunTask was on its way: its
        // requests went then, and this one goes too. Put back, it was delivered in every window
        // to an app that no longer knows it, each refusal doubling the wait of its other work.
        if newer == nil, apps[member.request.appID]?.record.identifiers.contains(member.request.identifier) != true {
            dropWithdrawn(member, sliceID: sliceID, reason: reason, outcome: outcome, now: now)
            return
        }
        let request = newer ?? (sent ? Self.failedAttempt(member.request, reason: reason, now: now) : member.request)
        // Asked before the write: a job queued before it may run during it, or right after,
        // and leave the writer idle by the time it is done.
        let writesQueued = !writer.isIdle
        do {
            try Self.spendingReserve(store: store, logger: logger, appID: request.appID, keeping: Self.putBackWords) { () throws(StoreError) in
                try storeReturn(
                    of: request, taskID: member.taskID, reason: reason, at: now, repending: newer == nil, outcome: outcome)
            }
            if newer == nil, writesQueued { saveAgainBehindQueuedWrites(request) }
        } catch {
            // On disk the task is still running, and a start would close it as interrupted
            // and never deliver it: written again at the next chance.
            unsavedReturns[member.taskID] = (request, reason, now)
            logger.error(
                "Could not put a request back on disk; it stays pending, and is written again at the next chance",
                metadata: ["app.id": "\(request.appID)", "error": "\(error)"])
        }
        pending[request.appID, default: [:]][request.identifier] = request
        taskSlices[member.taskID] = nil
        slices[sliceID]?.members.removeAll { $0.taskID == member.taskID }
    }

    /// A request put back by `returnToPending` is written on the executor, at once, with its
    /// task's end. A write queued on the store writer before it (a `CancelAll` of the app's
    /// other requests, the second delete of a registration's withdrawal) would land after it and
    /// delete it from disk while memory keeps it: the next start would have lost it. So it is
    /// written once more behind them, and ahead of any queued after (the app's own `Cancel`);
    /// the app is not evaluated until then, so that a delivery's delete of its row cannot come
    /// before this write either.
    func saveAgainBehindQueuedWrites(_ request: TaskRequest) {
        let appID = request.appID
        let store = store
        let logger = logger
        beginSaving(appID)
        writer.enqueue { [self] in
            do {
                try Self.spendingReserve(store: store, logger: logger, appID: appID, keeping: Self.putBackWords) { () throws(StoreError) in
                    try store.savePending(request)
                }
            } catch {
                logger.error(
                    "Could not write again a request put back after a failed delivery; the next start may not find it pending",
                    metadata: ["app.id": "\(appID)", "error": "\(error)"])
            }
            Task { await self.endSaving(appID) }
        }
    }

    /// A task of `returnToPending` whose identifier the app no longer registers: its running
    /// row goes, with a `delivery-failed` entry that says why it is not pending again. A failed
    /// write leaves the row, which the next start closes as interrupted: nothing comes back.
    func dropWithdrawn(_ member: Slice.Member, sliceID: String, reason: String, outcome: String, now: UnixTime) {
        let request = member.request
        do {
            try store.finishTask(
                taskID: member.taskID,
                history: HistoryEntry(
                    time: now, appID: request.appID, identifier: request.identifier, taskID: member.taskID,
                    event: .deliveryFailed, kind: DeliveryKind(request.kind),
                    detail: "\(outcome): \(reason); the app registered again without \(request.identifier), so the request is dropped"))
        } catch {
            logger.error(
                "Could not record a dropped request the app had withdrawn",
                metadata: ["app.id": "\(request.appID)", "task.identifier": "\(request.identifier)", "error": "\(error)"])
        }
        taskSlices[member.taskID] = nil
        slices[sliceID]?.members.removeAll { $0.taskID == member.taskID }
    }

    /// A content-available wake that did not reach the app waits for the next window again,
    /// unless a newer one arrived meanwhile (only the newest is kept).
    /// The request pending again (written first, so a crash in between leaves it pending
    /// rather than lost), then the task's running row gone, with its history.
    /// `repending: false`: a newer request for the identifier is pending, and stays as it is.
    func storeReturn(
        of request: TaskRequest, taskID: String, reason: String, at time: UnixTime, repending: Bool = true,
        outcome: String = "RunTask failed"
    ) throws(StoreError) {
        if repending { try store.savePending(request) }
        try store.finishTask(
            taskID: taskID,
            history: HistoryEntry(
                time: time, appID: request.appID, identifier: request.identifier, taskID: taskID,
                event: .deliveryFailed, kind: DeliveryKind(request.kind),
                detail: repending
                    ? "\(outcome): \(reason); the request stays pending"
                    : "\(outcome): \(reason); the app submitted it again meanwhile, and that request stays pending"))
    }

    /// Writes again what `unstart` could not (`unsavedReturns`): the request as memory holds
    /// it now, if it is still pending (it may have been replaced, attempted again, cancelled or
    /// delivered since), and the old task's end.
    func storeUnsavedReturns() {
        for (taskID, unsaved) in unsavedReturns.sorted(by: { $0.key < $1.key }) {
            let request = unsaved.request
            let current = pending[request.appID]?[request.identifier]
            do {
                if let current {
                    try Self.spendingReserve(store: store, logger: logger, appID: request.appID, keeping: Self.putBackWords) { () throws(StoreError) in
                        try storeReturn(of: current, taskID: taskID, reason: unsaved.reason, at: unsaved.at)
                    }
                } else {
                    try store.finishTask(
                        taskID: taskID,
                        history: HistoryEntry(
                            time: unsaved.at, appID: request.appID, identifier: request.identifier, taskID: taskID,
                            event: .deliveryFailed, kind: DeliveryKind(request.kind), detail: "RunTask failed: \(unsaved.reason)"))
                }
                unsavedReturns[taskID] = nil
                logger.info("A request put back in memory is on disk again", metadata: ["app.id": "\(request.appID)"])
            } catch {
                return  // The disk still refuses: the next chance.
            }
        }
    }

    /// `write`, which keeps what would otherwise be in memory only, tried once more when the
    /// disk is full, on the room the store keeps in reserve for it (`TaskStore.releaseReserve`).
    /// For a request put back after a failed delivery: a stop or a crash before the disk had
    /// room again would take the request's task for interrupted and lose the request. For a
    /// content-available wake the sender was told was accepted: a stop would lose it. The
    /// reserve is made again once there is room (`keepReserveIfDue`). `what` names it in the
    /// log. Static, for the store writer too (`saveAgainBehindQueuedWrites`, the wakes' writes).
    nonisolated static func spendingReserve(
        store: TaskStore, logger: Logger, appID: AppID, keeping what: String, _ write: () throws(StoreError) -> Void
    ) throws(StoreError) {
        do {
            try write()
        } catch .full(let message) {
            guard store.releaseReserve() else { throw .full(message) }
            logger.error(
                "The disk is full: the room kept in reserve was given back to keep \(what); free some space on the disk that holds the database",
                metadata: ["app.id": "\(appID)", "database": "\(store.path ?? "-")", "error": "\(message)"])
            try write()
        }
    }

    /// What `spendingReserve` keeps for `returnToPending`, in its log.
    static let putBackWords = "a request put back after a failed delivery"

    func putBack(_ member: Slice.Member, sliceID: String, reason: String, outcome: String = "RunTask failed", now: UnixTime) {
        let appID = member.request.appID
        if let wake = member.contentWake { contentWakes.putBack(appID, wake: wake) }
        do {
            try store.finishTask(
                taskID: member.taskID,
                history: HistoryEntry(
                    time: now, appID: appID, identifier: "", taskID: member.taskID, event: .deliveryFailed,
                    kind: .contentAvailable, detail: "\(outcome): \(reason); the wake waits for the next window"))
        } catch {
            logger.error("Could not record a failed content-available delivery", metadata: ["app.id": "\(appID)", "error": "\(error)"])
        }
        taskSlices[member.taskID] = nil
        slices[sliceID]?.members.removeAll { $0.taskID == member.taskID }
    }

    /// The app answered a content-available `RunTask` with an error of its own (it has no
    /// handler for wakes, or turned this one down): the wake is dropped, not put back. Another
    /// process sent it, so the app cannot withdraw it; kept, it would be refused in every
    /// window, and each refusal would lengthen the wait that holds the app's own work.
    func dropRefusedWake(_ member: Slice.Member, sliceID: String, reason: String) {
        let appID = member.request.appID
        do {
            try store.finishTask(
                taskID: member.taskID,
                history: HistoryEntry(
                    time: Self.wallNow(), appID: appID, identifier: "", taskID: member.taskID, event: .deliveryFailed,
                    kind: .contentAvailable, detail: "RunTask refused: \(reason); the wake is dropped"))
        } catch {
            logger.error("Could not record a refused content-available wake", metadata: ["app.id": "\(appID)", "error": "\(error)"])
        }
        contentWakeDelivered(appID)
        taskSlices[member.taskID] = nil
        slices[sliceID]?.members.removeAll { $0.taskID == member.taskID }
    }

    /// Whether a failed `RunTask` was answered by the app itself: an error of its own, or the
    /// standard ones a D-Bus library answers for it (no Client1 there, arguments it does not
    /// take). Not the errors the bus gives when it cannot reach the app, start it, or have it
    /// answer in time (`ServiceUnknown`, `NoReply`, `Spawn.*`, `LimitsExceeded`, …), which
    /// say nothing of what the app would answer; nor `org.bgpolicy.Error.Unavailable`, which
    /// the client library answers on a connection it is closing: "not now", not "no".
    static func isAppsOwnAnswer(_ error: any Error) -> Bool {
        guard case DBusError.remote(let name, _) = error else { return false }
        if name == BGPolicyErrorName.unavailable.dbusName { return false }
        let standard = "org.freedesktop.DBus.Error."
        guard name.hasPrefix(standard) else { return true }
        return ["UnknownMethod", "UnknownObject", "UnknownInterface", "InvalidArgs", "NotSupported"]
            .contains(name.dropFirst(standard.count))
    }

    /// Whether a call failed for want of an answer in time: the callee may have it all the same.
    static func isTimeout(_ error: any Error) -> Bool {
        guard case DBusError.remote(let name, _) = error else { return false }
        return name == "org.freedesktop.DBus.Error.NoReply" || name == "org.freedesktop.DBus.Error.Timeout"
    }

    func recordDeliveryFailure(_ requests: [TaskRequest], reason: String, now: UnixTime) {
        for failed in requests {
            let request = Self.failedAttempt(failed, reason: reason, now: now)
            do {
                try store.savePending(request)
            } catch {
                logger.error("Could not record a delivery attempt", metadata: ["app.id": "\(request.appID)", "error": "\(error)"])
            }
            pending[request.appID, default: [:]][request.identifier] = request
            appendHistory(HistoryEntry(
                time: now, appID: request.appID, identifier: request.identifier, event: .deliveryFailed,
                kind: DeliveryKind(request.kind), detail: "not delivered: \(reason); the request stays pending"))
        }
        if let appID = requests.first?.appID { noteDeliveryFailure(of: appID, at: now) }
    }

    /// One more delivery to the app failed: the next waits twice as long as the last did.
    func noteDeliveryFailure(of appID: AppID, at now: UnixTime) {
        guard apps[appID] != nil else { return }
        apps[appID]?.lastDeliveryFailureAt = now
        apps[appID]?.failedDeliveries += 1
    }

    /// The request as it stays pending after a delivery that did not reach the app.
    static func failedAttempt(_ request: TaskRequest, reason: String, now: UnixTime) -> TaskRequest {
        var request = request
        request.deliveryAttempts += 1
        request.lastAttemptAt = now
        request.lastAttemptError = reason
        return request
    }

    /// How much of an app's error message a delivery failure quotes whole.
    static let appMessageBytes = 1024
    /// The most of an app's answer to RunTask that is read: RunTask returns nothing, and an
    /// error needs only its name and a line (`DBusConnection.call(_:timeout:replyBodyLimit:)`).
    static let appReplyBytes = 64 * 1024

    static func describe(deliveryError error: any Error, target: String) -> String {
        switch error {
        case DBusError.remote(let name, let message):
            switch name {
            case "org.freedesktop.DBus.Error.ServiceUnknown", "org.freedesktop.DBus.Error.NameHasNoOwner":
                return "\(target) is not on the bus and cannot be started (\(message))"
            case "org.freedesktop.DBus.Error.NoReply", "org.freedesktop.DBus.Error.Timeout":
                return "\(target) did not answer RunTask in time"
            case "org.freedesktop.DBus.Error.UnknownObject", "org.freedesktop.DBus.Error.UnknownMethod",
                "org.freedesktop.DBus.Error.UnknownInterface":
                return "\(target) does not export org.bgpolicy.Client1 at /org/bgpolicy/Client1"
            default:
                // The app's own words, quoted briefly: this reason is stored with the request and
                // in history, and sent back in SimulateLaunch's error, ListPending, GetPending,
                // Explain and GetHistory, and logged. Whole, an app answering with a message of
                // megabytes made each of those replies and log lines that large, and with 70 MB
                // ListPending could not be answered at all (an array over D-Bus's 64 MiB).
                return "\(target) answered RunTask with \(name): "
                    + SchedulerError.shown(message, over: Self.appMessageBytes, keeping: Self.appMessageBytes / 2)
            }
        default:
            return "\(error)"
        }
    }
}
