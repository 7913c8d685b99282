import Foundation
import Synchronization
import BGPolicyTestSupport
import Testing

@testable import BGPolicyDBus

// Helpers shared by the D-Bus tests. Every wait is bounded: a bug must make a test fail,
// never hang the run.

/// Thrown by `withTimeout` when the body has not finished in time.
struct TimedOut: Error, CustomStringConvertible {
    let what: String
    let limit: Duration
    var description: String { "timed out after \(limit) waiting for \(what)" }
}

/// Resumes a continuation at most once, whichever of several racers gets there first.
private final class ResumeOnce<T: Sendable>: Sendable {
    private let continuation = Mutex<CheckedContinuation<T, any Error>?>(nil)

    func install(_ c: CheckedContinuation<T, any Error>) {
        continuation.withLock { $0 = c }
    }

    func resume(with result: Result<T, any Error>) {
        let c = continuation.withLock { c in
            defer { c = nil }
            return c
        }
        c?.resume(with: result)
    }
}

/// Runs `body` and returns its result, or throws `TimedOut` once `limit` has passed.
///
/// The body runs in an unstructured task that is cancelled (and abandoned) on timeout, so even
/// a body that ignores cancellation cannot keep the test waiting.
func withTimeout<T: Sendable>(
    _ limit: Duration = .seconds(5), _ what: String = "an operation",
    _ body: @escaping @Sendable () async throws -> T
) async throws -> T {
    let work = Task { try await body() }
    let once = ResumeOnce<T>()
    return try await withTaskCancellationHandler {
        try await withCheckedThrowingContinuation { (c: CheckedContinuation<T, any Error>) in
            once.install(c)
            let timer = Task {
                do { try await Task.sleep(for: limit) } catch { return }
                once.resume(with: .failure(TimedOut(what: what, limit: limit)))
                work.cancel()
            }
            Task {
                let result = await work.result
                timer.cancel()
                once.resume(with: result)
            }
        }
    } onCancel: {
        work.cancel()
    }
}

/// Polls `condition` until it holds or `limit` passes; returns whether it held.
func eventually(
    _ limit: Duration = .seconds(5), every interval: Duration = .milliseconds(10),
    _ condition: @escaping @Sendable () async throws -> Bool
) async rethrows -> Bool {
    let deadline = ContinuousClock.now.advanced(by: limit)
    while true {
        if try await condition() { return true }
        if ContinuousClock.now >= deadline { return false }
        try? await Task.sleep(for: interval)
    }
}

/// Asserts that `body` throws `DBusError.remote` with the error name `name`; returns the message.
@discardableResult
func expectRemoteError(
    _ name: String, sourceLocation: SourceLocation = #_sourceLocation, _ body: () async throws -> Void
) async -> String? {
    do {
        try await body()
        Issue.record("expected the D-Bus error \(name), but the call succeeded", sourceLocation: sourceLocation)
    } catch DBusError.remote(let got, let message) {
        #expect(got == name, "error message: \(message)", sourceLocation: sourceLocation)
        return message
    } catch {
        Issue.record("expected the D-Bus error \(name), got \(error)", sourceLocation: sourceLocation)
    }
    return nil
}

/// The first signal of `subscription`, within `limit`.
func firstSignal(of subscription: SignalSubscription, within limit: Duration = .seconds(5)) async throws -> Message {
    try await signals(of: subscription, count: 1, within: limit)[0]
}

/// The first `count` signals of `subscription`, within `limit`.
func signals(of subscription: SignalSubscription, count: Int, within limit: Duration = .seconds(5)) async throws -> [Message] {
    try await withTimeout(limit, "\(count) signal(s)") {
        var out: [Message] = []
        for try await message in subscription {
            out.append(message)
            if out.count == count { break }
        }
        if out.count < count { throw DBusError.usage("the subscription ended after \(out.count) signal(s)") }
        return out
    }
}

/// A one-shot gate handlers can wait on; the test opens it.
final class Gate: Sendable {
    private let state = Mutex<(open: Bool, waiters: [CheckedContinuation<Void, Never>])>((false, []))

    func open() {
        let waiters = state.withLock { s in
            s.open = true
            defer { s.waiters = [] }
            return s.waiters
        }
        for w in waiters { w.resume() }
    }

    func wait() async {
        await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in
            let now = state.withLock { s in
                if s.open { return true }
                s.waiters.append(c)
                return false
            }
            if now { c.resume() }
        }
    }
}

/// A thread-safe list, for recording what handlers saw.
final class Recorder<T: Sendable>: Sendable {
    private let items = Mutex<[T]>([])
    func append(_ item: T) { items.withLock { $0.append(item) } }
    var all: [T] { items.withLock { $0 } }
    var count: Int { items.withLock { $0.count } }
}

/// Connects `count` connections to `bus`.
func connect(_ count: Int, to bus: PrivateBus) async throws -> [DBusConnection] {
    var out: [DBusConnection] = []
    for _ in 0..<count { out.append(try await DBusConnection.connect(to: .address(bus.address))) }
    return out
}

/// Runs `connection.objects.serve()` until the returned task is cancelled.
func startServing(_ connection: DBusConnection) -> Task<Void, Never> {
    Task { await connection.objects.serve() }
}

extension ObjectPath {
    /// For literals in tests: traps on an invalid path, which is a bug in the test.
    init(checked text: String) {
        do { try self.init(text) } catch { fatalError("invalid test path \(text)") }
    }
}

/// The `Echo` interface: takes one variant and returns it unchanged.
enum Echo {
    static let name = "org.bgpolicy.Test.Echo"
    static let path = ObjectPath(checked: "/org/bgpolicy/Test/Echo")
    static let description = InterfaceDescription(
        name: name, documentation: "Returns what it is given.",
        methods: [
            .init("Echo", inputs: [.init("value", .variant)], outputs: [.init("value", .variant)], documentation: "Echoes a variant.")
        ])
    static let interface = ExportedInterface(description).method("Echo") { call in call.arguments }
}

/// Compares two values exactly: doubles by bit pattern (so NaN and -0.0 count), strings by
/// their UTF-8 bytes (Swift's `==` treats canonically equivalent strings as equal), and file
/// descriptors only by type (numbers change in transit).
func bitExact(_ a: DBusValue, _ b: DBusValue) -> Bool {
    switch (a, b) {
    case (.double(let x), .double(let y)): return x.bitPattern == y.bitPattern
    case (.string(let x), .string(let y)): return Array(x.utf8) == Array(y.utf8)
    case (.unixFD, .unixFD): return true
    case (.variant(let x), .variant(let y)): return bitExact(x, y)
    case (.array(let te, let xs), .array(let ue, let ys)):
        return te == ue && xs.count == ys.count && zip(xs, ys).allSatisfy { bitExact($0, $1) }
    case (.dictionary(let tk, let tv, let xs), .dictionary(let uk, let uv, let ys)):
        return tk == uk && tv == uv && xs.count == ys.count
            && zip(xs, ys).allSatisfy { bitExact($0.key, $1.key) && bitExact($0.value, $1.value) }
    case (.structure(let xs), .structure(let ys)):
        return xs.count == ys.count && zip(xs, ys).allSatisfy { bitExact($0, $1) }
    default:
        return a == b
    }
}

func bitExact(_ a: [DBusValue], _ b: [DBusValue]) -> Bool {
    a.count == b.count && zip(a, b).allSatisfy { bitExact($0, $1) }
}

/// A private bus from a configuration of its own, in a new folder (returned, for the caller to
/// remove): `listen` (nil: a Unix socket in that folder) and `auth` as given, every name and
/// message allowed, then `extra` (`<allow_anonymous/>`, a `<limit>`…).
func configuredBus(named name: String, listen: String? = nil, auth: String = "EXTERNAL", extra: String = "") throws -> (PrivateBus, String) {
    let directory = FileManager.default.temporaryDirectory.appendingPathComponent(
        "bgpolicy-\(name)-bus-\(getpid())-\(UInt32.random(in: 0...UInt32.max))")
    try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
    let config = directory.appendingPathComponent("bus.conf")
    try """
        <!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
         "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
        <busconfig>
          <type>session</type>
          <listen>\(listen ?? "unix:tmpdir=\(directory.path)")</listen>
          <auth>\(auth)</auth>
          <policy context="default">
            <allow send_destination="*" eavesdrop="true"/>
            <allow eavesdrop="true"/>
            <allow own="*"/>
          </policy>
          \(extra)
        </busconfig>
        """.write(to: config, atomically: true, encoding: .utf8)
    return (try PrivateBus(configFile: config.path), directory.path)
}
