internal import CBGPolicyClock
import Glibc
public import Logging
import Synchronization

/// Hears the wall clock being set: by the user, by `timedatectl`, by an NTP client stepping it,
/// by a VM resuming. The agent's timers run on the monotonic clock, so a window due at a wall
/// time would otherwise come as late (or as early) as the step; told, the agent plans again.
///
/// One thread sleeps in `read` on a timerfd armed on `CLOCK_REALTIME` at the far end of time
/// with `TFD_TIMER_CANCEL_ON_SET`: the kernel ends the read with `ECANCELED` when the clock is
/// set. Nothing else wakes it, so an idle machine never does; `stop()` wakes it by arming the
/// timer to expire at once.
public final class WallClockWatch: Sendable {
    private let stopping = Mutex(false)
    private let failureText = Mutex<String?>(nil)
    /// -1 when timerfd_create failed (the thread then never starts). Closed in `deinit`, not
    /// when the thread ends: `stop()` may still arm it, and a closed number could by then
    /// belong to someone else's file.
    private let timerFD: Int32
    private let changes: AsyncStream<Void>.Continuation

    /// Starts the thread. The stream gets a value each time the clock is set (several close
    /// together may come as one), and finishes when the thread ends: after `stop()`, when the
    /// reader goes away, or at once when the watch cannot run (`failure` says why).
    public static func start() -> (WallClockWatch, AsyncStream<Void>) {
        let (stream, continuation) = AsyncStream.makeStream(of: Void.self, bufferingPolicy: .bufferingNewest(1))
        let watch = WallClockWatch(changes: continuation)
        continuation.onTermination = { [weak watch] _ in watch?.stop() }
        watch.launch()
        return (watch, stream)
    }

    /// Runs until the task is cancelled, calling `changed` each time the wall clock is set. A
    /// watch that cannot run says so once and waits to be cancelled: it never ends the agent.
    public static func run(logger: Logger, changed: @escaping @Sendable () async -> Void) async {
        let (watch, changes) = start()
        for await _ in changes { await changed() }
        if let failure = watch.failure {
            logger.warning(
                "Cannot hear the wall clock being set: after a step of the clock, windows planned by the wall clock come that much early or late",
                metadata: ["error": "\(failure)"])
        }
        watch.stop()
        await waitUntilCancelled()
    }

    /// Why the watch ended on its own, if it did (read once the stream finished).
    public var failure: String? { failureText.withLock { $0 } }

    private init(changes: AsyncStream<Void>.Continuation) {
        self.changes = changes
        timerFD = timerfd_create(CLOCK_REALTIME, Int32(TFD_CLOEXEC))
    }

    deinit {
        if timerFD >= 0 { _ = close(timerFD) }
    }

    /// Asks the thread to end. Returns at once.
    public func stop() {
        let first = stopping.withLock { stopping -> Bool in
            defer { stopping = true }
            return !stopping
        }
        guard first, timerFD >= 0 else { return }
        // Expire at once, relative: the read returns and the thread sees `stopping`.
        var spec = itimerspec()
        spec.it_value.tv_nsec = 1
        _ = timerfd_settime(timerFD, 0, &spec, nil)
    }

    private static func describe(_ call: String, _ code: Int32) -> String {
        "\(call): \(String(cString: strerror(code)))"
    }

    private func end(failure: String?) {
        if let failure { failureText.withLock { $0 = failure } }
        changes.finish()
    }

    private func launch() {
        guard timerFD >= 0 else { return end(failure: Self.describe("timerfd_create", errno)) }
        if let failure = arm() { return end(failure: failure) }
        let rc = DetachedThread.start(name: "clock-watch") { self.end(failure: self.run()) }
        if rc != 0 { end(failure: Self.describe("pthread_create", rc)) }
    }

    /// Arms the timer at the far end of time, to be cancelled when the clock is set. Returns
    /// why it could not, or nil.
    ///
    /// `timerfd_settime` answers `ECANCELED` when the clock was set since the timer was last
    /// armed or read (a second step right after the one just heard, as NTP and `timedatectl`
    /// can make): the timer is armed all the same, and that set is reported here, once, rather
    /// than by the read. So it is passed on as a set, and the timer armed again. Taken for a
    /// failure, it ended the watch for good, and the agent heard no step after it.
    private func arm() -> String? {
        var spec = itimerspec()
        spec.it_value.tv_sec = Int(Int32.max) * 64  // about the year 6000: never, in practice
        let flags = Int32(TFD_TIMER_ABSTIME | TFD_TIMER_CANCEL_ON_SET)
        while timerfd_settime(timerFD, flags, &spec, nil) != 0 {
            let code = errno
            guard code == ECANCELED || code == EINTR else { return Self.describe("timerfd_settime", code) }
            if code == ECANCELED { changes.yield() }
        }
        return nil
    }

    /// The thread: until stopped, each wake of the read is the clock set (`ECANCELED`), or the
    /// far end of time reached; either way the clock is not where it was, and the timer is
    /// armed again. Returns why it ended on its own, or nil when stopped.
    private func run() -> String? {
        while true {
            var expirations: UInt64 = 0
            let n = withUnsafeMutableBytes(of: &expirations) { read(timerFD, $0.baseAddress, 8) }
            let code = errno
            if stopping.withLock({ $0 }) { return nil }
            if n < 0 && code == EINTR { continue }
            if n < 0 && code != ECANCELED { return Self.describe("read", code) }
            changes.yield()
            if let failure = arm() { return failure }
            // A stop that came between the read and the arming was overwritten by it.
            if stopping.withLock({ $0 }) { return nil }
        }
    }
}
