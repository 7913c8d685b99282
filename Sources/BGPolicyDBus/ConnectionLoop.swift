internal import CBGPolicyDBus
import Glibc
import Synchronization

/// The one thread that owns a libdbus connection (STYLE.md example 4).
///
/// Every libdbus call for the connection happens on this thread. Other threads hand it work
/// as closures through a locked queue and an eventfd; it answers by resuming continuations.
/// It sleeps in `epoll_wait` on exactly the descriptors libdbus asks to watch, with a timeout
/// taken from the nearest enabled libdbus timeout, so an idle connection never wakes up.
final class ConnectionLoop: @unchecked Sendable {
    typealias Job = @Sendable (ConnectionLoop) -> Void

    // Immutable after init; safe from any thread.
    private let epollFD: Int32
    private let wakeFD: Int32
    private let epollControl: EpollControl
    private let queue = Mutex<(jobs: [Job], stopped: Bool)>(([], false))

    // Everything below is touched only on the loop thread.
    private(set) var connection: OpaquePointer?
    private var watches: [OpaquePointer: Int32] = [:]  // DBusWatch* -> fd
    private var registeredEvents: [Int32: UInt32] = [:]  // fd -> epoll events we asked for
    private var timeouts: [OpaquePointer: UInt64] = [:]  // DBusTimeout* -> deadline (monotonic ns)
    private var pendingCalls: [UInt64: PendingCall] = [:]
    private var cancelledBeforeStart: Set<UInt64> = []
    private var flushes: [UInt64: Flush] = [:]
    private var running = true
    /// Set once the bus answered `Hello`: only then is what is queued worth writing at close.
    private var registered = false
    /// Set by the owner for incoming method calls and signals; called on the loop thread with
    /// the message's headers, which decide whether its body is read at all.
    var onMethodCall: ((IncomingMessage) -> Void)?
    var onSignal: ((IncomingMessage) -> Void)?
    var onDisconnect: (() -> Void)?
    /// A message whose headers could not be read (libdbus has validated them: not expected).
    /// For a method call, returns the error name to answer with.
    var onUndecodable: ((DBusError, Message.Kind) -> String)?

    struct PendingCall {
        let pointer: OpaquePointer
        let continuation: CheckedContinuation<Message, any Error>
        /// The most bytes of reply body read (`DBusConnection.call(_:timeout:replyBodyLimit:)`).
        var replyBodyLimit: Int?
    }

    /// A `flush` waiting for libdbus's outgoing queue to empty, or its deadline.
    struct Flush {
        let deadline: UInt64  // monotonic ns
        let continuation: CheckedContinuation<Bool, Never>
    }

    /// `epoll_ctl`, or what stands in for it (tests make it fail).
    typealias EpollControl = @Sendable (_ epfd: Int32, _ op: Int32, _ fd: Int32, _ event: UnsafeMutablePointer<epoll_event>?) -> Int32

    static let systemEpollControl: EpollControl = { epoll_ctl($0, $1, $2, $3) }
    /// `EPOLL_CTL_ADD`, for tests (which do not see the epoll header).
    static let epollAdd = EPOLL_CTL_ADD

    init(epollControl: @escaping EpollControl = ConnectionLoop.systemEpollControl) throws(DBusError) {
        self.epollControl = epollControl
        epollFD = epoll_create1(Int32(EPOLL_CLOEXEC))
        guard epollFD >= 0 else {
            throw .connectionFailed(name: "org.freedesktop.DBus.Error.Failed", message: "epoll_create1: \(SystemCalls.errnoDescription(errno))")
        }
        wakeFD = eventfd(0, Int32(EFD_CLOEXEC | EFD_NONBLOCK))
        guard wakeFD >= 0 else {
            _ = SystemCalls.close(epollFD)
            throw .connectionFailed(name: "org.freedesktop.DBus.Error.Failed", message: "eventfd: \(SystemCalls.errnoDescription(errno))")
        }
        var event = epoll_event()
        event.events = EPOLLIN.rawValue
        event.data.fd = wakeFD
        // Without it no job would ever wake the thread: every call would wait for ever.
        guard epollControl(epollFD, EPOLL_CTL_ADD, wakeFD, &event) == 0 else {
            // Every stored property is set: deinit closes both descriptors.
            let error = errno
            throw .connectionFailed(name: "org.freedesktop.DBus.Error.Failed", message: "epoll_ctl: \(SystemCalls.errnoDescription(error))")
        }
    }

    deinit {
        _ = SystemCalls.close(wakeFD)
        _ = SystemCalls.close(epollFD)
    }

    // MARK: Cross-thread entry points

    /// Runs `job` on the loop thread. Returns false if the loop has stopped.
    @discardableResult
    func enqueue(_ job: @escaping Job) -> Bool {
        let wake: Bool? = queue.withLock { state in
            guard !state.stopped else { return nil }
            state.jobs.append(job)
            return state.jobs.count == 1
        }
        guard let wake else { return false }
        if wake { signalWake() }
        return true
    }

    var isStopped: Bool { queue.withLock { $0.stopped } }

    private func signalWake() {
        var one: UInt64 = 1
        _ = withUnsafeBytes(of: &one) { write(wakeFD, $0.baseAddress, 8) }
    }

    /// Creates a detached thread running `body(argument)`; returns pthread_create's result.
    typealias ThreadSpawner = @Sendable (
        _ body: @escaping @convention(c) (UnsafeMutableRawPointer?) -> UnsafeMutableRawPointer?, _ argument: UnsafeMutableRawPointer
    ) -> Int32

    static let spawnDetachedThread: ThreadSpawner = { body, argument in
        var thread = pthread_t()
        let rc = pthread_create(&thread, nil, body, argument)
        if rc == 0 { pthread_detach(thread) }
        return rc
    }

    /// Starts the thread. `setUp` runs first on it, and opens the connection. Throws, and runs
    /// nothing, when the thread cannot be created: a connection without its thread would
    /// leave every call waiting for ever.
    func start(spawn: ThreadSpawner = ConnectionLoop.spawnDetachedThread, setUp: @escaping @Sendable (ConnectionLoop) -> Void) throws(DBusError) {
        let box = Unmanaged.passRetained(ThreadStart(loop: self, setUp: setUp))
        let rc = spawn({ raw in
            let start = Unmanaged<ThreadStart>.fromOpaque(raw!).takeRetainedValue()
            start.loop.threadMain(setUp: start.setUp)
            return nil
        }, box.toOpaque())
        guard rc == 0 else {
            box.release()
            queue.withLock { $0.stopped = true }
            throw .connectionFailed(
                name: "org.freedesktop.DBus.Error.Failed", message: "could not start the D-Bus thread: \(SystemCalls.errnoDescription(rc))")
        }
    }

    private final class ThreadStart {
        let loop: ConnectionLoop
        let setUp: @Sendable (ConnectionLoop) -> Void
        init(loop: ConnectionLoop, setUp: @escaping @Sendable (ConnectionLoop) -> Void) {
            self.loop = loop
            self.setUp = setUp
        }
    }

    // MARK: The loop

    private func threadMain(setUp: @Sendable (ConnectionLoop) -> Void) {
        setUp(self)
        var events = [epoll_event](repeating: epoll_event(), count: 32)
        while running {
            runJobs()
            dispatch()
            guard running else { break }
            finishFlushes()
            let timeout = nextTimeoutMilliseconds()
            let n = events.withUnsafeMutableBufferPointer { epoll_wait(epollFD, $0.baseAddress, 32, timeout) }
            if n < 0 {
                if errno == EINTR { continue }
                break
            }
            for i in 0..<Int(n) {
                let fd = events[i].data.fd
                if fd == wakeFD {
                    var value: UInt64 = 0
                    _ = withUnsafeMutableBytes(of: &value) { read(wakeFD, $0.baseAddress, 8) }
                } else {
                    handleWatchEvents(fd: fd, events: events[i].events)
                }
            }
            handleExpiredTimeouts()
        }
        tearDown()
    }

    private func runJobs() {
        let jobs = queue.withLock { state in
            let jobs = state.jobs
            state.jobs = []
            return jobs
        }
        for job in jobs { job(self) }
    }

    private func dispatch() {
        guard let connection else { return }
        while running && dbus_connection_dispatch(connection) == DBUS_DISPATCH_DATA_REMAINS {}
    }

    /// Asks the loop to finish: closes the connection and fails whatever is still waiting.
    func stop() {
        enqueue { loop in loop.running = false }
    }

    private func tearDown() {
        let leftover = queue.withLock { state in
            state.stopped = true
            let jobs = state.jobs
            state.jobs = []
            return jobs
        }
        // Jobs that arrived too late still run, so that their continuations are resumed with
        // an error: every method that enqueues checks `connection`.
        if let connection {
            // What was sent before the close goes out first (an agent that stops tells its apps
            // so), for at most a second: a bus that does not read must not hold the exit. Not
            // for a connect given up on: only its Hello is queued, to a bus that did not answer.
            let deadline = ContinuousClock.now + .seconds(1)
            while registered, dbus_connection_get_is_connected(connection) != 0, dbus_connection_has_messages_to_send(connection) != 0,
                ContinuousClock.now < deadline
            {
                _ = dbus_connection_read_write(connection, 100)
            }
            dbus_connection_remove_filter(connection, cFilter, Unmanaged.passUnretained(self).toOpaque())
            dbus_connection_close(connection)
            dbus_connection_set_watch_functions(connection, nil, nil, nil, nil, nil)
            dbus_connection_set_timeout_functions(connection, nil, nil, nil, nil, nil)
        }
        for (_, call) in pendingCalls {
            dbus_pending_call_cancel(call.pointer)
            dbus_pending_call_unref(call.pointer)
            call.continuation.resume(throwing: DBusError.disconnected)
        }
        pendingCalls = [:]
        let closedConnection = connection
        connection = nil
        finishFlushes()
        for job in leftover { job(self) }
        if let closedConnection { dbus_connection_unref(closedConnection) }
        onDisconnect?()
        onDisconnect = nil
        onMethodCall = nil
        onSignal = nil
        onUndecodable = nil
    }

    // MARK: Opening

    /// Opens a private connection and lets the loop serve it. Runs on the loop thread, and
    /// blocks on nothing: authentication goes on as the socket is ready, and registering with
    /// the bus is the caller's `Hello`, sent as any call (`startCall`), then `registered(as:)`.
    /// (`dbus_bus_register` would flush before waiting for the reply, with no time limit: a bus
    /// that takes the connection but never authenticates it held the thread for good.)
    func open(address: String) throws(DBusError) {
        dbus_threads_init_default()
        let (conn, openError) = withCError { err in address.withCString { dbus_connection_open_private($0, err) } }
        if let openError { throw .connectionFailed(name: openError.name, message: openError.message) }
        guard let conn else { throw .connectionFailed(name: "org.freedesktop.DBus.Error.Failed", message: "could not open \(address)") }
        dbus_connection_set_exit_on_disconnect(conn, 0)
        let me = Unmanaged.passUnretained(self).toOpaque()
        watchError = nil
        guard dbus_connection_add_filter(conn, cFilter, me, nil) != 0,
            dbus_connection_set_watch_functions(conn, cAddWatch, cRemoveWatch, cToggleWatch, me, nil) != 0,
            dbus_connection_set_timeout_functions(conn, cAddTimeout, cRemoveTimeout, cToggleTimeout, me, nil) != 0
        else {
            // Setting them to nil removes, through our functions, what was added.
            dbus_connection_set_watch_functions(conn, nil, nil, nil, nil, nil)
            dbus_connection_set_timeout_functions(conn, nil, nil, nil, nil, nil)
            dbus_connection_remove_filter(conn, cFilter, me)
            dbus_connection_close(conn)
            dbus_connection_unref(conn)
            if let watchError {
                throw .connectionFailed(
                    name: "org.freedesktop.DBus.Error.Failed",
                    message: "could not watch the socket of \(address): epoll_ctl: \(SystemCalls.errnoDescription(watchError))")
            }
            throw .outOfMemory
        }
        connection = conn
    }

    /// The bus answered `Hello` with `uniqueName`. libdbus keeps it, as `dbus_bus_register`
    /// would have.
    func registered(as uniqueName: String) {
        registered = true
        guard let connection else { return }
        _ = uniqueName.withCString { dbus_bus_set_unique_name(connection, $0) }
    }

    /// Whether the connection is open and its socket connected.
    var isConnected: Bool {
        guard let connection else { return false }
        return dbus_connection_get_is_connected(connection) != 0
    }

    /// `isConnected`, asked from another thread (false once the loop has stopped).
    func isConnectedOnItsThread() async -> Bool {
        await withCheckedContinuation { (continuation: CheckedContinuation<Bool, Never>) in
            if !enqueue({ loop in continuation.resume(returning: loop.isConnected) }) { continuation.resume(returning: false) }
        }
    }

    // MARK: Sending (loop thread)

    func send(_ raw: RawMessage) throws(DBusError) {
        guard let connection, dbus_connection_get_is_connected(connection) != 0 else { throw .disconnected }
        try checkFileDescriptors(raw)
        guard dbus_connection_send(connection, raw.pointer, nil) != 0 else { throw .outOfMemory }
    }

    /// A message carrying descriptors (anywhere, a variant's included) on a connection that
    /// cannot pass them (TCP): libdbus would drop it and give no pending call, which read as
    /// a lost connection.
    private func checkFileDescriptors(_ raw: RawMessage) throws(DBusError) {
        guard let connection else { return }
        if dbus_message_contains_unix_fds(raw.pointer) != 0,
            dbus_connection_can_send_type(connection, DBusType.unixFD.typeCode) == 0
        {
            throw .invalidValue("this connection cannot pass file descriptors (a Unix socket can; TCP cannot)")
        }
    }

    /// Resumes `continuation` with true once libdbus has written all it holds queued to send
    /// (at once if nothing is queued, or the connection is gone), or with false at `deadline`.
    /// The thread goes on serving meanwhile: `dbus_connection_flush` would block it, with no
    /// limit, on a bus that does not read.
    func flush(id: UInt64, deadline: UInt64, continuation: CheckedContinuation<Bool, Never>) {
        flushes[id] = Flush(deadline: deadline, continuation: continuation)
        finishFlushes()
    }

    /// A flush whose task was cancelled stops waiting (false, unless all was written).
    func cancelFlush(id: UInt64) {
        guard let flush = flushes.removeValue(forKey: id) else { return }
        flush.continuation.resume(returning: flushOutcome ?? false)
    }

    /// True once libdbus has nothing left to write; false when the connection is gone (what
    /// it held is lost); nil while it is still writing.
    private var flushOutcome: Bool? {
        guard let connection, dbus_connection_get_is_connected(connection) != 0 else { return false }
        return dbus_connection_has_messages_to_send(connection) != 0 ? nil : true
    }

    /// Resumes the flushes that are done: all of them once nothing is left to write (or
    /// nothing can be), those past their deadline otherwise.
    private func finishFlushes() {
        guard !flushes.isEmpty else { return }
        let outcome = flushOutcome
        let now = ConnectionLoop.now()
        for (id, flush) in flushes where outcome != nil || flush.deadline <= now {
            flushes[id] = nil
            flush.continuation.resume(returning: outcome ?? false)
        }
    }

    func startCall(
        id: UInt64, raw: RawMessage, timeoutMilliseconds: Int32, written: CallWritten? = nil, replyBodyLimit: Int? = nil,
        continuation: CheckedContinuation<Message, any Error>
    ) {
        if cancelledBeforeStart.remove(id) != nil {
            continuation.resume(throwing: CancellationError())
            return
        }
        guard let connection, dbus_connection_get_is_connected(connection) != 0 else {
            continuation.resume(throwing: DBusError.disconnected)
            return
        }
        do {
            try checkFileDescriptors(raw)
        } catch {
            continuation.resume(throwing: error)
            return
        }
        var pending: OpaquePointer? = nil
        guard dbus_connection_send_with_reply(connection, raw.pointer, &pending, timeoutMilliseconds) != 0 else {
            continuation.resume(throwing: DBusError.outOfMemory)
            return
        }
        guard let pending else {
            continuation.resume(throwing: DBusError.disconnected)
            return
        }
        written?.set()
        pendingCalls[id] = PendingCall(pointer: pending, continuation: continuation, replyBodyLimit: replyBodyLimit)
        let context = Unmanaged.passRetained(PendingContext(loop: self, id: id)).toOpaque()
        guard dbus_pending_call_set_notify(pending, pendingNotify, context, pendingContextFree) != 0 else {
            Unmanaged<PendingContext>.fromOpaque(context).release()
            pendingCalls[id] = nil
            dbus_pending_call_cancel(pending)
            dbus_pending_call_unref(pending)
            continuation.resume(throwing: DBusError.outOfMemory)
            return
        }
        // The reply may already be there (libdbus read it while sending).
        if dbus_pending_call_get_completed(pending) != 0 { completeCall(id: id) }
    }

    /// Calls waiting for their reply (tests look).
    var pendingCallCount: Int { pendingCalls.count }

    func cancelCall(id: UInt64) {
        guard let call = pendingCalls.removeValue(forKey: id) else {
            cancelledBeforeStart.insert(id)
            return
        }
        dbus_pending_call_cancel(call.pointer)
        dbus_pending_call_unref(call.pointer)
        call.continuation.resume(throwing: CancellationError())
    }

    /// A call that finished before it could be cancelled leaves its id behind; forget it.
    func forgetCancellation(id: UInt64) {
        cancelledBeforeStart.remove(id)
    }

    fileprivate func completeCall(id: UInt64) {
        guard let call = pendingCalls.removeValue(forKey: id) else { return }
        defer { dbus_pending_call_unref(call.pointer) }
        guard let reply = dbus_pending_call_steal_reply(call.pointer) else {
            call.continuation.resume(throwing: DBusError.disconnected)
            return
        }
        let raw = RawMessage(taking: reply)
        // IncomingMessage borrows raw's pointer: raw must outlive every read through it.
        withExtendedLifetime(raw) { complete(call, raw) }
    }

    private func complete(_ call: PendingCall, _ raw: RawMessage) {
        do {
            guard let limit = call.replyBodyLimit else {
                call.continuation.resume(returning: try Message(decoding: raw.pointer))
                return
            }
            let incoming = try IncomingMessage(raw.pointer)
            guard incoming.bodyLength(upTo: limit) == nil else {
                call.continuation.resume(returning: try incoming.decoded())
                return
            }
            var headers = incoming.header
            if headers.kind == .error {
                // Its message alone, read without the rest: a string costs its own bytes.
                headers.body = [.string(incoming.stringArgument(0) ?? "(a reply of more than \(limit) bytes, not read)")]
            }
            call.continuation.resume(returning: headers)
        } catch {
            call.continuation.resume(throwing: error)
        }
    }

    // MARK: Incoming

    fileprivate func handleIncoming(_ pointer: OpaquePointer) -> Bool {
        let type = dbus_message_get_type(pointer)
        if type == 4, dbus_message_is_signal(pointer, Message.localInterface, "Disconnected") != 0 {
            running = false
            return true
        }
        // Only the headers are read here: the owner reads the body if it will use it.
        switch type {
        case 1:  // method call
            // No handler (none installed): libdbus answers UnknownMethod, rather than the
            // caller waiting out its timeout.
            guard let onMethodCall else { return false }
            do {
                onMethodCall(try IncomingMessage(pointer))
            } catch {
                let name = onUndecodable?(error, .methodCall) ?? error.name
                replyUndecodable(pointer, name: name, error)
            }
            return true
        case 4:
            do {
                onSignal?(try IncomingMessage(pointer))
            } catch {
                _ = onUndecodable?(error, .signal)
            }
            return true
        default:
            return false  // stray replies: libdbus drops them
        }
    }

    private func replyUndecodable(_ pointer: OpaquePointer, name: String, _ error: DBusError) {
        guard dbus_message_get_no_reply(pointer) == 0 else { return }
        var reply = Message(kind: .error, body: [.string("the call's headers could not be read: \(error.message)")])
        reply.errorName = name
        reply.replySerial = dbus_message_get_serial(pointer)
        reply.destination = dbus_message_get_sender(pointer).map { String(cString: $0) }
        if let raw = try? reply.encode() { try? send(raw) }
    }

    // MARK: Watches

    /// The errno of the last `epoll_ctl` that failed to add a watch (`open` reports it).
    private var watchError: Int32?

    fileprivate func addWatch(_ watch: OpaquePointer) -> Bool {
        let fd = dbus_watch_get_unix_fd(watch)
        guard fd >= 0 else { return false }
        watches[watch] = fd
        // A watch epoll does not have would never be served: refuse it, and libdbus fails.
        if let error = updateInterest(fd: fd) {
            watches[watch] = nil
            _ = updateInterest(fd: fd)
            watchError = error
            return false
        }
        return true
    }

    fileprivate func removeWatch(_ watch: OpaquePointer) {
        guard let fd = watches.removeValue(forKey: watch) else { return }
        updateInterest(fd: fd)
    }

    fileprivate func toggleWatch(_ watch: OpaquePointer) {
        guard let fd = watches[watch] else { return }
        updateInterest(fd: fd)
    }

    /// Several watches may share a descriptor (libdbus uses one for reading, one for
    /// writing); epoll takes each descriptor once, so register the union of their interests.
    /// Returns the errno of an `epoll_ctl` that failed to add or change it (nil when none did).
    @discardableResult
    private func updateInterest(fd: Int32) -> Int32? {
        var wanted: UInt32 = 0
        for (watch, watchFD) in watches where watchFD == fd && dbus_watch_get_enabled(watch) != 0 {
            let flags = dbus_watch_get_flags(watch)
            if flags & DBUS_WATCH_READABLE.rawValue != 0 { wanted |= EPOLLIN.rawValue }
            if flags & DBUS_WATCH_WRITABLE.rawValue != 0 { wanted |= EPOLLOUT.rawValue }
        }
        let anyWatch = watches.values.contains(fd)
        let current = registeredEvents[fd]
        var event = epoll_event()
        event.events = wanted
        event.data.fd = fd
        if !anyWatch || (wanted == 0 && current != nil) {
            if current != nil { _ = epollControl(epollFD, EPOLL_CTL_DEL, fd, &event) }
            registeredEvents[fd] = nil
        } else if wanted == 0 {
            return nil
        } else if current == nil {
            guard epollControl(epollFD, EPOLL_CTL_ADD, fd, &event) == 0 else { return errno }
            registeredEvents[fd] = wanted
        } else if current != wanted {
            guard epollControl(epollFD, EPOLL_CTL_MOD, fd, &event) == 0 else { return errno }
            registeredEvents[fd] = wanted
        }
        return nil
    }

    private func handleWatchEvents(fd: Int32, events: UInt32) {
        var flags: UInt32 = 0
        if events & EPOLLIN.rawValue != 0 { flags |= DBUS_WATCH_READABLE.rawValue }
        if events & EPOLLOUT.rawValue != 0 { flags |= DBUS_WATCH_WRITABLE.rawValue }
        if events & EPOLLERR.rawValue != 0 { flags |= DBUS_WATCH_ERROR.rawValue }
        if events & EPOLLHUP.rawValue != 0 { flags |= DBUS_WATCH_HANGUP.rawValue }
        // Handling one watch may remove others; work on a snapshot and re-check each.
        let candidates = watches.filter { $0.value == fd }.map(\.key)
        for watch in candidates {
            guard watches[watch] != nil, dbus_watch_get_enabled(watch) != 0 else { continue }
            let interest = dbus_watch_get_flags(watch) | DBUS_WATCH_ERROR.rawValue | DBUS_WATCH_HANGUP.rawValue
            let mine = flags & interest
            if mine != 0 { _ = dbus_watch_handle(watch, mine) }
        }
    }

    // MARK: Timeouts

    static func now() -> UInt64 {
        var ts = timespec()
        clock_gettime(CLOCK_MONOTONIC, &ts)
        return UInt64(ts.tv_sec) * 1_000_000_000 + UInt64(ts.tv_nsec)
    }

    private static func deadline(for timeout: OpaquePointer) -> UInt64 {
        now() + UInt64(max(0, dbus_timeout_get_interval(timeout))) * 1_000_000
    }

    fileprivate func addTimeout(_ timeout: OpaquePointer) -> Bool {
        timeouts[timeout] = ConnectionLoop.deadline(for: timeout)
        return true
    }

    fileprivate func removeTimeout(_ timeout: OpaquePointer) {
        timeouts[timeout] = nil
    }

    fileprivate func toggleTimeout(_ timeout: OpaquePointer) {
        guard timeouts[timeout] != nil else { return }
        timeouts[timeout] = ConnectionLoop.deadline(for: timeout)
    }

    /// -1 (sleep until a descriptor is ready) when no timeout is enabled: no idle wake-ups.
    private func nextTimeoutMilliseconds() -> Int32 {
        var nearest: UInt64? = nil
        for (timeout, deadline) in timeouts where dbus_timeout_get_enabled(timeout) != 0 {
            nearest = min(nearest ?? deadline, deadline)
        }
        for flush in flushes.values { nearest = min(nearest ?? flush.deadline, flush.deadline) }
        guard let nearest else { return -1 }
        let now = ConnectionLoop.now()
        guard nearest > now else { return 0 }
        let ms = (nearest - now + 999_999) / 1_000_000
        return Int32(clamping: ms)
    }

    private func handleExpiredTimeouts() {
        let now = ConnectionLoop.now()
        let due = timeouts.filter { $0.value <= now && dbus_timeout_get_enabled($0.key) != 0 }.map(\.key)
        for timeout in due {
            guard timeouts[timeout] != nil else { continue }
            // libdbus timeouts repeat until removed; re-arm before handling, which may remove it.
            timeouts[timeout] = ConnectionLoop.deadline(for: timeout)
            _ = dbus_timeout_handle(timeout)
        }
    }
}

private final class PendingContext {
    let loop: ConnectionLoop
    let id: UInt64
    init(loop: ConnectionLoop, id: UInt64) {
        self.loop = loop
        self.id = id
    }
}

// MARK: C callbacks. Each recovers the loop from its user data; all run on the loop thread.

private func loopFrom(_ data: UnsafeMutableRawPointer?) -> ConnectionLoop {
    Unmanaged<ConnectionLoop>.fromOpaque(data!).takeUnretainedValue()
}

private let cFilter: DBusHandleMessageFunction = { _, message, data in
    guard let message, let data else { return DBUS_HANDLER_RESULT_NOT_YET_HANDLED }
    return loopFrom(data).handleIncoming(message) ? DBUS_HANDLER_RESULT_HANDLED : DBUS_HANDLER_RESULT_NOT_YET_HANDLED
}

private let cAddWatch: DBusAddWatchFunction = { watch, data in
    guard let watch else { return 0 }
    return loopFrom(data).addWatch(watch) ? 1 : 0
}

private let cRemoveWatch: DBusRemoveWatchFunction = { watch, data in
    guard let watch else { return }
    loopFrom(data).removeWatch(watch)
}

private let cToggleWatch: DBusWatchToggledFunction = { watch, data in
    guard let watch else { return }
    loopFrom(data).toggleWatch(watch)
}

private let cAddTimeout: DBusAddTimeoutFunction = { timeout, data in
    guard let timeout else { return 0 }
    return loopFrom(data).addTimeout(timeout) ? 1 : 0
}

private let cRemoveTimeout: DBusRemoveTimeoutFunction = { timeout, data in
    guard let timeout else { return }
    loopFrom(data).removeTimeout(timeout)
}

private let cToggleTimeout: DBusTimeoutToggledFunction = { timeout, data in
    guard let timeout else { return }
    loopFrom(data).toggleTimeout(timeout)
}

private let pendingNotify: DBusPendingCallNotifyFunction = { _, data in
    guard let data else { return }
    let context = Unmanaged<PendingContext>.fromOpaque(data).takeUnretainedValue()
    context.loop.completeCall(id: context.id)
}

private let pendingContextFree: DBusFreeFunction = { data in
    guard let data else { return }
    Unmanaged<PendingContext>.fromOpaque(data).release()
}
