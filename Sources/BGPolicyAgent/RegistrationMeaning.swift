/// What a `Register` says about the user, which the usage model must not get wrong: an app
/// process usually registers as it starts, so a registration is taken for the user opening the
/// app, unless the process says or shows otherwise. Pure, so the rule is tested on its own.
enum RegistrationMeaning: Equatable, Sendable {
    /// The user opened the app: the predictor learns an open, its record's `last_used_at` is
    /// now, and it is in use until its last connection closes.
    case opened
    /// The process was running before the agent started (the agent restarted, and the app
    /// registers again): the app is in use if the usage log left it so, but when the user
    /// opened it is not known, so nothing is learned and `last_used_at` stays as it was.
    case alreadyRunning
    /// Not the user's doing: the app is registered, not opened, and not in use.
    case notOpened(Cause)

    enum Cause: String, Equatable, Sendable {
        /// The agent started it itself (D-Bus activation for a delivery).
        case launchedByTheAgent = "launched by the agent"
        /// It runs in a unit the session's autostart started (`SessionStartedUnits`).
        case autostarted = "started by the session's autostart"
        /// It registered with `background_only`: it shows no window.
        case backgroundOnly = "background only"
    }

    /// How long before the agent a process may have started and still count as opened now: the
    /// app whose call started the agent by D-Bus activation began a moment before it.
    static let activationMargin: Double = 5

    /// The meaning of a registration by a process that runs in a unit the session's autostart
    /// started or not (`autostarted`), and started at `processStart` (seconds since boot; nil
    /// when unknown), to an agent that started at `agentStart`. What cannot be read counts as an
    /// open, as it did before the agent looked.
    static func of(
        launchedByAgent: Bool, backgroundOnly: Bool, autostarted: Bool, processStart: Double?, agentStart: Double?
    ) -> RegistrationMeaning {
        if launchedByAgent { return .notOpened(.launchedByTheAgent) }
        if autostarted { return .notOpened(.autostarted) }
        if backgroundOnly { return .notOpened(.backgroundOnly) }
        if let processStart, let agentStart, processStart < agentStart - activationMargin { return .alreadyRunning }
        return .opened
    }

    /// For logs.
    var description: String {
        switch self {
        case .opened: "opened"
        case .alreadyRunning: "running before the agent started"
        case .notOpened(let cause): cause.rawValue
        }
    }
}
