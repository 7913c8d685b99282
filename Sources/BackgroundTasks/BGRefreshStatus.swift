/// Whether the agent will launch this app in the background (`GetRefreshStatus`), as an app
/// would show it next to a "refresh in the background" setting.
public enum BGRefreshStatus: String, Sendable, Hashable, CaseIterable {
    /// Background work may run.
    case available
    /// The user switched background work off for this app (`bgpolicy disable APP`).
    case denied
    /// All background work is off for now: the global switch, power saver, or a low battery.
    case restricted
}
