import BGPolicyCore
public import BGPolicyDBus
import BGPolicyStore
import BGPolicySystem
public import Logging
public import ServiceLifecycle
import UnixSignals

/// The agent on the session bus: owns `org.bgpolicy.Agent1`, exports its interfaces, and
/// serves calls until graceful shutdown, the loss of its name, or the loss of the bus.
public struct AgentService: Service {
    let environment: AgentEnvironment
    let bus: DBusConnection.Bus
    let logger: Logger

    public init(environment: AgentEnvironment, bus: DBusConnection.Bus = .session, logger: Logger) {
        self.environment = environment
        self.bus = bus
        self.logger = logger
    }

    /// The error names the object server uses for routing failures: all in our domain.
    static let errorNames = ObjectServer.ErrorNames(domain: BGPolicyNames.errorPrefix)

    /// The most a call's arguments may take in the wire format; a call over it is answered
    /// LimitsExceeded without being read. The largest call the agent serves is a Register of 64
    /// identifiers of 255 bytes with its options (about 17 KiB); NotifyContentAvailable's
    /// payload is at most 4096 bytes, and every other argument is a name or a number. 64 KiB
    /// leaves room over that, and a call read only to be refused costs at most some 1.5 MiB
    /// (an `ay` takes about 24 bytes a byte once read), not the library's 24 MiB for 1 MiB.
    static let maximumCallBodyBytes = 64 << 10

    /// The most one reply may take in the wire format. A bus disconnects the sender of a
    /// message over its `max_message_size`, and the agent would lose its name and stop:
    /// dbus-daemon's own default is 32 MiB, in force on a bus whose configuration sets none
    /// (the stock session.conf raises it to the specification's 128 MiB). A reply over it gets
    /// LimitsExceeded, saying how large it was and what to ask instead
    /// (`AdminInterface.oversizedReplyAdvice`). Only lists of many apps reach it: ListApps of
    /// some 2,000 apps that each registered 64 identifiers of 255 bytes, ListPending of tens of
    /// thousands of requests, GetTimeline of tens of thousands of apps.
    static let maximumReplyBytes = 32 << 20

    public func run() async throws {
        let connection: DBusConnection
        do {
            connection = try await DBusConnection.connect(to: bus, logger: logger)
        } catch let error as DBusError {
            throw AgentError.noSessionBus(error.message)
        }
        // Closed only once what the agent sent last (ExpireTask to the apps of slices it ends
        // on the way out) is written to the bus: the process exits right after.
        do {
            try await run(on: connection)
        } catch {
            await connection.closeAndWait()
            throw error
        }
        await connection.closeAndWait()
    }

    private func run(on connection: DBusConnection) async throws {
        // Trapped first: from here SIGHUP reloads the configuration (its default action would
        // end the process), whenever it comes.
        let hangups = await UnixSignalsSequence(trapping: .sighup)
        connection.objects.errorNames = Self.errorNames
        // No method of the agent takes a descriptor (Submit's options may name one in a variant).
        connection.objects.limits.acceptsFileDescriptors = false
        connection.objects.limits.maximumCallBodyBytes = Self.maximumCallBodyBytes
        connection.objects.limits.maximumReplyBytes = Self.maximumReplyBytes
        // Before the store is read: a second agent on this directory must not touch it.
        let lock = try StateLock(directory: environment.stateDirectory)
        defer { withExtendedLifetime(lock) {} }
        let store: TaskStore
        do {
            store = try TaskStore(path: environment.databasePath)
        } catch {
            if case .newerVersion = error {
                throw AgentError.storeFromNewerVersion(path: environment.databasePath, reason: "\(error)")
            }
            throw AgentError.store(path: environment.databasePath, reason: "\(error)")
        }
        if store.openedExclusively {
            logger.error(
                "The disk is full: the database was opened without its shared-memory file, so only the agent can read it until it next starts; writes fail until there is room",
                metadata: ["db.path": "\(environment.databasePath)"])
        }
        // What a start-up recovery did, in words: logged at critical now, and kept in the
        // history once the engine runs, where `bgpolicy history` shows it.
        var recovery: String?
        if let moved = store.recoveredFromCorruption {
            var metadata: Logger.Metadata = ["db.path": "\(environment.databasePath)", "db.moved_to": "\(moved)"]
            let words: String
            if let salvaged = store.salvaged {
                metadata["db.kept"] = "\(salvaged.kept.joined(separator: ","))"
                metadata["db.lost"] = "\(salvaged.lost.joined(separator: ","))"
                let lost = salvaged.lost.joined(separator: ", ")
                words = salvaged.lost.isEmpty
                    ? "The database was corrupt: moved aside, and all its tables were read back into a fresh one"
                    : "The database was corrupt: moved aside; its readable tables were read back into a fresh one, and these are lost: \(lost)"
            } else {
                words = "The database was corrupt (or not a bgpolicy database): moved aside and started afresh; registrations, pending requests and history are lost"
            }
            logger.critical("\(words)", metadata: metadata)
            recovery = "\(words). The old file is kept as \(moved)"
            if !store.removedDamagedCopies.isEmpty {
                logger.warning(
                    "Removed older damaged databases moved aside before; the newest \(TaskStore.keptDamagedCopies) are kept",
                    metadata: ["db.removed": "\(store.removedDamagedCopies.joined(separator: ","))"])
            }
        }
        let engine = TaskEngine(
            store: store, policy: WindowPlanner(), configuration: environment.configuration,
            connection: connection, inspector: .fromEnvironment(), logger: logger)
        do {
            try await engine.load()
        } catch {
            throw AgentError.store(path: environment.databasePath, reason: "\(error)")
        }
        if let recovery {
            await engine.appendHistory(HistoryEntry(time: TaskEngine.wallNow(), appID: nil, event: .databaseRecovered, detail: recovery))
        }
        // A process left stopped, or a unit left frozen or throttled, by an agent that crashed.
        await engine.undoLeftEnforcement()
        await engine.publishStatus(nextWindow: nil)
        // Connections that leave: their unverified ids are freed and their slices closed. Every
        // connection of the session that leaves is one signal: a big buffer, so that a burst
        // while the engine is busy loses none (a drop leaves an app's slice running to its
        // deadline, and is logged). About 0.5 kB each: 32 MB at the very worst, only if the
        // engine falls 65,536 disconnects behind.
        let vanished = try await connection.subscribe(
            MatchRule(sender: "org.freedesktop.DBus", interface: "org.freedesktop.DBus", member: "NameOwnerChanged",
                      arguments: [2: ""]),
            buffer: 65_536)

        let hub = ConditionsHub(
            logger: logger, udevPolling: UdevBatteryPolling(interval: environment.configuration.battery.udevReadInterval))
        let liveConfiguration = LiveConfiguration(environment)
        // SIGHUP's and Admin1.Reload's, run one at a time by the reloader's task below.
        let reloads = ReloadRequests()
        let admin = AdminInterface(
            environment: environment, configuration: liveConfiguration, reloads: reloads, conditions: hub, engine: engine)
        let scheduler = SchedulerInterface(engine: engine, connection: connection)
        let objectPath = try ObjectPath(BGPolicyNames.objectPath)
        try connection.objects.export([admin.exported(), scheduler.exported()], at: objectPath)
        let log = logger
        // Work starts once the battery and power profile are known (or after a few seconds
        // without them); see `TaskEngine.conditionsSettled`. The same after each resume, for
        // that resume's `generation`.
        @Sendable func settleWhenKnown(generation: Int) async -> Task<Void, any Error> {
            await hub.onSettled { Task { await engine.conditionsSettle(generation: generation) } }
            return Task {
                try await AgentExecutor.sleep(for: TaskEngine.settleTimeout)
                await engine.conditionsSettle(timedOut: true, generation: generation)
            }
        }
        let settleFallback = await settleWhenKnown(generation: 0)
        defer { settleFallback.cancel() }
        await hub.onChange { conditions in
            engine.noteConditions(conditions)
            do {
                try connection.emitPropertiesChanged(
                    path: objectPath, interface: BGPolicyNames.adminInterface,
                    changed: ["Conditions": conditions.dbusDictionary.dbusValue])
            } catch {
                log.warning("Could not emit PropertiesChanged for Conditions", metadata: ["error": "\(error)"])
            }
        }
        // "No input for [idle] no_input_after", from GNOME's idle monitor on this same bus.
        let idleInterval = LiveSetting(environment.configuration.idle.noInputAfter)
        let idleRereads = Rereads()
        let idleMonitor = IdleMonitorSource(sessionBus: connection, noInputAfter: idleInterval)
        let reloader = ConfigurationReloader(
            live: liveConfiguration, engine: engine, idleInterval: idleInterval, idleRereads: idleRereads,
            udevPolling: hub.udevPolling, logger: logger)
        let conditions = ConditionsService(hub: hub, logger: logger, sessionSources: [(idleMonitor, idleRereads)]) { event in
            // Awaited before the sleep inhibitor is released: slices are expired first.
            await engine.sleepEvent(event)
            guard event == .resumed else { return }
            // Work waits for the battery and power profile read anew (the sources are asked
            // once this returns), or a few seconds without them, as at start.
            let generation = await engine.settleGeneration
            await hub.resettle()
            _ = await settleWhenKnown(generation: generation)
        }
        // Apps opening and closing, from the systemd user manager on this same bus.
        let appUnits = AppUnitSource(sessionBus: connection) { try await AgentExecutor.sleep(for: $0) }

        // Subscribe before asking for the name, so a NameLost cannot slip past.
        let nameLost = try await connection.nameLostSignals()
        switch try await connection.requestName(BGPolicyNames.busName, flags: [.doNotQueue]) {
        case .primaryOwner, .alreadyOwner:
            break
        case .exists, .inQueue:
            let owner = try await connection.nameOwner(of: BGPolicyNames.busName) ?? "another connection"
            let pid = try? await connection.credentials(of: owner).pid
            throw AgentError.nameTaken(name: BGPolicyNames.busName, owner: owner, pid: pid)
        }
        logger.info(
            "Agent ready",
            metadata: [
                "bus.name": "\(BGPolicyNames.busName)", "bus.unique": "\(connection.uniqueName)",
                "state.dir": "\(environment.stateDirectory)", "config": "\(environment.configSource ?? "defaults")",
            ])

        // However the agent ends, the slices under way end (and what the CPU monitor did is
        // undone: `TaskEngine.stop`), and the refresh planner's state is stored on the way out:
        // the next start takes it back (`TaskEngine.restorePlannerState`).
        do {
            try await cancelWhenGracefulShutdown {
                try await withThrowingTaskGroup(of: Void.self) { group in
                    group.addTask {
                        await connection.objects.serve()
                        // serve() ends before cancellation only when the connection is gone.
                        guard Task.isCancelled else { throw AgentError.busLost }
                    }
                    // The conditions never end the agent: their sources outlive every daemon.
                    group.addTask { await conditions.run() }
                    // Like the conditions, never ends the agent: a missing manager means no events.
                    group.addTask {
                        await appUnits.run(logger: log) { running in
                            await engine.appUnitsRunning(running)
                        } report: { event in
                            await engine.appUnitChanged(event)
                        }
                    }
                    // SIGHUP and Admin1.Reload (systemctl --user reload bgpolicyd, through
                    // bgpolicy reload): the configuration is read again, one reload at a time.
                    group.addTask {
                        for await _ in hangups {
                            log.info("SIGHUP: reading the configuration again")
                            reloads.hangup()
                        }
                    }
                    group.addTask { await reloader.run(reloads) }
                    // The wall clock being set (a step by NTP or by hand): the engine plans again.
                    group.addTask {
                        await WallClockWatch.run(logger: log) { await engine.wallClockSet() }
                    }
                    group.addTask {
                        await connection.waitUntilDisconnected()
                        guard Task.isCancelled else { throw AgentError.busLost }
                    }
                    group.addTask {
                        for try await signal in vanished {
                            if case .string(let name)? = signal.body.first, name.hasPrefix(":") {
                                await engine.connectionVanished(name)
                            }
                        }
                    }
                    // Damage found after the check at start-up: only a new start can move the
                    // file aside and salvage it, so the agent ends, and systemd starts it again.
                    let path = environment.databasePath
                    group.addTask {
                        for await error in store.corruptionFound {
                            log.critical(
                                "The database was found damaged while the agent ran; stopping so that the next start recovers it",
                                metadata: ["db.path": "\(path)", "error": "\(error)"])
                            throw AgentError.storeCorrupt(path: path, reason: "\(error)")
                        }
                        // Without damage, the loop ends only when the group is cancelled.
                    }
                    // The file removed (and written again) or replaced under the running agent.
                    group.addTask {
                        for await event in store.fileEvents {
                            switch event {
                            case .restored(let path):
                                log.error(
                                    """
                                    The database was removed while the agent ran; it was written again from what the agent \
                                    holds, and nothing was lost. To start afresh, stop the agent first \
                                    (systemctl --user stop bgpolicyd), then remove the file
                                    """,
                                    metadata: ["db.path": "\(path)"])
                            case .logRestored(let path):
                                log.error(
                                    """
                                    The database's log (its -wal file) was removed while the agent ran; the database was \
                                    written again from what the agent holds, and nothing was lost. To start afresh, stop \
                                    the agent first (systemctl --user stop bgpolicyd), then remove the files
                                    """,
                                    metadata: ["db.path": "\(path)"])
                            case .replaced(let path):
                                log.warning(
                                    """
                                    Another file took the database's path while the agent ran; the agent goes on with the \
                                    file it opened, and its next start reads the new one
                                    """,
                                    metadata: ["db.path": "\(path)"])
                            case .restoreFailed(let path, let reason):
                                log.error(
                                    """
                                    The database (or its -wal log) was removed while the agent ran, and could not be written again; the agent \
                                    goes on with what it holds and tries again a minute after its next write, and at its stop
                                    """,
                                    metadata: ["db.path": "\(path)", "error": "\(reason)"])
                            }
                        }
                    }
                    group.addTask {
                        for try await signal in nameLost {
                            if case .string(BGPolicyNames.busName)? = signal.body.first {
                                throw AgentError.nameLost(name: BGPolicyNames.busName)
                            }
                        }
                    }
                    // The first task to end ends the agent; on graceful shutdown all end together.
                    defer { group.cancelAll() }
                    do {
                        // Conditions, app units, reloads and the clock watch return only when cancelled, so the first task to end is
                        // serve(), the session bus, or NameLost.
                        try await group.next()
                    } catch DBusError.disconnected {
                        throw AgentError.busLost
                    }
                }
            }
        } catch {
            await engine.stop()
            await engine.savePlannerState(advancing: true)
            checkpoint(store)
            throw error
        }
        await engine.stop()
        await engine.savePlannerState(advancing: true)
        checkpoint(store)
        logger.info("Agent stopped")
    }

    /// The WAL folded into the database file on the way out, so that the file alone holds
    /// everything (a copy of it, or a `-wal` lost beside it, loses nothing). Logged on failure
    /// only: the WAL still holds it all, and SQLite replays it at the next open.
    private func checkpoint(_ store: TaskStore) {
        do {
            try store.checkpoint()
        } catch {
            logger.warning("Could not fold the WAL into the database at stop", metadata: ["error": "\(error)"])
        }
    }
}
