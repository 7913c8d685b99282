public import Logging
import Synchronization

/// One incoming method call, as a handler sees it.
public struct MethodCall: Sendable {
    public let message: Message
    public var arguments: [DBusValue] { message.body }
    /// The caller's unique name.
    public var sender: String { message.sender ?? "" }
    public var path: ObjectPath { message.path ?? .root }
}

public typealias MethodHandler = @Sendable (MethodCall) async throws -> [DBusValue]
/// A handler that answers at once, without suspending: it runs on the connection's thread,
/// so it must be quick and must not block (read a snapshot, build a reply).
public typealias ImmediateMethodHandler = @Sendable (MethodCall) throws -> [DBusValue]
public typealias PropertyGetter = @Sendable () async throws -> DBusValue
public typealias PropertySetter = @Sendable (DBusValue, MethodCall) async throws -> Void

/// An error a handler can throw to send a specific D-Bus error back to the caller.
public protocol DBusErrorConvertible: Error {
    var dbusErrorName: String { get }
    var dbusErrorMessage: String { get }
}

/// An interface's description bound to its implementation.
public struct ExportedInterface: Sendable {
    public let description: InterfaceDescription
    var methods: [String: MethodHandler] = [:]
    var immediateMethods: [String: ImmediateMethodHandler] = [:]
    var getters: [String: PropertyGetter] = [:]
    var setters: [String: PropertySetter] = [:]
    /// What a caller can do instead when a method's reply is too large to send.
    var oversizedReplyAdvice: [String: String] = [:]

    public init(_ description: InterfaceDescription) {
        self.description = description
    }

    public func method(_ name: String, _ handler: @escaping MethodHandler) -> ExportedInterface {
        var copy = self
        copy.methods[name] = handler
        return copy
    }

    /// A method answered on the connection's thread, saving two thread hand-offs per call.
    /// Calls from one caller still run in order: when that caller has calls queued, this
    /// one queues behind them.
    public func method(_ name: String, immediate handler: @escaping ImmediateMethodHandler) -> ExportedInterface {
        var copy = self
        copy.methods[name] = { call in try handler(call) }
        copy.immediateMethods[name] = handler
        return copy
    }

    /// A method answered on the connection's thread when `immediate` can (from what it has at
    /// hand); when it throws `ObjectServer.NotImmediate`, the call waits in its caller's lane
    /// for `queued`, which may await. Calls queued behind others go to `queued` directly.
    public func method(
        _ name: String, immediate: @escaping ImmediateMethodHandler, queued: @escaping MethodHandler
    ) -> ExportedInterface {
        var copy = self
        copy.methods[name] = queued
        copy.immediateMethods[name] = immediate
        return copy
    }

    /// What a caller of `method` can do instead when its reply is too large to send (over
    /// `ObjectServer.Limits.maximumReplyBytes`, or an array over 64 MiB): a sentence or two,
    /// ending the `limitsExceeded` error's message, after the size. Without it, the message
    /// says to ask for less in one call.
    public func whenReplyTooLarge(_ method: String, advise advice: String) -> ExportedInterface {
        var copy = self
        copy.oversizedReplyAdvice[method] = advice
        return copy
    }

    public func property(_ name: String, get: @escaping PropertyGetter, set: PropertySetter? = nil) -> ExportedInterface {
        var copy = self
        copy.getters[name] = get
        if let set { copy.setters[name] = set }
        return copy
    }

    /// Every described member has an implementation and nothing else does.
    func validate() throws(DBusError) {
        try description.validate()
        let name = description.name
        for method in description.methods where methods[method.name] == nil {
            throw .usage("\(name).\(method.name) is described but has no handler")
        }
        for handled in methods.keys where description.method(named: handled) == nil {
            throw .usage("\(name).\(handled) has a handler but is not described")
        }
        for advised in oversizedReplyAdvice.keys where description.method(named: advised) == nil {
            throw .usage("\(name).\(advised) has advice for a reply too large but is not described")
        }
        for property in description.properties {
            if property.isReadable && getters[property.name] == nil { throw .usage("\(name).\(property.name) has no getter") }
            if property.isWritable && setters[property.name] == nil { throw .usage("\(name).\(property.name) has no setter") }
        }
        for handled in Set(getters.keys).union(setters.keys) where description.property(named: handled) == nil {
            throw .usage("\(name).\(handled) is implemented but not described")
        }
    }
}

/// The objects a connection exports, and the dispatcher that answers calls to them.
///
/// Routing (unknown object, unknown method, wrong signature, introspection) is answered at
/// once on the connection's thread, from the call's headers and signature (and, for
/// `Properties`, the interface and property names in its first arguments and the type of the
/// value `Set` carries): the arguments are read only for a call that will be handled, and only
/// when they are within `limits.maximumCallBodyBytes`. Calls that reach a handler (`Properties`
/// calls too) are queued per caller and run by `serve()`: calls from one caller run in order,
/// different callers run concurrently, and a caller with too many calls or bytes waiting (or
/// any caller, when all callers together have) gets `LimitsExceeded`, before its arguments are
/// read, instead of growing the queue. Once
/// `serve()` has been cancelled, calls get `unavailable` until it runs again.
public final class ObjectServer: Sendable {
    public static let propertiesInterface = "org.freedesktop.DBus.Properties"
    public static let introspectableInterface = "org.freedesktop.DBus.Introspectable"
    public static let peerInterface = "org.freedesktop.DBus.Peer"

    /// The error names sent for routing failures. The defaults are the freedesktop ones; an
    /// application may use its own domain.
    public struct ErrorNames: Sendable {
        public var unknownObject = "org.freedesktop.DBus.Error.UnknownObject"
        public var unknownInterface = "org.freedesktop.DBus.Error.UnknownInterface"
        public var unknownMethod = "org.freedesktop.DBus.Error.UnknownMethod"
        public var unknownProperty = "org.freedesktop.DBus.Error.UnknownProperty"
        public var propertyReadOnly = "org.freedesktop.DBus.Error.PropertyReadOnly"
        public var invalidArgs = "org.freedesktop.DBus.Error.InvalidArgs"
        public var failed = "org.freedesktop.DBus.Error.Failed"
        public var limitsExceeded = "org.freedesktop.DBus.Error.LimitsExceeded"
        /// Calls that arrive once `serve()` has ended, or are cancelled by its end.
        public var unavailable = "org.freedesktop.DBus.Error.Failed"
        public init() {}

        /// Every name in one application's domain: `domain` followed by `UnknownObject`,
        /// `UnknownInterface`, `UnknownMethod`, `UnknownProperty`, `PropertyReadOnly`,
        /// `InvalidArgument`, `Failed`, `LimitsExceeded` and `Unavailable` (`domain` ends with
        /// its dot: "org.example.Error.").
        public init(domain: String) {
            unknownObject = domain + "UnknownObject"
            unknownInterface = domain + "UnknownInterface"
            unknownMethod = domain + "UnknownMethod"
            unknownProperty = domain + "UnknownProperty"
            propertyReadOnly = domain + "PropertyReadOnly"
            invalidArgs = domain + "InvalidArgument"
            failed = domain + "Failed"
            limitsExceeded = domain + "LimitsExceeded"
            unavailable = domain + "Unavailable"
        }

        /// Every name, for a caller to check them against its own list.
        public var all: [String] {
            [unknownObject, unknownInterface, unknownMethod, unknownProperty, propertyReadOnly, invalidArgs, failed,
             limitsExceeded, unavailable]
        }
    }

    /// What one caller may send before its calls are refused with `limitsExceeded`. They
    /// protect the process, not policy: replies to calls this connection makes are not bound.
    /// Thrown by an immediate handler that cannot answer without awaiting: the call is then
    /// queued for the method's other handler (`ExportedInterface.method(_:immediate:queued:)`).
    public struct NotImmediate: Error {
        public init() {}
    }

    public struct Limits: Sendable {
        /// The most a method call's arguments may take in the wire format (its body). A call
        /// over it is answered without its arguments being read. 1 MiB: D-Bus services take
        /// small arguments (bgpolicy's need under 64 KiB, the agent's own bound) and pass bulk
        /// data as descriptors.
        public var maximumCallBodyBytes = 1 << 20
        /// Calls one caller may have waiting before further calls are refused.
        public var maximumQueuedCallsPerCaller = ObjectServer.maximumQueuedCallsPerCaller
        /// The arguments (in the wire format) of the calls one caller may have waiting. Read
        /// arguments take more memory than their wire format (an `ay` about 24 bytes per
        /// byte), so this bounds a caller's queue to some 100 MiB at the worst.
        public var maximumQueuedBytesPerCaller = 4 << 20
        /// Calls all callers together may have waiting. The per-caller bounds hold one
        /// connection; a process may open many (dbus-daemon's session bus lets one user have
        /// thousands), so the whole queue is bounded too. A call over it is refused with
        /// `limitsExceeded`, saying the server is busy, whoever sent it; the calls running are
        /// not counted.
        public var maximumQueuedCalls = 8192
        /// The arguments (in the wire format) of the calls all callers together may have
        /// waiting: 64 MiB, the memory they hold as they wait, whatever the number of callers.
        /// A call alone is always taken, as for one caller.
        public var maximumQueuedBytes = 64 << 20
        /// Whether calls may carry Unix file descriptors, to the methods whose arguments can
        /// hold one (an `h`, or a variant) and to `Properties.Set`. Other calls that carry
        /// some are always refused, before anything is read. A service that takes none turns
        /// this off: its callers' descriptors, open in this process while their calls wait,
        /// are then refused with the call.
        public var acceptsFileDescriptors = true
        /// The most one reply may take in the wire format, headers included; at most the
        /// specification's 128 MiB (and an array is never over its 64 MiB, whatever this
        /// says). A reply over it is not sent: the caller gets `limitsExceeded`, saying how
        /// large it was and what to do instead (`ExportedInterface.whenReplyTooLarge`). A bus
        /// may take less than the specification allows, and disconnects a sender of more
        /// (dbus-daemon's `max_message_size`: 32 MiB unless its configuration says more, as the
        /// stock session bus's does, 128 MiB): a service that cannot lose its connection sets
        /// the least a bus it runs on may take. Checked as the reply is written, element by
        /// element of its arrays, which costs a comparison each: a reply over it is refused
        /// once it has passed it, not written in full first.
        public var maximumReplyBytes = WireWriter.maximumMessageLength
        public init() {}
    }

    /// Calls one caller may have waiting before further calls are refused, by default.
    public static let maximumQueuedCallsPerCaller = 256

    struct Work: Sendable {
        let message: Message
        let loop: ConnectionLoop
        let run: @Sendable (MethodCall) async throws -> [DBusValue]
        /// The length of the call's body in the wire format.
        var bytes = 0
    }

    /// One caller's queued calls, oldest first: a queue with a moving head, so taking the next
    /// call is O(1). A taken call's slot is emptied at once, so that its message is freed when
    /// its reply is sent, and the emptied slots at the front are dropped once they are half the
    /// storage: a caller that always keeps a call waiting behind the running one (so the queue
    /// is never empty when a call is taken) cannot make it grow. A lane exists while its caller
    /// has calls queued or running; one drain serves it.
    struct Lane {
        private var queue: [Work?] = []
        private var head = 0
        var count: Int { queue.count - head }
        /// The slots the lane holds, emptied ones included: at most about twice `count`.
        var storedSlots: Int { queue.count }
        /// The body bytes of the calls waiting.
        private(set) var bytes = 0

        /// Below this many emptied slots, the front is left as it is: moving the waiting calls
        /// down costs more than the slots.
        private static let compactionThreshold = 16

        mutating func append(_ work: Work) {
            queue.append(work)
            bytes += work.bytes
        }

        mutating func next() -> Work? {
            guard head < queue.count, let work = queue[head] else { return nil }
            queue[head] = nil
            bytes -= work.bytes
            head += 1
            if head == queue.count {
                queue.removeAll(keepingCapacity: true)
                head = 0
            } else if head >= Self.compactionThreshold, head * 2 >= queue.count {
                // Amortised O(1): the calls moved are no more than the slots dropped.
                queue.removeFirst(head)
                head = 0
            }
            return work
        }
    }

    private struct State {
        var objects: [ObjectPath: [String: ExportedInterface]] = [:]
        var errorNames = ErrorNames()
        var limits = Limits()
        var lanes: [String: Lane] = [:]
        /// The calls waiting in every lane, and their body bytes: what `Limits.maximumQueuedCalls`
        /// and `maximumQueuedBytes` bound.
        var waitingCalls = 0
        var waitingBytes = 0
        var closed = false
        /// Set while `serve()` runs: callers whose lanes are ready to drain.
        var ready: AsyncStream<String>.Continuation?
        /// Set from the end of a `serve()` until the next one: calls are answered
        /// `unavailable`, not queued for a server that has stopped.
        var stopping = false
        /// From the start of a `serve()` to the end of its tidy-up: one at a time.
        var serving = false
    }

    private let state = Mutex(State())
    /// `limits.maximumReplyBytes`, read without the lock by every reply.
    private let maximumReplyBytes = Atomic<Int>(WireWriter.maximumMessageLength)
    /// The last reply of each immediate method, for `Message.encodeReply`.
    private let replyTemplates = ReplyTemplates()
    private let logger: Logger

    init(logger: Logger) {
        self.logger = logger
    }

    public var errorNames: ErrorNames {
        get { state.withLock { $0.errorNames } }
        set { state.withLock { $0.errorNames = newValue } }
    }

    public var limits: Limits {
        get { state.withLock { $0.limits } }
        set {
            state.withLock { $0.limits = newValue }
            maximumReplyBytes.store(newValue.maximumReplyBytes, ordering: .relaxed)
        }
    }

    /// Whether `serve()` has ended (or is ending) and not run again.
    var isStopping: Bool { state.withLock { $0.stopping } }

    /// Exports interfaces at a path. Throws if the path is taken or an interface is incomplete.
    public func export(_ interfaces: [ExportedInterface], at path: ObjectPath) throws {
        var table: [String: ExportedInterface] = [:]
        for interface in interfaces {
            try interface.validate()
            let name = interface.description.name
            guard ![Self.propertiesInterface, Self.introspectableInterface, Self.peerInterface].contains(name) else {
                throw DBusError.usage("\(name) is provided by the connection itself")
            }
            guard table[name] == nil else { throw DBusError.usage("\(name) exported twice at \(path)") }
            table[name] = interface
        }
        try state.withLock { s throws(DBusError) in
            guard s.objects[path] == nil else { throw .usage("an object is already exported at \(path)") }
            s.objects[path] = table
        }
    }

    public func unexport(_ path: ObjectPath) {
        _ = state.withLock { $0.objects.removeValue(forKey: path) }
    }

    func connectionClosed() {
        let ready = state.withLock { s in
            s.closed = true
            s.lanes = [:]
            (s.waitingCalls, s.waitingBytes) = (0, 0)
            return s.ready
        }
        ready?.finish()
    }

    // MARK: Serving

    /// Runs handlers until the task is cancelled or the connection closes. Calls already
    /// started are finished before it returns; from its cancellation, calls that have not
    /// started, and new ones, are answered `errorNames.unavailable`. It may run again after it
    /// returns, but only once at a time: a second concurrent call logs an error and returns at
    /// once. Calls that arrive before the first `serve()` wait for it.
    public func serve() async {
        let (ready, continuation) = AsyncStream.makeStream(of: String.self)
        let started: Bool = state.withLock { s in
            guard !s.serving, !s.closed else { return false }
            s.serving = true
            s.ready = continuation
            s.stopping = false
            // Lanes that filled while nobody served.
            for sender in s.lanes.keys { continuation.yield(sender) }
            return true
        }
        guard started else {
            logger.error("ObjectServer.serve() is already running, or the connection is closed")
            return
        }
        await withDiscardingTaskGroup { group in
            for await sender in ready {
                group.addTask { await self.drain(sender) }
            }
            // Cancelled (or closed): nothing will start a drain for a lane now.
            state.withLock { s in
                s.ready = nil
                s.stopping = true
            }
        }
        // The drains have ended; lanes that never had one are answered here.
        let (left, names) = state.withLock { s in
            let left = s.lanes.values
            s.lanes = [:]
            (s.waitingCalls, s.waitingBytes) = (0, 0)
            s.serving = false
            return (Array(left), s.errorNames)
        }
        for var lane in left {
            while let work = lane.next() {
                respond(Self.stoppingError(for: work.message, names: names), to: work.message, loop: work.loop)
            }
        }
    }

    private static func stoppingError(for message: Message, names: ErrorNames) -> Message {
        message.makeError(name: names.unavailable, message: "the service is stopping; call again once it is back")
    }

    private func drain(_ sender: String) async {
        while let work = nextWork(for: sender) {
            respond(await run(work.run, for: work.message), to: work.message, loop: work.loop)
        }
    }

    private func run(_ handler: @Sendable (MethodCall) async throws -> [DBusValue], for message: Message) async -> Message {
        do {
            return message.makeReply(try await handler(MethodCall(message: message)))
        } catch {
            return errorReply(for: message, error: error)
        }
    }

    /// Answers one method call exactly as the connection would, without a bus: routing,
    /// signature checks, properties, introspection and the handler. Returns the reply, or
    /// nil when the call asked for none. The fuzzer and tests drive the dispatcher with it.
    public func handle(_ message: Message) async -> Message? {
        guard message.kind == .methodCall else { return nil }
        let reply: Message
        switch resolve(message) {
        case .reply(let body): reply = message.makeReply(body)
        case .error(let name, let text): reply = message.makeError(name: name, message: text)
        case .handler(let handler): reply = await run(handler, for: message)
        case .immediate(let handler, let queued):
            if let immediate = runImmediate(handler, for: message) {
                reply = immediate
            } else {
                reply = await run(queued, for: message)
            }
        }
        return message.noReplyExpected ? nil : reply
    }

    /// Creates a server with no connection, for `handle(_:)`.
    public static func detached(logger: Logger = Logger(label: "org.bgpolicy.dbus")) -> ObjectServer {
        ObjectServer(logger: logger)
    }

    private func nextWork(for sender: String) -> Work? {
        state.withLock { s in
            // Modified in place: copying the lane out would copy its queue on every call.
            guard s.lanes[sender] != nil else { return nil }
            // Stopping: what is left is answered once the running calls are done.
            guard !s.stopping else { return nil }
            guard let work = s.lanes[sender]!.next() else {
                s.lanes[sender] = nil
                return nil
            }
            s.waitingCalls -= 1
            s.waitingBytes -= work.bytes
            return work
        }
    }

    private func errorReply(for message: Message, error: any Error) -> Message {
        let names = errorNames
        switch error {
        case let e as any DBusErrorConvertible:
            return message.makeError(name: e.dbusErrorName, message: e.dbusErrorMessage)
        case DBusError.remote(let name, let text):
            return message.makeError(name: name, message: text)
        case let e as DBusError:
            switch e {
            case .typeMismatch, .invalidValue, .invalidName, .invalidSignature, .malformedMessage:
                return message.makeError(name: names.invalidArgs, message: e.message)
            case .limitsExceeded:
                return message.makeError(name: names.limitsExceeded, message: e.message)
            default:
                return message.makeError(name: names.failed, message: e.message)
            }
        case is CancellationError:
            return message.makeError(name: names.unavailable, message: "the call was cancelled: the service is stopping")
        default:
            logger.error("A method handler failed", metadata: ["member": "\(message.member ?? "")", "error": "\(error)"])
            return message.makeError(name: names.failed, message: "internal error: \(error)")
        }
    }

    /// Sends a reply: directly when already on the connection's thread, else through its queue.
    /// An immediate method's reply goes through `replyTemplates`: such methods read a snapshot,
    /// often the same one many times over, and their replies are small.
    private func respond(_ reply: Message, to call: Message, loop: ConnectionLoop, onLoopThread: Bool = false,
                         immediate: Bool = false) {
        guard !call.noReplyExpected else { return }
        func deliver(_ raw: RawMessage) {
            if onLoopThread { try? loop.send(raw) } else { loop.enqueue { loop in try? loop.send(raw) } }
        }
        let limit = maximumReplyBytes.load(ordering: .relaxed)
        do {
            if immediate {
                let method = ReplyTemplates.Method(interface: call.interface, member: call.member)
                deliver(try reply.encodeReply(method: method, templates: replyTemplates, maximumLength: limit))
            } else {
                deliver(try reply.encode(maximumLength: limit))
            }
        } catch .limitsExceeded(let why) {
            // Sent, it would cost this connection: the bus disconnects the sender of a message it
            // cannot take. The caller is told how large it was and what to do instead.
            let (method, advice) = oversizedReplyAdvice(for: call)
            logger.warning("A reply was too large to send", metadata: ["method": "\(method)", "reason": "\(why)"])
            let text = "the reply to \(method) is too large to send in one D-Bus message: \(why). "
                + (advice ?? "Ask for less in one call.")
            if let raw = try? call.makeError(name: errorNames.limitsExceeded, message: text).encode() { deliver(raw) }
        } catch {
            // The handler returned something unsendable: tell the caller rather than nothing.
            logger.error("A reply could not be encoded", metadata: ["member": "\(call.member ?? "")", "error": "\(error)"])
            if let raw = try? call.makeError(name: errorNames.failed, message: "the reply could not be encoded: \(error.message)").encode() {
                deliver(raw)
            }
        }
    }

    /// The method `call` reached, as "interface.member", and its advice for a reply too large
    /// (`ExportedInterface.whenReplyTooLarge`), if it has some. Read only when a reply is.
    private func oversizedReplyAdvice(for call: Message) -> (method: String, advice: String?) {
        let member = call.member ?? ""
        let table = state.withLock { $0.objects[call.path ?? .root] } ?? [:]
        // With no interface named, the one routing found: the first by name with the method.
        let exported = call.interface.flatMap { table[$0] }
            ?? table.keys.sorted().lazy.compactMap { table[$0] }.first { $0.description.method(named: member) != nil }
        let interface = exported?.description.name ?? call.interface ?? ""
        return ("\(interface).\(member)", exported?.oversizedReplyAdvice[member])
    }

    // MARK: Routing (on the connection's thread)

    /// Routes a call from its headers and signature (and a `Properties` call from the names in
    /// its first arguments); its arguments are read only for a call that will be handled, only
    /// when they are within `limits.maximumCallBodyBytes`, and, for a call that will wait in its
    /// caller's lane, only when the lane has room for it.
    func route(_ incoming: IncomingMessage, loop: ConnectionLoop) {
        let header = incoming.header
        // Every descriptor of a call stays open in this process while the call waits in its
        // caller's lane (and one in a variant is duplicated when the body is read): a call
        // that cannot use them is answered before anything is read.
        if header.interface == Self.propertiesInterface, incoming.carriesFileDescriptors,
            header.member != "Set" || !state.withLock({ $0.limits.acceptsFileDescriptors })
        {
            let name = state.withLock { $0.errorNames.invalidArgs }
            let text = "\(Self.propertiesInterface).\(header.member ?? "") takes no file descriptors here; "
                + "send the call without them"
            respond(header.makeError(name: name, message: text), to: header, loop: loop, onLoopThread: true)
            return
        }
        let resolution = resolve(
            header, signature: incoming.signature, carriesFileDescriptors: incoming.carriesFileDescriptors,
            incoming: header.interface == Self.propertiesInterface ? incoming : nil)
        switch resolution {
        case .reply(let body):
            respond(header.makeReply(body), to: header, loop: loop, onLoopThread: true)
        case .error(let name, let text):
            respond(header.makeError(name: name, message: text), to: header, loop: loop, onLoopThread: true)
        case .handler(let run):
            guard let read = readArguments(of: incoming, queued: true, loop: loop) else { return }
            enqueue(Work(message: read.message, loop: loop, run: run, bytes: read.bytes), loop: loop)
        case .immediate(let handler, let queued):
            // Inline unless this caller has calls queued, which must be answered first.
            let busy = state.withLock { $0.lanes[header.sender ?? ""] != nil }
            guard let (message, bytes) = readArguments(of: incoming, queued: busy, loop: loop) else { return }
            if !busy, let reply = runImmediate(handler, for: message) {
                respond(reply, to: message, loop: loop, onLoopThread: true, immediate: true)
            } else {
                enqueue(Work(message: message, loop: loop, run: queued, bytes: bytes), loop: loop)
            }
        }
    }

    /// The call with its arguments read, and their length; nil when they are over the bound
    /// or cannot be read, and the caller has been answered.
    ///
    /// `queued`: the call will wait in its caller's lane, so the lane's bounds are checked on
    /// its measured length before the arguments are read: a caller whose lane is full is
    /// answered without the agent decoding what it would refuse.
    private func readArguments(
        of incoming: IncomingMessage, queued: Bool = false, loop: ConnectionLoop
    ) -> (message: Message, bytes: Int)? {
        let header = incoming.header
        // No arguments: nothing to measure, and no lock taken (GetStatus, on every redraw of a
        // settings panel).
        if incoming.signature.isEmpty && !queued {
            return (header, 0)
        }
        let limit = state.withLock { $0.limits.maximumCallBodyBytes }
        func method() -> String { "\(header.interface ?? "").\(header.member ?? "")" }
        let bytes = incoming.signature.isEmpty ? 0 : incoming.bodyLength(upTo: limit)
        guard let bytes else {
            logger.debug("Refused a call with arguments over the bound", metadata: [
                "sender": "\(header.sender ?? "")", "method": "\(method())", "limit": "\(limit)",
            ])
            let text = "\(method()): the arguments take more than \(limit) bytes, the most this service reads in one call; "
                + "send less in each call, or pass bulk data through a file descriptor"
            let name = state.withLock { $0.errorNames.limitsExceeded }
            respond(header.makeError(name: name, message: text), to: header, loop: loop, onLoopThread: true)
            return nil
        }
        if queued, let refusal = admission(of: header.sender ?? "", bytes: bytes) {
            respond(refusal(header), to: header, loop: loop, onLoopThread: true)
            return nil
        }
        do {
            return (try incoming.decoded(), bytes)
        } catch {
            // Answered, so not worth more than debug: a client could otherwise fill the journal.
            logger.debug("Refused a call whose arguments could not be read", metadata: [
                "sender": "\(header.sender ?? "")", "method": "\(method())", "error": "\(error)",
            ])
            let text = "\(method()): the arguments of type \"\(incoming.signature)\" could not be read: \(error.message)"
            let name = state.withLock { $0.errorNames.invalidArgs }
            respond(header.makeError(name: name, message: text), to: header, loop: loop, onLoopThread: true)
            return nil
        }
    }

    /// Why a call of `bytes` from `sender` would be refused by `enqueue` now, as the error
    /// reply to make for it; nil when it would be queued. (`enqueue` checks again: a lane may
    /// change in between, and then the call is refused after it was read, as before.)
    private func admission(of sender: String, bytes: Int) -> ((Message) -> Message)? {
        let outcome = state.withLock { s in Self.outcome(for: s.lanes[sender] ?? Lane(), bytes: bytes, in: s) }
        switch outcome {
        case .queued, .closed: return nil
        case .stopping(let names): return { Self.stoppingError(for: $0, names: names) }
        case .full(let names, let why): return { Self.fullError(for: $0, sender: sender, why: why, names: names) }
        }
    }

    private enum Outcome {
        enum Bound { case calls(Int), bytes(Int), allCalls(Int), allBytes(Int) }
        case queued, full(ErrorNames, Bound), closed, stopping(ErrorNames)
    }

    /// What `enqueue` does with a call of `bytes` for `lane`, in state `s`.
    private static func outcome(for lane: Lane, bytes: Int, in s: State) -> Outcome {
        guard !s.closed else { return .closed }
        guard !s.stopping else { return .stopping(s.errorNames) }
        guard lane.count < s.limits.maximumQueuedCallsPerCaller else {
            return .full(s.errorNames, .calls(s.limits.maximumQueuedCallsPerCaller))
        }
        // A call alone is always taken: it is within the bound for one call.
        guard lane.count == 0 || lane.bytes + bytes <= s.limits.maximumQueuedBytesPerCaller else {
            return .full(s.errorNames, .bytes(s.limits.maximumQueuedBytesPerCaller))
        }
        guard s.waitingCalls < s.limits.maximumQueuedCalls else {
            return .full(s.errorNames, .allCalls(s.limits.maximumQueuedCalls))
        }
        guard s.waitingCalls == 0 || s.waitingBytes + bytes <= s.limits.maximumQueuedBytes else {
            return .full(s.errorNames, .allBytes(s.limits.maximumQueuedBytes))
        }
        return .queued
    }

    private static func fullError(for message: Message, sender: String, why: Outcome.Bound, names: ErrorNames) -> Message {
        let text =
            switch why {
            case .calls(let most):
                "too many calls waiting from \(sender) (\(most) calls already wait); wait for replies before sending more"
            case .bytes(let most):
                "too many calls waiting from \(sender) (the calls waiting would take over \(most) bytes of arguments); wait for replies before sending more"
            case .allCalls(let most):
                "busy: \(most) calls from all callers already wait to be served; try again in a moment"
            case .allBytes(let most):
                "busy: the calls waiting from all callers would take over \(most) bytes of arguments; try again in a moment"
            }
        return message.makeError(name: names.limitsExceeded, message: text)
    }

    /// The reply, or nil when the handler cannot answer at once (`NotImmediate`).
    private func runImmediate(_ handler: ImmediateMethodHandler, for message: Message) -> Message? {
        do {
            return message.makeReply(try handler(MethodCall(message: message)))
        } catch is NotImmediate {
            return nil
        } catch {
            return errorReply(for: message, error: error)
        }
    }

    private func enqueue(_ work: Work, loop: ConnectionLoop) {
        let sender = work.message.sender ?? ""
        let outcome: Outcome = state.withLock { s in
            let isNew = s.lanes[sender] == nil
            let outcome = Self.outcome(for: s.lanes[sender] ?? Lane(), bytes: work.bytes, in: s)
            guard case .queued = outcome else { return outcome }
            s.lanes[sender, default: Lane()].append(work)
            s.waitingCalls += 1
            s.waitingBytes += work.bytes
            if isNew {
                // Without a serve() running, the lane waits: the next serve() picks it up.
                s.ready?.yield(sender)
            }
            return .queued
        }
        switch outcome {
        case .queued, .closed:
            break
        case .stopping(let names):
            respond(Self.stoppingError(for: work.message, names: names), to: work.message, loop: loop)
        case .full(let names, let why):
            respond(Self.fullError(for: work.message, sender: sender, why: why, names: names), to: work.message, loop: loop)
        }
    }

    enum Resolution {
        case reply([DBusValue])
        case error(String, String)
        case handler(@Sendable (MethodCall) async throws -> [DBusValue])
        case immediate(ImmediateMethodHandler, queued: @Sendable (MethodCall) async throws -> [DBusValue])
    }

    /// Decides what a call reaches. Pure apart from reading the export table, so the fuzzer
    /// can drive it without a bus. `signature` is the body's (by default, that of
    /// `message.body`): routing needs only it and the headers, except for `Properties` calls,
    /// which name their interface and property in their first arguments. Those are read from
    /// `incoming` when it is given (`message` is then its headers alone), without reading the
    /// value a `Set` carries; else from `message.body`.
    func resolve(
        _ message: Message, signature: String? = nil, carriesFileDescriptors: Bool = false, incoming: IncomingMessage? = nil
    ) -> Resolution {
        let signature = signature ?? message.signature
        let path = message.path ?? .root
        let member = message.member ?? ""
        let interface = message.interface
        let isIntrospect = member == "Introspect" && (interface == nil || interface == Self.introspectableInterface)
        let (table, names, children, acceptsFileDescriptors) = state.withLock {
            s -> ([String: ExportedInterface]?, ErrorNames, [String], Bool) in
            (s.objects[path], s.errorNames, isIntrospect ? Self.children(of: path, in: s.objects.keys) : [],
             s.limits.acceptsFileDescriptors)
        }

        if isIntrospect {
            guard signature.isEmpty else {
                return .error(names.invalidArgs, "Introspect takes no arguments, got \"\(signature)\"")
            }
            return .reply([.string(Self.introspection(of: table, children: children))])
        }
        if interface == Self.introspectableInterface {
            return .error(names.unknownMethod, "no method \(member) in \(Self.introspectableInterface)")
        }
        guard let table else {
            return .error(names.unknownObject, "no object at \(path)")
        }
        if interface == Self.propertiesInterface {
            let arguments = incoming.map(PropertyArguments.incoming) ?? .decoded(message.body)
            return resolveProperties(member: member, signature: signature, arguments: arguments, table: table, names: names)
        }
        let candidate: ExportedInterface?
        if let interface {
            guard let found = table[interface] else {
                return .error(names.unknownInterface, "the object at \(path) has no interface \(interface)")
            }
            candidate = found
        } else {
            // No interface named (the D-Bus spec allows it): the interface whose method of that
            // name takes these arguments, else the first by name that has the method, for its
            // error. Never the dictionary's order, which changes from one run to the next.
            let having = table.keys.sorted().compactMap { table[$0] }.filter { $0.description.method(named: member) != nil }
            candidate = having.first { $0.description.method(named: member)?.inputSignature == signature }
                ?? having.first
        }
        guard let exported = candidate, let method = exported.description.method(named: member),
            let handler = exported.methods[member]
        else {
            return .error(names.unknownMethod, "no method \(member) in \(interface ?? "any interface") at \(path)")
        }
        guard signature == method.inputSignature else {
            return .error(
                names.invalidArgs,
                "\(exported.description.name).\(member) takes arguments of type \"\(method.inputSignature)\", not \"\(signature)\"")
        }
        // Descriptors sent to a method that cannot take them would stay open in this process
        // while the call waits its turn, for nothing: refused at once, they close with it.
        if carriesFileDescriptors,
            !acceptsFileDescriptors || !method.inputSignature.contains(where: { $0 == "h" || $0 == "v" })
        {
            return .error(
                names.invalidArgs,
                "\(exported.description.name).\(member) takes no file descriptors; send the call without them")
        }
        if let immediate = exported.immediateMethods[member] { return .immediate(immediate, queued: handler) }
        return .handler(handler)
    }

    /// What routing reads of a `Properties` call's arguments: the names in its strings, and the
    /// type of the value `Set` carries, never the value itself.
    enum PropertyArguments {
        /// The call as it arrived, its body unread (`route`).
        case incoming(IncomingMessage)
        /// The call's arguments, already read (`handle`, the fuzzer).
        case decoded([DBusValue])

        func string(_ index: Int) -> String? {
            switch self {
            case .incoming(let incoming): return incoming.stringArgument(index)
            case .decoded(let body):
                guard index < body.count, case .string(let text) = body[index] else { return nil }
                return text
            }
        }

        func variantSignature(_ index: Int) -> String? {
            switch self {
            case .incoming(let incoming): return incoming.variantSignature(index)
            case .decoded(let body):
                guard index < body.count, case .variant(let value) = body[index] else { return nil }
                return value.type.signature
            }
        }
    }

    /// Routes a `Properties` call from its signature, its interface and property names and,
    /// for `Set`, its value's type: an unknown or read-only property, or a value of the wrong
    /// type, is answered before the value is read. A call that will be handled is read, like
    /// any other, only once its caller's lane has room for it.
    private func resolveProperties(
        member: String, signature: String, arguments: PropertyArguments, table: [String: ExportedInterface], names: ErrorNames
    ) -> Resolution {
        func lookup(_ interfaceName: String, _ propertyName: String) -> Result<(ExportedInterface, InterfaceDescription.Property), Failure> {
            // The D-Bus specification lets Get and Set name no interface: the property is then
            // looked for on every interface of the object, the first by name that has it.
            if interfaceName.isEmpty {
                let owner = table.keys.sorted().lazy.compactMap { name in
                    table[name].flatMap { exported in exported.description.property(named: propertyName).map { (exported, $0) } }
                }.first
                guard let owner else {
                    return .failure(Failure(name: names.unknownProperty, text: "no interface here has a property \(propertyName)"))
                }
                return .success(owner)
            }
            guard let exported = table[interfaceName] else {
                return .failure(Failure(name: names.unknownInterface, text: "no interface \(interfaceName) here"))
            }
            guard let property = exported.description.property(named: propertyName) else {
                return .failure(Failure(name: names.unknownProperty, text: "\(interfaceName) has no property \(propertyName)"))
            }
            return .success((exported, property))
        }
        switch (member, signature) {
        case ("Get", "ss"):
            guard let i = arguments.string(0), let p = arguments.string(1) else { break }
            switch lookup(i, p) {
            case .failure(let f): return .error(f.name, f.text)
            case .success(let (exported, property)):
                let i = exported.description.name  // the interface found, when the call named none
                guard property.isReadable, let getter = exported.getters[p] else {
                    return .error(names.unknownProperty, "\(i).\(p) is write-only")
                }
                let type = property.type
                return .handler { _ in
                    let value = try await getter()
                    guard value.type == type else { throw DBusError.usage("\(i).\(p) produced \(value.type), not \(type)") }
                    return [.variant(value)]
                }
            }
        case ("GetAll", "s"):
            guard let i = arguments.string(0) else { break }
            // Get and Set may name no interface, GetAll may not: "no interface  here" said nothing.
            guard !i.isEmpty else {
                return .error(
                    names.unknownInterface,
                    "\(Self.propertiesInterface).GetAll needs an interface name; call it once for each interface of the object")
            }
            guard let exported = table[i] else { return .error(names.unknownInterface, "no interface \(i) here") }
            let readable = exported.description.properties.filter(\.isReadable)
            return .handler { _ in
                var entries: [DBusDictEntry] = []
                for property in readable {
                    guard let getter = exported.getters[property.name] else { continue }
                    let value = try await getter()
                    guard value.type == property.type else {
                        throw DBusError.usage("\(i).\(property.name) produced \(value.type), not \(property.type)")
                    }
                    entries.append(DBusDictEntry(key: .string(property.name), value: .variant(value)))
                }
                return [.dictionary(key: .string, value: .variant, entries)]
            }
        case ("Set", "ssv"):
            guard let i = arguments.string(0), let p = arguments.string(1), let valueType = arguments.variantSignature(2)
            else { break }
            switch lookup(i, p) {
            case .failure(let f): return .error(f.name, f.text)
            case .success(let (exported, property)):
                let i = exported.description.name
                guard property.isWritable, let setter = exported.setters[p] else {
                    return .error(names.propertyReadOnly, "\(i).\(p) is read-only")
                }
                guard valueType == property.type.signature else {
                    return .error(names.invalidArgs, "\(i).\(p) has type \"\(property.type.signature)\", not \"\(valueType)\"")
                }
                return .handler { call in
                    guard case .variant(let value)? = call.arguments.dropFirst(2).first else {
                        throw DBusError.typeMismatch(expected: "ssv", got: call.message.signature)
                    }
                    // GetAll wraps the value in an array, a dict entry and a variant: keep room.
                    guard value.containerDepth + 3 <= DBusValue.maximumDepth else {
                        throw DBusError.invalidValue("\(i).\(p): the value is nested too deeply to be read back")
                    }
                    try await setter(value, call)
                    return []
                }
            }
        default:
            guard ["Get", "GetAll", "Set"].contains(member) else {
                return .error(names.unknownMethod, "no method \(member) in \(Self.propertiesInterface)")
            }
        }
        let expected = ["Get": "ss", "GetAll": "s", "Set": "ssv"][member] ?? ""
        return .error(names.invalidArgs, "\(Self.propertiesInterface).\(member) takes \"\(expected)\", not \"\(signature)\"")
    }

    private struct Failure: Error {
        let name: String
        let text: String
    }

    // MARK: Introspection

    static func children(of path: ObjectPath, in paths: some Sequence<ObjectPath>) -> [String] {
        let prefix = path.rawValue == "/" ? "/" : path.rawValue + "/"
        var names = Set<String>()
        for candidate in paths where candidate.rawValue.hasPrefix(prefix) && candidate != path {
            let rest = candidate.rawValue.dropFirst(prefix.count)
            if let first = rest.split(separator: "/").first { names.insert(String(first)) }
        }
        return names.sorted()
    }

    static func introspection(of table: [String: ExportedInterface]?, children: [String]) -> String {
        var out = XML.doctype + "<node>\n"
        if let table {
            for standard in StandardInterfaces.all { out += standard.xml(documented: false) }
            for name in table.keys.sorted() { out += table[name]!.description.xml() }
        }
        for child in children { out += "  <node name=\"\(XML.escape(child))\"/>\n" }
        out += "</node>\n"
        return out
    }
}

/// The interfaces every object has, answered by the connection itself.
public enum StandardInterfaces {
    public static let peer = InterfaceDescription(
        name: ObjectServer.peerInterface, documentation: "",
        methods: [
            .init("Ping", documentation: ""),
            .init("GetMachineId", outputs: [.init("machine_uuid", .string)], documentation: ""),
        ])
    public static let introspectable = InterfaceDescription(
        name: ObjectServer.introspectableInterface, documentation: "",
        methods: [.init("Introspect", outputs: [.init("xml_data", .string)], documentation: "")])
    public static let properties = InterfaceDescription(
        name: ObjectServer.propertiesInterface, documentation: "",
        methods: [
            .init("Get", inputs: [.init("interface_name", .string), .init("property_name", .string)], outputs: [.init("value", .variant)], documentation: ""),
            .init("GetAll", inputs: [.init("interface_name", .string)], outputs: [.init("props", .dictionary(key: .string, value: .variant))], documentation: ""),
            .init("Set", inputs: [.init("interface_name", .string), .init("property_name", .string), .init("value", .variant)], documentation: ""),
        ],
        signals: [
            .init(
                "PropertiesChanged",
                arguments: [
                    .init("interface_name", .string), .init("changed_properties", .dictionary(key: .string, value: .variant)),
                    .init("invalidated_properties", .array(.string)),
                ], documentation: "")
        ])
    static let all = [peer, introspectable, properties]
}
