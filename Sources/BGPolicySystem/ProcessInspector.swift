import BGPolicyCore
import Glibc

/// Reads who a process is and how much CPU it has used, from procfs and cgroupfs
/// (SPEC §1; the contract's "Identity"). Both roots are paths so that tests can build fake ones.
///
/// Every read is bounded: these files come from the kernel, but `.flatpak-info` lies inside the
/// process's own root, and a hostile root could hold anything there.
public struct ProcessInspector: Sendable {
    /// Where procfs is mounted; `<procRoot>/<pid>/{cgroup,stat,root}` are read.
    public var procRoot: String
    /// Where the cgroup-v2 hierarchy is mounted; `<cgroupRoot><cgroup path>/cpu.stat` is read.
    public var cgroupRoot: String
    /// Where `identify` reads a process that `procRoot` has no entry for; nil: nowhere. Set
    /// by `fromEnvironment` to the real `/proc` when tests point `procRoot` at a fake tree, so
    /// that the processes the tree does not describe (a test's own connection, `bgpolicy`)
    /// are read as they are, not taken for gone.
    public var fallbackProcRoot: String?

    public init(procRoot: String = "/proc", cgroupRoot: String = "/sys/fs/cgroup", fallbackProcRoot: String? = nil) {
        self.procRoot = procRoot
        self.cgroupRoot = cgroupRoot
        self.fallbackProcRoot = fallbackProcRoot
    }

    /// The default roots, overridden by `BGPOLICY_PROC_ROOT` (then falling back to `/proc`
    /// for processes it has no entry for) and `BGPOLICY_CGROUP_ROOT` when set and not empty
    /// (tests).
    public static func fromEnvironment() -> ProcessInspector {
        func variable(_ name: String) -> String? {
            guard let raw = getenv(name) else { return nil }
            let value = String(cString: raw)
            return value.isEmpty ? nil : value
        }
        let fake = variable("BGPOLICY_PROC_ROOT")
        return ProcessInspector(
            procRoot: fake ?? "/proc", cgroupRoot: variable("BGPOLICY_CGROUP_ROOT") ?? "/sys/fs/cgroup",
            fallbackProcRoot: fake == nil ? nil : "/proc")
    }

    // MARK: Identity

    /// Who `pid` is: its Flatpak instance (`<procRoot>/<pid>/root/.flatpak-info`) first, then its
    /// snap, then its systemd app unit; unverified when none of them names it, and unseen
    /// (`ProcessIdentity.seen` false) when its cgroup cannot be read: gone, or hidden.
    ///
    /// A process whose root holds a `.flatpak-info` that names no app (a runtime run with
    /// `flatpak run --command`, a damaged file, or a symlink or FIFO in its place) is sandboxed
    /// yet unnamed: it is unverified, not identified by its cgroup, because only Flatpak vouches
    /// for what runs in a sandbox and here it names nothing.
    public func identify(pid: UInt32) -> ProcessIdentity {
        var identity = identifyByRoot(pid: pid)
        if identity.seen { identity.startTime = startTime(pid: pid) }
        return identity
    }

    /// Whether `identity`'s process still runs: a process has the pid and started when the one
    /// identified did. True when its start was not read (nothing to tell them apart by).
    public func stillRuns(_ identity: ProcessIdentity) -> Bool {
        guard let started = identity.startTime else { return true }
        return startTime(pid: identity.pid) == started
    }

    private func identifyByRoot(pid: UInt32) -> ProcessIdentity {
        var procRoot = procRoot
        if let fallbackProcRoot, access("\(procRoot)/\(pid)", F_OK) != 0 { procRoot = fallbackProcRoot }
        guard let cgroupText = SmallFile.read("\(procRoot)/\(pid)/cgroup", limit: Self.cgroupFileLimit).map(SmallFile.text) else {
            return .unseen(pid: pid)
        }
        let path = AppIdentityParser.cgroupPath(fromProcCgroup: cgroupText)
        let unit = path.flatMap(AppIdentityParser.unitName(fromCgroupPath:))

        /// The identity, with the process's unit when that unit is the app's own.
        func identity(_ id: AppID, _ source: IdentitySource, unitBelongs: (String) -> Bool) -> ProcessIdentity {
            guard let path, let unit, unitBelongs(unit), let unitCgroup = Self.cgroup(of: unit, in: path) else {
                return ProcessIdentity(pid: pid, appID: id, source: source)
            }
            return ProcessIdentity(pid: pid, appID: id, source: source, unit: unit, cgroupPath: unitCgroup)
        }

        /// Flatpak runs each instance in `app-flatpak-<id>-<pid>.scope`; any other unit is shared.
        func flatpak(_ id: AppID) -> ProcessIdentity {
            identity(id, .flatpak) { AppIdentityParser.appID(fromUnitName: $0) == id }
        }
        switch flatpakInstance(pid: pid, procRoot: procRoot) {
        case .app(let id):
            return flatpak(id)
        case .unnamed:
            return .unverified(pid: pid)
        case .unreadable:
            // A root the agent may not enter: a FUSE root (a toolbox container), or a process
            // that made itself non-dumpable. Flatpak's own scope still says it is one, and a
            // sandboxed app cannot move out of it (its cgroupfs is read-only).
            if let unit, unit.hasPrefix("app-flatpak-"), let id = AppIdentityParser.appID(fromUnitName: unit) {
                return flatpak(id)
            }
        case .gone:
            return .unseen(pid: pid)
        case .none:
            break
        }
        if let path, let id = AppIdentityParser.snapAppID(fromCgroupPath: path) {
            return identity(id, .snap) { AppIdentityParser.snapAppID(fromCgroupPath: "/" + $0) == id }
        }
        if let unit, let id = AppIdentityParser.appID(fromUnitName: unit) {
            return identity(id, .systemdUnit) { _ in true }
        }
        return .unverified(pid: pid)
    }

    enum FlatpakInstance: Equatable {
        case none
        case app(AppID)
        case unnamed
        /// The root could not be entered (EACCES).
        case unreadable
        /// The process went between the reads (ESRCH).
        case gone
    }

    private func flatpakInstance(pid: UInt32, procRoot: String) -> FlatpakInstance {
        // Symlinks refused, and the regular-file check in SmallFile: the file lies in the sandbox's root.
        switch SmallFile.read("\(procRoot)/\(pid)/root/.flatpak-info", limit: Self.flatpakInfoLimit, followingSymlinks: false) {
        case .success(let bytes):
            return AppIdentityParser.flatpakAppID(fromInfo: SmallFile.text(bytes)).map(FlatpakInstance.app) ?? .unnamed
        case .failure(let failure):
            return Self.flatpakInstance(failing: failure.code)
        }
    }

    /// What a failure to read `.flatpak-info` says: absent (`ENOENT`, `ENOTDIR`) is a host
    /// process; a root the agent may not enter (`EACCES`) or a process gone meanwhile
    /// (`ESRCH`) says nothing either way; anything else (a symlink, a FIFO, a huge file) is
    /// a root someone has tampered with.
    static func flatpakInstance(failing code: Int32) -> FlatpakInstance {
        switch code {
        case ENOENT, ENOTDIR: .none
        case EACCES: .unreadable
        case ESRCH: .gone
        default: .unnamed
        }
    }

    /// The cgroup path up to and including `unit`'s component.
    static func cgroup(of unit: String, in path: String) -> String? {
        var prefix = ""
        for component in path.split(separator: "/") {
            prefix += "/" + component
            if component == unit { return prefix }
        }
        return nil
    }

    // MARK: CPU

    /// The CPU time used so far, or nil when the process is gone.
    ///
    /// With `cgroupPath` (the app's own unit's cgroup, `ProcessIdentity.cgroupPath`), the
    /// cgroup's `cpu.stat` `usage_usec` when that file can be read: it counts every process of
    /// the unit, however it forked. Pass nil for a process without a unit of its own, whose
    /// cgroup is shared. Otherwise the sum over the process tree from `<procRoot>/*/stat`:
    /// the process's utime+stime+cutime+cstime plus the same four of every live descendant.
    /// Counting the descendants' cutime+cstime too keeps the sum from dropping when a
    /// grandchild is reaped by a child (its time moves into that child's cutime); a process that
    /// leaves the tree (re-parented to a subreaper or init) is no longer counted.
    public func cpuUsage(pid: UInt32, cgroupPath: String?) -> CPUReading? {
        guard let own = readStat(pid: pid) else { return nil }
        if let cgroupPath, let usec = cgroupUsage(cgroupPath) {
            return CPUReading(cpuSeconds: Double(usec) / 1_000_000, fromCgroup: true)
        }
        let ticks = own.totalTicks &+ descendantTicks(of: pid)
        return CPUReading(cpuSeconds: Double(ticks) / Self.clockTicksPerSecond, fromCgroup: false)
    }

    /// Whether a CPU quota on the unit whose cgroup is `cgroupPath` can take effect: the `cpu`
    /// controller is named in the `cgroup.controllers` of the cgroup above it (the slice the
    /// unit is in). The systemd user manager can turn the controller on for its units only
    /// where the system manager delegated it to `user@.service` (`Delegate=pids memory cpu`
    /// from systemd 252; `pids memory` before, where `CPUQuota=` on a user unit is accepted and
    /// does nothing). Nil when that cannot be read (cgroup v1, a path outside the root, no
    /// such file): not known, so not assumed either way.
    public func cpuControllerAvailable(cgroupPath: String) -> Bool? {
        guard let directory = Self.checkedDirectory(cgroupPath), let slash = directory.lastIndex(of: "/") else { return nil }
        let parent = String(directory[..<slash])
        guard let bytes = SmallFile.read(cgroupRoot + parent + "/cgroup.controllers", limit: Self.smallFileLimit) else { return nil }
        return SmallFile.text(bytes).split(whereSeparator: { $0 == " " || $0 == "\n" }).contains("cpu")
    }

    /// `cgroupPath` without a trailing slash; nil for a path that could climb out of the root
    /// (the path comes from /proc, but the caller passes it).
    private static func checkedDirectory(_ cgroupPath: String) -> String? {
        guard cgroupPath.hasPrefix("/"), !cgroupPath.split(separator: "/").contains(where: { $0 == ".." || $0 == "." }) else {
            return nil
        }
        return cgroupPath.hasSuffix("/") ? String(cgroupPath.dropLast()) : cgroupPath
    }

    private func cgroupUsage(_ cgroupPath: String) -> UInt64? {
        guard let directory = Self.checkedDirectory(cgroupPath) else { return nil }
        guard let bytes = SmallFile.read(cgroupRoot + directory + "/cpu.stat", limit: Self.smallFileLimit) else { return nil }
        for line in SmallFile.text(bytes).split(separator: "\n") {
            let fields = line.split(separator: " ")
            if fields.count == 2, fields[0] == "usage_usec" { return UInt64(fields[1]) }
        }
        return nil
    }

    /// The four times of every live descendant of `pid`, in clock ticks.
    private func descendantTicks(of pid: UInt32) -> UInt64 {
        guard let directory = opendir(procRoot) else { return 0 }
        defer { closedir(directory) }
        var children: [UInt32: [UInt32]] = [:]
        var ticks: [UInt32: UInt64] = [:]
        while let entry = readdir(directory) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in
                String(decoding: raw.prefix(while: { $0 != 0 }), as: UTF8.self)
            }
            guard let other = UInt32(name), other != pid, let stat = readStat(pid: other) else { continue }
            children[stat.ppid, default: []].append(other)
            ticks[other] = stat.totalTicks
        }
        var total: UInt64 = 0
        var pending = children[pid] ?? []
        var seen: Set<UInt32> = [pid]
        // A snapshot of a live /proc (or a fake root) could hold a ppid cycle: visit each pid once.
        while let next = pending.popLast() {
            guard seen.insert(next).inserted else { continue }
            total &+= ticks[next] ?? 0
            pending += children[next] ?? []
        }
        return total
    }

    // MARK: Start

    /// When `pid` started, in seconds since boot (`starttime` in `<procRoot>/<pid>/stat`), or
    /// nil when the process is gone or its stat cannot be read.
    public func startTime(pid: UInt32) -> Double? {
        readStat(pid: pid)?.startSeconds
    }

    /// When this process started, in seconds since boot, from the real `/proc/self/stat`
    /// whatever `procRoot` is: the fake roots of tests stand for other processes, and link to
    /// their real `stat` files, so their start times are on the same clock.
    public static func ownStartTime() -> Double? {
        readStat(at: "/proc/self/stat")?.startSeconds
    }

    private func readStat(pid: UInt32) -> ProcStat? {
        Self.readStat(at: "\(procRoot)/\(pid)/stat")
    }

    private static func readStat(at path: String) -> ProcStat? {
        SmallFile.read(path, limit: smallFileLimit).flatMap(ProcStat.init(parsing:))
    }

    static let clockTicksPerSecond: Double = {
        let ticks = sysconf(Int32(_SC_CLK_TCK))
        return ticks > 0 ? Double(ticks) : 100
    }()

    /// /proc/PID/cgroup holds one line per v1 hierarchy, each path at most PATH_MAX.
    static let cgroupFileLimit = 64 * 1024
    /// .flatpak-info is a few kilobytes; a sandbox with very many permissions stays far below this.
    static let flatpakInfoLimit = 1024 * 1024
    /// /proc/PID/stat is 52 numbers and a 16-byte name; cpu.stat a dozen lines.
    static let smallFileLimit = 8 * 1024
}

/// The fields of /proc/PID/stat the inspector needs (proc(5)).
struct ProcStat: Equatable {
    var ppid: UInt32
    var utime: UInt64
    var stime: UInt64
    var cutime: UInt64
    var cstime: UInt64
    /// When the process started, in clock ticks since boot.
    var startTicks: UInt64

    var totalTicks: UInt64 { utime &+ stime &+ cutime &+ cstime }
    /// `startTicks` in seconds since boot.
    var startSeconds: Double { Double(startTicks) / ProcessInspector.clockTicksPerSecond }

    /// Parses `pid (comm) state ppid … utime stime cutime cstime …`. The name may hold spaces
    /// and parentheses, and the kernel does not escape them, so the fields start after the
    /// *last* ')'.
    init?(parsing bytes: [UInt8]) {
        guard let close = bytes.lastIndex(of: UInt8(ascii: ")")) else { return nil }
        let fields = bytes[(close + 1)...].split(whereSeparator: { $0 == UInt8(ascii: " ") || $0 == UInt8(ascii: "\n") })
        // fields[0] is the state (field 3 of proc(5)); utime is field 14, cstime field 17,
        // starttime field 22.
        guard fields.count > 19 else { return nil }
        func number(_ index: Int) -> Int64? { Int64(String(decoding: fields[index], as: UTF8.self)) }
        guard let ppid = number(1), let utime = number(11), let stime = number(12), let cutime = number(13),
            let cstime = number(14), let start = number(19), ppid >= 0, ppid <= Int64(UInt32.max), start >= 0
        else { return nil }
        self.startTicks = UInt64(start)
        self.ppid = UInt32(ppid)
        // cutime and cstime are signed in the kernel's format; they are never negative in practice.
        self.utime = UInt64(max(utime, 0))
        self.stime = UInt64(max(stime, 0))
        self.cutime = UInt64(max(cutime, 0))
        self.cstime = UInt64(max(cstime, 0))
    }
}
