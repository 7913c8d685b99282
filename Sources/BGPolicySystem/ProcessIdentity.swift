public import BGPolicyCore

/// Who a process is, as far as the machine can vouch for it (SPEC §1, App identity).
public struct ProcessIdentity: Sendable, Equatable {
    public var pid: UInt32
    /// The derived app id; nil when nothing vouches for one, so the caller must name itself
    /// (and is then unverified).
    public var appID: AppID?
    /// Where `appID` came from; `.unverified` when `appID` is nil.
    public var source: IdentitySource
    /// The app's own systemd unit (an `app-*.scope`/`.service`, or a snap's scope), which the
    /// CPU monitor may throttle or freeze; nil otherwise — never a shared unit such as
    /// `session-2.scope` or a terminal's `vte-spawn-….scope`.
    public var unit: String?
    /// The cgroup of `unit` (from the cgroup root, e.g. `/user.slice/…/app-gnome-org.gnome.Maps-1.scope`),
    /// which is what the CPU monitor measures; nil exactly when `unit` is, so that
    /// `cpuUsage(pid:cgroupPath:)` never counts a cgroup shared with other programs.
    public var cgroupPath: String?
    /// Whether the agent could read the process at all. False when its `/proc` entry is gone
    /// (it exited, though the connection it opened lives on in a child: the bus reports the
    /// PID of the process that connected) or hidden, or the bus gave no PID: then nothing
    /// tells a host process from a sandboxed one, and the caller gets no host's rights
    /// (`Admin1`, naming its own app id).
    public var seen: Bool
    /// When the process started, in seconds since boot, read as it was identified; nil when
    /// that could not be read. The bus names a connection's process by pid, taken when it
    /// connected; this tells that process from a later one given the same number.
    public var startTime: Double? = nil

    public init(
        pid: UInt32, appID: AppID?, source: IdentitySource, unit: String? = nil, cgroupPath: String? = nil, seen: Bool = true
    ) {
        self.pid = pid
        self.appID = appID
        self.source = source
        self.unit = unit
        self.cgroupPath = cgroupPath
        self.seen = seen
    }

    /// A process nothing vouches for, seen outside any sandbox.
    public static func unverified(pid: UInt32) -> ProcessIdentity {
        ProcessIdentity(pid: pid, appID: nil, source: .unverified)
    }

    /// A process the agent cannot read (`seen` false); pid 0 when the bus gave none.
    public static func unseen(pid: UInt32) -> ProcessIdentity {
        ProcessIdentity(pid: pid, appID: nil, source: .unverified, seen: false)
    }
}

/// CPU time a process (or its app's cgroup) has used since it started.
public struct CPUReading: Sendable, Equatable {
    /// User plus system time, in seconds.
    public var cpuSeconds: Double
    /// Whether this is the cgroup's `usage_usec` rather than the sum over the process tree.
    public var fromCgroup: Bool

    public init(cpuSeconds: Double, fromCgroup: Bool) {
        self.cpuSeconds = cpuSeconds
        self.fromCgroup = fromCgroup
    }
}
