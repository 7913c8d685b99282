/// Why a call to bgpolicyd never reached it, or never came back, read from the D-Bus error the
/// bus answered with: the agent is not running and the bus could not start it, or it left the
/// bus before it answered.
///
/// The command (`bgpolicy`) and the client library (`BackgroundTasks`) both meet these errors
/// and both tell a person what to do about them; this is the one place that reads the error
/// names and words the advice, so the two say the same. Each formats it its own way: the
/// command as a message and a hint on its own line, the library as one sentence.
public struct AgentUnreachable: Sendable, Equatable {
    public enum Cause: Sendable, Equatable {
        /// Nobody owns the agent's name, and the bus has no way to start it.
        case notRunning
        /// Under systemd, the bus asked the user manager for the unit its activation file
        /// names (`dbus-org.bgpolicy.Agent1.service`, an alias that
        /// `systemctl --user enable bgpolicyd` makes), and the unit does not exist.
        case notEnabled
        /// The user manager refused to start the unit: it is masked.
        case masked
        /// Any other refusal of the bus (`Spawn.*`) or of the user manager (`systemd1.*`).
        case couldNotStart
        /// The agent left the bus after the call reached it, before it answered.
        case stoppedBeforeAnswering
    }

    public let cause: Cause
    /// The bus's own words, quoted in `problem`.
    public let detail: String
    /// The D-Bus error name the bus answered with.
    public let dbusErrorName: String

    /// The reading of the error `name` with the bus's `message`, or nil when it is none of
    /// the above (an answer of the agent's, a timeout, anything else).
    public init?(dbusErrorName name: String, message: String) {
        switch name {
        // dbus-broker (Fedora, Arch) answers a failed activation under this name, saying why in
        // words: "Could not activate remote peer '…': activation request failed: unknown unit".
        case "org.freedesktop.DBus.Error.NameHasNoOwner" where message.contains("Could not activate remote peer"):
            cause = message.contains("unknown unit") ? .notEnabled : message.contains("masked") ? .masked : .couldNotStart
        case "org.freedesktop.DBus.Error.ServiceUnknown", "org.freedesktop.DBus.Error.NameHasNoOwner",
            "org.freedesktop.DBus.Error.Spawn.ServiceNotFound", "org.freedesktop.DBus.Error.Disconnected":
            cause = .notRunning
        case "org.freedesktop.systemd1.NoSuchUnit":
            cause = .notEnabled
        case "org.freedesktop.systemd1.UnitMasked":
            cause = .masked
        case _ where name.hasPrefix("org.freedesktop.DBus.Error.Spawn.") || name.hasPrefix("org.freedesktop.systemd1."):
            cause = .couldNotStart
        // The bus's words when the agent leaves it before it answers (a crash, a stop).
        case "org.freedesktop.DBus.Error.NoReply" where message.contains("disconnected"):
            cause = .stoppedBeforeAnswering
        default:
            return nil
        }
        detail = message
        dbusErrorName = name
    }

    /// Whether the agent is simply not there (every cause but `stoppedBeforeAnswering`, after
    /// which the call's effect is not known).
    public var agentIsMissing: Bool { cause != .stoppedBeforeAnswering }

    /// What went wrong, as a clause: no capital, no final stop.
    public var problem: String {
        switch cause {
        case .notRunning:
            "bgpolicyd is not running on this session bus (\(detail))"
        case .notEnabled:
            "bgpolicyd is not running and is not enabled, so the bus cannot start it (\(detail))"
        case .masked:
            "bgpolicyd is not running and is masked, so the bus cannot start it (\(detail))"
        case .couldNotStart:
            "the bus could not start bgpolicyd: \(detail) (\(dbusErrorName))"
        case .stoppedBeforeAnswering:
            "bgpolicyd stopped before it answered (\(detail)); whether the call took effect is not known"
        }
    }

    /// What to do about it, as a clause: no capital, no final stop.
    public var remedy: String {
        switch cause {
        case .notRunning:
            "start it with 'systemctl --user start bgpolicyd' ('systemctl --user enable --now bgpolicyd' also starts it at every login)"
        case .notEnabled:
            "enable and start it with 'systemctl --user enable --now bgpolicyd'"
        case .masked:
            "unmask it with 'systemctl --user unmask bgpolicyd', then 'systemctl --user enable --now bgpolicyd'"
        case .couldNotStart:
            "'journalctl --user -u bgpolicyd' and 'systemctl --user status bgpolicyd' say why"
        case .stoppedBeforeAnswering:
            "'journalctl --user -u bgpolicyd' says why it stopped; check it, then try again"
        }
    }
}
