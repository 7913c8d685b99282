import BGPolicyCore
import BGPolicyDBus
import BGPolicyStore
import Logging

/// `NotifyContentAvailable`: a sync or push service asks to wake an app. The wake waits, newest
/// only, for the next wake window, by token bucket on battery (SPEC §2).
///
/// The wake and the bucket are kept in memory and stored after it (`content_wakes`,
/// `content_buckets`), so that a restart loses neither: `loadContentWakes()` puts them back at
/// start. Memory comes first here, unlike the rest of the engine: a write that fails (a full
/// disk) is logged and the wake still goes out from memory, because refusing the notification
/// would lose the wake at once, where a failed write loses it only if the agent also restarts.
/// The stored wake is removed once `RunTask` has delivered it; a failed delivery leaves it.
extension TaskEngine {
    /// The largest payload kept, marshalled: a wake says "there is something", the app fetches it.
    static let maximumContentPayload = 4096

    /// Apps with an undelivered content-available wake.
    func contentWakeApps() -> [AppID] { contentWakes.undelivered }

    /// Apps with an undelivered wake that may be delivered now: not while it is being written.
    func deliverableContentWakeApps() -> [AppID] {
        contentWakeWrites.isEmpty ? contentWakes.undelivered : contentWakes.undelivered.filter { contentWakeWrites[$0] == nil }
    }

    func notifyContentAvailable(caller: String, app text: String, payload: [String: Variant]) async throws(SchedulerError) {
        let appID = try SchedulerError.appID(text)
        guard apps[appID] != nil else { throw .unknownApp(text) }
        let value = payload.dbusValue
        guard let size = value.marshalledLength else {
            throw .invalid("the payload may not carry file descriptors: the wake is delivered later, to another process")
        }
        guard size <= Self.maximumContentPayload else {
            throw .invalid(
                "the payload is \(size) bytes marshalled, over the \(Self.maximumContentPayload) allowed: send a "
                    + "small hint (a mailbox, a cursor) and let the app fetch the content itself")
        }
        let now = Self.wallNow()
        contentWakes.perHour = configuration.limits.contentAvailablePerHour
        let metadata: Logger.Metadata = ["app.id": "\(appID)", "sender": "\(caller)"]
        switch contentWakes.notify(appID, payload: payload, at: now, onBattery: conditions.onBattery) {
        case .rateLimited(let next):
            logger.info("Content-available wake refused by the rate limit", metadata: metadata)
            throw SchedulerError(
                .limitsExceeded,
                ContentAvailableQueue<[String: Variant]>.refusalMessage(
                    appID: appID, perHour: configuration.limits.contentAvailablePerHour, nextAllowedAt: next, now: now))
        case .queued(let replaced, _):
            logger.debug("Content-available wake queued", metadata: metadata.merging(["replaced": "\(replaced)"]) { $1 })
            if !replaced {
                appendHistory(HistoryEntry(
                    time: now, appID: appID, event: .contentQueued, kind: .contentAvailable,
                    detail: "content-available wake from \(caller); delivered in the next wake window"))
            }
        }
        await storeContentWake(of: appID)
        requestEvaluation(for: appID)
    }

    // MARK: Keeping wakes across restarts

    /// The encoding of stored payloads (`content_wakes.payload_encoding`): a D-Bus message in
    /// the wire format of the D-Bus specification ("Message Format", major protocol version 1),
    /// a method call `org.bgpolicy.Scheduler1.NotifyContentAvailable` to
    /// `/org/bgpolicy/Agent1` whose body is the payload alone, one `a{sv}`. libdbus writes and
    /// reads it (`dbus_message_marshal`, `dbus_message_demarshal`); the message carries its own
    /// byte order. A later agent that stores payloads otherwise names its encoding anew and
    /// keeps reading this one.
    static let contentPayloadEncoding = "dbus-message-1"

    static func encodeContentPayload(_ payload: [String: Variant]) throws(DBusError) -> [UInt8] {
        try Message.methodCall(
            destination: nil, path: ObjectPath(BGPolicyNames.objectPath), interface: BGPolicyNames.schedulerInterface,
            member: "NotifyContentAvailable", body: [payload.dbusValue]
        ).marshal()
    }

    /// The payload stored in `bytes`, or `nil` when they are not in `encoding`, or `encoding` is
    /// one this agent does not know.
    static func decodeContentPayload(_ bytes: [UInt8], encoding: String) -> [String: Variant]? {
        guard encoding == contentPayloadEncoding,
            let message = try? Message.demarshal(bytes), message.signature == "a{sv}", let body = message.body.first
        else { return nil }
        return try? VariantDictionary(dbusValue: body)
    }

    /// Writes the app's undelivered wake and its bucket, as they are in memory now, on the
    /// store's writer thread. The wake is not delivered until the write is done, so that it is
    /// never delivered (and its row removed) before its row is written; the app's requests are
    /// evaluated meanwhile, as usual. A notification that comes while the app's wake is being
    /// written does not queue a write of its own: the write under way is followed by one more,
    /// of the newest wake, however many came (`contentWakeWrites`). So senders that keep
    /// replacing a wake cost two writes at a time, not one each. A full disk spends the store's
    /// reserve on it (`spendingReserve`); a failure even so is logged, and the wake stays in
    /// memory and is delivered all the same.
    func storeContentWake(of appID: AppID) async {
        guard contentWakeWrites[appID] == nil else {
            contentWakeWrites[appID] = .again
            return
        }
        defer {
            contentWakeWrites[appID] = nil
            requestEvaluation(for: appID)
        }
        repeat {
            contentWakeWrites[appID] = .writing
            await writeContentWake(of: appID)
        } while contentWakeWrites[appID] == .again
    }

    /// Whether a content-available wake is being written again after a newer one came.
    enum ContentWakeWrite {
        case writing
        /// A newer wake came while it was written: one more write follows.
        case again
    }

    /// One write of `storeContentWake`.
    private func writeContentWake(of appID: AppID) async {
        guard let write = contentWakeWrite(of: appID) else { return }
        do {
            try await writer.run(write)
        } catch {
            logger.error(
                "Could not store a content-available wake; it is kept in memory only and lost if the agent stops",
                metadata: ["app.id": "\(appID)", "error": "\(error)"])
        }
    }

    /// The write of the app's wake and bucket as they are in memory now, for the store's writer;
    /// nil when it has no wake, or its payload cannot be encoded (logged).
    private func contentWakeWrite(of appID: AppID) -> (@Sendable () throws(StoreError) -> Void)? {
        guard let wake = contentWakes.wake(for: appID) else { return nil }
        let record: ContentWakeRecord
        do {
            record = ContentWakeRecord(
                appID: appID, payload: try Self.encodeContentPayload(wake.payload),
                payloadEncoding: Self.contentPayloadEncoding, receivedAt: wake.receivedAt,
                firstReceivedAt: wake.firstReceivedAt, notificationCount: wake.notificationCount)
        } catch {
            logger.error(
                "Could not encode a content-available wake; it is kept in memory only",
                metadata: ["app.id": "\(appID)", "error": "\(error)"])
            return nil
        }
        let bucket = contentWakes.bucket(for: appID)
        let store = store
        let logger = logger
        // The sender was told the wake was accepted: on a full disk, the reserve keeps it.
        return { () throws(StoreError) in
            try Self.spendingReserve(store: store, logger: logger, appID: appID, keeping: "a content-available wake") {
                () throws(StoreError) in try store.saveContentWake(record, bucket: bucket)
            }
        }
    }

    /// At the stop: the newest wake of each app whose write is under way with a newer one
    /// waiting (`.again`), queued now, ahead of the stop's wait for the writer. The loop of
    /// `storeContentWake` would queue it only once the write under way is done, which may be
    /// after that wait, and the process would end without it.
    func queueWaitingContentWakes() {
        let logger = logger
        for (appID, write) in contentWakeWrites where write == .again {
            guard let job = contentWakeWrite(of: appID) else { continue }
            writer.enqueue {
                do {
                    try job()
                } catch {
                    logger.error(
                        "Could not store a content-available wake at the stop; the one stored before it is delivered after the restart",
                        metadata: ["app.id": "\(appID)", "error": "\(error)"])
                }
            }
        }
    }

    /// Moves the stored buckets' and wakes' times by `step`, as `wallClockStepped(by:)` moved
    /// them in memory. On the writer, behind the wake writes queued before the step (their
    /// times are from before it), so that each row moves once. A failure is logged: a restart
    /// before the buckets refill would then count from the times stored before the clock was
    /// set.
    func moveStoredContentTimes(by step: Double) {
        let store = store
        let logger = logger
        writer.enqueue {
            do {
                try store.moveContentTimes(by: step)
            } catch {
                logger.warning(
                    "Could not move the stored content-available times with the wall clock",
                    metadata: ["step.seconds": "\(Int(step.rounded()))", "error": "\(error)"])
            }
        }
    }

    /// `RunTask` delivered the app's wake: its row goes, unless a newer wake arrived meanwhile,
    /// whose row has replaced it. A failure is logged; the wake would then be delivered again
    /// after a restart.
    func contentWakeDelivered(_ appID: AppID) {
        guard contentWakes.wake(for: appID) == nil else { return }
        do {
            try store.deleteContentWake(appID: appID)
        } catch {
            logger.error(
                "Could not remove a delivered content-available wake from the store",
                metadata: ["app.id": "\(appID)", "error": "\(error)"])
        }
    }

    /// Puts back the wakes and buckets that the agent stored before it last stopped, at start,
    /// after the apps are loaded. A wake whose payload cannot be read is left out (and left in
    /// the file, for the agent that wrote it); its bucket still counts.
    func loadContentWakes() throws(StoreError) {
        contentWakes.perHour = configuration.limits.contentAvailablePerHour
        let buckets = try store.contentBuckets(perHour: configuration.limits.contentAvailablePerHour)
        var wakes: [AppID: ContentAvailableQueue<[String: Variant]>.Wake] = [:]
        for record in try store.contentWakes() where apps[record.appID] != nil {
            guard let payload = Self.decodeContentPayload(record.payload, encoding: record.payloadEncoding) else {
                logger.warning(
                    "Stored content-available wake not readable; not delivered",
                    metadata: ["app.id": "\(record.appID)", "encoding": "\(record.payloadEncoding)"])
                continue
            }
            wakes[record.appID] = ContentAvailableQueue.Wake(
                payload: payload, receivedAt: record.receivedAt, firstReceivedAt: record.firstReceivedAt,
                notificationCount: max(record.notificationCount, 1))
        }
        for appID in Set(wakes.keys).union(buckets.keys) where apps[appID] != nil {
            contentWakes.restore(appID, wake: wakes[appID], bucket: buckets[appID])
        }
        if !wakes.isEmpty {
            logger.info("Content-available wakes loaded", metadata: ["wakes": "\(wakes.count)", "buckets": "\(buckets.count)"])
        }
    }
}
