/// Why the agent could not start or had to stop. Each message names the problem and the way out.
public enum AgentError: Error, CustomStringConvertible, Sendable {
    case nameTaken(name: String, owner: String, pid: UInt32?)
    case nameLost(name: String)
    case busLost
    case noSessionBus(String)
    case stateDirectory(path: String, reason: String)
    case stateInUse(path: String, pid: Int32?)
    case configuration(String)
    case store(path: String, reason: String)
    case storeFromNewerVersion(path: String, reason: String)
    case storeCorrupt(path: String, reason: String)

    public var description: String {
        switch self {
        case .nameTaken(let name, let owner, let pid):
            let who = pid.map { "process \($0) (\(owner))" } ?? owner
            return "\(name) is already owned by \(who) on this session bus. Another bgpolicyd is running: "
                + "stop it first (systemctl --user stop bgpolicyd), or query it with 'bgpolicy status'."
        case .nameLost(let name):
            return "lost the bus name \(name) to another process; exiting so that only one agent runs."
        case .busLost:
            return "the session bus connection was lost; exiting (systemd restarts the agent when the bus returns)."
        case .noSessionBus(let detail):
            return "cannot reach the session bus: \(detail)"
        case .stateDirectory(let path, let reason):
            return "cannot use the state directory \(path): \(reason). Fix its ownership or permissions, or pass --state-dir DIR."
        case .stateInUse(let path, let pid):
            let who = pid.map { "bgpolicyd process \($0)" } ?? "another bgpolicyd"
            return "the state directory \(path) is in use by \(who). Only one agent may use a state directory: "
                + "stop the other one (systemctl --user stop bgpolicyd), or give this one its own with --state-dir DIR."
        case .configuration(let message):
            return "invalid configuration: \(message)"
        case .store(let path, let reason):
            return "cannot open the database \(path): \(reason). Check the disk and the directory's permissions."
        case .storeCorrupt(let path, let reason):
            return "damage was found in the database while the agent ran (\(reason)); stopping so that the next start "
                + "moves \(path) aside and reads back what is still readable (systemd starts the agent again at once)."
        case .storeFromNewerVersion(let path, let reason):
            return "cannot use the database \(path): \(reason). Run the newer bgpolicyd again, or move the file "
                + "aside to start afresh (registrations, pending requests and history stay in it)."
        }
    }
}
