public import BGPolicyCore
public import BGPolicyDBus
import Glibc
public import Logging
import Synchronization

/// The user's graphical session and the machine's sleep, from systemd-logind (system bus).
///
/// - The session: `GetUser(uid)` → `Display`; when that names no session (`/`), the user's
///   `Sessions`, preferring an active graphical one. Its `LockedHint` and `IdleHint` are
///   followed through `PropertiesChanged`; `IdleHint` only for a graphical session
///   (`idleHintFromTerminal`). `IdleHint` is not kept current by GNOME or KDE; the
///   core also counts a locked session as idle, and no input by GNOME's idle monitor
///   (`IdleMonitorSource`; Docs/Conditions.md).
/// - Locked is `LockedHint`, and nothing else. logind's `Lock` and `Unlock` signals are
///   requests to the session's screen locker (`loginctl lock-session`, logind's own locking),
///   not its state: GNOME's and KDE's lockers act on them and set `LockedHint`, which is
///   followed; a locker that does not set it (xss-lock with i3lock) says nothing when the user
///   unlocks, so a `Lock` taken as "locked" stayed so while the user worked, and a locked
///   session counts as idle, which let processing work run. Such a locker's screen is not seen
///   as locked; idle is then logind's `IdleHint` (and the idle monitor) alone.
/// - Sleep: a `sleep` delay inhibitor is held while awake. On `PrepareForSleep(true)` the
///   agent is told (it expires running slices), then the inhibitor is released so the machine
///   may sleep; on `PrepareForSleep(false)` it is taken again and the agent is told to read
///   everything anew. A sleep announced and never followed by its resume (logind left the bus
///   in between: it crashed, or was restarted during the suspend) is taken as resumed when
///   logind goes, or comes back not `PreparingForSleep`: the agent runs, so the machine is
///   awake, and it held all work until its own restart.
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

    /// Whether the last event told was `.preparing` (a sleep announced, its resume not yet),
    /// across the follower's sessions.
    let sleepAnnounced = SharedFlag()

    public init(systemBus: DBusConnection, uid: UInt32? = nil, onSleep: @escaping @Sendable (SleepEvent) async -> Void) {
        connection = systemBus
        self.uid = uid ?? getuid()
        self.onSleep = onSleep
    }

    private func tell(_ event: SleepEvent) async {
        sleepAnnounced.value = event == .preparing
        await onSleep(event)
    }

    /// Tells the agent the machine resumed, with a warning, if the last word was a sleep: for
    /// when nobody is left to announce its end (`why`: what went). Running, the machine is awake.
    public func resumeUnannouncedSleep(_ logger: Logger, why: String) async {
        guard sleepAnnounced.value else { return }
        logger.warning("\(why) while the machine was preparing for sleep, before logind said the machine resumed; taken as resumed")
        await tell(.resumed)
    }

    public func run(_ context: SourceContext) async {
        let follower = DaemonFollower(connection: connection, name: Self.busName, logger: context.logger, sleep: context.sleep)
        let lost: @Sendable () async -> Void = {
            await context.report(.lost)
            await resumeUnannouncedSleep(context.logger, why: "logind left the bus (or stopped answering)")
        }
        await follower.run(rereads: context.rereads, lost: lost) { owner, succeeded in
            let manager = RemoteObject(connection: connection, owner: owner, path: Self.managerPath, interface: Self.managerInterface)
            let sleeps = try await connection.subscribe(
                MatchRule(sender: owner, interface: Self.managerInterface, member: "PrepareForSleep", path: Self.managerPath))
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask { try await followSleep(manager: manager, signals: sleeps, logger: context.logger) }
                // The session half failing must not release the sleep inhibitor: it reports its
                // facts unknown and tries again when the user's sessions change.
                group.addTask { try await followSessions(manager: manager, owner: owner, context: context, succeeded: succeeded) }
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
        // A sleep announced by a logind before this one: this one says whether it still holds.
        if sleepAnnounced.value, (try? await manager.get("PreparingForSleep")) != .boolean(true) {
            await resumeUnannouncedSleep(logger, why: "logind came back not preparing for sleep")
        }
        // The descriptor is the inhibitor: closing it (dropping the last reference) releases it.
        var inhibitor = sleepAnnounced.value ? nil : await takeInhibitor(manager, logger: logger)
        defer { _ = inhibitor }
        for try await signal in signals {
            guard case .boolean(let start)? = signal.body.first, signal.body.count == 1 else {
                logger.warning("logind sent PrepareForSleep with unexpected arguments", metadata: ["signature": "\(signal.signature)"])
                continue
            }
            if start {
                logger.info("Preparing for sleep")
                await tell(.preparing)
                inhibitor = nil
            } else {
                logger.info("Resumed from sleep")
                if inhibitor == nil { inhibitor = await takeInhibitor(manager, logger: logger) }
                await tell(.resumed)
            }
        }
    }

    // MARK: Session

    /// Follows the user's session (`findSession`), choosing again whenever logind announces a
    /// session's arrival or end (`SessionNew`, `SessionRemoved`): the agent may start before
    /// any session (lingering, at boot), the user may log in on a console first and then
    /// graphically, or log out and back in while the user manager stays.
    private func followSessions(
        manager: RemoteObject, owner: String, context: SourceContext, succeeded: @escaping @Sendable () -> Void
    ) async throws {
        let rule = { (member: String) in
            MatchRule(sender: owner, interface: Self.managerInterface, member: member, path: Self.managerPath)
        }
        let arrivals = try await connection.subscribe(rule("SessionNew"))
        let removals = try await connection.subscribe(rule("SessionRemoved"))
        // All that can fail this session is set up (the user's session has its own retries).
        succeeded()
        let (changes, poke) = AsyncStream.makeStream(of: Void.self, bufferingPolicy: .bufferingNewest(1))
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { for try await _ in arrivals { poke.yield() } }
            group.addTask { for try await _ in removals { poke.yield() } }
            group.addTask {
                var followed: ObjectPath?
                var following: Task<Void, Never>?
                let ended = SharedFlag()
                // A lookup or a follow that failed (logind busy at login, a call timed out) is
                // tried again after a wait, as well as when sessions change: otherwise lock
                // and idle stayed unknown until the next login.
                let retry = SessionRetry(sleep: context.sleep) { _ = poke.yield() }
                defer {
                    following?.cancel()
                    retry.cancel()
                }
                var chose = false
                var next = changes.makeAsyncIterator()
                repeat {
                    let path: ObjectPath?
                    do {
                        path = try await findSession(manager: manager, owner: owner, logger: context.logger)
                    } catch is CancellationError {
                        return
                    } catch {
                        context.logger.warning(
                            "Cannot find the user's logind session; trying again \(retry.failed())",
                            metadata: ["error": "\(error)"])
                        following?.cancel()
                        following = nil
                        chose = false
                        await context.report(.lost)
                        continue
                    }
                    guard !chose || path != followed || ended.value else { continue }
                    following?.cancel()
                    await following?.value
                    followed = path
                    chose = true
                    ended.value = false
                    guard let path else {
                        following = nil
                        retry.succeeded()
                        context.logger.warning(
                            "No logind session for this user; idle and lock state are unknown until one starts", metadata: ["uid": "\(uid)"])
                        await context.report(.lost)
                        continue
                    }
                    context.logger.info("Following the user's logind session", metadata: ["session": "\(path)"])
                    following = Task {
                        do {
                            try await followSession(at: path, owner: owner, context: context) { retry.succeeded() }
                        } catch is CancellationError {
                        } catch {
                            if Task.isCancelled { return }
                            ended.value = true
                            context.logger.warning(
                                "Cannot follow the user's logind session; trying again \(retry.failed())",
                                metadata: ["session": "\(path)", "error": "\(error)"])
                            await context.report(.lost)
                        }
                    }
                } while await next.next() != nil
            }
            try await group.next()
            group.cancelAll()
        }
    }

    /// Session types whose `IdleHint` logind works out from the terminal's last access (5 min
    /// without it reads as idle) rather than taking it from the session: a compositor started
    /// from a console login (sway, Hyprland) reads input from evdev and never touches the
    /// terminal, so the hint turned true five minutes after login while the user worked, and
    /// processing ran under them. Only graphical sessions (`x11`, `wayland`, `mir`) carry a hint
    /// set by the desktop.
    static let idleHintFromTerminal: Set<String> = ["tty", "unspecified", "web"]

    /// Follows the session's `LockedHint` and `IdleHint`; `onRead` runs after the first read.
    private func followSession(
        at sessionPath: ObjectPath, owner: String, context: SourceContext, onRead: @Sendable () -> Void
    ) async throws {
        let session = RemoteObject(connection: connection, owner: owner, path: sessionPath, interface: Self.sessionInterface)
        let changes = try await session.propertiesChanged()

        var sample = SessionSample(locked: false, idleHint: false)
        var reported: SessionSample?
        var saidConsole = false
        func publish() async {
            if sample != reported {
                reported = sample
                await context.report(.session(sample))
            }
        }
        func read() async throws {
            let properties = try await session.getAll()
            sample.locked = properties.property("LockedHint", as: Bool.self, logger: context.logger, from: Self.busName) ?? false
            let idleHint = properties.property("IdleHint", as: Bool.self, logger: context.logger, from: Self.busName) ?? false
            let type = properties.property("Type", as: String.self, logger: context.logger, from: Self.busName)
            if let type, Self.idleHintFromTerminal.contains(type) {
                sample.idleHint = false
                if !saidConsole {
                    saidConsole = true
                    context.logger.info(
                        "Not using logind's IdleHint: for a session of this type logind works it out from the terminal's last use, which a compositor started from the console never touches",
                        metadata: ["session": "\(sessionPath)", "type": "\(type)"])
                }
            } else {
                sample.idleHint = idleHint
            }
            await publish()
        }
        try await read()
        onRead()
        // Lock and Unlock are not followed: they ask the locker to act, and LockedHint says
        // whether it did (see the type's comment).
        for try await _ in changes { try await read() }
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

/// A flag that tasks share: whether the session being followed has stopped with an error (set
/// by its task, read by the loop that chooses the session); whether a sleep was announced and
/// its resume not yet (`sleepAnnounced`).
final class SharedFlag: Sendable {
    private let flag = Mutex(false)
    var value: Bool {
        get { flag.withLock { $0 } }
        set { flag.withLock { $0 = newValue } }
    }
}

/// When to look for the user's logind session again after a lookup or a follow failed: 1 s,
/// doubling up to 5 min, `DaemonFollower.retries` times in a row at most (then only when
/// sessions change, logind restarts, or the system bus comes back); a success starts over. The
/// wait is a timer only while something failed.
final class SessionRetry: Sendable {
    private let sleep: Sleep
    private let poke: @Sendable () -> Void
    private let state = Mutex<(failures: Int, pending: Task<Void, Never>?)>((0, nil))

    init(sleep: @escaping Sleep, poke: @escaping @Sendable () -> Void) {
        self.sleep = sleep
        self.poke = poke
    }

    /// One more failure: pokes after the wait, unless too many came in a row. Returns the
    /// words for the log ("in 4 s, or when sessions change").
    func failed() -> String {
        state.withLock { s in
            s.pending?.cancel()
            s.failures += 1
            guard s.failures <= DaemonFollower.retries else {
                s.pending = nil
                return "when sessions change (it failed \(s.failures) times in a row)"
            }
            let wait = DaemonFollower.retryWait(after: s.failures)
            let sleep = sleep, poke = poke
            s.pending = Task {
                do { try await sleep(wait) } catch { return }
                poke()
            }
            return "in \(wait.components.seconds) s, or when sessions change"
        }
    }

    func succeeded() {
        state.withLock { s in
            s.pending?.cancel()
            s.pending = nil
            s.failures = 0
        }
    }

    func cancel() {
        state.withLock { $0.pending?.cancel() }
    }
}
