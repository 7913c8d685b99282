public import BGPolicyCore
public import BGPolicyDBus
import Logging

/// Whether the user has given no input for `[idle] no_input_after`, from GNOME's idle monitor:
/// mutter's `org.gnome.Mutter.IdleMonitor` at `/org/gnome/Mutter/IdleMonitor/Core` on the
/// session bus. GNOME does not keep logind's `IdleHint` current, so this is how the agent
/// learns that a GNOME user is away (Docs/Conditions.md).
///
/// Nothing polls. An idle watch of `no_input_after` fires when input has been absent that
/// long; then a user-active watch fires on the next input (mutter removes a user-active watch
/// once it has fired, and keeps an idle watch for every later idle period). `GetIdletime` is
/// asked once per owner, and on each re-read, for the state at the start. Watches belong to
/// the connection that added them and vanish with mutter, so the name's owner is followed and
/// a new owner gets new watches. Without mutter (another desktop, a console) this input is not
/// live and idle rests on logind alone.
public struct IdleMonitorSource: ConditionSource {
    public static let busName = "org.gnome.Mutter.IdleMonitor"
    static let path = try! ObjectPath("/org/gnome/Mutter/IdleMonitor/Core")
    static let interface = "org.gnome.Mutter.IdleMonitor"

    static let sessionManagerName = "org.gnome.SessionManager"
    static let sessionManagerPath = try! ObjectPath("/org/gnome/SessionManager")
    /// gnome-session's `InhibitedActions` flag for idle (`GSM_INHIBITOR_FLAG_IDLE`).
    static let idleInhibitedFlag: UInt32 = 8

    public let name = ConditionSourceName.mutter
    let connection: DBusConnection
    let setting: LiveSetting<Duration>

    /// - Parameter noInputAfter: `[idle] no_input_after`; the idle watch's interval.
    public init(sessionBus: DBusConnection, noInputAfter: Duration) {
        self.init(sessionBus: sessionBus, noInputAfter: LiveSetting(noInputAfter))
    }

    /// - Parameter noInputAfter: `[idle] no_input_after`, which a reload may change: each
    ///   session with mutter (a new owner, a re-read) adds its idle watch with the value then.
    public init(sessionBus: DBusConnection, noInputAfter: LiveSetting<Duration>) {
        connection = sessionBus
        setting = noInputAfter
    }

    var noInputAfter: Duration { setting.value }

    /// The idle watch's interval in milliseconds, as `AddIdleWatch` takes it (at least 1).
    var intervalMilliseconds: UInt64 {
        let (seconds, attoseconds) = noInputAfter.components
        guard seconds >= 0 else { return 1 }
        let (ms, overflow) = seconds.multipliedReportingOverflow(by: 1000)
        if overflow { return UInt64(Int64.max) }
        let (total, overflow2) = ms.addingReportingOverflow(attoseconds / 1_000_000_000_000_000)
        return overflow2 ? UInt64(Int64.max) : UInt64(max(1, total))
    }

    public func run(_ context: SourceContext) async {
        let follower = DaemonFollower(connection: connection, name: Self.busName, logger: context.logger, sleep: context.sleep)
        await follower.run(rereads: context.rereads, lost: { await context.report(.lost) }) { owner, succeeded in
            try await follow(owner: owner, context: context, succeeded: succeeded)
        }
    }

    private func follow(owner: String, context: SourceContext, succeeded: () -> Void) async throws {
        let logger = context.logger
        let monitor = RemoteObject(connection: connection, owner: owner, path: Self.path, interface: Self.interface)
        // Subscribed before any watch exists, so no WatchFired can be missed.
        let fired = try await connection.subscribe(
            MatchRule(sender: owner, interface: Self.interface, member: "WatchFired", path: Self.path))
        // The watches this session added and mutter still holds: removed when the session ends
        // (a re-read, or the owner changing), without waiting for a reply, so that this works
        // in a cancelled task and never leaves a watch firing for nobody.
        var armed: [UInt32] = []
        defer {
            for id in armed { removeWatch(id, owner: owner) }
        }
        let interval = intervalMilliseconds
        let idleWatch = try await monitor.call("AddIdleWatch", [.uint64(interval)]).decode(UInt32.self, at: 0)
        armed.append(idleWatch)
        logger.debug(
            "Idle watch added", metadata: ["bus.unique": "\(owner)", "watch.id": "\(idleWatch)", "interval.ms": "\(interval)"])
        var activeWatch: UInt32?
        func addUserActiveWatch() async throws {
            guard activeWatch == nil else { return }
            let id = try await monitor.call("AddUserActiveWatch").decode(UInt32.self, at: 0)
            activeWatch = id
            armed.append(id)
            logger.debug("User-active watch added", metadata: ["bus.unique": "\(owner)", "watch.id": "\(id)"])
        }

        // The state now: already idle for the interval means waiting for the next input.
        let idleTime = try await monitor.call("GetIdletime").decode(UInt64.self, at: 0)
        var noInput = idleTime >= interval
        // Mutter's idle watches do not fire while gnome-session holds an idle inhibitor (a
        // video playing, a presentation), but GetIdletime counts on: a film watched for the
        // interval without a key pressed is not the user away. Mutter fires the idle watch
        // when the inhibitor goes, if there was still no input.
        if noInput, await idleInhibited() {
            noInput = false
            logger.info(
                "No input for the interval, but gnome-session inhibits idle (a video, a presentation): not idle until the idle watch fires")
        }
        if noInput { try await addUserActiveWatch() }
        await context.report(.input(InputSample(noInput: noInput)))
        succeeded()

        for try await signal in fired {
            guard signal.body.count == 1, case .uint32(let id) = signal.body[0] else {
                logger.warning(
                    "The idle monitor sent WatchFired with unexpected arguments", metadata: ["signature": "\(signal.signature)"])
                continue
            }
            if id == idleWatch {
                try await addUserActiveWatch()
                if !noInput {
                    noInput = true
                    await context.report(.input(InputSample(noInput: true)))
                }
            } else if id == activeWatch {
                // Fired once and removed by mutter; the idle watch stays for the next period.
                activeWatch = nil
                armed.removeAll { $0 == id }
                if noInput {
                    noInput = false
                    await context.report(.input(InputSample(noInput: false)))
                }
            }
        }
    }

    /// Whether gnome-session holds an inhibitor of idle now (`InhibitedActions`). No
    /// gnome-session, no answer within 2 s, or an answer of another type: not inhibited.
    private func idleInhibited() async -> Bool {
        var message = Message.methodCall(
            destination: Self.sessionManagerName, path: Self.sessionManagerPath,
            interface: ObjectServer.propertiesInterface, member: "Get",
            body: [.string(Self.sessionManagerName), .string("InhibitedActions")])
        message.noAutoStart = true
        guard let reply = try? await connection.call(message, timeout: .seconds(2)),
            case .variant(let value)? = reply.body.first, let flags = try? value.decode(UInt32.self)
        else { return false }
        return flags & Self.idleInhibitedFlag != 0
    }

    /// `RemoveWatch(id)`, sent without waiting for the reply.
    private func removeWatch(_ id: UInt32, owner: String) {
        var message = Message.methodCall(
            destination: owner, path: Self.path, interface: Self.interface, member: "RemoveWatch", body: [.uint32(id)])
        message.noReplyExpected = true
        try? connection.send(message)
    }
}
