import Glibc

/// The bgpolicyd the bench starts, with its own state and configuration folders.
final class AgentProcess {
    let pid: pid_t
    let home: String
    let logPath: String
    private var exitStatus: Int32?

    private init(pid: pid_t, home: String, logPath: String) {
        self.pid = pid
        self.home = home
        self.logPath = logPath
    }

    /// `bgpolicyd` in the folder of this executable.
    static func defaultPath() -> String? {
        var buffer = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
        let n = readlink("/proc/self/exe", &buffer, buffer.count - 1)
        guard n > 0 else { return nil }
        let exe = String(decoding: buffer[0..<n].map { UInt8(bitPattern: $0) }, as: UTF8.self)
        guard let slash = exe.lastIndex(of: "/") else { return nil }
        return String(exe[..<slash]) + "/bgpolicyd"
    }

    /// Starts the agent with `--state-dir`, XDG_STATE_HOME and XDG_CONFIG_HOME in a fresh
    /// temporary folder (or in `home`, to start again on the state an earlier agent left), its
    /// output appended to a log file there, and a clean signal mask and dispositions (so
    /// SIGTERM reaches it whatever this process blocks). `environment` adds variables.
    static func spawn(path: String, home existingHome: String? = nil, environment extra: [String] = []) throws(BenchFailure) -> AgentProcess {
        guard access(path, X_OK) == 0 else {
            throw BenchFailure("no agent at \(path) (\(String(cString: strerror(errno)))): build the bgpolicyd product next to bgpolicy-bench, or pass --agent PATH")
        }
        let home: String
        if let existingHome {
            home = existingHome
        } else {
            let tmp = getenv("TMPDIR").map { String(cString: $0) }.flatMap { $0.isEmpty ? nil : $0 } ?? "/tmp"
            var template = Array((tmp + "/bgpolicy-bench.XXXXXX").utf8CString)
            guard mkdtemp(&template) != nil else {
                throw BenchFailure("mkdtemp in \(tmp): \(String(cString: strerror(errno)))")
            }
            home = template.withUnsafeBufferPointer { String(cString: $0.baseAddress!) }
        }
        let logPath = home + "/bgpolicyd.log"

        var environment: [String] = []
        var entry = environ
        while let pointer = entry.pointee {
            let text = String(cString: pointer)
            let name = text.prefix { $0 != "=" }
            if name != "XDG_STATE_HOME" && name != "XDG_CONFIG_HOME" && !extra.contains(where: { $0.hasPrefix(name + "=") }) {
                environment.append(text)
            }
            entry += 1
        }
        environment.append("XDG_STATE_HOME=\(home)/state")
        environment.append("XDG_CONFIG_HOME=\(home)/config")
        environment += extra
        // Without a system bus the agent retries with a backoff, and those due timers would
        // count as idle wake-ups. Give it a quiet one: the session bus, where no UPower,
        // NetworkManager or logind runs, so its sources are simply missing.
        if getenv("DBUS_SYSTEM_BUS_ADDRESS") == nil, let session = getenv("DBUS_SESSION_BUS_ADDRESS") {
            environment.append("DBUS_SYSTEM_BUS_ADDRESS=" + String(cString: session))
        }

        let argv: [UnsafeMutablePointer<CChar>?] = [strdup(path), strdup("--state-dir"), strdup(home + "/state/bgpolicy"), nil]
        let envp: [UnsafeMutablePointer<CChar>?] = environment.map { strdup($0) } + [nil]
        defer {
            for p in argv { free(p) }
            for p in envp { free(p) }
        }

        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 1, logPath, O_WRONLY | O_CREAT | O_APPEND, 0o644)
        posix_spawn_file_actions_adddup2(&actions, 1, 2)

        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        var mask = sigset_t()
        sigemptyset(&mask)
        posix_spawnattr_setsigmask(&attributes, &mask)
        var defaults = sigset_t()
        sigemptyset(&defaults)
        for signal in [SIGTERM, SIGINT, SIGHUP, SIGPIPE] { sigaddset(&defaults, signal) }
        posix_spawnattr_setsigdefault(&attributes, &defaults)
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF))

        var pid: pid_t = 0
        let rc = argv.withUnsafeBufferPointer { a in
            envp.withUnsafeBufferPointer { e in
                posix_spawn(&pid, path, &actions, &attributes, a.baseAddress!, e.baseAddress!)
            }
        }
        guard rc == 0 else {
            if existingHome == nil { removeTree(home) }
            throw BenchFailure("posix_spawn \(path): \(String(cString: strerror(rc)))")
        }
        return AgentProcess(pid: pid, home: home, logPath: logPath)
    }

    /// The raw wait status once the process has ended, nil while it runs.
    func poll() -> Int32? {
        if let exitStatus { return exitStatus }
        var status: Int32 = 0
        let r = waitpid(pid, &status, WNOHANG)
        if r == pid { exitStatus = status }
        return exitStatus
    }

    var isRunning: Bool { poll() == nil }

    static func describe(status: Int32) -> String {
        let signal = status & 0x7f
        if signal == 0 { return "exit status \((status >> 8) & 0xff)" }
        return "killed by signal \(signal)"
    }

    /// The last lines of the agent's log, for failure messages.
    func logTail(lines: Int = 15) -> String {
        guard let text = ProcFS.read(logPath), !text.isEmpty else { return "(the agent wrote nothing)" }
        return text.split(separator: "\n", omittingEmptySubsequences: false).suffix(lines).joined(separator: "\n")
    }

    /// SIGTERM, then SIGKILL after `timeout` seconds. Returns how it ended.
    func stop(timeout: Double = 5) -> (description: String, milliseconds: Double, killed: Bool) {
        let start = Clock.nanoseconds()
        if let status = poll() { return ("had already ended: \(Self.describe(status: status))", 0, false) }
        kill(pid, SIGTERM)
        let deadline = start + UInt64(timeout * 1e9)
        while Clock.nanoseconds() < deadline {
            if let status = poll() {
                return (Self.describe(status: status), Double(Clock.nanoseconds() - start) / 1e6, false)
            }
            usleep(2_000)
        }
        kill(pid, SIGKILL)
        var status: Int32 = 0
        while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
        exitStatus = status
        return ("did not stop within \(timeout) s of SIGTERM; SIGKILL sent", Double(Clock.nanoseconds() - start) / 1e6, true)
    }

    func removeHome() {
        Self.removeTree(home)
    }

    /// `rm -rf`, without following symbolic links.
    static func removeTree(_ path: String) {
        var info = stat()
        guard lstat(path, &info) == 0 else { return }
        if info.st_mode & S_IFMT == S_IFDIR {
            if let dir = opendir(path) {
                var names: [String] = []
                while let entry = readdir(dir) {
                    let name = withUnsafePointer(to: &entry.pointee.d_name) {
                        String(cString: UnsafeRawPointer($0).assumingMemoryBound(to: CChar.self))
                    }
                    if name != "." && name != ".." { names.append(name) }
                }
                closedir(dir)
                for name in names { removeTree(path + "/" + name) }
            }
            rmdir(path)
        } else {
            unlink(path)
        }
    }
}

enum Clock {
    /// CLOCK_MONOTONIC in nanoseconds.
    @inline(__always)
    static func nanoseconds() -> UInt64 {
        var ts = timespec()
        clock_gettime(CLOCK_MONOTONIC, &ts)
        return UInt64(ts.tv_sec) * 1_000_000_000 + UInt64(ts.tv_nsec)
    }
}
