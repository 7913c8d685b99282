import BGPolicyCore
@testable import BGPolicySystem
import Foundation
import Testing

/// A fake procfs and cgroupfs in a temporary directory, removed when the value goes away.
private final class FakeRoots {
    let directory: URL
    var proc: String { directory.appendingPathComponent("proc").path }
    var cgroup: String { directory.appendingPathComponent("cgroup").path }
    var inspector: ProcessInspector { ProcessInspector(procRoot: proc, cgroupRoot: cgroup) }

    init() throws {
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("bgpolicy-proc-\(UUID().uuidString)")
        try FileManager.default.createDirectory(atPath: directory.appendingPathComponent("proc").path, withIntermediateDirectories: true)
        try FileManager.default.createDirectory(atPath: directory.appendingPathComponent("cgroup").path, withIntermediateDirectories: true)
    }

    deinit {
        try? FileManager.default.removeItem(at: directory)
    }

    func write(_ text: String, to relative: String) throws {
        let url = directory.appendingPathComponent(relative)
        try FileManager.default.createDirectory(at: url.deletingLastPathComponent(), withIntermediateDirectories: true)
        try Data(text.utf8).write(to: url)
    }

    func cgroupFile(pid: UInt32, path: String) throws {
        try write("0::\(path)\n", to: "proc/\(pid)/cgroup")
    }

    /// A /proc/PID/stat line in the kernel's format; times are in clock ticks.
    func stat(pid: UInt32, comm: String = "worker", ppid: UInt32, utime: Int, stime: Int, cutime: Int = 0, cstime: Int = 0,
              start: Int = 12345) throws {
        let fields = ["S", "\(ppid)", "\(pid)", "\(pid)", "0", "-1", "4194560", "100", "0", "0", "0",
                      "\(utime)", "\(stime)", "\(cutime)", "\(cstime)", "20", "0", "1", "0", "\(start)", "1000000", "200"]
            + Array(repeating: "0", count: 30)
        try write("\(pid) (\(comm)) " + fields.joined(separator: " ") + "\n", to: "proc/\(pid)/stat")
    }
}

/// Expects `roots`' inspector to identify process `pid` as `appID`, named by `source`, in the
/// unit `unit` whose cgroup is `cgroupPath`.
private func expectIdentified(
    _ pid: UInt32, by roots: FakeRoots, as appID: String, source: IdentitySource, unit: String, cgroupPath: String,
    sourceLocation: SourceLocation = #_sourceLocation
) {
    #expect(
        roots.inspector.identify(pid: pid)
            == ProcessIdentity(pid: pid, appID: AppID(rawValue: appID), source: source, unit: unit, cgroupPath: cgroupPath),
        sourceLocation: sourceLocation)
}

private let ticksPerSecond = Double(sysconf(Int32(_SC_CLK_TCK)))
private let userManager = "/user.slice/user-1000.slice/user@1000.service"

@Suite("ProcessInspector")
struct ProcessInspectorTests {
    // MARK: Identity

    @Test("a Flatpak instance is named by .flatpak-info, with its own scope")
    func flatpak() throws {
        let roots = try FakeRoots()
        let scope = "\(userManager)/app.slice/app-flatpak-org.gnome.Maps-4242.scope"
        try roots.cgroupFile(pid: 4242, path: scope)
        try roots.write("[Application]\nname=org.gnome.Maps\nruntime=runtime/org.gnome.Platform/x86_64/46\n\n[Instance]\ninstance-id=1\n",
                        to: "proc/4242/root/.flatpak-info")
        expectIdentified(4242, by: roots, as: "org.gnome.Maps", source: .flatpak,
                         unit: "app-flatpak-org.gnome.Maps-4242.scope", cgroupPath: scope)
    }

    @Test("a Flatpak instance in someone else's unit gets no unit to throttle")
    func flatpakInForeignUnit() throws {
        let roots = try FakeRoots()
        try roots.cgroupFile(pid: 7, path: "/user.slice/user-1000.slice/session-2.scope")
        try roots.write("[Application]\nname=org.gnome.Maps\n", to: "proc/7/root/.flatpak-info")
        #expect(roots.inspector.identify(pid: 7) == ProcessIdentity(pid: 7, appID: AppID(rawValue: "org.gnome.Maps"), source: .flatpak))

        try roots.cgroupFile(pid: 8, path: "\(userManager)/app.slice/app-gnome-org.other.App-8.scope")
        try roots.write("[Application]\nname=org.gnome.Maps\n", to: "proc/8/root/.flatpak-info")
        #expect(roots.inspector.identify(pid: 8) == ProcessIdentity(pid: 8, appID: AppID(rawValue: "org.gnome.Maps"), source: .flatpak))
    }

    @Test("a sandbox that names no app is unverified, whatever its cgroup says")
    func flatpakUnnamed() throws {
        let roots = try FakeRoots()
        for pid: UInt32 in [10, 11, 12] {
            try roots.cgroupFile(pid: pid, path: "\(userManager)/app.slice/app-gnome-org.gnome.Maps-\(pid).scope")
        }
        try roots.write("[Runtime]\nname=org.gnome.Sdk\n", to: "proc/10/root/.flatpak-info")
        // A symlink and a FIFO where the file should be: tampered with, and the FIFO must not block.
        try FileManager.default.createDirectory(atPath: roots.proc + "/11/root", withIntermediateDirectories: true)
        try FileManager.default.createSymbolicLink(atPath: roots.proc + "/11/root/.flatpak-info", withDestinationPath: roots.proc + "/10/root/.flatpak-info")
        try FileManager.default.createDirectory(atPath: roots.proc + "/12/root", withIntermediateDirectories: true)
        #expect(mkfifo(roots.proc + "/12/root/.flatpak-info", 0o600) == 0)
        for pid: UInt32 in [10, 11, 12] {
            #expect(roots.inspector.identify(pid: pid) == .unverified(pid: pid))
        }
    }

    @Test("a snap is named by its scope")
    func snap() throws {
        let roots = try FakeRoots()
        let scope = "\(userManager)/app.slice/snap.firefox.firefox-2bcc5f39-2b4a-4fd4-9b2b-3b2b6f1c8d1e.scope"
        try roots.cgroupFile(pid: 31, path: scope)
        expectIdentified(31, by: roots, as: "snap.firefox", source: .snap,
                         unit: "snap.firefox.firefox-2bcc5f39-2b4a-4fd4-9b2b-3b2b6f1c8d1e.scope", cgroupPath: scope)
    }

    @Test("an app unit names the app: GNOME, KDE, cgroup v1")
    func appUnits() throws {
        let roots = try FakeRoots()
        let gnome = "\(userManager)/app.slice/app-gnome-firefox\\x2desr-9876.scope"
        try roots.cgroupFile(pid: 9876, path: gnome)
        expectIdentified(9876, by: roots, as: "firefox-esr", source: .systemdUnit,
                         unit: "app-gnome-firefox\\x2desr-9876.scope", cgroupPath: gnome)

        // A process in a sub-cgroup of its unit: the unit's cgroup is what is measured.
        let kde = "\(userManager)/app.slice/app-org.kde.dolphin@a1b2.service"
        try roots.cgroupFile(pid: 55, path: kde + "/worker")
        expectIdentified(55, by: roots, as: "org.kde.dolphin", source: .systemdUnit,
                         unit: "app-org.kde.dolphin@a1b2.service", cgroupPath: kde)

        let maps = "\(userManager)/app.slice/app-gnome-org.gnome.Maps-12345.scope"
        try roots.write("12:pids:/\n4:memory:/\n1:name=systemd:\(maps)\n", to: "proc/12345/cgroup")
        #expect(roots.inspector.identify(pid: 12345).appID == AppID(rawValue: "org.gnome.Maps"))
        #expect(roots.inspector.identify(pid: 12345).unit == "app-gnome-org.gnome.Maps-12345.scope")
    }

    @Test("a terminal, a session scope or a cgroup naming no unit: unverified, no unit")
    func unverified() throws {
        let roots = try FakeRoots()
        try roots.cgroupFile(pid: 2, path: "/user.slice/user-1000.slice/session-2.scope")
        try roots.cgroupFile(pid: 3, path: "\(userManager)/app.slice/app-org.gnome.Terminal.slice/vte-spawn-228ae109-a869-4533-8988-65ea4c10b492.scope")
        try roots.cgroupFile(pid: 4, path: "/")
        try roots.write("garbage", to: "proc/5/cgroup")
        for pid: UInt32 in [2, 3, 4, 5] {
            #expect(roots.inspector.identify(pid: pid) == .unverified(pid: pid))
            #expect(roots.inspector.identify(pid: pid).seen)
        }
    }

    @Test("an identity keeps its process's start, and tells a later process with the pid from it")
    func startTimeTellsAReusedPid() throws {
        let roots = try FakeRoots()
        try roots.cgroupFile(pid: 2, path: "/user.slice/user-1000.slice/session-2.scope")
        try roots.stat(pid: 2, ppid: 1, utime: 0, stime: 0, start: 500)
        let identity = roots.inspector.identify(pid: 2)
        #expect(identity.startTime == 500 / ticksPerSecond)
        #expect(roots.inspector.stillRuns(identity))
        // The process exits and another is given its number.
        try roots.stat(pid: 2, ppid: 1, utime: 0, stime: 0, start: 90_000)
        #expect(!roots.inspector.stillRuns(identity))
        // No start read, nothing to tell them apart by: taken as the same.
        try roots.cgroupFile(pid: 3, path: "/user.slice/user-1000.slice/session-2.scope")
        let unread = roots.inspector.identify(pid: 3)
        #expect(unread.startTime == nil)
        #expect(roots.inspector.stillRuns(unread))
    }

    /// A process whose cgroup cannot be read is gone (or hidden): the bus reports the PID of
    /// the process that connected, which may have exited leaving its connection to a child,
    /// a sandboxed one as well as any. Nothing then says it is outside a sandbox.
    @Test("no /proc entry, or no cgroup in it: unseen")
    func unseen() throws {
        let roots = try FakeRoots()
        try FileManager.default.createDirectory(atPath: roots.proc + "/7", withIntermediateDirectories: true)
        for pid: UInt32 in [6, 7] {
            #expect(roots.inspector.identify(pid: pid) == .unseen(pid: pid))
            #expect(!roots.inspector.identify(pid: pid).seen)
        }
    }

    @Test("tests' fake tree falls back to the real /proc for a process it has no entry for")
    func fallback() throws {
        let roots = try FakeRoots()
        var inspector = roots.inspector
        inspector.fallbackProcRoot = "/proc"
        let me = UInt32(getpid())
        #expect(roots.inspector.identify(pid: me).seen == false)
        #expect(inspector.identify(pid: me).seen)
        // An entry in the fake tree is read there, fallback or not.
        try roots.cgroupFile(pid: me, path: "\(userManager)/app.slice/app-gnome-org.gnome.Maps-1.scope")
        #expect(inspector.identify(pid: me).appID == AppID(rawValue: "org.gnome.Maps"))
    }

    @Test("what a failure to read .flatpak-info says", arguments: [
        (ENOENT, ProcessInspector.FlatpakInstance.none), (ENOTDIR, .none), (EACCES, .unreadable), (ESRCH, .gone),
        (ELOOP, .unnamed), (EFBIG, .unnamed),
    ])
    func flatpakInfoFailures(code: Int32, expected: ProcessInspector.FlatpakInstance) {
        #expect(ProcessInspector.flatpakInstance(failing: code) == expected)
    }

    // MARK: CPU

    @Test("/proc/PID/stat: fields after the last ')', descendants summed, strangers not")
    func processTree() throws {
        let roots = try FakeRoots()
        // The app, with a name the kernel does not escape.
        try roots.stat(pid: 100, comm: "my) (app", ppid: 1, utime: 300, stime: 100, cutime: 50, cstime: 10)
        try roots.stat(pid: 101, comm: "child", ppid: 100, utime: 20, stime: 5)
        try roots.stat(pid: 102, comm: ") )", ppid: 101, utime: 7, stime: 3, cutime: 4, cstime: 1)
        try roots.stat(pid: 200, comm: "stranger", ppid: 1, utime: 9999, stime: 9999)
        try roots.stat(pid: 201, comm: "stranger's child", ppid: 200, utime: 9999, stime: 9999)
        try roots.write("not a pid", to: "proc/self/stat")
        let reading = try #require(roots.inspector.cpuUsage(pid: 100, cgroupPath: nil))
        #expect(reading.fromCgroup == false)
        #expect(reading.cpuSeconds == Double(300 + 100 + 50 + 10 + 20 + 5 + 7 + 3 + 4 + 1) / ticksPerSecond)
        // A child alone.
        #expect(roots.inspector.cpuUsage(pid: 102, cgroupPath: nil) == CPUReading(cpuSeconds: 15 / ticksPerSecond, fromCgroup: false))
    }

    @Test("start times: starttime of /proc/PID/stat in seconds since boot; this process's own from the real /proc")
    func startTimes() throws {
        let roots = try FakeRoots()
        try roots.stat(pid: 100, comm: "a (b) c", ppid: 1, utime: 0, stime: 0, start: 4200)
        #expect(roots.inspector.startTime(pid: 100) == 4200 / ticksPerSecond)
        #expect(roots.inspector.startTime(pid: 101) == nil)
        try roots.write("102 (cut) S 1 2 3", to: "proc/102/stat")
        #expect(roots.inspector.startTime(pid: 102) == nil)
        // The fake root has no self; the real one does, on the clock of a real process's stat.
        let own = try #require(ProcessInspector.ownStartTime())
        let pid = UInt32(getpid())
        try FileManager.default.createSymbolicLink(atPath: roots.proc + "/\(pid)", withDestinationPath: "/proc/\(pid)")
        #expect(roots.inspector.startTime(pid: pid) == own)
        var boot = timespec()
        clock_gettime(CLOCK_BOOTTIME, &boot)
        #expect(own > 0 && own <= Double(boot.tv_sec) + 1)
    }

    @Test("a ppid cycle in a snapshot counts each process once")
    func cycle() throws {
        let roots = try FakeRoots()
        try roots.stat(pid: 1, ppid: 2, utime: 1, stime: 0)
        try roots.stat(pid: 2, ppid: 1, utime: 10, stime: 0)
        #expect(roots.inspector.cpuUsage(pid: 1, cgroupPath: nil)?.cpuSeconds == 11 / ticksPerSecond)
    }

    @Test("cpu.stat usage_usec when the cgroup has one, the process tree otherwise")
    func cgroup() throws {
        let roots = try FakeRoots()
        let scope = "\(userManager)/app.slice/app-gnome-org.gnome.Maps-12345.scope"
        try roots.stat(pid: 12345, ppid: 1, utime: 100, stime: 0)
        try roots.write("usage_usec 2500000\nuser_usec 2000000\nsystem_usec 500000\nnr_periods 0\n", to: "cgroup" + scope + "/cpu.stat")
        #expect(roots.inspector.cpuUsage(pid: 12345, cgroupPath: scope) == CPUReading(cpuSeconds: 2.5, fromCgroup: true))
        #expect(roots.inspector.cpuUsage(pid: 12345, cgroupPath: scope + "/") == CPUReading(cpuSeconds: 2.5, fromCgroup: true))
        let fallback = CPUReading(cpuSeconds: 100 / ticksPerSecond, fromCgroup: false)
        // No cpu.stat (cgroup v1, or a vanished unit), one without usage_usec, or a path that climbs out.
        #expect(roots.inspector.cpuUsage(pid: 12345, cgroupPath: "/user.slice/other.scope") == fallback)
        try roots.write("nr_periods 0\n", to: "cgroup/empty.scope/cpu.stat")
        #expect(roots.inspector.cpuUsage(pid: 12345, cgroupPath: "/empty.scope") == fallback)
        try roots.write("usage_usec 1\n", to: "secret/cpu.stat")
        #expect(roots.inspector.cpuUsage(pid: 12345, cgroupPath: "/../secret") == fallback)
        #expect(roots.inspector.cpuUsage(pid: 12345, cgroupPath: "relative") == fallback)
    }

    @Test("a CPU quota can work where the slice above the unit has the cpu controller; unknown where that is unreadable")
    func cpuController() throws {
        let roots = try FakeRoots()
        let scope = "\(userManager)/app.slice/app-gnome-org.gnome.Maps-12345.scope"
        #expect(roots.inspector.cpuControllerAvailable(cgroupPath: scope) == nil)
        // systemd before 252: user@.service has Delegate=pids memory.
        try roots.write("memory pids\n", to: "cgroup\(userManager)/app.slice/cgroup.controllers")
        #expect(roots.inspector.cpuControllerAvailable(cgroupPath: scope) == false)
        #expect(roots.inspector.cpuControllerAvailable(cgroupPath: scope + "/") == false)
        // "cpuset" is not "cpu".
        try roots.write("cpuset io memory pids\n", to: "cgroup\(userManager)/app.slice/cgroup.controllers")
        #expect(roots.inspector.cpuControllerAvailable(cgroupPath: scope) == false)
        try roots.write("cpuset cpu io memory pids\n", to: "cgroup\(userManager)/app.slice/cgroup.controllers")
        #expect(roots.inspector.cpuControllerAvailable(cgroupPath: scope) == true)
        // A path that could climb out of the root, or a relative one, is not read.
        try roots.write("memory pids\n", to: "cgroup.controllers")
        #expect(roots.inspector.cpuControllerAvailable(cgroupPath: "/../x.scope") == nil)
        #expect(roots.inspector.cpuControllerAvailable(cgroupPath: "relative") == nil)
    }

    @Test("a vanished process reads nil, even when its cgroup remains")
    func vanished() throws {
        let roots = try FakeRoots()
        try roots.write("usage_usec 2500000\n", to: "cgroup/app.scope/cpu.stat")
        #expect(roots.inspector.cpuUsage(pid: 999, cgroupPath: "/app.scope") == nil)
        #expect(roots.inspector.cpuUsage(pid: 999, cgroupPath: nil) == nil)
        #expect(roots.inspector.identify(pid: 999) == .unseen(pid: 999))
        // Truncated or oversized stat files read as gone, not as garbage.
        try roots.write("998 (cut", to: "proc/998/stat")
        #expect(roots.inspector.cpuUsage(pid: 998, cgroupPath: nil) == nil)
        try roots.write("997 (x) S 1 " + String(repeating: "1 ", count: 5000), to: "proc/997/stat")
        #expect(roots.inspector.cpuUsage(pid: 997, cgroupPath: nil) == nil)
    }

    @Test("the real /proc/self: a busy loop's CPU within ±10 %")
    func realProcess() throws {
        // A proc root that shows only this process, so that other tests' children do not count.
        let roots = try FakeRoots()
        let pid = UInt32(getpid())
        try FileManager.default.createSymbolicLink(atPath: roots.proc + "/\(pid)", withDestinationPath: "/proc/\(pid)")
        let inspector = ProcessInspector(procRoot: roots.proc, cgroupRoot: roots.cgroup)

        // What the kernel counts for this process and its reaped children, as cutime/cstime do.
        func reference() -> Double {
            var now = timespec()
            clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &now)
            var children = rusage()
            getrusage(__rusage_who_t(RUSAGE_CHILDREN.rawValue), &children)
            return Double(now.tv_sec) + Double(now.tv_nsec) / 1e9
                + Double(children.ru_utime.tv_sec + children.ru_stime.tv_sec)
                + Double(children.ru_utime.tv_usec + children.ru_stime.tv_usec) / 1e6
        }
        func threadSeconds() -> Double {
            var now = timespec()
            clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now)
            return Double(now.tv_sec) + Double(now.tv_nsec) / 1e9
        }

        let before = try #require(inspector.cpuUsage(pid: pid, cgroupPath: nil))
        let referenceBefore = reference()
        let start = threadSeconds()
        var spin: UInt64 = 0
        while threadSeconds() - start < 0.6 {
            for i in 0..<10_000 { spin = spin &* 31 &+ UInt64(i) }
        }
        let after = try #require(inspector.cpuUsage(pid: pid, cgroupPath: nil))
        let referenceAfter = reference()
        #expect(spin != 42)

        let measured = after.cpuSeconds - before.cpuSeconds
        let expected = referenceAfter - referenceBefore
        #expect(after.fromCgroup == false)
        #expect(abs(measured - expected) <= 0.1 * expected, "measured \(measured) s, expected \(expected) s")
    }
}
