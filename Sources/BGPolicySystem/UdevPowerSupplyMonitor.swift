internal import CBGPolicyThread
internal import CBGPolicyUdev
import Glibc
import Synchronization

/// What `UdevPowerSource` asks of a watch of the power supplies: to read them all again, now
/// or on a timer, to stop, and to say when it has let go of everything.
/// `UdevPowerSupplyMonitor` is libudev's; the source's tests give it others, to break on cue.
protocol PowerSupplyWatch: Sendable {
    /// Asks for an enumeration now, reported whatever it finds. Requests coalesce.
    func rescan()
    /// Reads the supplies again every `period` from now (nil: never), and reports such a read
    /// only when it found something new. Replaces the period set before.
    func reread(every period: Duration?)
    /// Asks the watch to end. Returns at once; `finished()` waits.
    func stop()
    /// Returns when the watch has ended and released everything.
    func finished() async
}

/// The one thread that owns libudev for the power source (STYLE.md example 4).
///
/// The thread makes the context, the netlink monitor and every enumerator and device, uses
/// them, and unrefs them; nothing else touches them. It sleeps in `poll` on two descriptors —
/// the monitor's socket and an eventfd that other threads write to — with no timeout, so an
/// idle machine never wakes it. After it starts listening, after every uevent burst and on
/// every `rescan()`, it enumerates `power_supply` and yields the devices as plain values.
///
/// With a period set (`reread(every:)`: on battery without UPower), `poll` times out at the
/// next read instead, and the thread enumerates then; a timed read that finds the devices as
/// the last one yielded yields nothing. So a battery that does not change wakes this thread
/// alone, once a period, and the agent's executor not at all (the executor's own timer and the
/// answer it waited for woke it three times a read, and this thread three times too).
///
/// Listening starts before the first enumeration, so a change between the two cannot be
/// missed: it arrives as a uevent and causes a second enumeration.
///
/// Lost uevents are not the end. When a burst overflows the socket's receive buffer the kernel
/// drops uevents and reports ENOBUFS as an error on the socket (`POLLERR`); the thread clears
/// it and enumerates again, which covers whatever was lost. Only a socket that hangs up or is
/// not open (`POLLHUP`, `POLLNVAL`), or an error that reading it does not clear, ends the
/// thread: the source then reports its facts lost, and starts another after a wait
/// (`UdevPowerSource`).
final class UdevPowerSupplyMonitor: PowerSupplyWatch {
    enum Event: Sendable, Equatable {
        /// Every `power_supply` device, sorted by name.
        case devices([PowerSupplyDevice])
        /// libudev could not be set up, or the monitor broke; the thread has ended.
        case failed(UdevError)
    }

    private struct State {
        var rescan = false
        /// The timed reads' period, and whether it changed since the thread last took it.
        var period: Duration?
        var periodChanged = false
        var stop = false
        var finished = false
        var waiters: [CheckedContinuation<Void, Never>] = []
    }

    /// What outlives the thread's hold on the monitor: the requests, the stream and the
    /// waiters. The thread lets go of the monitor before it announces the end, so once
    /// `finished()` returns only the caller's reference keeps the eventfd open.
    private final class Shared: Sendable {
        let state = Mutex(State())
        let events: AsyncStream<Event>.Continuation

        init(events: AsyncStream<Event>.Continuation) {
            self.events = events
        }

        /// Publishes the end: a failure if any, then the stream's finish, then the waiters.
        func end(with failure: UdevError?) {
            if let failure { events.yield(.failed(failure)) }
            events.finish()
            let waiters = state.withLock { state in
                state.finished = true
                let waiters = state.waiters
                state.waiters = []
                return waiters
            }
            for waiter in waiters { waiter.resume() }
        }

        /// What `stop()`, `rescan()` and `reread(every:)` asked since the last call; the
        /// rescan request and the period's change are taken.
        func takeRequests() -> Requests {
            state.withLock { state in
                defer { (state.rescan, state.periodChanged) = (false, false) }
                return Requests(stop: state.stop, rescan: state.rescan, period: state.periodChanged ? .some(state.period) : nil)
            }
        }
    }

    /// What the thread is asked, taken at each wake of its eventfd.
    struct Requests {
        var stop = false
        var rescan = false
        /// The timed reads' new period (`.some(nil)`: none), or nil when it did not change.
        var period: Duration?? = nil
    }

    static let subsystem = "power_supply"

    /// -1 when eventfd failed (the thread then never starts). Closed in `deinit`, not when
    /// the thread ends: `stop()` and `rescan()` may still write to it, and a closed number
    /// could by then belong to someone else's file.
    private let wakeFD: Int32
    private let wakeFDError: Int32
    private let shared: Shared

    /// Starts the thread. The stream receives the first enumeration (or a failure) at once,
    /// and finishes when the thread has released every libudev object. The thread runs until
    /// `stop()` or until the stream's reader goes away.
    static func start() -> (UdevPowerSupplyMonitor, AsyncStream<Event>) {
        // Only the latest enumeration matters; a slow reader skips the stale ones.
        let (stream, continuation) = AsyncStream.makeStream(of: Event.self, bufferingPolicy: .bufferingNewest(1))
        let monitor = UdevPowerSupplyMonitor(events: continuation)
        // A reader that goes away (its task cancelled) stops the thread too.
        continuation.onTermination = { [weak monitor] _ in monitor?.stop() }
        monitor.launch()
        return (monitor, stream)
    }

    private init(events: AsyncStream<Event>.Continuation) {
        shared = Shared(events: events)
        wakeFD = eventfd(0, Int32(EFD_CLOEXEC | EFD_NONBLOCK))
        wakeFDError = wakeFD < 0 ? errno : 0
    }

    deinit {
        if wakeFD >= 0 { _ = close(wakeFD) }
    }

    // MARK: Any thread

    /// Asks for an enumeration now (after resume from sleep). Requests coalesce.
    func rescan() {
        let wake = shared.state.withLock { state -> Bool in
            guard !state.finished, !state.stop else { return false }
            state.rescan = true
            return true
        }
        if wake { signalWake() }
    }

    /// Sets the timed reads' period; the next read comes one period from now.
    func reread(every period: Duration?) {
        let wake = shared.state.withLock { state -> Bool in
            guard !state.finished, !state.stop else { return false }
            state.period = period
            state.periodChanged = true
            return true
        }
        if wake { signalWake() }
    }

    /// Asks the thread to release everything and end. Returns at once; `finished()` waits.
    func stop() {
        let wake = shared.state.withLock { state -> Bool in
            guard !state.finished, !state.stop else { return false }
            state.stop = true
            return true
        }
        if wake { signalWake() }
    }

    /// Returns when the thread has ended and every libudev object is released. Not
    /// cancellable on purpose: it is what makes "stopped" mean "released".
    func finished() async {
        await withCheckedContinuation { (waiter: CheckedContinuation<Void, Never>) in
            let done = shared.state.withLock { state -> Bool in
                if state.finished { return true }
                state.waiters.append(waiter)
                return false
            }
            if done { waiter.resume() }
        }
    }

    private func signalWake() {
        var one: UInt64 = 1
        _ = withUnsafeBytes(of: &one) { write(wakeFD, $0.baseAddress, 8) }
    }

    private func launch() {
        guard wakeFD >= 0 else {
            shared.end(with: UdevError(call: "eventfd", code: wakeFDError))
            return
        }
        let box = Unmanaged.passRetained(self)
        var thread = pthread_t()
        let rc = pthread_create(&thread, nil, { raw in
            _ = bgpolicy_name_this_thread("udev-monitor")
            let shared: Shared
            let failure: UdevError?
            do {
                let monitor = Unmanaged<UdevPowerSupplyMonitor>.fromOpaque(raw!).takeRetainedValue()
                shared = monitor.shared
                failure = monitor.threadMain()
            }
            shared.end(with: failure)
            return nil
        }, box.toOpaque())
        if rc == 0 {
            pthread_detach(thread)
        } else {
            box.release()
            shared.end(with: UdevError(call: "pthread_create", code: rc))
        }
    }

    // MARK: The owner thread

    /// Every libudev object lives inside `serve`, so all are released when it returns.
    private func threadMain() -> UdevError? {
        do {
            try serve()
            return nil
        } catch {
            return error
        }
    }

    private func serve() throws(UdevError) {
        if shared.state.withLock({ $0.stop }) { return }
        // Without sysfs libudev would enumerate nothing and look like a machine without
        // batteries; say that the input is missing instead.
        guard access("/sys", F_OK) == 0 else { throw UdevError(call: "access(/sys)", code: errno) }
        // Non-copyable locals end with this scope, in reverse order: monitor, then context.
        let context = try Udev.Context()
        let monitor = try Udev.Monitor.listening(subsystem: Self.subsystem, in: context)
        let shared = shared
        var last = try Self.enumerate(in: context)
        shared.events.yield(.devices(last))
        try Self.wait(
            socket: monitor.fd, wake: wakeFD, requests: { shared.takeRequests() }, drain: { _ = monitor.drain() },
            enumerate: { (timed: Bool) throws(UdevError) in
                let devices = try Self.enumerate(in: context)
                // A timed read of a battery that did not change: nothing to tell the reader.
                if timed, devices == last { return }
                last = devices
                shared.events.yield(.devices(devices))
            })
    }

    /// Sleeps in `poll` on the uevent socket and the wake eventfd until `requests` says stop;
    /// calls `enumerate(false)` after uevents, after a rescan request and after lost uevents,
    /// and `enumerate(true)` when a period is set (`requests`) and that long has passed since
    /// the last enumeration of any kind (or since the period was set). Apart from libudev (the
    /// socket is a descriptor, its reading a closure) so that a test can hand it a socket with
    /// a real error pending, or a pipe and a period.
    ///
    /// On a netlink socket `POLLERR` is the kernel saying that uevents did not fit in the
    /// receive buffer and were dropped (ENOBUFS). With `POLLIN`, as an overflow comes, `drain`
    /// clears it (libudev's next `recvmsg` returns the error, which ends that drain; what is
    /// still queued wakes the next `poll`). Alone, reading `SO_ERROR` clears it. Either way an
    /// enumeration covers what was lost. `POLLERR` that `SO_ERROR` cannot clear would make
    /// every `poll` return at once: after `maximumUnclearedErrors` in a row the loop throws
    /// rather than spin, as it does for `POLLHUP` and `POLLNVAL`.
    static func wait(
        socket: Int32, wake: Int32, requests: () -> Requests, drain: () -> Void,
        enumerate: (_ timed: Bool) throws(UdevError) -> Void
    ) throws(UdevError) {
        var fds = [
            pollfd(fd: socket, events: Int16(POLLIN), revents: 0),
            pollfd(fd: wake, events: Int16(POLLIN), revents: 0),
        ]
        var unclearedErrors = 0
        var period: Duration?
        // When the next timed read is due, on the suspending clock, which like `poll`'s timeout
        // does not count a suspend. A resume asks for a rescan, which reads at once.
        var due: SuspendingClock.Instant?
        while true {
            let timeout = due.map { Self.pollTimeout(until: $0) } ?? -1
            let ready = fds.withUnsafeMutableBufferPointer { poll($0.baseAddress, nfds_t($0.count), timeout) }
            if ready < 0 {
                if errno == EINTR { continue }
                throw UdevError(call: "poll", code: errno)
            }
            var rescan = false
            if fds[1].revents != 0 {
                var value: UInt64 = 0
                _ = withUnsafeMutableBytes(of: &value) { read(wake, $0.baseAddress, 8) }
                let asked = requests()
                if asked.stop { return }
                rescan = asked.rescan
                if let new = asked.period {
                    period = new
                    due = new.map { SuspendingClock.now + $0 }
                }
            }
            let events = fds[0].revents
            if events & Int16(POLLIN) != 0 {
                drain()
                // Enumerate even if nothing passed libudev's checks: a lost burst (ENOBUFS)
                // also wakes us, and a spare enumeration costs a few file reads.
                rescan = true
                unclearedErrors = 0
            } else if events & Int16(POLLHUP | POLLNVAL) != 0 {
                throw UdevError(call: "poll(udev monitor)", code: EPIPE)
            } else if events & Int16(POLLERR) != 0 {
                if try Udev.Monitor.takeSocketError(socket) == 0 {
                    unclearedErrors += 1
                    guard unclearedErrors < maximumUnclearedErrors else { throw UdevError(call: "poll(udev monitor)", code: EIO) }
                } else {
                    unclearedErrors = 0
                }
                rescan = true
            }
            if rescan {
                try enumerate(false)
            } else if let when = due, ready == 0 || SuspendingClock.now >= when {
                try enumerate(true)
            } else {
                continue
            }
            // Any enumeration read the battery: the next timed one is a period after it.
            due = period.map { SuspendingClock.now + $0 }
        }
    }

    /// `poll`'s timeout in milliseconds for a read due at `due`: rounded up, so that the
    /// wake-up is not a millisecond early and followed by another, and at most `Int32.max`.
    static func pollTimeout(until due: SuspendingClock.Instant) -> Int32 {
        let left = SuspendingClock.now.duration(to: due)
        guard left > .zero else { return 0 }
        let (seconds, attoseconds) = left.components
        let milliseconds = seconds * 1000 + (attoseconds + 999_999_999_999_999) / 1_000_000_000_000_000
        return Int32(clamping: milliseconds)
    }

    /// `POLLERR` wake-ups in a row with no error to clear before the loop gives up.
    static let maximumUnclearedErrors = 3

    /// One scan of `power_supply`, copied into values. A device that vanished between the
    /// scan and the read is skipped.
    private static func enumerate(in context: borrowing Udev.Context) throws(UdevError) -> [PowerSupplyDevice] {
        let paths = try Udev.Enumerator.matching(subsystem: subsystem, in: context).scan()
        var devices: [PowerSupplyDevice] = []
        for path in paths {
            guard let device = try? Udev.Device(syspath: path, in: context) else { continue }
            var attributes: [String: String] = [:]
            for name in PowerSupplyDevice.attributeNames {
                attributes[name] = device.attribute(name)
            }
            let sysname = device.sysname ?? String(path.split(separator: "/").last ?? "")
            devices.append(PowerSupplyDevice(sysname: sysname, attributes: attributes))
        }
        return devices.sorted { $0.sysname < $1.sysname }
    }
}
