import BGPolicyCore
import BGPolicyDBus
#if canImport(FoundationEssentials)
public import FoundationEssentials
#else
public import Foundation
#endif

/// A request to launch the app in the background: `BGAppRefreshTaskRequest` or
/// `BGProcessingTaskRequest`.
///
/// iOS makes these mutable classes. Here they are structs behind this protocol because a request
/// is a value the app fills in and hands over: structs are `Sendable` without locks or
/// `@unchecked`, a request changed after `submit(_:)` cannot change what was sent, and
/// `pendingTaskRequests()` can return plain values. Inspect a pending request with `as?`, as on
/// iOS. Only the two types in this library are meant to conform: `submit(_:)` rejects others.
public protocol BGTaskRequest: Sendable {
    /// The task identifier, one the app registered with
    /// `register(forTaskWithIdentifier:launchHandler:)`.
    var identifier: String { get }
    /// Not before this time; `nil` means as soon as the agent sees fit. At most a week ahead.
    var earliestBeginDate: Date? { get set }
}

/// A request to refresh the app's content in a short slice (30 s by default), scheduled from
/// when the user tends to open the app. An app has one pending at most (unless the agent's
/// `[limits] pending_refresh` allows more): submitting the same identifier again replaces it,
/// while submitting another refresh identifier throws `.tooManyPendingTaskRequests` until the
/// first has run or is cancelled.
public struct BGAppRefreshTaskRequest: BGTaskRequest, Hashable {
    /// The task identifier.
    public let identifier: String
    /// Not before this time, or as soon as the agent sees fit when `nil`.
    public var earliestBeginDate: Date?

    /// A request for `identifier`, to begin no earlier than `earliestBeginDate`.
    public init(identifier: String, earliestBeginDate: Date? = nil) {
        self.identifier = identifier
        self.earliestBeginDate = earliestBeginDate
    }
}

/// A request for deferrable maintenance that may take minutes, run while the machine is idle.
/// An app may have ten pending (the agent's `[limits] pending_processing`).
public struct BGProcessingTaskRequest: BGTaskRequest, Hashable {
    /// The task identifier.
    public let identifier: String
    /// Not before this time, or as soon as the agent sees fit when `nil`.
    public var earliestBeginDate: Date?
    /// Run only with full network connectivity. Connectivity dropping from full while the task
    /// runs (offline, a captive portal, limited) ends it at once: its `expirationHandler` runs,
    /// and the agent closes it as `conditions-lost`, not counted against the app.
    public var requiresNetworkConnectivity: Bool
    /// Run only on AC power. The charger unplugged while the task runs ends it at once, as
    /// `requiresNetworkConnectivity` does. While on AC, the CPU monitor leaves alone a slice whose
    /// tasks all require external power; one that shares its slice with a refresh, with
    /// processing that does not require it, or with a content-available wake is watched like
    /// any other, as every slice is while the machine is not known to be on AC.
    public var requiresExternalPower: Bool
    /// How long the work is expected to take, in seconds: a hint for the agent, not a limit.
    public var expectedDuration: TimeInterval?

    /// A processing request for `identifier`; every requirement is off unless given.
    public init(
        identifier: String, earliestBeginDate: Date? = nil, requiresNetworkConnectivity: Bool = false,
        requiresExternalPower: Bool = false, expectedDuration: TimeInterval? = nil
    ) {
        self.identifier = identifier
        self.earliestBeginDate = earliestBeginDate
        self.requiresNetworkConnectivity = requiresNetworkConnectivity
        self.requiresExternalPower = requiresExternalPower
        self.expectedDuration = expectedDuration
    }
}

/// The arguments of `org.bgpolicy.Scheduler1.Submit` for one request, checked before they leave.
struct SubmitArguments: Equatable {
    var identifier: String
    var kind: TaskKind
    var options: [String: Variant]

    var body: [DBusValue] { [.string(identifier), .string(kind.rawValue), options.dbusValue] }

    init(_ request: some BGTaskRequest) throws(BGTaskSchedulerError) {
        if let problem = TaskIdentifier.problem(with: request.identifier) {
            throw BGTaskSchedulerError(.invalidArgument, "\"\(request.identifier)\" is not a task identifier: \(problem)")
        }
        identifier = request.identifier
        options = [:]
        if let date = request.earliestBeginDate {
            options["earliest_begin"] = Variant(.int64(try Self.unixSeconds(date)))
        }
        switch request {
        case is BGAppRefreshTaskRequest:
            kind = .refresh
        case let processing as BGProcessingTaskRequest:
            kind = .processing
            options["requires_network"] = Variant(.boolean(processing.requiresNetworkConnectivity))
            options["requires_external_power"] = Variant(.boolean(processing.requiresExternalPower))
            if let duration = processing.expectedDuration {
                options["expected_duration"] = Variant(.uint32(try Self.seconds(duration)))
            }
        default:
            throw BGTaskSchedulerError(
                .invalidArgument, "submit BGAppRefreshTaskRequest or BGProcessingTaskRequest, not \(type(of: request))")
        }
    }

    /// Rounded up: "not before" must never become a second earlier than asked.
    static func unixSeconds(_ date: Date) throws(BGTaskSchedulerError) -> Int64 {
        let seconds = date.timeIntervalSince1970.rounded(.up)
        guard seconds.isFinite, let value = Int64(exactly: seconds) else {
            throw BGTaskSchedulerError(.invalidArgument, "earliestBeginDate \(date.timeIntervalSince1970) is not a usable time")
        }
        return value
    }

    static func seconds(_ duration: TimeInterval) throws(BGTaskSchedulerError) -> UInt32 {
        let seconds = duration.rounded(.up)
        guard seconds.isFinite, let value = UInt32(exactly: seconds) else {
            throw BGTaskSchedulerError(.invalidArgument, "expectedDuration must be between 0 and \(UInt32.max) seconds, not \(duration)")
        }
        return value
    }
}

/// A pending request as `GetPending` describes it, back in the app's terms.
enum PendingRequest {
    /// `nil` for kinds this library does not know (a newer agent's).
    static func request(from entry: [String: Variant]) throws(DBusError) -> (any BGTaskRequest)? {
        guard let identifier = try entry.optional("identifier", as: String.self),
            let kind = try entry.optional("kind", as: String.self).flatMap(TaskKind.init(rawValue:))
        else { return nil }
        let earliest = try entry.optional("earliest_begin", as: Int64.self).map { Date(timeIntervalSince1970: TimeInterval($0)) }
        switch kind {
        case .refresh:
            return BGAppRefreshTaskRequest(identifier: identifier, earliestBeginDate: earliest)
        case .processing:
            return BGProcessingTaskRequest(
                identifier: identifier, earliestBeginDate: earliest,
                requiresNetworkConnectivity: try entry.optional("requires_network", as: Bool.self) ?? false,
                requiresExternalPower: try entry.optional("requires_external_power", as: Bool.self) ?? false,
                expectedDuration: try entry.optional("expected_duration", as: UInt32.self).map(TimeInterval.init))
        }
    }
}
