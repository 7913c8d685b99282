/// How the planner places refresh work (`[refresh] strategy`). The raw values are the
/// configuration file's words.
public enum RefreshStrategy: String, Sendable, CaseIterable, CustomStringConvertible {
    /// SPEC §2: refresh shortly before the opens the agent predicts, within a per-app budget.
    case predicted
    /// Every pending refresh runs in the next wake window, like a coalesced timer: for machines
    /// whose user wants refreshes as soon as they are due, and for tests that need a refresh to
    /// run without a learned history.
    case everyWindow = "every-window"

    public var description: String { rawValue }
}
