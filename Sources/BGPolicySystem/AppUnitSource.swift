import BGPolicyCore
public import BGPolicyDBus
public import Logging

/// Apps opening and closing, from the systemd user manager (`org.freedesktop.systemd1` on the
/// session bus): desktop launchers (GNOME Shell, KDE Plasma, `systemd-run --user --scope`…)
/// start each app in its own `app-*.scope` or `app-*.service`, so the manager's `UnitNew` and
/// `UnitRemoved` signals say when the user opened an app and when it exited.
///
/// On connecting, the source also asks which app units are running (`ListUnitsByPatterns`):
/// apps opened or closed while the agent was not watching (it restarted, or stopped before the
/// apps at the end of the last session) are then known for what they are.
///
/// A reload of the manager (`systemctl --user daemon-reload`) sends a `UnitRemoved` and a
/// `UnitNew` for every unit, between `Reloading(true)` and `Reloading(false)`: those are held,
/// and at `Reloading(false)` the source asks again which app units run, and reports only the
/// units that appeared or went across the reload (`AppUnitTracker.reloadFinished`). A manager
/// that goes away during a reload takes the held signals with it: the next one is listed anew.
///
/// The manager sends those signals only to clients that called `Subscribe`. The name's owner
/// is followed (`DaemonFollower`): a manager missing at start is picked up when it appears,
/// and one that restarts is subscribed to again. Nothing polls; between signals this costs
/// nothing. No manager at all only means no events.
public struct AppUnitSource: Sendable {
    static let busName = SystemdUserManagerProxy.busName
    static let path = SystemdUserManagerProxy.path
    static let interface = SystemdUserManagerProxy.interface

    let connection: DBusConnection
    let sleep: Sleep

    /// `sleep`: how the source waits before subscribing again after a failure
    /// (`SourceContext.sleep`).
    public init(sessionBus: DBusConnection, sleep: @escaping Sleep = Sleeping.task) {
        connection = sessionBus
        self.sleep = sleep
    }

    /// Runs until the task is cancelled, calling `running` with the app units that run each
    /// time it connects to a manager (after subscribing, so that no change is lost between),
    /// and `report` for each app unit that appears or goes, in the order the manager sent them
    /// (across a reload, once it is done, for the units that really did).
    public func run(
        logger: Logger, running: @escaping @Sendable ([RunningAppUnit]) async -> Void,
        report: @escaping @Sendable (AppUnitEvent) async -> Void
    ) async {
        // No re-reads: there is no state to read again, only signals to follow. The
        // continuation is kept alive so that the follower does not see the stream end.
        let (rereads, keepAlive) = AsyncStream.makeStream(of: Void.self)
        let follower = DaemonFollower(connection: connection, name: Self.busName, logger: logger, sleep: sleep)
        await follower.run(rereads: rereads, lost: {}) { owner, succeeded in
            // One rule for the manager's signals, not one per member, so that a unit's
            // UnitNew and UnitRemoved cannot be reordered between two streams.
            let signals = try await connection.subscribe(MatchRule(sender: owner, interface: Self.interface, path: Self.path))
            await subscribe(owner: owner, logger: logger)
            var tracker = AppUnitTracker()
            if let units = await runningAppUnits(owner: owner, logger: logger) {
                await running(tracker.running(units: units))
            }
            succeeded()
            for try await signal in signals {
                if signal.member == "Reloading" {
                    for event in await reloading(signal, owner: owner, tracker: &tracker, logger: logger) {
                        await report(event)
                    }
                    continue
                }
                guard let member = signal.member, member == "UnitNew" || member == "UnitRemoved" else { continue }
                guard signal.body.count == 2, case .string(let unit) = signal.body[0] else {
                    logger.warning(
                        "The systemd user manager sent a unit signal with unexpected arguments",
                        metadata: ["member": "\(member)", "signature": "\(signal.signature)"])
                    continue
                }
                guard let event = tracker.event(member: member, unit: unit) else { continue }
                await report(event)
            }
        }
        keepAlive.finish()
        // The follower returns early only when the bus itself is gone, which the agent learns
        // elsewhere; this source never ends the agent.
        await waitUntilCancelled()
    }

    /// The manager's `Reloading` signal: at its start, unit signals are held by `tracker`; at its
    /// end, the running app units are listed again (the manager sends the signal once the
    /// reload's `UnitNew`s are out, and answers after it) and the changes across the reload
    /// returned. The next signals wait meanwhile, so that none is read before the list.
    private func reloading(
        _ signal: Message, owner: String, tracker: inout AppUnitTracker, logger: Logger
    ) async -> [AppUnitEvent] {
        guard signal.body.count == 1, case .boolean(let active) = signal.body[0] else {
            logger.warning(
                "The systemd user manager sent Reloading with unexpected arguments",
                metadata: ["signature": "\(signal.signature)"])
            return []
        }
        if active {
            logger.debug("The systemd user manager is reloading; app unit signals are held until it is done")
            tracker.reloadStarted()
            return []
        }
        let units = await runningAppUnits(owner: owner, logger: logger)
        let events = tracker.reloadFinished(running: units)
        logger.debug(
            "The systemd user manager reloaded; app units checked against those it runs",
            metadata: ["units.listed": "\(units != nil)", "units.changed": "\(events.count)"])
        return events
    }

    /// The names of the manager's running app units, or nil when it cannot say (a manager
    /// older than systemd 230, or one that failed): then, on connecting, nothing is reconciled,
    /// and the usage log's word stands; at the end of a reload, the held signals are taken at
    /// their word.
    private func runningAppUnits(owner: String, logger: Logger) async -> [String]? {
        let states: [DBusValue] = ["active", "activating", "reloading"].map { .string($0) }
        let patterns: [DBusValue] = AppIdentityParser.appUnitPatterns.map { .string($0) }
        do {
            let reply = try await connection.call(
                destination: owner, path: Self.path, interface: Self.interface, member: "ListUnitsByPatterns",
                [.array(element: .string, states), .array(element: .string, patterns)], timeout: .seconds(5))
            guard reply.count == 1, case .array(_, let units) = reply[0] else {
                throw DBusError.invalidValue("ListUnitsByPatterns returned \(reply.count) values, not an array of units")
            }
            return units.compactMap { unit in
                guard case .structure(let fields) = unit, case .string(let name)? = fields.first else { return nil }
                return name
            }
        } catch {
            logger.warning(
                "Could not list the running app units; only the manager's signals say which apps run",
                metadata: ["bus.unique": "\(owner)", "error": "\(error)"])
            return nil
        }
    }

    /// Asks the manager to send unit signals to this connection. A failure is logged and the
    /// signals still followed: some managers (and mocks) broadcast them unasked.
    private func subscribe(owner: String, logger: Logger) async {
        do {
            _ = try await connection.call(
                destination: owner, path: Self.path, interface: Self.interface, member: "Subscribe", [], timeout: .seconds(5))
            logger.debug("Following app units of the systemd user manager", metadata: ["bus.unique": "\(owner)"])
        } catch DBusError.remote(let name, _) where name == "org.freedesktop.systemd1.AlreadySubscribed" {
            // This connection subscribed earlier: the signals already come.
        } catch {
            logger.warning(
                "The systemd user manager refused Subscribe; app opens may be missed",
                metadata: ["bus.unique": "\(owner)", "error": "\(error)"])
        }
    }
}
