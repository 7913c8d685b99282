import Glibc
import Synchronization

/// A process a test starts (a private dbus-daemon, python-dbusmock, bgpolicyd), spawned with
/// `posix_spawn` and reaped with `waitpid`, and never with Foundation's `Process`.
///
/// Foundation's `Process` learns that a child exited when a socket the child inherited closes,
/// and that socket is not close-on-exec: a child another thread spawned at the same moment
/// inherits it too, and then the first child's exit goes unseen while the second lives.
/// `waitUntilExit()` then waits for good, on a thread of the cooperative pool (two, on two
/// CPUs), and the whole test run hangs (a dbus-daemon killed by one bus test, its socket held
/// by the dbus-daemon of the test beside it). Here the child's exit is `waitpid`'s to report,
/// and the child inherits no descriptor but its standard three.
public final class ChildProcess: Sendable {
    /// Where the child's standard output or error goes.
    public enum Output: Sendable {
        /// /dev/null.
        case null
        /// The test runner's own.
        case inherit
        /// Appended to the file at this path, created if missing.
        case file(String)
        /// A pipe whose read end `readLine()` reads (standard output only).
        case pipe
    }

    public struct SpawnError: Error, CustomStringConvertible {
        public let executable: String
        public let step: String
        public let code: Int32
        public var description: String { "cannot start \(executable): \(step): \(String(cString: strerror(code)))" }
    }

    public let pid: Int32
    /// The read end of the standard output pipe, for `.pipe`; -1 once closed or never opened.
    private let output: Mutex<Int32>
    /// The raw `waitpid` status, once the child has been reaped.
    private let status = Mutex<Int32?>(nil)

    /// Starts `executable` with `arguments`, and `environment` (the runner's own when nil). The
    /// child's signal mask is empty and its signal dispositions the defaults, whatever the
    /// spawning thread had (the test runner's threads may block SIGTERM).
    public init(
        _ executable: String, _ arguments: [String], environment: [String: String]? = nil,
        standardOutput: Output = .null, standardError: Output = .null
    ) throws(SpawnError) {
        func failure(_ step: String, _ code: Int32) -> SpawnError {
            SpawnError(executable: executable, step: step, code: code)
        }
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        var pipeEnds: [Int32] = [-1, -1]
        func redirect(_ output: Output, to target: Int32) throws(SpawnError) {
            switch output {
            case .inherit:
                break
            case .null:
                posix_spawn_file_actions_addopen(&actions, target, "/dev/null", O_WRONLY, 0)
            case .file(let path):
                posix_spawn_file_actions_addopen(&actions, target, path, O_WRONLY | O_APPEND | O_CREAT, 0o644)
            case .pipe:
                guard target == STDOUT_FILENO else { throw failure("only standard output can be a pipe", EINVAL) }
                // (pipe2 is not in Swift's Glibc module; no other thread here spawns without
                // closing every descriptor from 3 on, so the moment before FD_CLOEXEC is harmless.)
                guard pipe(&pipeEnds) == 0 else { throw failure("pipe", errno) }
                for fd in pipeEnds { _ = fcntl(fd, F_SETFD, FD_CLOEXEC) }
                // dup2 leaves the copy (the child's 1) open across exec.
                posix_spawn_file_actions_adddup2(&actions, pipeEnds[1], target)
            }
        }
        do {
            posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0)
            try redirect(standardOutput, to: STDOUT_FILENO)
            try redirect(standardError, to: STDERR_FILENO)
        } catch {
            for fd in pipeEnds where fd >= 0 { close(fd) }
            throw error
        }
        Self.closeTheRest(&actions)

        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        var noSignals = sigset_t()
        sigemptyset(&noSignals)
        var allSignals = sigset_t()
        sigfillset(&allSignals)
        posix_spawnattr_setsigmask(&attributes, &noSignals)
        posix_spawnattr_setsigdefault(&attributes, &allSignals)
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF))

        let argv = ([executable] + arguments).map { strdup($0) } + [nil]
        defer { for pointer in argv { free(pointer) } }
        let variables = environment.map { $0.map { "\($0.key)=\($0.value)" } }
        let envp = variables.map { $0.map { strdup($0) } + [nil] }
        defer { for pointer in envp ?? [] { free(pointer) } }

        var pid = pid_t()
        let result = argv.withUnsafeBufferPointer { argvBuffer in
            if let envp {
                return envp.withUnsafeBufferPointer { envpBuffer in
                    posix_spawn(&pid, executable, &actions, &attributes, argvBuffer.baseAddress!, envpBuffer.baseAddress!)
                }
            }
            return posix_spawn(&pid, executable, &actions, &attributes, argvBuffer.baseAddress!, environ)
        }
        if pipeEnds[1] >= 0 { close(pipeEnds[1]) }
        guard result == 0 else {
            if pipeEnds[0] >= 0 { close(pipeEnds[0]) }
            throw failure("posix_spawn", result)
        }
        self.pid = pid
        output = Mutex(pipeEnds[0])
    }

    deinit {
        // A child still running is left to the test that started it; its pipe is not.
        output.withLock { fd in
            if fd >= 0 { close(fd) }
        }
    }

    /// Everything from descriptor 3 on is closed in the child, whatever its close-on-exec flag:
    /// glibc's `posix_spawn_file_actions_addclosefrom_np` (2.34), which Swift's Glibc module
    /// does not declare; else each descriptor open now that lacks the flag.
    private static func closeTheRest(_ actions: inout posix_spawn_file_actions_t) {
        typealias AddCloseFrom = @convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>, Int32) -> Int32
        if let symbol = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "posix_spawn_file_actions_addclosefrom_np") {
            _ = unsafeBitCast(symbol, to: AddCloseFrom.self)(&actions, 3)
            return
        }
        guard let directory = opendir("/proc/self/fd") else { return }
        defer { closedir(directory) }
        let own = dirfd(directory)
        while let entry = readdir(directory) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
            guard let fd = Int32(name), fd > 2, fd != own else { continue }
            let flags = fcntl(fd, F_GETFD)
            if flags >= 0 && flags & FD_CLOEXEC == 0 {
                posix_spawn_file_actions_addclose(&actions, fd)
            }
        }
    }

    /// The first line of the child's standard output (`.pipe`), without its newline; nil if
    /// the child closed it first. The pipe is closed after.
    public func readLine() -> String? {
        output.withLock { fd -> String? in
            guard fd >= 0 else { return nil }
            defer {
                close(fd)
                fd = -1
            }
            var bytes: [UInt8] = []
            var byte: UInt8 = 0
            while true {
                let n = read(fd, &byte, 1)
                if n < 0 && errno == EINTR { continue }
                guard n == 1 else { return nil }
                if byte == UInt8(ascii: "\n") { return String(decoding: bytes, as: UTF8.self) }
                bytes.append(byte)
            }
        }
    }

    /// Sends `signal`, unless the child has been reaped (its pid may be another process's by then).
    public func signal(_ number: Int32) {
        status.withLock { status in
            if status == nil { Glibc.kill(pid, number) }
        }
    }

    /// Whether the child has not exited (reaping it if it has).
    public var isRunning: Bool {
        status.withLock { status in
            if status == nil { status = Self.reap(pid, options: WNOHANG) }
            return status == nil
        }
    }

    /// Waits until the child exits, reaps it, and returns its raw status (as `waitpid` gives it).
    @discardableResult
    public func waitForExit() -> Int32 {
        while true {
            if let reaped = status.withLock({ status -> Int32? in
                if status == nil { status = Self.reap(pid, options: WNOHANG) }
                return status
            }) {
                return reaped
            }
            // Wait without reaping, outside the lock, then reap under it above.
            var info = siginfo_t()
            while waitid(P_PID, id_t(pid), &info, WEXITED | WNOWAIT) < 0 && errno == EINTR {}
        }
    }

    /// SIGKILL, then waits for the exit.
    public func kill() {
        signal(SIGKILL)
        waitForExit()
    }

    /// SIGTERM (and SIGCONT, for a child stopped with SIGSTOP), then SIGKILL if the child has
    /// not exited within `grace`; waits for the exit. A child that cleans up on SIGTERM (a
    /// dbus-daemon removes its socket file) gets the chance to.
    public func terminate(grace: Duration = .seconds(2)) {
        signal(SIGTERM)
        signal(SIGCONT)
        let deadline = ContinuousClock.now + grace
        while isRunning {
            guard ContinuousClock.now < deadline else { break }
            usleep(2_000)
        }
        kill()
    }

    /// The exit code, or nil when the child was ended by a signal or is running.
    public var exitCode: Int32? {
        status.withLock { status in
            guard let status, status & 0x7f == 0 else { return nil }
            return (status >> 8) & 0xff
        }
    }

    private static func reap(_ pid: pid_t, options: Int32) -> Int32? {
        var raw: Int32 = 0
        while true {
            let result = waitpid(pid, &raw, options)
            if result == pid { return raw }
            if result < 0 && errno == EINTR { continue }
            // 0: still running. ECHILD cannot happen for our own unreaped child; were it
            // reaped elsewhere, call it gone rather than wait for good.
            return result < 0 ? 0 : nil
        }
    }
}
