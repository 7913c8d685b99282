import BGPolicyCore
import BGPolicyDBus
import Logging

/// `NotifyContentAvailable`: a sync or push service asks to wake an app. The wake waits, newest
/// only, for the next wake window, by token bucket on battery (SPEC §2).
extension TaskEngine {
    /// The largest payload kept, marshalled: a wake says "there is something", the app fetches it.
    static let maximumContentPayload = 4096

    /// Apps with an undelivered content-available wake.
    func contentWakeApps() -> [AppID] { contentWakes.undelivered }

    func notifyContentAvailable(caller: String, app text: String, payload: [String: Variant]) throws(SchedulerError) {
        guard let appID = AppID(rawValue: text) else {
            throw .invalid("'\(text)' is not an app id: use the reverse-DNS desktop id, such as org.example.Mail")
        }
        guard apps[appID] != nil else { throw .unknownApp(text) }
        let value = payload.dbusValue
        guard let size = Self.marshalledSize(value) else {
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
        requestEvaluation(for: appID)
    }

    /// The size of `value` in the D-Bus wire format, ignoring alignment padding, or `nil` when
    /// it holds a file descriptor.
    static func marshalledSize(_ value: DBusValue) -> Int? {
        switch value {
        case .byte: return 1
        case .boolean, .int32, .uint32: return 4
        case .int16, .uint16: return 2
        case .int64, .uint64, .double: return 8
        case .string(let s): return s.utf8.count + 5
        case .objectPath(let p): return p.description.utf8.count + 5
        case .signature(let s): return s.description.utf8.count + 2
        case .unixFD: return nil
        case .variant(let inner):
            guard let size = marshalledSize(inner) else { return nil }
            return size + inner.type.signature.utf8.count + 2
        case .array(_, let elements):
            var total = 4
            for element in elements {
                guard let size = marshalledSize(element) else { return nil }
                total += size
            }
            return total
        case .dictionary(_, _, let entries):
            var total = 4
            for entry in entries {
                guard let key = marshalledSize(entry.key), let value = marshalledSize(entry.value) else { return nil }
                total += key + value
            }
            return total
        case .structure(let fields):
            var total = 0
            for field in fields {
                guard let size = marshalledSize(field) else { return nil }
                total += size
            }
            return total
        }
    }
}
