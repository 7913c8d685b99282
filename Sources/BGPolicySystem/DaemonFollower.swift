import BGPolicyCore
import BGPolicyDBus
import Logging
import Synchronization

/// Follows a daemon's well-known bus name: runs `session` for each owner while it owns the
/// name, cancels it when the owner changes or goes, and calls `lost` when nobody owns it.
/// A daemon missing at start is picked up when it appears; one that restarts is read anew.
/// Every `reread` restarts the session against the same owner, so its state is read afresh.
/// A session that fails (a call timing out on a daemon that stalls, an object not there yet
/// while it starts) is started again against the same owner after 1 s, then 2, 4 … up to 5
/// minutes: without that, one failed call left the daemon's facts unknown until it restarted
/// or the machine resumed. After `retries` failures in a row (about half an hour) it waits
/// for those instead, so that a daemon that always fails does not wake the machine every 5
/// minutes for good. A session that has read its daemon (it calls `succeeded`) ends the row,
/// so that stalls days apart are each a first failure: they used to add up, and the 13th gave
/// the daemon up until it restarted or the machine resumed. Following the name itself is
/// tried again on the same schedule when it fails (`watchOwners`).
struct DaemonFollower: Sendable {
    /// The first and the longest wait before a failed session starts again, and how many
    /// failures in a row are retried.
    static let firstRetry: Duration = .seconds(1)
    static let longestRetry: Duration = .seconds(300)
    static let retries = 12

    /// The wait after the `failures`th failure in a row: 1 s, doubling up to 5 minutes.
    static func retryWait(after failures: Int) -> Duration {
        min(firstRetry * (1 << min(max(failures - 1, 0), 16)), longestRetry)
    }

    let name: String
    let logger: Logger
    /// The wait between attempts (`SourceContext.sleep`).
    let sleep: Sleep
    /// Starts following the name's owner: the bus's (`DBusConnection.watchNameOwner`), or a test's.
    let watchOwner: @Sendable () async throws -> AsyncThrowingStream<String?, any Error>

    init(connection: DBusConnection, name: String, logger: Logger, sleep: @escaping Sleep) {
        self.init(name: name, logger: logger, sleep: sleep) { try await connection.watchNameOwner(name) }
    }

    init(
        name: String, logger: Logger, sleep: @escaping Sleep,
        watchOwner: @escaping @Sendable () async throws -> AsyncThrowingStream<String?, any Error>
    ) {
        self.name = name
        self.logger = logger
        self.sleep = sleep
        self.watchOwner = watchOwner
    }

    /// - Parameter session: follows one owner until it fails or is cancelled; it calls its
    ///   `succeeded` once it has read the daemon (or set up all it follows), which ends a row of
    ///   failures.
    func run(
        rereads: AsyncStream<Void>,
        lost: @escaping @Sendable () async -> Void,
        session: @escaping @Sendable (_ owner: String, _ succeeded: @escaping @Sendable () -> Void) async throws -> Void
    ) async {
        guard let owners = await watchOwners(lost: lost) else { return }
        // Owner changes and re-read requests arrive on one stream, so one loop handles both.
        enum Event: Sendable { case owner(String?), reread, ended }
        let (events, input) = AsyncStream.makeStream(of: Event.self)
        let feeder = Task {
            await withTaskGroup(of: Void.self) { group in
                group.addTask {
                    do {
                        for try await owner in owners { input.yield(.owner(owner)) }
                    } catch {}
                    input.yield(.ended)
                }
                group.addTask {
                    for await _ in rereads { input.yield(.reread) }
                }
                await group.next()
                group.cancelAll()
            }
        }
        var running: Task<Void, Never>?
        var owner: String?
        func start(_ newOwner: String) {
            let name = self.name, logger = self.logger, sleep = self.sleep
            running = Task {
                let row = FailureRow()
                while true {
                    do {
                        try await session(newOwner) { row.succeeded() }
                        return
                    } catch is CancellationError {
                        return
                    } catch {
                        if Task.isCancelled { return }
                        let failures = row.failed()
                        await lost()
                        if failures > Self.retries {
                            logger.warning(
                                "A daemon keeps failing; it is read again when it restarts or the machine resumes",
                                metadata: ["bus.name": "\(name)", "error": "\(error)", "failures": "\(failures)"])
                            return
                        }
                        // One warning per outage; the attempts after it at debug level.
                        let wait = Self.retryWait(after: failures)
                        logger.log(
                            level: failures == 1 ? .warning : .debug, "Lost track of a daemon; trying again",
                            metadata: ["bus.name": "\(name)", "error": "\(error)", "retry.seconds": "\(wait.components.seconds)"])
                        do { try await sleep(wait) } catch { return }
                    }
                }
            }
        }
        await withTaskCancellationHandler {
            for await event in events {
                switch event {
                case .owner(let newOwner):
                    running?.cancel()
                    await running?.value
                    running = nil
                    owner = newOwner
                    if let newOwner {
                        logger.info("Daemon appeared", metadata: ["bus.name": "\(name)", "bus.unique": "\(newOwner)"])
                        start(newOwner)
                    } else {
                        logger.info("Daemon missing", metadata: ["bus.name": "\(name)"])
                        await lost()
                    }
                case .reread:
                    guard let owner else { continue }
                    running?.cancel()
                    await running?.value
                    start(owner)
                case .ended:
                    running?.cancel()
                    await running?.value
                    running = nil
                    await lost()
                    feeder.cancel()
                    return
                }
                if Task.isCancelled { break }
            }
        } onCancel: {
            feeder.cancel()
            input.finish()
        }
        running?.cancel()
        await running?.value
        feeder.cancel()
    }

    /// Starts following the name's owner. A watch that fails (AddMatch or GetNameOwner refused,
    /// or timing out on a system bus busy at boot) loses the daemon's facts and is tried again
    /// as a session is, `retries` times at most: it used to be given up at once, and the daemon
    /// went unfollowed until the system bus was connected anew. Nil when it gave up, or the
    /// task was cancelled.
    private func watchOwners(lost: @Sendable () async -> Void) async -> AsyncThrowingStream<String?, any Error>? {
        var failures = 0
        while true {
            do {
                let owners = try await watchOwner()
                if failures > 0 { logger.info("Following a bus name after all", metadata: ["bus.name": "\(name)"]) }
                return owners
            } catch {
                if Task.isCancelled { return nil }
                failures += 1
                if failures == 1 { await lost() }
                guard failures <= Self.retries else {
                    logger.warning(
                        "Cannot follow a bus name; it is followed again when the bus is connected anew",
                        metadata: ["bus.name": "\(name)", "error": "\(error)", "failures": "\(failures)"])
                    return nil
                }
                let wait = Self.retryWait(after: failures)
                logger.log(
                    level: failures == 1 ? .warning : .debug, "Cannot follow a bus name; trying again",
                    metadata: ["bus.name": "\(name)", "error": "\(error)", "retry.seconds": "\(wait.components.seconds)"])
                do { try await sleep(wait) } catch { return nil }
            }
        }
    }
}

/// The failures in a row of the sessions with one owner: a session that read its daemon
/// (`succeeded`) ends the row.
private final class FailureRow: Sendable {
    private let count = Mutex(0)

    func succeeded() { count.withLock { $0 = 0 } }

    /// One more failure; returns how many in a row now.
    func failed() -> Int {
        count.withLock { count in
            count += 1
            return count
        }
    }
}

/// Reading properties of another daemon's object, defensively: a hostile or broken peer that
/// sends the wrong types gets logged, and the fact stays unknown; nothing traps.
struct RemoteObject: Sendable {
    let connection: DBusConnection
    let owner: String
    let path: ObjectPath
    let interface: String

    func getAll() async throws -> [String: Variant] {
        let reply = try await connection.call(
            destination: owner, path: path, interface: ObjectServer.propertiesInterface, member: "GetAll",
            [.string(interface)], timeout: .seconds(5))
        return try reply.decode([String: Variant].self, at: 0)
    }

    func get(_ property: String) async throws -> DBusValue {
        let reply = try await connection.call(
            destination: owner, path: path, interface: ObjectServer.propertiesInterface, member: "Get",
            [.string(interface), .string(property)], timeout: .seconds(5))
        guard case .variant(let value)? = reply.first else {
            throw DBusError.typeMismatch(expected: "v", got: reply.signatureText)
        }
        return value
    }

    func call(_ member: String, _ body: [DBusValue] = []) async throws -> [DBusValue] {
        try await connection.call(destination: owner, path: path, interface: interface, member: member, body, timeout: .seconds(5))
    }

    /// `PropertiesChanged` for this object, from this owner only.
    func propertiesChanged() async throws -> SignalSubscription {
        try await connection.subscribe(
            MatchRule(sender: owner, interface: ObjectServer.propertiesInterface, member: "PropertiesChanged", path: path))
    }
}

extension Dictionary where Key == String, Value == Variant {
    /// A property of the expected type, or nil (logged) when it is missing or mistyped.
    func property<T: DBusRepresentable>(_ key: String, as _: T.Type, logger: Logger, from daemon: String) -> T? {
        guard let variant = self[key] else { return nil }
        do {
            return try variant.decode(T.self)
        } catch {
            logger.warning(
                "A daemon sent a property of the wrong type",
                metadata: ["daemon": "\(daemon)", "property": "\(key)", "expected": "\(T.dbusType)", "got": "\(variant.value.type)"])
            return nil
        }
    }
}

/// Calls `read` each time any of `subscriptions` delivers a signal, until the task is
/// cancelled. Bursts coalesce: signals that arrive during a read cause one more read, not one
/// each, so a chatty daemon costs one read per burst.
func rereadOnSignals(_ subscriptions: [SignalSubscription], read: () async throws -> Void) async throws {
    try await withThrowingTaskGroup(of: Void.self) { group in
        let (pokes, poke) = AsyncStream.makeStream(of: Void.self, bufferingPolicy: .bufferingNewest(1))
        for subscription in subscriptions {
            group.addTask { for try await _ in subscription { poke.yield() } }
        }
        for await _ in pokes { try await read() }
        group.cancelAll()
    }
}

/// Suspends until the task is cancelled, with no timer.
func waitUntilCancelled() async {
    let (stream, continuation) = AsyncStream.makeStream(of: Void.self)
    for await _ in stream {}
    withExtendedLifetime(continuation) {}
}
