public import BGPolicyCore

/// An app unit of the systemd user manager appeared or went: the plain fact `AppUnitSource`
/// reports. What it means for the app (an open, a close) is the agent's to decide.
public struct AppUnitEvent: Sendable, Hashable {
    public enum Change: String, Sendable, Hashable, CaseIterable {
        /// `UnitNew`: the launcher created the app's scope or service; the app is starting.
        case opened
        /// `UnitRemoved`: the unit is gone; every process of that instance has exited.
        case closed
    }

    public var appID: AppID
    public var change: Change
    /// The unit's name as systemd sent it (escaped), for logs.
    public var unit: String
    /// The unit is one of an XDG autostart entry (`AppIdentityParser.isAutostartUnit`): the
    /// session started the app at login, not the user.
    public var autostart: Bool

    public init(appID: AppID, change: Change, unit: String, autostart: Bool = false) {
        self.appID = appID
        self.change = change
        self.unit = unit
        self.autostart = autostart
    }
}

/// An app unit the user manager runs when the agent connects (`AppUnitSource`): which app it
/// is, and its name, so that the agent can tell the units the user opened from those the
/// session started.
public struct RunningAppUnit: Sendable, Hashable {
    public var appID: AppID
    /// The unit's name as systemd lists it (escaped).
    public var unit: String

    public init(appID: AppID, unit: String) {
        self.appID = appID
        self.unit = unit
    }
}
