/// The names of the D-Bus contract (SPEC §3). Other programs depend on these exact strings.
public enum BGPolicyNames {
    public static let busName = "org.bgpolicy.Agent1"
    public static let objectPath = "/org/bgpolicy/Agent1"
    public static let adminInterface = "org.bgpolicy.Admin1"
    public static let schedulerInterface = "org.bgpolicy.Scheduler1"
    public static let clientInterface = "org.bgpolicy.Client1"
    public static let clientObjectPath = "/org/bgpolicy/Client1"
    public static let errorPrefix = "org.bgpolicy.Error."
}

/// Every error the agent sends over D-Bus: `org.bgpolicy.Error.<rawValue>`.
/// String-backed so the names round-trip exactly (STYLE.md example 9).
public enum BGPolicyErrorName: String, Sendable, CaseIterable {
    // SPEC §3.
    case notRegistered = "NotRegistered"
    case notPermitted = "NotPermitted"
    case tooManyPendingRequests = "TooManyPendingRequests"
    case unavailable = "Unavailable"
    case invalidArgument = "InvalidArgument"
    case accessDenied = "AccessDenied"
    case unknownTask = "UnknownTask"
    // Routing failures, so that every error a caller sees is in our domain.
    case unknownObject = "UnknownObject"
    case unknownInterface = "UnknownInterface"
    case unknownMethod = "UnknownMethod"
    case unknownProperty = "UnknownProperty"
    case propertyReadOnly = "PropertyReadOnly"
    case limitsExceeded = "LimitsExceeded"
    case failed = "Failed"

    /// The full D-Bus error name.
    public var dbusName: String { BGPolicyNames.errorPrefix + rawValue }

    public init?(dbusName: String) {
        guard dbusName.hasPrefix(BGPolicyNames.errorPrefix) else { return nil }
        self.init(rawValue: String(dbusName.dropFirst(BGPolicyNames.errorPrefix.count)))
    }
}

/// The version every binary reports.
public enum BGPolicyVersion {
    public static let current = "0.1.0"
}
