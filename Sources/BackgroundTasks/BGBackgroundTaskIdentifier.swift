#if canImport(FoundationEssentials)
public import FoundationEssentials
#else
public import Foundation
#endif

/// A background task begun with `beginBackgroundTask(name:expirationHandler:)`: the token to end
/// it with, and how long the agent granted.
public struct BGBackgroundTaskIdentifier: Sendable, Hashable, CustomStringConvertible {
    /// The agent's token for this background task.
    public let rawValue: String
    /// The time the agent granted, in seconds (30 by default). The expiration handler runs a few
    /// seconds before it runs out.
    public let timeAllowed: TimeInterval
    /// When the grant runs out.
    public let expirationDate: Date

    init(rawValue: String, timeAllowed: TimeInterval, grantedAt: Date = Date()) {
        self.rawValue = rawValue
        self.timeAllowed = timeAllowed
        self.expirationDate = grantedAt.addingTimeInterval(timeAllowed)
    }

    /// The token.
    public var description: String { rawValue }
}
