import Glibc
import Synchronization

/// Prints one `ok <check>` or `FAIL <check>: why` line per check, flushed at once, and counts them.
final class Report: Sendable {
    private let counts = Mutex<(passed: Int, failed: Int)>((0, 0))
    /// When false, passing checks are counted but not printed (the self-test's bulk calls).
    let verbose: Bool

    init(verbose: Bool = true) {
        self.verbose = verbose
    }

    var passed: Int { counts.withLock { $0.passed } }
    var failed: Int { counts.withLock { $0.failed } }

    func ok(_ check: String) {
        counts.withLock { $0.passed += 1 }
        if verbose { say("ok \(check)") }
    }

    func fail(_ check: String, _ why: String) {
        counts.withLock { $0.failed += 1 }
        say("FAIL \(check): \(why.replacingNewlines())")
    }

    /// Runs one check: passes unless `body` throws.
    func check(_ name: String, _ body: () async throws -> Void) async {
        do {
            try await body()
            ok(name)
        } catch {
            fail(name, "\(error)")
        }
    }
}

/// Writes a line to standard output unbuffered, so a reading test sees it at once.
func say(_ line: String) {
    writeAll(1, line + "\n")
}

/// Writes a line to standard error.
func warn(_ line: String) {
    writeAll(2, line + "\n")
}

private func writeAll(_ fd: Int32, _ text: String) {
    let bytes = Array(text.utf8)
    var done = 0
    while done < bytes.count {
        let n = bytes.withUnsafeBytes { write(fd, $0.baseAddress! + done, bytes.count - done) }
        if n < 0 && errno == EINTR { continue }
        guard n > 0 else { return }
        done += n
    }
}

/// A failed expectation inside a check.
struct CheckFailure: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

func expect(_ condition: Bool, _ message: @autoclosure () -> String) throws {
    if !condition { throw CheckFailure(message()) }
}

/// Runs `operation`, failing with a clear message if it takes longer than `seconds`.
func withTimeout<T: Sendable>(
    _ seconds: Double, _ what: String, _ operation: @escaping @Sendable () async throws -> T
) async throws -> T {
    try await withThrowingTaskGroup(of: T.self) { group in
        group.addTask { try await operation() }
        group.addTask {
            try await Task.sleep(for: .milliseconds(Int(seconds * 1000)))
            throw CheckFailure("timed out after \(seconds) s waiting for \(what)")
        }
        defer { group.cancelAll() }
        return try await group.next()!
    }
}

extension String {
    func replacingNewlines() -> String {
        var out = ""
        for c in self { out += c == "\n" ? "\\n" : String(c) }
        return out
    }
}

/// Monotonic milliseconds, for measuring how long a call took.
func monotonicMilliseconds() -> Int64 {
    var ts = timespec()
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return Int64(ts.tv_sec) * 1000 + Int64(ts.tv_nsec) / 1_000_000
}
