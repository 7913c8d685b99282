import Glibc
import Synchronization

/// What the crash handler and the hang watchdog report: the seed, the iteration and the
/// input being processed. An abort (libdbus's "check failed"), a Swift trap or a segfault
/// kills the process, so the handler writes the reproduction line itself, with no allocation,
/// before letting the signal take its course.
enum CrashContext {
    static let iteration = Atomic<UInt64>(0)
    static let progress = Atomic<UInt64>(0)
    static let finished = Atomic<Bool>(false)

    nonisolated(unsafe) static var seed: UInt64 = 0
    nonisolated(unsafe) static var hangSeconds: UInt32 = 60
    static let inputCapacity = 1 << 16
    nonisolated(unsafe) static var input = UnsafeMutablePointer<UInt8>.allocate(capacity: inputCapacity)
    nonisolated(unsafe) static var inputLength = 0
    nonisolated(unsafe) static var phase: StaticString = "startup"
    nonisolated(unsafe) static var scratch = UnsafeMutablePointer<UInt8>.allocate(capacity: 4096)

    /// Remembers the bytes about to be parsed (the first 64 KiB), for the crash report.
    static func setInput(_ bytes: [UInt8]) {
        let n = min(bytes.count, inputCapacity)
        bytes.withUnsafeBufferPointer { b in
            if let base = b.baseAddress { input.update(from: base, count: n) }
        }
        inputLength = n
    }

    static func clearInput() { inputLength = 0 }

    // MARK: Async-signal-safe output

    static func write(_ text: StaticString) {
        _ = Glibc.write(2, text.utf8Start, text.utf8CodeUnitCount)
    }

    static func write(number: UInt64) {
        var v = number
        var i = 32
        repeat {
            i -= 1
            scratch[i] = UInt8(ascii: "0") + UInt8(v % 10)
            v /= 10
        } while v > 0
        _ = Glibc.write(2, scratch + i, 32 - i)
    }

    static func writeInputHex() {
        let digits: StaticString = "0123456789abcdef"
        var offset = 0
        while offset < inputLength {
            let chunk = min(1024, inputLength - offset)
            for j in 0..<chunk {
                let b = input[offset + j]
                scratch[2 * j] = digits.utf8Start[Int(b >> 4)]
                scratch[2 * j + 1] = digits.utf8Start[Int(b & 15)]
            }
            _ = Glibc.write(2, scratch, 2 * chunk)
            offset += chunk
        }
    }

    static func report(_ what: StaticString, signal: Int32) {
        write("\nbgpolicy-fuzz: ")
        write(what)
        if signal > 0 {
            write(" (signal ")
            write(number: UInt64(signal))
            write(")")
        }
        write(" at seed ")
        write(number: seed)
        write(" iteration ")
        write(number: iteration.load(ordering: .relaxed))
        write(" during ")
        write(phase)
        write("\nbgpolicy-fuzz: reproduce with: bgpolicy-fuzz --seed ")
        write(number: seed)
        write(" --start ")
        write(number: iteration.load(ordering: .relaxed))
        write(" --iterations 1 --verbose\n")
        if inputLength > 0 {
            write("bgpolicy-fuzz: input bytes (replay with --replay HEX): ")
            writeInputHex()
            write("\n")
        }
    }

    // MARK: Installation

    static func install(hangSeconds: UInt32) {
        self.hangSeconds = hangSeconds
        // An alternate stack, so a stack overflow can still be reported.
        let size = 1 << 16
        var stack = stack_t()
        stack.ss_sp = UnsafeMutableRawPointer.allocate(byteCount: size, alignment: 16)
        stack.ss_size = size
        stack.ss_flags = 0
        sigaltstack(&stack, nil)

        for sig in [SIGABRT, SIGSEGV, SIGBUS, SIGILL, SIGTRAP, SIGFPE] {
            var action = sigaction()
            action.__sigaction_handler.sa_handler = { sig in
                CrashContext.report("CRASH", signal: sig)
                signal(sig, SIG_DFL)
                raise(sig)
            }
            action.sa_flags = Int32(SA_ONSTACK) | Int32(bitPattern: UInt32(SA_RESETHAND))
            sigemptyset(&action.sa_mask)
            sigaction(sig, &action, nil)
        }

        var thread = pthread_t()
        pthread_create(
            &thread, nil,
            { _ in
                var last = CrashContext.progress.load(ordering: .relaxed)
                var still: UInt32 = 0
                while !CrashContext.finished.load(ordering: .relaxed) {
                    sleep(1)
                    let now = CrashContext.progress.load(ordering: .relaxed)
                    if now != last {
                        last = now
                        still = 0
                        continue
                    }
                    still += 1
                    if still >= CrashContext.hangSeconds && !CrashContext.finished.load(ordering: .relaxed) {
                        CrashContext.report("HANG (no progress for the watchdog's limit)", signal: 0)
                        _exit(3)
                    }
                }
                return nil
            }, nil)
        pthread_detach(thread)
    }
}

/// Resident memory and open descriptors, to check that a long run stays flat.
enum ProcessStats {
    static func residentBytes() -> Int {
        let fd = open("/proc/self/statm", O_RDONLY)
        guard fd >= 0 else { return 0 }
        defer { close(fd) }
        var buffer = [UInt8](repeating: 0, count: 128)
        let n = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, 127) }
        guard n > 0 else { return 0 }
        let fields = buffer[0..<n].split(separator: UInt8(ascii: " "))
        guard fields.count > 1, let pages = Int(String(decoding: fields[1], as: UTF8.self)) else { return 0 }
        return pages * Int(sysconf(Int32(_SC_PAGESIZE)))
    }

    /// Open descriptors on files, pipes and sockets. Not counted: the ones on /proc (libdispatch's
    /// threads briefly open /proc/PID/stat) and anonymous inodes (the epoll, eventfd and timerfd
    /// libdispatch creates when it first needs them): both would make the count race.
    static func openDescriptors() -> Int {
        guard let dir = opendir("/proc/self/fd") else { return -1 }
        defer { closedir(dir) }
        var n = 0
        var target = [CChar](repeating: 0, count: 256)
        while let entry = readdir(dir) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
            guard name != ".", name != ".." else { continue }
            let length = readlink("/proc/self/fd/" + name, &target, target.count - 1)
            guard length > 0 else { continue }  // the directory's own descriptor, already closed
            let text = String(decoding: target[0..<length].map { UInt8(bitPattern: $0) }, as: UTF8.self)
            if text.hasPrefix("/proc/") || text.hasPrefix("anon_inode:") { continue }
            n += 1
        }
        return n
    }

    static func mebibytes(_ bytes: Int) -> String {
        let tenths = bytes * 10 / (1 << 20)
        return "\(tenths / 10).\(tenths % 10)MiB"
    }
}
