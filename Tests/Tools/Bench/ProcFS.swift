import Glibc

/// What the bench reads about other processes, from /proc.
enum ProcFS {
    static func read(_ path: String) -> String? {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var bytes: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 4096)
        while true {
            let n = buffer.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, $0.count) }
            if n < 0 && errno == EINTR { continue }
            guard n > 0 else { break }
            bytes.append(contentsOf: buffer[0..<n])
        }
        return String(decoding: bytes, as: UTF8.self)
    }

    /// The number in a `Key:   123 kB` line of a /proc status file.
    static func field(_ key: String, in status: String) -> Int? {
        for line in status.split(separator: "\n") where line.hasPrefix(key + ":") {
            let rest = line.dropFirst(key.count + 1).drop { $0 == " " || $0 == "\t" }
            return Int(rest.prefix { $0.isNumber })
        }
        return nil
    }

    /// Resident set size in kB.
    static func rssKB(of pid: pid_t) -> Int? {
        read("/proc/\(pid)/status").flatMap { field("VmRSS", in: $0) }
    }

    /// Nanoseconds on a CPU of each live thread of `pid` (/proc/PID/task/TID/schedstat), by tid.
    static func threadCPU(of pid: pid_t) -> [Int: UInt64] {
        guard let dir = opendir("/proc/\(pid)/task") else { return [:] }
        defer { closedir(dir) }
        var out: [Int: UInt64] = [:]
        while let entry = readdir(dir) {
            let name = withUnsafePointer(to: &entry.pointee.d_name) {
                String(cString: UnsafeRawPointer($0).assumingMemoryBound(to: CChar.self))
            }
            guard let tid = Int(name), let text = read("/proc/\(pid)/task/\(name)/schedstat") else { continue }
            out[tid] = UInt64(text.prefix { $0.isNumber }) ?? 0
        }
        return out
    }

    /// CPU time spent between two `threadCPU` snapshots: threads born in between count from 0;
    /// the last stretch of a thread that ended in between is lost (the kernel drops its entry).
    static func cpuBetween(_ start: [Int: UInt64], _ end: [Int: UInt64]) -> UInt64 {
        var total: UInt64 = 0
        for (tid, ns) in end {
            let before = start[tid] ?? 0
            if ns > before { total += ns - before }
        }
        return total
    }

    struct ThreadSwitches: Sendable {
        let tid: Int
        let name: String
        /// voluntary + nonvoluntary
        let switches: Int
    }

    /// Context switches of every thread of `pid`.
    static func threadSwitches(of pid: pid_t) -> [ThreadSwitches]? {
        guard let dir = opendir("/proc/\(pid)/task") else { return nil }
        defer { closedir(dir) }
        var out: [ThreadSwitches] = []
        while let entry = readdir(dir) {
            let name = withUnsafePointer(to: &entry.pointee.d_name) {
                String(cString: UnsafeRawPointer($0).assumingMemoryBound(to: CChar.self))
            }
            guard let tid = Int(name) else { continue }
            guard let status = read("/proc/\(pid)/task/\(tid)/status") else { continue }  // thread just ended
            let switches = (field("voluntary_ctxt_switches", in: status) ?? 0) + (field("nonvoluntary_ctxt_switches", in: status) ?? 0)
            let comm = read("/proc/\(pid)/task/\(tid)/comm").map { String($0.prefix { $0 != "\n" }) } ?? "?"
            out.append(ThreadSwitches(tid: tid, name: comm, switches: switches))
        }
        return out
    }
}
