import BGPolicyCore

/// bgpolicyd said no: an `org.bgpolicy.Error.<Name>` reply. Kept apart from `CLIError` so
/// that each command can add the hint that fits it, and scripts get their own exit status.
struct AgentRefusal: Error, CustomStringConvertible {
    /// The full D-Bus error name.
    let dbusName: String
    /// The agent's message, which says what went wrong.
    let message: String

    var name: BGPolicyErrorName? { BGPolicyErrorName(dbusName: dbusName) }

    /// `NotRegistered` rather than the full D-Bus name: short enough to print and grep for.
    var shortName: String {
        dbusName.hasPrefix(BGPolicyNames.errorPrefix) ? String(dbusName.dropFirst(BGPolicyNames.errorPrefix.count)) : dbusName
    }

    var description: String { "\(message) (\(shortName))" }

    /// What to do about it: the command's own hint for this error if it has one, else a
    /// general one; nil when the agent's message already names the command the hint would.
    func hint(_ hints: [BGPolicyErrorName: String]) -> String? {
        guard let name, let hint = hints[name] ?? Self.specificHint(name, message) ?? Self.generalHints[name] else { return nil }
        if let command = Self.firstQuoted(hint), message.contains(command) { return nil }
        return hint
    }

    /// The first 'quoted' text: the command a hint recommends.
    static func firstQuoted(_ text: String) -> String? {
        let parts = text.split(separator: "'", maxSplits: 2, omittingEmptySubsequences: false)
        return parts.count == 3 && !parts[1].isEmpty ? "'\(parts[1])'" : nil
    }

    /// A hint for one kind of refusal that its error's general hint would misdirect: text that
    /// is no app id at all (`InvalidArgument`) is a mistyped app, not a version mismatch.
    static func specificHint(_ name: BGPolicyErrorName, _ message: String) -> String? {
        name == .invalidArgument && message.contains(" is not an app id") ? "'bgpolicy apps' lists the app ids." : nil
    }

    /// None for `LimitsExceeded`: each of the agent's says what to do, and they differ (wait
    /// for replies, or, for a reply too large to send, ask for less or forget apps).
    static let generalHints: [BGPolicyErrorName: String] = [
        .notRegistered: "'bgpolicy apps' lists the apps that have registered with bgpolicyd.",
        .unknownTask: "'bgpolicy pending' lists the waiting requests, 'bgpolicy status' the running tasks.",
        .invalidArgument: "Check the arguments with 'bgpolicy help'; if they look right, bgpolicy and bgpolicyd may be different versions.",
        .accessDenied:
            "bgpolicyd answers these only to callers it can see outside an app sandbox: run bgpolicy on the host "
            + "(from a Flatpak app's terminal: 'flatpak-spawn --host bgpolicy ...').",
        .unknownMethod: Self.olderAgent,
        .unknownInterface: Self.olderAgent,
        .unknownObject: Self.olderAgent,
        .failed: "Check its log with 'journalctl --user -u bgpolicyd'.",
    ]

    private static let olderAgent =
        "This bgpolicyd is older than bgpolicy \(BGPolicyVersion.current); restart it with 'systemctl --user restart bgpolicyd'."
}
