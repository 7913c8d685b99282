public import BGPolicyCore
public import BGPolicyDBus
import Glibc
import Logging

/// The user's graphical session and the machine's sleep, from systemd-logind (system bus).
///
/// - The session: `GetUser(uid)` → `Display`; when that names no session (`/`), the user's
///   `Sessions`, preferring an active graphical one. Its `LockedHint` and `IdleHint` are
///   followed through `PropertiesChanged`, and its `Lock`/`Unlock` signals, which logind sends
///   on the real session path only. `IdleHint` is not kept current by GNOME or KDE; the core
///   also counts a locked session as idle, and no input by GNOME's idle monitor
///   (`IdleMonitorSource`; Docs/Conditions.md).
/// - Sleep: a `sleep` delay inhibitor is held while awake. On `PrepareForSleep(true)` the
///   agent is told (it expires running slices), then the inhibitor is released so the machine
///   may sleep; on `PrepareForSleep(false)` it is taken again and the agent is told to read
///   everything anew.
public struct LogindSource: ConditionSource {
    public static let busName = "org.freedesktop.login1"
    static let managerPath = try! ObjectPath("/org/freedesktop/login1")
    static let managerInterface = "org.freedesktop.login1.Manager"
    static let userInterface = "org.freedesktop.login1.User"
    static let sessionInterface = "org.freedesktop.login1.Session"

    public let name = ConditionSourceName.logind
    let connection: DBusConnection
    let uid: UInt32
    let onSleep: @Sendable (SleepEvent) async -> Void

    public init(systemBus: DBusConnection, uid: UInt32? = nil, onSleep: @escaping @Sendable (SleepEvent) async -> Void) {
        connection = systemBus
        self.uid = uid ?? getuid()
        self.onSleep = onSleep
    }

    public func run(_ context: SourceContext) async {
        let follower = DaemonFollower(connection: connection, name: Self.busName, logger: context.logger)
        await follower.run(rereads: context.rereads, lost: { await context.report(.lost) }) { owner in
            let manager = RemoteObject(connection: connection, owner: owner, path: Self.managerPath, interface: Self.managerInterface)
            let sleeps = try await connection.subscribe(
                MatchRule(sender: owner, interface: Self.managerInterface, member: "PrepareForSleep", path: Self.managerPath))
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask { try await followSleep(manager: manager, signals: sleeps, logger: context.logger) }
                group.addTask {
                    // The session half failing must not release the sleep inhibitor: its
                    // facts become unknown, and the next re-read or a logind restart retries.
                    do {
                        try await followSession(manager: manager, owner: owner, context: context)
                    } catch is CancellationError {
                        throw CancellationError()
                    } catch {
                        context.logger.warning("Cannot follow the user's logind session", metadata: ["error": "\(error)"])
                        await context.report(.lost)
                        await waitUntilCancelled()
                    }
                }
                try await group.next()
                group.cancelAll()
            }
        }
    }

    // MARK: Sleep

    private func takeInhibitor(_ manager: RemoteObject, logger: Logger) async -> UnixFD? {
        do {
            let reply = try await manager.call(
                "Inhibit", [.string("sleep"), .string("bgpolicy"), .string("Expire running background slices before sleep"), .string("delay")])
            return try reply.decode(UnixFD.self, at: 0)
        } catch {
            logger.warning("Could not take a sleep delay inhibitor", metadata: ["error": "\(error)"])
            return nil
        }
    }

    private func followSleep(manager: RemoteObject, signals: SignalSubscription, logger: Logger) async throws {
        // The descriptor is the inhibitor: closing it (dropping the last reference) releases it.
        var inhibitor = await takeInhibitor(manager, logger: logger)
        defer { _ = inhibitor }
        for try await signal in signals {
            guard case .boolean(let start)? = signal.body.first, signal.body.count == 1 else {
                logger.warning("logind sent PrepareForSleep with unexpected arguments", metadata: ["signature": "\(signal.signature)"])
                continue
            }
            if start {
                logger.info("Preparing for sleep")
                await onSleep(.preparing)
                inhibitor = nil
            } else {
                logger.info("Resumed from sleep")
                if inhibitor == nil { inhibitor = await takeInhibitor(manager, logger: logger) }
                await onSleep(.resumed)
            }
        }
    }

    // MARK: Session

    private func followSession(manager: RemoteObject, owner: String, context: SourceContext) async throws {
        guard let sessionPath = try await findSession(manager: manager, owner: owner, logger: context.logger) else {
            context.logger.warning("No logind session for this user; idle and lock state stay unknown", metadata: ["uid": "\(uid)"])
            await context.report(.lost)
            // Keep the sleep half running; a session appearing later is seen on the next re-read.
            await waitUntilCancelled()
            return
        }
        let session = RemoteObject(connection: connection, owner: owner, path: sessionPath, interface: Self.sessionInterface)
        let changes = try await session.propertiesChanged()
        let locks = try await connection.subscribe(MatchRule(sender: owner, interface: Self.sessionInterface, member: "Lock", path: sessionPath))
        let unlocks = try await connection.subscribe(MatchRule(sender: owner, interface: Self.sessionInterface, member: "Unlock", path: sessionPath))

        var sample = SessionSample(locked: false, idleHint: false)
        var reported: SessionSample?
        func publish() async {
            if sample != reported {
                reported = sample
                await context.report(.session(sample))
            }
        }
        func read() async throws {
            let properties = try await session.getAll()
            sample.locked = properties.property("LockedHint", as: Bool.self, logger: context.logger, from: Self.busName) ?? false
            sample.idleHint = properties.property("IdleHint", as: Bool.self, logger: context.logger, from: Self.busName) ?? false
            await publish()
        }
        try await read()
        enum Event: Sendable { case changed, lock, unlock }
        let (events, feed) = AsyncStream.makeStream(of: Event.self)
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { for try await _ in changes { feed.yield(.changed) } }
            group.addTask { for try await _ in locks { feed.yield(.lock) } }
            group.addTask { for try await _ in unlocks { feed.yield(.unlock) } }
            for await event in events {
                switch event {
                case .changed: try await read()
                // Lock and Unlock ask the session's locker to act; LockedHint confirms it later.
                case .lock:
                    sample.locked = true
                    await publish()
                case .unlock:
                    sample.locked = false
                    await publish()
                }
            }
            group.cancelAll()
        }
    }

    /// The user's graphical session: `User.Display`, else an active graphical session of the
    /// user's, else any active one, else the first.
    private func findSession(manager: RemoteObject, owner: String, logger: Logger) async throws -> ObjectPath? {
        let userPath: ObjectPath
        do {
            userPath = try (try await manager.call("GetUser", [.uint32(uid)])).decode(ObjectPath.self, at: 0)
        } catch DBusError.remote(let name, _) where name.hasSuffix("NoSuchUser") {
            return nil
        }
        let user = RemoteObject(connection: connection, owner: owner, path: userPath, interface: Self.userInterface)
        let properties = try await user.getAll()
        if case .structure(let fields)? = properties["Display"]?.value, fields.count == 2,
            case .objectPath(let path) = fields[1], path != .root
        {
            return path
        }
        var candidates: [(path: ObjectPath, active: Bool, graphical: Bool)] = []
        if case .array(_, let sessions)? = properties["Sessions"]?.value {
            for case .structure(let fields) in sessions where fields.count == 2 {
                guard case .objectPath(let path) = fields[1] else { continue }
                let session = RemoteObject(connection: connection, owner: owner, path: path, interface: Self.sessionInterface)
                guard let p = try? await session.getAll() else { continue }
                let active = p.property("Active", as: Bool.self, logger: logger, from: Self.busName) ?? false
                let type = p.property("Type", as: String.self, logger: logger, from: Self.busName) ?? ""
                candidates.append((path, active, ["x11", "wayland", "mir"].contains(type)))
            }
        }
        return (candidates.first { $0.active && $0.graphical } ?? candidates.first { $0.active } ?? candidates.first)?.path
    }
}
