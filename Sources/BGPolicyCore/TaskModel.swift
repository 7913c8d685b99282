/// The words of SPEC §3 that cross the bus, string-backed so they round-trip exactly
/// (STYLE.md example 9), and the plain values the agent, the store and the policy share.

/// What an app asks for with `Submit`.
public enum TaskKind: String, Sendable, CaseIterable, Codable {
    case refresh
    case processing
}

/// The `kind` argument of `org.bgpolicy.Client1.RunTask`.
public enum DeliveryKind: String, Sendable, CaseIterable, Codable {
    case refresh
    case processing
    case contentAvailable = "content-available"
    case transfers

    public init(_ kind: TaskKind) {
        switch kind {
        case .refresh: self = .refresh
        case .processing: self = .processing
        }
    }
}

/// The `result` argument of `SetTaskCompleted`.
public enum TaskResult: String, Sendable, CaseIterable, Codable {
    case newData = "new-data"
    case noData = "no-data"
    case failed
    case unspecified = ""
}

/// The argument of `ReportUsage`.
public enum UsageState: String, Sendable, CaseIterable, Codable {
    case foreground
    case background
}

/// The answer of `GetRefreshStatus`.
public enum RefreshStatus: String, Sendable, CaseIterable, Codable {
    /// Background work may run.
    case available
    /// The user switched this app off.
    case denied
    /// All background work is off: the global switch, power saver, or low battery.
    case restricted
}

/// How the agent knows who an app is (SPEC §1, App identity).
public enum IdentitySource: String, Sendable, CaseIterable, Codable {
    /// `/proc/PID/root/.flatpak-info`.
    case flatpak
    /// The caller's snap, from its cgroup.
    case snap
    /// The caller's systemd unit, `app-<launcher>-<id>-<rand>.scope` or `app-<launcher>-<id>@<rand>.service`.
    case systemdUnit = "systemd-unit"
    /// Named by the caller itself with the `app_id` option; nothing vouches for it.
    case unverified

    /// Whether the id was derived from the caller rather than claimed by it.
    public var isVerified: Bool { self != .unverified }
}

/// A desktop app id such as `org.gnome.Maps`: the key of everything the agent keeps.
///
/// Accepts what desktop ids are in practice: one or more elements of `[A-Za-z0-9_-]`
/// separated by dots, 255 bytes at most, not beginning with `-` (a command line, as
/// `bgpolicy explain APP ID` or `systemctl`, would take it for an option). Reverse-DNS is the
/// convention, not a requirement, because systemd units carry ids like `firefox-esr`.
public struct AppID: RawRepresentable, Hashable, Sendable, Comparable, CustomStringConvertible, Codable {
    public let rawValue: String

    public init?(rawValue: String) {
        guard Self.problem(with: rawValue) == nil else { return nil }
        self.rawValue = rawValue
    }

    /// Why `text` is not an app id, in words, or `nil` when it is one.
    public static func problem(with text: String) -> String? {
        if text.isEmpty { return "an app id may not be empty" }
        if text.utf8.count > 255 { return "an app id is at most 255 bytes long" }
        if text.utf8.first == UInt8(ascii: "-") {
            return "an app id may not begin with '-', which a command line takes for an option"
        }
        for element in text.split(separator: ".", omittingEmptySubsequences: false) {
            if element.isEmpty { return "an app id may not begin or end with a dot, nor hold two dots in a row" }
            for byte in element.utf8 {
                switch byte {
                case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"),
                    UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "_"), UInt8(ascii: "-"):
                    continue
                default:
                    return "an app id holds only ASCII letters, digits, '_', '-' and dots, like org.example.App"
                }
            }
        }
        return nil
    }

    public var description: String { rawValue }
    public static func < (lhs: Self, rhs: Self) -> Bool { lhs.rawValue < rhs.rawValue }
}

/// Task identifiers (`org.example.App.refresh`): letters, digits, `_`, `-` and `.`, so that they
/// print and log safely, and not beginning with `-`, so that `bgpolicy explain APP ID` does not
/// take one for an option. Unlike app ids, the dots are not checked for empty elements: an
/// identifier is the app's own name for its work, not a name the agent derives anything from.
public enum TaskIdentifier {
    /// Why `text` is not a task identifier, or `nil` when it is one.
    public static func problem(with text: String) -> String? {
        if text.isEmpty { return "a task identifier may not be empty" }
        if text.utf8.count > 255 { return "a task identifier is at most 255 bytes long" }
        if text.utf8.first == UInt8(ascii: "-") {
            return "a task identifier may not begin with '-', which a command line takes for an option"
        }
        for byte in text.utf8 {
            switch byte {
            case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"),
                UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "_"), UInt8(ascii: "-"), UInt8(ascii: "."):
                continue
            default:
                return "a task identifier holds only ASCII letters, digits, '_', '-' and '.', like org.example.App.refresh"
            }
        }
        return nil
    }
}

/// Wall-clock time in Unix seconds. The policy takes it as an argument (STYLE.md example 3).
public typealias UnixTime = Double

/// A pending request: what `Submit` stored and the agent has not yet delivered.
public struct TaskRequest: Sendable, Equatable, Codable {
    public var appID: AppID
    public var identifier: String
    public var kind: TaskKind
    /// Not before this time (`earliest_begin`), or as soon as possible when `nil`.
    public var earliestBegin: UnixTime?
    public var requiresNetwork: Bool
    public var requiresExternalPower: Bool
    /// What the app expects the work to take, in seconds; advisory.
    public var expectedDuration: UInt32?
    public var submittedAt: UnixTime
    /// Deliveries tried and failed (the app could not be reached).
    public var deliveryAttempts: Int
    public var lastAttemptAt: UnixTime?
    /// Why the last delivery failed, in words.
    public var lastAttemptError: String?

    public init(
        appID: AppID, identifier: String, kind: TaskKind, earliestBegin: UnixTime? = nil,
        requiresNetwork: Bool = false, requiresExternalPower: Bool = false, expectedDuration: UInt32? = nil,
        submittedAt: UnixTime, deliveryAttempts: Int = 0, lastAttemptAt: UnixTime? = nil, lastAttemptError: String? = nil
    ) {
        self.appID = appID
        self.identifier = identifier
        self.kind = kind
        self.earliestBegin = earliestBegin
        self.requiresNetwork = requiresNetwork
        self.requiresExternalPower = requiresExternalPower
        self.expectedDuration = expectedDuration
        self.submittedAt = submittedAt
        self.deliveryAttempts = deliveryAttempts
        self.lastAttemptAt = lastAttemptAt
        self.lastAttemptError = lastAttemptError
    }
}

/// A registered app, as the store keeps it.
public struct AppRecord: Sendable, Equatable, Codable {
    public var appID: AppID
    /// The identifiers the app declared with `Register`, sorted.
    public var identifiers: [String]
    /// A D-Bus-activatable name at which the agent may reach the app when it is not running.
    public var busName: String?
    /// How the id was established at the last registration.
    public var identity: IdentitySource
    /// Registered with `background_only`: the SIGSTOP/SIGCONT fallback may apply to it.
    public var backgroundOnly: Bool
    /// The user's per-app switch.
    public var enabled: Bool
    public var registeredAt: UnixTime
    /// The last sign the user used the app (registration, `ReportUsage(foreground)`), or `nil`.
    public var lastUsedAt: UnixTime?

    public init(
        appID: AppID, identifiers: [String], busName: String? = nil, identity: IdentitySource,
        backgroundOnly: Bool = false, enabled: Bool = true, registeredAt: UnixTime, lastUsedAt: UnixTime? = nil
    ) {
        self.appID = appID
        self.identifiers = identifiers.sorted()
        self.busName = busName
        self.identity = identity
        self.backgroundOnly = backgroundOnly
        self.enabled = enabled
        self.registeredAt = registeredAt
        self.lastUsedAt = lastUsedAt
    }
}

/// What a history entry records. String-backed: the store and `GetHistory` carry the raw value.
public enum HistoryEvent: String, Sendable, CaseIterable, Codable {
    case registered
    case submitted
    /// A resubmitted identifier replaced its pending request.
    case replaced
    case cancelled
    /// `RunTask` was answered: the task is running in a slice.
    case delivered
    /// `RunTask` failed; the request stays pending.
    case deliveryFailed = "delivery-failed"
    /// `ExpireTask` was sent: the slice ends soon, or the CPU limit was passed.
    case expirationWarned = "expiration-warned"
    /// `SetTaskCompleted` arrived in time.
    case completed
    /// The slice ended without `SetTaskCompleted`: a violation.
    case expired
    /// The app left the bus mid-slice: closed as failed.
    case vanished
    /// The agent stopped (crash, SIGKILL, power loss) with this task running: never delivered again.
    case interrupted
    /// Expired because the machine went to sleep.
    case sleepExpired = "sleep-expired"
    /// Expired because the user switched the app's background work off (or all apps'): the
    /// slice's tasks are told at once and closed, not a violation.
    case switchedOff = "switched-off"
    /// A processing task expired because the user came back (the session no longer locked or
    /// idle): told at once and closed, not a violation.
    case userReturned = "user-returned"
    /// A task expired because a condition it asked for went while it ran: the charger
    /// (`requires_external_power`) or full connectivity (`requires_network`). Told at once and
    /// closed, not a violation.
    case conditionsLost = "conditions-lost"
    case cpuWarned = "cpu-warned"
    case cpuThrottled = "cpu-throttled"
    case cpuFrozen = "cpu-frozen"
    case cpuStopped = "cpu-stopped"
    case cpuObserved = "cpu-observed"
    case cpuReleased = "cpu-released"
    case backgroundTaskBegan = "background-task-began"
    case backgroundTaskEnded = "background-task-ended"
    case backgroundTaskExpired = "background-task-expired"
    case appEnabled = "app-enabled"
    case appDisabled = "app-disabled"
    case globalEnabled = "global-enabled"
    case globalDisabled = "global-disabled"
    /// Written by older agents, before opens and closes had a log of their own (the usage
    /// log); kept so that their history still reads. Never written now.
    case usage
    /// `NotifyContentAvailable` queued a wake for the app's next window.
    case contentQueued = "content-queued"
    /// At start the database was found damaged (or not bgpolicy's): it was moved aside and what
    /// could be read was copied into a fresh one; the detail says where it went and what was lost.
    case databaseRecovered = "database-recovered"

    /// Whether this event counts against the app's future opportunities.
    public var isViolation: Bool { violation != nil }

    /// The kind of violation this event is, if it is one: `explain` names what the app did.
    public var violation: ViolationKind? {
        switch self {
        case .expired, .backgroundTaskExpired: .overrun
        case .cpuThrottled, .cpuFrozen, .cpuStopped, .cpuObserved: .cpu
        default: nil
        }
    }
}

/// What an app did that counts against its future opportunities (SPEC §1, Slice; §2, CPU
/// monitor). Both count alike; they are told apart only so that the words say which happened.
public enum ViolationKind: Sendable, Equatable {
    /// A slice or a background task ran to its end without the app completing it.
    case overrun
    /// The CPU monitor enforced its limit on a slice (throttled, froze, stopped, or, in
    /// `observe` mode, recorded it).
    case cpu
}

/// One line of history. Everything the agent does to an app is kept, so that "it never ran"
/// always has an answer.
public struct HistoryEntry: Sendable, Equatable, Codable {
    /// Assigned by the store; `nil` before it is stored.
    public var id: Int64?
    public var time: UnixTime
    /// `nil` for machine-wide events such as the global switch.
    public var appID: AppID?
    public var identifier: String?
    public var taskID: String?
    public var event: HistoryEvent
    public var kind: DeliveryKind?
    public var result: TaskResult?
    /// The same in words, for people.
    public var detail: String
    /// CPU time the app used in the slice, in seconds, when measured.
    public var cpuSeconds: Double?
    /// How long the slice or task ran, in seconds.
    public var duration: Double?

    public init(
        id: Int64? = nil, time: UnixTime, appID: AppID?, identifier: String? = nil, taskID: String? = nil,
        event: HistoryEvent, kind: DeliveryKind? = nil, result: TaskResult? = nil, detail: String,
        cpuSeconds: Double? = nil, duration: Double? = nil
    ) {
        self.id = id
        self.time = time
        self.appID = appID
        self.identifier = identifier
        self.taskID = taskID
        self.event = event
        self.kind = kind
        self.result = result
        self.detail = detail
        self.cpuSeconds = cpuSeconds
        self.duration = duration
    }
}

/// A task delivered and not yet finished, as the store keeps it so that a crash leaves a trace.
public struct RunningTaskRecord: Sendable, Equatable, Codable {
    public var taskID: String
    public var sliceID: String
    public var appID: AppID
    public var identifier: String
    public var kind: DeliveryKind
    public var startedAt: UnixTime
    public var deadline: UnixTime

    public init(
        taskID: String, sliceID: String, appID: AppID, identifier: String, kind: DeliveryKind,
        startedAt: UnixTime, deadline: UnixTime
    ) {
        self.taskID = taskID
        self.sliceID = sliceID
        self.appID = appID
        self.identifier = identifier
        self.kind = kind
        self.startedAt = startedAt
        self.deadline = deadline
    }
}
