import BGPolicyCore
import BGPolicyDBus
import BGPolicyStore
import BGPolicySystem
import Logging

/// Registration: a connection binds to its app id and the task identifiers it may submit;
/// which caller may claim which id or bus name; and the app a registered caller is.
extension TaskEngine {
    struct RegisterOptions {
        var appID: String?
        var busName: String?
        var backgroundOnly = false
    }

    func register(caller: String, pid: UInt32?, identifiers: [String], options: RegisterOptions) async throws(SchedulerError) -> AppID {
        if identifiers.isEmpty {
            throw .invalid("Register needs at least one task identifier, such as \"org.example.App.refresh\"")
        }
        if identifiers.count > Self.maximumIdentifiers {
            throw .invalid("Register takes at most \(Self.maximumIdentifiers) task identifiers; got \(identifiers.count)")
        }
        for identifier in identifiers {
            if let problem = TaskIdentifier.problem(with: identifier) {
                throw .invalid("task identifier '\(SchedulerError.shown(identifier))': \(problem)")
            }
        }
        if let busName = options.busName, !busName.isEmpty,
           !(DBusNames.isValidBusName(busName) && !DBusNames.isUniqueName(busName)) {
            throw .invalid(
                "bus_name '\(SchedulerError.shown(busName))' is not a well-known D-Bus name such as org.example.App (or \"\" to register none)")
        }

        let identity = pid.map { inspector.identify(pid: $0) } ?? .unseen(pid: 0)
        let appID: AppID
        if let derived = identity.appID {
            if let claimed = options.appID, claimed != derived.rawValue {
                throw SchedulerError(
                    .accessDenied,
                    "this process is \(derived) (from its \(identity.source.rawValue)); it cannot register as '\(SchedulerError.shown(claimed))'. Leave out the app_id option")
            }
            appID = derived
        } else {
            // Only a process seen outside any sandbox names its own app: one the agent cannot
            // read may be a sandboxed app's (it forked and exited, and the bus reports the PID
            // that connected), and would take any id no verified app holds yet.
            guard identity.seen else {
                throw SchedulerError(
                    .accessDenied,
                    "the agent cannot see this process (PID \(identity.pid): its /proc entry is gone or hidden, or the bus gave none), so it cannot tell which app it is; register from the process that opened the connection")
            }
            guard let claimed = options.appID else {
                throw .invalid(
                    "the agent cannot tell which app this process is (it is not in a Flatpak, a snap or an app-*.scope/.service unit): pass your app id in the app_id option")
            }
            guard let id = AppID(rawValue: claimed) else {
                throw .invalid("app_id '\(SchedulerError.shown(claimed))': \(AppID.problem(with: claimed) ?? "invalid")")
            }
            // Checked again after every wait: while the bus answers, other calls run, and the
            // verified app may register, or another connection take the id.
            while let existing = apps[id] {
                if existing.record.identity.isVerified {
                    throw SchedulerError(
                        .accessDenied,
                        "\(id) belongs to an app the agent identified from its \(existing.record.identity.rawValue); an unidentified process cannot claim it")
                }
                guard let holder = existing.connections.keys.sorted().first(where: { $0 != caller }) else { break }
                // A connection that left before its Register finished is never seen leaving:
                // ask the bus rather than keep the id bound to nobody.
                guard (try? await connection.nameOwner(of: holder)) == nil else {
                    throw SchedulerError(
                        .accessDenied,
                        "\(id) is held by another live connection (\(holder)); an unverified app id binds to one connection at a time. Try again after it exits")
                }
                if boundApp[holder] != nil {
                    await connectionVanished(holder)
                } else {
                    apps[id]?.connections[holder] = nil
                }
            }
            appID = id
        }
        if let bound = boundApp[caller], bound != appID {
            throw SchedulerError(.accessDenied, "this connection is already registered as \(bound); use one connection per app")
        }
        if apps[appID] == nil, apps.count >= configuration.limits.apps {
            throw tooManyApps(appID)
        }

        if let busName = options.busName, !busName.isEmpty, !Self.mayUse(busName: busName, appID: appID, identity: identity.source) {
            throw SchedulerError(
                .accessDenied,
                "bus_name '\(SchedulerError.shown(busName))' is not \(appID)'s: it must be the app id or a name under it (\(appID).Service), as Flatpak lets an app own; the agent starts whatever owns it for this app's work")
        }

        let now = Self.wallNow()
        let previous = apps[appID]?.record
        // Left out: the one given before. "": none from now on. Not one an unverified caller
        // gave, when the verified app takes its id over: the agent would start whatever owns
        // the squatter's name for the app's work (and its content-available payloads).
        let inheritedBusName = previous?.identity.isVerified == false && identity.source.isVerified ? nil : previous?.busName
        let busName = options.busName.map { $0.isEmpty ? nil : $0 } ?? inheritedBusName
        // Sorted, as the store reads them back, so that a restart does not read as a change.
        var record = AppRecord(
            appID: appID, identifiers: Set(identifiers).sorted(), busName: busName,
            identity: identity.source, backgroundOnly: options.backgroundOnly,
            enabled: previous?.enabled ?? true, registeredAt: previous?.registeredAt ?? now,
            lastUsedAt: previous?.lastUsedAt)
        let meaning = RegistrationMeaning.of(
            launchedByAgent: isLaunching(appID), backgroundOnly: options.backgroundOnly,
            autostarted: identity.unit.map(sessionStartedUnits.contains(unit:)) ?? false,
            processStart: pid.flatMap(inspector.startTime(pid:)), agentStart: agentStartedAt)
        if meaning == .opened { record.lastUsedAt = now }
        // The list replaces the one given before: a request of an identifier left out goes with
        // it, in the same transaction, rather than being delivered for work the app withdrew.
        let kept = Set(record.identifiers)
        let withdrawnIdentifiers = (pending[appID] ?? [:]).keys.filter { !kept.contains($0) }.sorted()
        let withdrawn = withdrawnIdentifiers.map { identifier in
            HistoryEntry(
                time: now, appID: appID, identifier: identifier, event: .cancelled,
                detail: "cancelled: the app registered again without \(identifier)")
        }
        do {
            try store.saveApp(record, cancelling: withdrawn)
        } catch {
            throw storeFailed(error, "a registration")
        }
        noteHistoryWritten(count: withdrawn.count, at: now)
        for identifier in withdrawnIdentifiers { pending[appID]?[identifier] = nil }
        if !withdrawnIdentifiers.isEmpty { deleteAgainBehindQueuedWrites(withdrawnIdentifiers, of: appID) }
        var runtime = apps[appID] ?? AppRuntime(record: record)
        runtime.record = record
        // SPEC §1: an unverified id never holds an app the agent identified. Connections that
        // claimed it unverified before the app itself registered lose it now.
        let claimants = identity.source.isVerified
            ? runtime.connections.filter { $0.key != caller && !$0.value.source.isVerified }.keys.sorted() : []
        runtime.connections[caller] = identity
        runtime.latestConnection = caller
        runtime.lastDeliveryFailureAt = nil
        runtime.failedDeliveries = 0
        apps[appID] = runtime
        boundApp[caller] = appID
        for claimant in claimants {
            logger.warning(
                "A connection that had claimed an app id unverified lost it to the app itself",
                metadata: ["app.id": "\(appID)", "bus.unique": "\(claimant)", "identity": "\(identity.source.rawValue)"])
            await unbind(
                claimant, from: appID,
                slice: "the app registered from its \(identity.source.rawValue); the unverified connection running this slice lost the app id (ExpireTask sent)",
                backgroundTask: "the app registered from its \(identity.source.rawValue); the unverified connection that began this task lost the app id (ExpireTask sent)",
                stillConnected: true)
        }
        switch meaning {
        case .opened: noteRegistrationAsOpen(appID, at: now)
        case .alreadyRunning: noteRegistrationOfRunningApp(appID)
        case .notOpened: break
        }
        if previous == nil || previous?.identifiers != record.identifiers || previous?.identity != record.identity {
            appendHistory(HistoryEntry(
                time: now, appID: appID, event: .registered,
                detail: "registered \(Self.listed(record.identifiers)) as \(identity.source.rawValue)"))
        }
        logger.info(
            "App registered",
            metadata: ["app.id": "\(appID)", "bus.unique": "\(caller)", "identity": "\(identity.source.rawValue)",
                       "unit": "\(identity.unit ?? "-")", "usage": "\(meaning.description)"])
        // Work that went may have been what the timer was set for (`endSaving`).
        if withdrawn.isEmpty { requestEvaluation(for: appID) } else { requestEvaluation() }
        // A caller that left while this call waited on the bus (its credentials, a holder's
        // owner) had its NameOwnerChanged handled before it was bound, as nobody's: the app
        // would stay bound to a dead name, shown connected, with work sent there rather than
        // to its bus_name. Asked after the binding, so a leave from now on is seen by
        // `connectionVanished`. A failed question leaves the binding as it is.
        let callerGone: Bool
        do { callerGone = try await connection.nameOwner(of: caller) == nil } catch { callerGone = false }
        if callerGone, boundApp[caller] == appID {
            logger.info("The app's connection left before its Register was answered",
                        metadata: ["app.id": "\(appID)", "bus.unique": "\(caller)"])
            await connectionVanished(caller)
        }
        return appID
    }

    static let maximumIdentifiers = 64

    /// The withdrawal of a registration is written on the executor, at once, with the record:
    /// Register waits for nothing between its checks (identity, the holder of an unverified
    /// id, `[limits] apps`) and binding the caller. A Submit of the app's other connection (an
    /// app restarting) may be in memory with its write still queued on the store writer; that
    /// write landed after the withdrawal and stored a request memory had dropped, whose history
    /// said cancelled, and which the next start delivered. So the withdrawn identifiers are
    /// deleted once more, behind every write queued before this point and ahead of any queued
    /// after (a Submit once they are registered again). Memory has none of them already.
    func deleteAgainBehindQueuedWrites(_ identifiers: [String], of appID: AppID) {
        let store = store
        let logger = logger
        writer.enqueue {
            for identifier in identifiers {
                do {
                    try store.deletePending(appID: appID, identifier: identifier)
                } catch {
                    logger.error(
                        "Could not delete a request withdrawn by a registration, written after it; the next start may find it pending",
                        metadata: ["app.id": "\(appID)", "error": "\(error)"])
                }
            }
        }
    }

    /// `LimitsExceeded` for a new app id when the agent keeps as many apps as `[limits] apps`
    /// allows, and a warning in the journal at most once an hour, so that a process
    /// registering ids in a loop shows there without filling it.
    func tooManyApps(_ appID: AppID) -> SchedulerError {
        let limit = configuration.limits.apps
        let instant = ContinuousClock.now
        if tooManyAppsWarnedAt.map({ $0.duration(to: instant) >= .seconds(3600) }) ?? true {
            tooManyAppsWarnedAt = instant
            logger.warning(
                "Refused a new app: the agent keeps as many apps as [limits] apps allows; 'bgpolicy apps' lists them",
                metadata: ["app.id": "\(appID)", "limit": "\(limit)"])
        }
        return SchedulerError(
            .limitsExceeded,
            "the agent keeps \(limit) registered apps already, the most [limits] apps allows, so it cannot take \(appID): "
                + "'bgpolicy apps' lists them, and 'bgpolicy forget APP' removes one no longer used")
    }

    /// Whether an app may name `busName` as the name the agent starts it by: its app id, or a
    /// name under it (`org.example.App.Service`), the names Flatpak lets an app own and the
    /// one a D-Bus-activatable desktop file uses. Anything else would let an app have the
    /// agent start another app for its work, and that app's registration would count as the
    /// user opening it. A snap's id (`snap.NAME`) is no D-Bus name's prefix, and snapd decides
    /// which names it may own: its bus_name is taken as given.
    static func mayUse(busName: String, appID: AppID, identity: IdentitySource) -> Bool {
        identity == .snap || busName == appID.rawValue || busName.hasPrefix(appID.rawValue + ".")
    }

    func isRegistered(_ appID: AppID) -> Bool { apps[appID] != nil }

    func app(of caller: String) throws(SchedulerError) -> AppID {
        guard let id = boundApp[caller] else { throw .notRegistered }
        return id
    }
}
