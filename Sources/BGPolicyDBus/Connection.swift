internal import CBGPolicyDBus
internal import CBGPolicyThread
import Glibc
public import Logging
import Synchronization

/// A private connection to a message bus, owned by its own thread.
///
/// All methods are safe to call from any task. Method calls are asynchronous, time out, and
/// honour cancellation; error replies throw `DBusError.remote` with the peer's name and text.
public final class DBusConnection: Sendable {
    public static let busName = "org.freedesktop.DBus"
    public static let busPath = try! ObjectPath("/org/freedesktop/DBus")

    public enum Bus: Sendable, Hashable {
        case session
        case system
        case address(String)

        /// What the connection's thread is called (`top -H`, /proc/PID/task/TID/comm).
        var threadName: String {
            switch self {
            case .session: "dbus-session"
            case .system: "dbus-system"
            case .address: "dbus-address"
            }
        }
    }

    let loop: ConnectionLoop
    let logger: Logger
    /// The bus-assigned unique name, such as `:1.42`.
    public let uniqueName: String
    /// The objects this connection exports.
    public let objects: ObjectServer
    let state: Mutex<SharedState>
    private let disconnected: DisconnectSignal

    struct SharedState {
        var nextID: UInt64 = 1
    }

    private init(
        loop: ConnectionLoop, uniqueName: String, logger: Logger, disconnected: DisconnectSignal, objects: ObjectServer,
        subscriptions: SubscriptionRegistry
    ) {
        self.loop = loop
        self.uniqueName = uniqueName
        self.logger = logger
        self.disconnected = disconnected
        self.objects = objects
        self.subscriptions = subscriptions
        self.state = Mutex(SharedState())
    }

    deinit {
        loop.stop()
    }

    /// The address libdbus would use for `bus`, resolved without autolaunching anything.
    public static func address(for bus: Bus) throws(DBusError) -> String {
        switch bus {
        case .address(let address):
            return address
        case .session:
            return try sessionAddress(
                environment: { getenv($0).map { String(cString: $0) } }, exists: { access($0, F_OK) == 0 })
        case .system:
            if let address = getenv("DBUS_SYSTEM_BUS_ADDRESS").map({ String(cString: $0) }), !address.isEmpty {
                return address
            }
            return "unix:path=/run/dbus/system_bus_socket"
        }
    }

    /// The session bus's address: `DBUS_SESSION_BUS_ADDRESS`, else `$XDG_RUNTIME_DIR/bus` when
    /// it exists.
    static func sessionAddress(environment: (String) -> String?, exists: (String) -> Bool) throws(DBusError) -> String {
        if let address = environment("DBUS_SESSION_BUS_ADDRESS"), !address.isEmpty {
            return address
        }
        if let runtime = environment("XDG_RUNTIME_DIR"), !runtime.isEmpty {
            let socket = runtime + "/bus"
            if exists(socket) { return "unix:path=" + escapeAddressValue(socket) }
        }
        throw .connectionFailed(
            name: "org.freedesktop.DBus.Error.NotSupported",
            message: "no session bus: DBUS_SESSION_BUS_ADDRESS is not set and $XDG_RUNTIME_DIR/bus does not exist. "
                + "Run inside a desktop session, or start one with 'dbus-run-session -- COMMAND'")
    }

    /// `value` as a D-Bus address value, escaped as `dbus_address_escape_value` does: every
    /// byte but `[-0-9A-Za-z_/.\*]` as `%xx`. A path with a space, `,`, `;`, `=` or `%` in it
    /// would otherwise be read as another address, another key, or an escape.
    static func escapeAddressValue(_ value: String) -> String {
        let hex = Array("0123456789abcdef".utf8)
        var out: [UInt8] = []
        for byte in value.utf8 {
            switch byte {
            case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
                UInt8(ascii: "-"), UInt8(ascii: "_"), UInt8(ascii: "/"), UInt8(ascii: "."), UInt8(ascii: "\\"), UInt8(ascii: "*"):
                out.append(byte)
            default:
                out += [UInt8(ascii: "%"), hex[Int(byte >> 4)], hex[Int(byte & 0xf)]]
            }
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// Opens a private connection (exit-on-disconnect off) and registers with the bus.
    ///
    /// - Parameter timeout: how long the bus has to answer `Hello` (libdbus's own default for
    ///   a call), after which this throws `connectionFailed` named `DBusError.timedOut`: a bus
    ///   that takes the connection but does not answer (its daemon stopped or stuck, or another
    ///   program listening on the socket) would otherwise hold the caller for good. Cancelling
    ///   the task throws `CancellationError` at once, and closes what was opened. Neither
    ///   reaches the socket's `connect(2)`, which libdbus makes blocking: a listener whose
    ///   backlog is full holds it with no limit (race a timer against this where that matters).
    public static func connect(
        to bus: Bus, timeout: Duration = .seconds(25), logger: Logger = Logger(label: "org.bgpolicy.dbus")
    ) async throws -> DBusConnection {
        try await connect(to: bus, timeout: timeout, logger: logger, spawn: ConnectionLoop.spawnDetachedThread)
    }

    /// `connect`, with what starts the connection's thread and what stands in for `epoll_ctl`
    /// (tests make them fail).
    static func connect(
        to bus: Bus, timeout: Duration = .seconds(25), logger: Logger, spawn: @escaping ConnectionLoop.ThreadSpawner,
        epollControl: @escaping ConnectionLoop.EpollControl = ConnectionLoop.systemEpollControl
    ) async throws -> DBusConnection {
        let address = try address(for: bus)
        try Task.checkCancellation()
        let loop = try ConnectionLoop(epollControl: epollControl)
        let disconnected = DisconnectSignal()
        let objects = ObjectServer(logger: logger)
        let subscriptions = SubscriptionRegistry()
        let hello = try Message.methodCall(destination: busName, path: busPath, interface: busName, member: "Hello").encode()
        let helloID: UInt64 = 0  // the connection's own ids start at 1
        let reply: Message
        do {
            reply = try await withTaskCancellationHandler {
                try await withCheckedThrowingContinuation { continuation in
                    do {
                        try loop.start(spawn: spawn) { loop in
                            _ = bus.threadName.withCString(bgpolicy_name_this_thread)
                            // In place before anything can be read: a peer may call the new
                            // name as soon as the bus gives it out.
                            installCallbacks(on: loop, objects: objects, subscriptions: subscriptions, disconnected: disconnected, logger: logger)
                            do {
                                try loop.open(address: address)
                            } catch {
                                continuation.resume(throwing: error)
                                return
                            }
                            loop.startCall(id: helloID, raw: hello, timeoutMilliseconds: milliseconds(timeout), continuation: continuation)
                        }
                    } catch {
                        continuation.resume(throwing: error)
                    }
                }
            } onCancel: {
                loop.enqueue { loop in loop.cancelCall(id: helloID) }
            }
        } catch {
            let lost = await loop.isConnectedOnItsThread() == false
            loop.stop()
            throw connectFailure(error, address: address, timeout: timeout, lost: lost)
        }
        let unique: String
        switch (reply.kind, reply.body.first) {
        case (.methodReturn, .string(let name)?):
            unique = name
        case (.error, _):
            let error = reply.asError ?? .disconnected
            let lost = await loop.isConnectedOnItsThread() == false
            loop.stop()
            throw connectFailure(error, address: address, timeout: timeout, lost: lost)
        default:
            loop.stop()
            throw DBusError.connectionFailed(
                name: "org.freedesktop.DBus.Error.Failed", message: "the bus at \(address) answered Hello without a unique name")
        }
        loop.enqueue { loop in loop.registered(as: unique) }
        return DBusConnection(
            loop: loop, uniqueName: unique, logger: logger, disconnected: disconnected, objects: objects, subscriptions: subscriptions)
    }

    /// What `connect` throws when the bus did not give it a name: cancellation as it is, the
    /// rest naming the address and saying what happened.
    private static func connectFailure(_ error: any Error, address: String, timeout: Duration, lost: Bool) -> any Error {
        guard let error = error as? DBusError else { return error }
        switch error {
        case .connectionFailed, .outOfMemory:
            return error
        case .remote(DBusError.noReply, _) where !lost:
            return DBusError.connectionFailed(
                name: DBusError.timedOut,
                message: "the bus at \(address) did not answer within \(describe(timeout)): its dbus-daemon may be stopped or stuck, "
                    + "or another program listens on its socket")
        case .remote(let name, let message) where name != DBusError.noReply:
            return DBusError.connectionFailed(name: name, message: "the bus at \(address) refused the connection: \(message)")
        default:
            return DBusError.connectionFailed(
                name: "org.freedesktop.DBus.Error.Disconnected",
                message: "the bus at \(address) closed the connection before it answered (it refused us, or is not a D-Bus bus)")
        }
    }

    /// "25 seconds", "300 ms".
    private static func describe(_ duration: Duration) -> String {
        let (seconds, attoseconds) = duration.components
        if attoseconds == 0 { return seconds == 1 ? "1 second" : "\(seconds) seconds" }
        return "\(seconds * 1000 + attoseconds / 1_000_000_000_000_000) ms"
    }

    /// libdbus takes milliseconds as an Int32; clamp rather than overflow on huge timeouts.
    static func milliseconds(_ timeout: Duration) -> Int32 {
        let seconds = min(max(timeout.components.seconds, 0), Int64(Int32.max / 1000))
        return Int32(clamping: max(1, seconds * 1000 + timeout.components.attoseconds / 1_000_000_000_000_000))
    }

    /// The loop's callbacks. They capture only what they use: the loop must not keep the
    /// connection alive.
    private static func installCallbacks(
        on loop: ConnectionLoop, objects: ObjectServer, subscriptions: SubscriptionRegistry, disconnected: DisconnectSignal,
        logger log: Logger
    ) {
        loop.onMethodCall = { [weak loop] incoming in
            guard let loop else { return }
            objects.route(incoming, loop: loop)
        }
        loop.onSignal = { incoming in
            do {
                for (rule, count) in try subscriptions.deliver(incoming) {
                    log.warning(
                        "Signals dropped: their reader fell behind by more than its buffer; the oldest went",
                        metadata: ["match": "\(rule.text)", "dropped": "\(count)"])
                }
            } catch {
                // A peer's doing, and nothing to answer: debug, or a client could fill the journal.
                log.debug("Dropped a signal whose arguments could not be read", metadata: [
                    "sender": "\(incoming.header.sender ?? "")", "member": "\(incoming.header.member ?? "")",
                    "error": "\(error)",
                ])
            }
        }
        loop.onUndecodable = { error, kind in
            log.debug("A message's headers could not be read", metadata: ["kind": "\(kind)", "error": "\(error)"])
            return objects.errorNames.invalidArgs
        }
        loop.onDisconnect = {
            subscriptions.finishAll(throwing: DBusError.disconnected)
            objects.connectionClosed()
            disconnected.fire()
        }
    }

    /// Closes the connection. Calls in flight fail with `DBusError.disconnected`. This only asks
    /// the connection's thread to close it: a process that exits next may lose what it sent last.
    public func close() {
        loop.stop()
    }

    /// Closes the connection and returns once it is closed. What was sent before is written to
    /// the bus first, for at most a second, so a process that exits next loses none of it (an
    /// agent that stops tells its apps so). Waits even when the calling task is cancelled.
    public func closeAndWait() async {
        loop.stop()
        let disconnected = disconnected
        await Task { await disconnected.wait() }.value
    }

    /// Waits until the connection is closed or lost, or the task is cancelled.
    public func waitUntilDisconnected() async {
        await disconnected.wait()
    }

    public var isConnected: Bool { !loop.isStopped && !disconnected.hasFired }

    func nextID() -> UInt64 {
        state.withLock { s in
            defer { s.nextID += 1 }
            return s.nextID
        }
    }

    // MARK: Sending

    /// Sends a message that expects no reply (a signal, a reply, or a no-reply call).
    public func send(_ message: Message) throws {
        let raw = try message.encode()
        let sent = loop.enqueue { [logger] loop in
            do {
                try loop.send(raw)
            } catch {
                logger.debug("Could not send a message", metadata: ["error": "\(error)"])
            }
        }
        if !sent { throw DBusError.disconnected }
    }

    /// Returns once every message sent before it has been written to the bus's socket: for a
    /// message that must be out before something else happens, such as `ExpireTask` before
    /// the sleep inhibitor is released. Returns false, not having written it all, when
    /// `timeout` passes first (a bus that does not read), the connection is gone, or the task
    /// is cancelled. The connection goes on serving meanwhile.
    @discardableResult
    public func flush(timeout: Duration = .seconds(5)) async -> Bool {
        let id = nextID()
        // Already cancelled: the handler below runs before the flush is on the loop, and would
        // find nothing to stop; so the flush ends at once with what was written by then.
        let wait = Task.isCancelled ? 0 : UInt64(Self.milliseconds(timeout))
        let deadline = ConnectionLoop.now() + wait * 1_000_000
        return await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Bool, Never>) in
                let queued = loop.enqueue { loop in loop.flush(id: id, deadline: deadline, continuation: continuation) }
                if !queued { continuation.resume(returning: false) }
            }
        } onCancel: {
            loop.enqueue { loop in loop.cancelFlush(id: id) }
        }
    }

    /// Emits a signal from one of this connection's objects.
    public func emitSignal(path: ObjectPath, interface: String, member: String, body: [DBusValue] = []) throws {
        try send(.signal(path: path, interface: interface, member: member, body: body))
    }

    /// Calls a method and returns its reply, or throws its error.
    ///
    /// - Parameter timeout: after which the call fails with `org.freedesktop.DBus.Error.NoReply`.
    /// - Parameter replyBodyLimit: for a peer that is not trusted (an app): a reply whose body
    ///   takes more bytes than this in the wire format is not read (measured first, without a
    ///   copy). It comes back with its headers and no body (an error with its message alone, when
    ///   that is a string). Read, an `ay` takes about 24 bytes per byte: an app answering with 50 MB
    ///   took an agent to 1.7 GB, its connection's thread busy for seconds.
    public func call(_ message: Message, timeout: Duration = .seconds(25), replyBodyLimit: Int? = nil) async throws -> Message {
        let reply = try await exchange(message, timeout: timeout, replyBodyLimit: replyBodyLimit)
        if let error = reply.asError { throw error }
        return reply
    }

    /// `call`, returning an error reply rather than throwing it (its sender tells the bus's own
    /// errors from libdbus's `NoReply`). `written` is set once the message is handed to libdbus.
    func exchange(
        _ message: Message, timeout: Duration = .seconds(25), written: CallWritten? = nil, replyBodyLimit: Int? = nil
    ) async throws -> Message {
        precondition(message.kind == .methodCall, "call(_:) sends method calls; use send(_:) for other messages")
        try Task.checkCancellation()
        let raw = try message.encode()
        let id = nextID()
        let ms = Self.milliseconds(timeout)
        // A cancellation that lands after the call finished leaves its id in the loop's
        // cancelled-before-start set, where nothing would ever remove it. The handler has run
        // (or never will) once withTaskCancellationHandler returns, so this comes after it.
        defer {
            if Task.isCancelled { loop.enqueue { loop in loop.forgetCancellation(id: id) } }
        }
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Message, any Error>) in
                let queued = loop.enqueue { loop in
                    loop.startCall(
                        id: id, raw: raw, timeoutMilliseconds: ms, written: written, replyBodyLimit: replyBodyLimit,
                        continuation: continuation)
                }
                if !queued { continuation.resume(throwing: DBusError.disconnected) }
            }
        } onCancel: {
            loop.enqueue { loop in loop.cancelCall(id: id) }
        }
    }

    /// Calls a method and returns the reply's body.
    public func call(
        destination: String?, path: ObjectPath, interface: String?, member: String,
        _ body: [DBusValue] = [], timeout: Duration = .seconds(25)
    ) async throws -> [DBusValue] {
        try await call(.methodCall(destination: destination, path: path, interface: interface, member: member, body: body), timeout: timeout).body
    }

    /// Calls a method on the bus daemon itself.
    func callBus(_ member: String, _ body: [DBusValue] = []) async throws -> [DBusValue] {
        try await call(destination: Self.busName, path: Self.busPath, interface: Self.busName, member: member, body)
    }

    // MARK: Signals

    let subscriptions: SubscriptionRegistry

    /// Subscribes to signals. The match rule is active on the bus when this returns, so no
    /// signal sent afterwards is missed. Dropping the subscription, or cancelling the task
    /// that iterates it, removes the rule (leaving a loop early while still holding the
    /// subscription keeps it).
    ///
    /// - Parameter buffer: how many signals wait for a reader that is behind; past it the
    ///   oldest go, and the connection's logger says so (the first drop, then every 1,000th).
    public func subscribe(_ rule: MatchRule, buffer: Int = 4096) async throws -> SignalSubscription {
        try rule.validate()
        let id = nextID()
        let (stream, continuation) = AsyncThrowingStream.makeStream(
            of: Message.self, throwing: (any Error).self, bufferingPolicy: .bufferingNewest(max(1, buffer)))
        // Register locally first, so signals that arrive while AddMatch is in flight are kept.
        subscriptions.add(id: id, rule: rule, continuation: continuation)
        continuation.onTermination = { [weak self] _ in
            guard let self else { return }
            self.unsubscribe(id: id)
        }
        do {
            if rule.needsOwnerTracking, let name = rule.sender {
                let tracking = try await trackOwner(of: name)
                // The subscription holds it from now on, and gives it back when it goes. Only
                // a lost connection removes the subscription this early.
                guard subscriptions.hold(tracking, for: id) else {
                    untrackOwner(tracking)
                    throw DBusError.disconnected
                }
            }
            try await addMatch(rule)
        } catch {
            // Its onTermination then finds nothing left to undo.
            if let tracking = subscriptions.remove(id: id)?.ownerTracking { untrackOwner(tracking) }
            continuation.finish(throwing: error)
            throw error
        }
        return SignalSubscription(stream: stream)
    }

    private func unsubscribe(id: UInt64) {
        guard let removed = subscriptions.remove(id: id) else { return }
        removeMatch(removed.rule)
        if let tracking = removed.ownerTracking { untrackOwner(tracking) }
    }

    /// Adds `rule` on the bus. A call that fails after AddMatch was written may have added it
    /// all the same (cancelled, or no reply in time: the bus answers in its own time), so the
    /// rule is then removed, or it stays for the connection's life. Only the bus's own error
    /// reply says that it added nothing; removing then could take an identical rule of another
    /// subscription.
    private func addMatch(_ rule: MatchRule) async throws {
        let written = CallWritten()
        let reply: Message
        do {
            reply = try await exchange(
                .methodCall(destination: Self.busName, path: Self.busPath, interface: Self.busName, member: "AddMatch", body: [.string(rule.text)]),
                written: written)
        } catch {
            if written.isSet { removeMatch(rule) }
            throw error
        }
        if let error = reply.asError {
            if reply.sender != Self.busName { removeMatch(rule) }  // libdbus's NoReply
            throw error
        }
    }

    /// Removes `rule` from the bus, without waiting: a rule the bus does not have is harmless.
    private func removeMatch(_ rule: MatchRule) {
        var remove = Message.methodCall(
            destination: Self.busName, path: Self.busPath, interface: Self.busName, member: "RemoveMatch", body: [.string(rule.text)])
        remove.noReplyExpected = true
        try? send(remove)
    }

    /// Keeps `subscriptions` told who owns `name`, so signals from that owner match rules
    /// that name the well-known name as their sender. On return the owner is known and the
    /// caller holds one share of the tracking, to give back with `untrackOwner` once; on a
    /// throw it holds nothing.
    ///
    /// The first tracker of a name starts the setup (AddMatch, then GetNameOwner) in a task of
    /// its own, which those after it wait for: a tracker that is cancelled stops waiting, but
    /// does not fail the others.
    private func trackOwner(of name: String) async throws -> OwnerTracking {
        let (tracking, isFirst) = subscriptions.retainOwnerTracking(name)
        if isFirst {
            Task { await self.setUpOwnerTracking(tracking) }
        }
        do {
            try await tracking.wait()
        } catch {
            // Cancelled: give back this share. After a failed setup nothing is held, and the
            // release does nothing.
            untrackOwner(tracking)
            throw error
        }
        return tracking
    }

    private func setUpOwnerTracking(_ tracking: OwnerTracking) async {
        let rule = MatchRule.nameOwnerChanged(for: tracking.name)
        do {
            try await addMatch(rule)
        } catch {
            subscriptions.ownerTrackingFailed(tracking)
            tracking.finish(.failure(error))
            return
        }
        do {
            // The owner read after AddMatch's reply is newer than any change read before it.
            subscriptions.ownerTrackingMatched(tracking)
            let owner = try await nameOwner(of: tracking.name)
            // Every tracker left meanwhile: the rule is this setup's to remove.
            if !subscriptions.ownerTrackingReady(tracking, owner: owner) { removeMatch(rule) }
            tracking.finish(.success(()))
        } catch {
            subscriptions.ownerTrackingFailed(tracking)
            removeMatch(rule)
            tracking.finish(.failure(error))
        }
    }

    /// Follows who owns the well-known `name`, as this connection reads it: see
    /// `NameOwnerFollower`. Following ends when the follower is stopped or released.
    public func followOwner(of name: String) async throws -> NameOwnerFollower {
        try DBusNames.checkBusName(name)
        guard !name.hasPrefix(":") else {
            throw DBusError.usage("\(name) is a unique name, which never changes hands: there is no owner to follow")
        }
        let tracking = try await trackOwner(of: name)
        return NameOwnerFollower(name: name, registry: subscriptions) { [weak self] in self?.untrackOwner(tracking) }
    }

    /// Gives back one share of `tracking`; the last removes the rule, unless its setup has not
    /// finished (the setup then removes it).
    private func untrackOwner(_ tracking: OwnerTracking) {
        if subscriptions.releaseOwnerTracking(tracking) { removeMatch(.nameOwnerChanged(for: tracking.name)) }
    }
}

/// Set, on the connection's thread, once a call's message is handed to libdbus to write.
final class CallWritten: Sendable {
    private let flag = Atomic<Bool>(false)
    func set() { flag.store(true, ordering: .releasing) }
    var isSet: Bool { flag.load(ordering: .acquiring) }
}

/// One setup of the tracking of a name's owner, which its trackers share: they wait for it,
/// and see how it ended.
final class OwnerTracking: Sendable {
    let name: String
    private struct State {
        var result: Result<Void, any Error>?
        var nextWaiter: UInt64 = 0
        var waiters: [UInt64: CheckedContinuation<Void, any Error>] = [:]
    }
    private let state = Mutex(State())

    init(name: String) {
        self.name = name
    }

    func finish(_ result: Result<Void, any Error>) {
        let waiters = state.withLock { s in
            s.result = result
            defer { s.waiters = [:] }
            return Array(s.waiters.values)
        }
        for waiter in waiters { waiter.resume(with: result) }
    }

    /// Returns once the setup succeeded; throws its error, or `CancellationError` at once when
    /// the waiting task is cancelled.
    func wait() async throws {
        let id = state.withLock { s in
            s.nextWaiter += 1
            return s.nextWaiter
        }
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (c: CheckedContinuation<Void, any Error>) in
                let now = state.withLock { s -> Result<Void, any Error>? in
                    if let result = s.result { return result }
                    if Task.isCancelled { return .failure(CancellationError()) }
                    s.waiters[id] = c
                    return nil
                }
                if let now { c.resume(with: now) }
            }
        } onCancel: {
            let waiter = state.withLock { $0.waiters.removeValue(forKey: id) }
            waiter?.resume(throwing: CancellationError())
        }
    }
}

extension MatchRule {
    /// `NameOwnerChanged` for one name.
    public static func nameOwnerChanged(for name: String) -> MatchRule {
        MatchRule(
            sender: DBusConnection.busName, interface: DBusConnection.busName, member: "NameOwnerChanged",
            path: DBusConnection.busPath, arguments: [0: name])
    }
}

/// A stream of signals that match one rule.
public struct SignalSubscription: AsyncSequence, Sendable {
    public typealias Element = Message
    let stream: AsyncThrowingStream<Message, any Error>

    public func makeAsyncIterator() -> AsyncThrowingStream<Message, any Error>.AsyncIterator {
        stream.makeAsyncIterator()
    }
}

/// Fires once, when the connection goes away; any number of tasks may wait for it, and a
/// waiting task that is cancelled stops waiting.
final class DisconnectSignal: Sendable {
    private struct State {
        var fired = false
        var nextWaiter: UInt64 = 0
        var waiters: [UInt64: CheckedContinuation<Void, Never>] = [:]
    }

    private let state = Mutex(State())

    var hasFired: Bool { state.withLock { $0.fired } }

    func fire() {
        let waiters = state.withLock { s in
            s.fired = true
            let w = s.waiters.values
            s.waiters = [:]
            return Array(w)
        }
        for w in waiters { w.resume() }
    }

    func wait() async {
        let id = state.withLock { s in
            s.nextWaiter += 1
            return s.nextWaiter
        }
        await withTaskCancellationHandler {
            await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in
                let resumeNow = state.withLock { s in
                    if s.fired || Task.isCancelled { return true }
                    s.waiters[id] = c
                    return false
                }
                if resumeNow { c.resume() }
            }
        } onCancel: {
            let waiter = state.withLock { $0.waiters.removeValue(forKey: id) }
            waiter?.resume()
        }
    }
}

/// Who owns a well-known name, as this connection has read it (`DBusConnection.followOwner`).
///
/// `owner` is kept on the connection's thread from the bus's `NameOwnerChanged`, in order
/// with the messages around it. The bus sends a new owner's change before anything that owner
/// sends after taking the name, so a method handler that runs on the connection's thread
/// (`ExportedInterface.method(_:immediate:)`) and compares the caller with `owner` sees the
/// caller's change already. `watchNameOwner`'s stream is read by a task some time later and
/// cannot promise that.
public final class NameOwnerFollower: Sendable {
    public let name: String
    private let registry: SubscriptionRegistry
    private let release: Mutex<(@Sendable () -> Void)?>

    init(name: String, registry: SubscriptionRegistry, release: @escaping @Sendable () -> Void) {
        self.name = name
        self.registry = registry
        self.release = Mutex(release)
    }

    deinit {
        stop()
    }

    /// The unique name of the owner; nil when the name has none, or once following stopped.
    public var owner: String? {
        guard isFollowing else { return nil }
        return registry.owner(of: name)
    }

    private var isFollowing: Bool { release.withLock { $0 != nil } }

    /// Stops following (the match rule is removed when nothing else needs it). Idempotent.
    public func stop() {
        let release = release.withLock { r in
            defer { r = nil }
            return r
        }
        release?()
    }
}

/// Signal subscribers and the owners of the well-known names they follow.
final class SubscriptionRegistry: Sendable {
    private struct Entry {
        let rule: MatchRule
        let continuation: AsyncThrowingStream<Message, any Error>.Continuation
        /// Signals its full buffer dropped so far.
        var dropped = 0
        /// The share of owner tracking it holds (a well-known sender), once it has it.
        var ownerTracking: OwnerTracking?
    }

    /// A subscription just removed: what is left to undo on the bus.
    struct Removed {
        let rule: MatchRule
        let ownerTracking: OwnerTracking?
    }

    /// A name whose owner is tracked, for the trackers of its current setup.
    private struct Tracked {
        let tracking: OwnerTracking
        var count = 1
        /// Its setup finished: the rule is on the bus, and the last tracker removes it.
        var ready = false
        var owner: String?
        /// A `NameOwnerChanged` for the name has been read since its rule was added.
        var heard = false
    }

    private struct State {
        var entries: [UInt64: Entry] = [:]
        var tracked: [String: Tracked] = [:]
    }

    private let state = Mutex(State())

    func add(id: UInt64, rule: MatchRule, continuation: AsyncThrowingStream<Message, any Error>.Continuation) {
        state.withLock { $0.entries[id] = Entry(rule: rule, continuation: continuation) }
    }

    /// Removes a subscription; nil if it was already gone.
    @discardableResult
    func remove(id: UInt64) -> Removed? {
        state.withLock { s in
            s.entries.removeValue(forKey: id).map { Removed(rule: $0.rule, ownerTracking: $0.ownerTracking) }
        }
    }

    /// Gives the subscription its share of owner tracking; false if the subscription is gone.
    func hold(_ tracking: OwnerTracking, for id: UInt64) -> Bool {
        state.withLock { s in
            guard s.entries[id] != nil else { return false }
            s.entries[id]?.ownerTracking = tracking
            return true
        }
    }

    /// Takes a share of the tracking of `name`; `isFirst` when the caller is to set it up.
    func retainOwnerTracking(_ name: String) -> (tracking: OwnerTracking, isFirst: Bool) {
        state.withLock { s in
            if let tracked = s.tracked[name] {
                s.tracked[name]?.count += 1
                return (tracked.tracking, false)
            }
            let tracking = OwnerTracking(name: name)
            s.tracked[name] = Tracked(tracking: tracking)
            return (tracking, true)
        }
    }

    /// Gives back a share of `tracking`. Returns true when it was the last and the setup had
    /// finished, so the caller removes the rule; false, too, for a setup that failed or a
    /// share already given back.
    func releaseOwnerTracking(_ tracking: OwnerTracking) -> Bool {
        state.withLock { s in
            guard let tracked = s.tracked[tracking.name], tracked.tracking === tracking else { return false }
            guard tracked.count <= 1 else {
                s.tracked[tracking.name]?.count -= 1
                return false
            }
            s.tracked[tracking.name] = nil
            return tracked.ready
        }
    }

    /// The setup's AddMatch was answered: only changes read from now on are newer than the
    /// owner it asks for next.
    func ownerTrackingMatched(_ tracking: OwnerTracking) {
        state.withLock { s in
            guard s.tracked[tracking.name]?.tracking === tracking else { return }
            s.tracked[tracking.name]?.heard = false
        }
    }

    /// The setup finished with the owner `GetNameOwner` gave. It is ignored once a
    /// `NameOwnerChanged` has been read: the signals come in order with the reply, so the last
    /// one read by now is at least as new as it. (The reply's task can run after the loop
    /// thread has read a later change, which it would otherwise undo.) Returns false when every
    /// tracker has left, so the setup removes the rule itself.
    func ownerTrackingReady(_ tracking: OwnerTracking, owner: String?) -> Bool {
        state.withLock { s in
            guard var tracked = s.tracked[tracking.name], tracked.tracking === tracking else { return false }
            tracked.ready = true
            if !tracked.heard { tracked.owner = owner }
            s.tracked[tracking.name] = tracked
            return true
        }
    }

    /// The setup failed: its trackers hold nothing, and the next starts afresh.
    func ownerTrackingFailed(_ tracking: OwnerTracking) {
        state.withLock { s in
            guard s.tracked[tracking.name]?.tracking === tracking else { return }
            s.tracked[tracking.name] = nil
        }
    }

    /// How many shares of the tracking of `name` are held, or waited for (tests look).
    func ownerTrackers(of name: String) -> Int {
        state.withLock { $0.tracked[name]?.count ?? 0 }
    }

    /// The owner of a tracked name as read so far; nil when it has none or is not tracked.
    func owner(of name: String) -> String? {
        state.withLock { $0.tracked[name]?.owner }
    }

    /// Called on the loop thread for every incoming signal. Its body is read only when a
    /// subscriber wants it (an `argN` is read alone, without the rest): a signal nobody wants
    /// costs its headers, whatever its size.
    /// Returns the subscriptions whose buffer dropped a signal to take this one, with their
    /// drops so far, when that is worth a log line (the first, then every 1,000th).
    func deliver(_ incoming: IncomingMessage) throws(DBusError) -> [(MatchRule, Int)] {
        try deliver(header: incoming.header, stringArgument: incoming.stringArgument, decoded: incoming.decoded)
    }

    /// `deliver(_:)` on its parts: the headers, what reads a top-level string argument, and
    /// what reads the whole message.
    @discardableResult
    func deliver(
        header: Message, stringArgument: (Int) -> String?, decoded: () throws(DBusError) -> Message
    ) throws(DBusError) -> [(MatchRule, Int)] {
        // The bus's own NameOwnerChanged keeps the owners of the names followed: only the bus
        // can send as it, and its signals are small.
        let ownerChange = header.sender == DBusConnection.busName && header.interface == DBusConnection.busName
            && header.member == "NameOwnerChanged"
        typealias Continuation = AsyncThrowingStream<Message, any Error>.Continuation
        let (candidates, tracking) = state.withLock { s -> ([(UInt64, MatchRule, Continuation)], Bool) in
            var out: [(UInt64, MatchRule, Continuation)] = []
            for (id, entry) in s.entries {
                let owner = entry.rule.sender.flatMap { s.tracked[$0]?.owner }
                if entry.rule.matchesHeaders(header, senderOwner: owner) { out.append((id, entry.rule, entry.continuation)) }
            }
            return (out, ownerChange && !s.tracked.isEmpty)
        }
        var read: [Int: String?] = [:]
        func argument(_ index: Int) -> String? {
            if let known = read[index] { return known }
            let value = stringArgument(index)
            read[index] = value
            return value
        }
        let targets = candidates.filter { _, rule, _ in rule.matchesArguments(argument) }
        guard !targets.isEmpty || tracking else { return [] }
        let message = try decoded()
        if tracking, message.body.count == 3, case .string(let name) = message.body[0],
            case .string(let newOwner) = message.body[2]
        {
            state.withLock { s in
                guard s.tracked[name] != nil else { return }
                s.tracked[name]?.owner = newOwner.isEmpty ? nil : newOwner
                s.tracked[name]?.heard = true
            }
        }
        var worthLogging: [(MatchRule, Int)] = []
        for (id, rule, continuation) in targets {
            guard case .dropped = continuation.yield(message) else { continue }
            let count = state.withLock { s -> Int in
                s.entries[id]?.dropped += 1
                return s.entries[id]?.dropped ?? 0
            }
            if count == 1 || count % 1000 == 0 { worthLogging.append((rule, count)) }
        }
        return worthLogging
    }

    func finishAll(throwing error: any Error) {
        let all = state.withLock { s in
            let all = s.entries.values.map(\.continuation)
            s.entries = [:]
            return all
        }
        for continuation in all { continuation.finish(throwing: error) }
    }
}
