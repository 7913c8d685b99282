import BGPolicyCore
import BGPolicyDBus
import BGPolicyStore
import BGPolicySystem
import Glibc
import Logging
import Synchronization

/// The agent's task state: registrations, pending requests, running slices, background tasks.
///
/// The store is written first and memory second, so a failed write leaves both as they were
/// and the caller gets an error that says nothing changed. What runs when is asked of a
/// `SchedulingPolicy`; this type only gathers facts for it and carries out its decisions.
actor TaskEngine {
    /// What the engine knows about one registered app beyond its stored record.
    struct AppRuntime {
        var record: AppRecord
        /// Unique names of connections bound to the app, with the identity each was given.
        var connections: [String: ProcessIdentity] = [:]
        /// The connection registered last: the one tasks are delivered to.
        var latestConnection: String?
        var lastDeliveryFailureAt: UnixTime?
        /// Deliveries that failed in a row; the wait before the next doubles with each.
        var failedDeliveries = 0
        /// Its violations of the last 7 days; read through `recentViolations(of:at:)`, which
        /// forgets the older ones first.
        var violations = RecentViolations()
    }

    /// An unfinished `BeginBackgroundTask`.
    struct BackgroundTask {
        let token: String
        let appID: AppID
        let name: String
        let connection: String
        let startedAt: UnixTime
        var timer: Task<Void, Never>?
    }

    let store: TaskStore
    let policy: any SchedulingPolicy
    /// The policy table in effect; a reload (`SIGHUP`) replaces it (`reconfigure`).
    var configuration: PolicyConfiguration
    let logger: Logger
    let connection: DBusConnection
    let inspector: ProcessInspector
    let systemd: SystemdUserManagerProxy

    var apps: [AppID: AppRuntime] = [:]
    /// Which app each connection is bound to.
    var boundApp: [String: AppID] = [:]
    var pending: [AppID: [String: TaskRequest]] = [:]
    var slices: [String: Slice] = [:]
    /// task id → slice id.
    var taskSlices: [String: String] = [:]
    var backgroundTasks: [String: BackgroundTask] = [:]
    /// Apps with a delivery on its way: not launched again until it settles.
    var delivering: Set<AppID> = []
    /// Apps of `delivering` that the delivery starts by D-Bus activation, once their turn to
    /// start has come (`isLaunching`); while they wait for it, nothing of the agent's is
    /// starting them, so a unit or registration of theirs is the user's doing.
    var startingByActivation: Set<AppID> = []
    /// Tasks whose `RunTask` went to a bus name the bus is starting the app for and awaits its
    /// answer, each with whether the agent has ended the task meanwhile (`finish`, but for the
    /// app's own completion). Its `ExpireTask` went to the name, which had no owner yet, and the
    /// bus refused it: `deliver` sends it again to the connection that answers.
    var activationsAwaited: [String: Bool] = [:]
    /// Turns to start apps by D-Bus activation (`[slices] concurrent_starts`).
    var startTurns: StartTurns<CheckedContinuation<Void, Never>>
    var globalEnabled = true
    var sleeping = false
    var conditions = Conditions.unknown
    var evaluationTimer: Task<Void, Never>?
    var evaluationTimerDue: UnixTime?
    /// CPU enforcements whose undo failed, by slice id, with the words of their undo and how
    /// many times in a row it failed: tried again while the agent runs (`retryFailedUndos`), on
    /// a timer that exists only while some are left, until `undoRetries` failures.
    var failedUndos: [String: (record: EnforcementRecord, why: String, failures: Int)] = [:]
    /// Apps with a systemd call of the CPU monitor on its way (a quota or freeze, or its undo
    /// at a slice's end), by app id: not forgotten until it settles (`refuseForgetting`).
    var enforcementCalls: [String: Int] = [:]
    /// The stop waiting for `enforcementCalls` to settle (`waitForEnforcementCalls`).
    var enforcementCallsSettled: [CheckedContinuation<Void, Never>] = []
    var undoRetryTimer: Task<Void, Never>?
    /// The wait of the undo retry's timer: 5 s, doubled at each round that leaves some, up to
    /// 5 minutes; back to 5 s once none is left.
    var undoRetryDelay: Duration = .zero
    /// The wall clock less the boot-time clock when last looked at (`wallClockSet`).
    var wallClockOffset = TaskEngine.wallMinusBootTime()
    var evaluationQueued = false
    /// Set by `stop`: nothing is evaluated or launched any more.
    var stopping = false
    var fullEvaluationNeeded = false
    var dirtyApps: Set<AppID> = []
    /// What holds each app's pending requests after its last evaluation, per rule (apps with
    /// nothing held are absent): `GetStatus`'s "waiting".
    var holdsByApp: [AppID: [BlockingRule: Int]] = [:]
    /// The sum of `holdsByApp`, kept as it changes: `GetStatus` is published after every
    /// Submit, and summing a thousand apps each time would cost more than the Submit.
    var holdsTotal: [BlockingRule: Int] = [:]
    var historyAppends = 0
    /// The battery and power-profile sources have reported once, or the wait for them ended
    /// (`conditionsSettle`): until then no evaluation launches anything. Unset again at each
    /// resume, until the sources have read their inputs anew (`sleepEvent`).
    var conditionsSettled = false
    /// Counts the resumes, so that the wait of an earlier one, ending late, does not end the
    /// wait of a later one (`conditionsSettle(generation:)`).
    var settleGeneration = 0
    /// What the history's and the usage log's retention count back from (`retentionNow`);
    /// set at `load`.
    var retentionClock = RetentionClock(wall: TaskEngine.wallNow(), newestRow: nil, boot: TaskEngine.bootNow())
    var usageAppends = 0
    /// Writes that may wait on the disk, away from the executor (see StoreWriter).
    let writer = StoreWriter()
    /// Apps with a Submit or Cancel on its way to the disk: not evaluated until it is there,
    /// so a request is never delivered before it is stored.
    var saving: [AppID: Int] = [:]
    /// Apps whose content-available wake is being written (`storeContentWake`): the wake is
    /// not delivered until it is on disk.
    var contentWakeWrites: [AppID: ContentWakeWrite] = [:]
    /// The newest Submit, Cancel or CancelAll of each request whose write is on its way, by
    /// its number (`pendingChangeCount`): a failed write puts memory back only if no later
    /// call changed the request meanwhile (`endPendingChange`).
    var pendingChanges: [PendingKey: UInt64] = [:]
    var pendingChangeCount: UInt64 = 0
    struct PendingKey: Hashable {
        let appID: AppID
        let identifier: String
    }
    /// Tasks whose delivery failed and whose request is pending again in memory, but not on
    /// disk (the write failed): by task id, with the words of the failure. Written again at the
    /// next evaluation and at the stop (`storeUnsavedReturns`), so that a restart does not take
    /// their rows for tasks that ran.
    var unsavedReturns: [String: (request: TaskRequest, reason: String, at: UnixTime)] = [:]
    /// When `keepReserveIfDue` next looks at the store's reserve, on the boot clock (a wall
    /// clock set back would put it off for as long).
    var nextReserveCheck = -Double.infinity
    /// `keepReserve` said it could not make the reserve, and says so again only after it could.
    var reserveFailureSaid = false
    /// The refresh planner (predictions and budget). With `[refresh] strategy = every-window`
    /// it keeps only each app's last refresh, for its interval (`predicts`).
    var refreshPlanner: RefreshPlanner?
    /// The latest opportunistic window (unlock, activity, charger, unmetered network).
    var opportunity: Opportunity?
    /// When the user last opened an app (`PlanningFacts.appOpenedAt`).
    var appOpenedAt: UnixTime?
    /// The app the user last left, and when (`PlanningFacts.appLeft`).
    var appLeft: AppLeft?
    /// The window for refreshes only that last started refreshes (`PlanningFacts.refreshWindow`).
    var refreshWindow: WakeWindow?
    /// Apps the user opened and has not left since (`noteOpen`, `noteLeft`), as the usage log
    /// read at start, the user manager's running app units (`appUnitsRunning`) and every open
    /// and leave since say. The CPU monitor follows it: an app's slices are not watched while it
    /// is in use (`cpuMonitorFollowsUse`).
    var appsInUse: Set<AppID> = [] {
        didSet {
            inUseStatus = nil
            if !slices.isEmpty { cpuMonitorFollowsUse(from: oldValue) }
        }
    }
    /// `appsInUse` as `GetStatus` shows it (sorted), made again only after it changed: status is
    /// published after every evaluation, and sorting a thousand ids each time slowed Submit.
    var inUseStatus: Variant?
    /// `GetStatus`'s `next_planned_window` as last worked out, and when (`plannedWindowForStatus`);
    /// the task that works it out again once the second since is up, while one is due.
    var plannedWindowShown: UnixTime?
    var plannedWindowWorkedOutAt: ContinuousClock.Instant?
    var plannedWindowRefresh: Task<Void, Never>?
    /// Apps in use by their own word since the agent started (they registered, or reported
    /// themselves in the foreground while no app unit of theirs ran, and have not been left
    /// since: a `background` report, also one while a unit runs, `reportWhileUnitRuns`, is a
    /// leave): in use whatever the user manager's units say.
    var selfReportedInUse: Set<AppID> = []
    /// Each app's last `ReportUsage` state in this run, until the user is seen leaving the app
    /// (`noteLeft`) or its last connection goes: a report of the same state is not recorded.
    var lastUsageReport: [AppID: UsageState] = [:]
    /// Each app's budget of usage changes recorded from `ReportUsage` (`UsageReportBudget`).
    var usageReportBudgets: [AppID: UsageReportBudget] = [:]
    /// All apps' together (`UsageReportBudget.allApps`).
    var usageReportBudgetAll = UsageReportBudget.allApps(at: .now)
    /// When a `Register` was last refused for `[limits] apps` with a warning (`tooManyApps`).
    var tooManyAppsWarnedAt: ContinuousClock.Instant?
    /// The app units running that the user opened (not ones the agent launched), by app, as the
    /// user manager said at connect and since: such an app is left when its last unit goes, not
    /// when its bus connection does.
    var openedUnits = OpenedAppUnits()
    /// The apps the usage log left in use when the agent started (`warmPlanner`): an app that
    /// registers again from a process older than the agent is in use only if it is one of them
    /// (`noteRegistrationOfRunningApp`).
    var inUseByLogAtStart: Set<AppID> = []
    /// The app units the session's autostart started (`appUnitChanged`, `RegistrationMeaning`).
    var sessionStartedUnits = SessionStartedUnits()
    /// When this agent process started, in seconds since boot (`RegistrationMeaning`).
    let agentStartedAt: Double? = ProcessInspector.ownStartTime()
    /// Undelivered content-available wakes, newest only, and their token buckets; stored too,
    /// and loaded at start (TaskEngine+ContentAvailable.swift).
    var contentWakes: ContentAvailableQueue<[String: Variant]>
    /// Refreshes in a row that brought no data, per app: they lower its standing.
    var noDataStreak: [AppID: Int] = [:]
    /// The engine's part of `GetStatus`, for answers that do not wait for the engine.
    nonisolated let statusEntries = Mutex<[StatusEntry]>([])
    nonisolated let incomingConditions = Mutex<Conditions>(.unknown)

    init(
        store: TaskStore, policy: any SchedulingPolicy, configuration: PolicyConfiguration,
        connection: DBusConnection, inspector: ProcessInspector, logger: Logger
    ) {
        self.store = store
        self.policy = policy
        self.configuration = configuration
        self.connection = connection
        self.inspector = inspector
        self.systemd = SystemdUserManagerProxy(connection: connection)
        self.logger = logger
        contentWakes = ContentAvailableQueue(perHour: configuration.limits.contentAvailablePerHour)
        startTurns = StartTurns(limit: configuration.slices.concurrentStarts)
        // Under every-window too: its record of each app's last refresh holds the app's next
        // for `min_interval` (`WindowPlanner.refreshIntervals`). It learns nothing there, and
        // its thresholds, budget, wake-ups and refreshes' yield stay as stored
        // (`keepsOnlyLastRefreshes`): every-window's refreshes would skew them for a later
        // switch to predicted.
        var planner = RefreshPlanner(utcOffsetSeconds: Self.localUTCOffset())
        planner.adaptsThresholds = configuration.refresh.strategy == .predicted
        planner.keepsOnlyLastRefreshes = configuration.refresh.strategy == .everyWindow
        planner.minRefreshIntervalSeconds = configuration.refresh.minInterval.seconds
        planner.leadSeconds = configuration.refresh.lead.seconds
        planner.inactiveAfterSeconds = configuration.limits.inactiveAfter.seconds
        refreshPlanner = planner
    }

    /// Loads the store, recording as interrupted every task that was running when the agent
    /// last stopped: those are never delivered again.
    func load() throws(StoreError) {
        let now = Self.wallNow()
        // Retention counts back from now, or from the newest row if that is earlier: a clock
        // set far ahead at boot (a bad RTC, a mistyped date) must not make every row older
        // than 8 weeks and prune the whole log and history. Read before anything is written.
        // While the agent runs, only the time that passed since counts (`RetentionClock`).
        // An earlier start in this boot kept its clock: carried on, since rows written while the
        // clock was wrong would mislead (`RetentionClock.resuming`). Kept again for the next.
        let newest = try? store.newestTimes()
        let bootID = Self.bootID()
        let kept = (try? store.keptRetentionClock()) ?? nil
        retentionClock = RetentionClock.resuming(
            kept.map { ($0.clock, sameBoot: bootID != nil && $0.bootID == bootID) },
            wall: now, newestRow: [newest?.history, newest?.usage].compactMap { $0 }.max(), boot: Self.bootNow())
        if let bootID, kept?.clock != retentionClock {
            do {
                try store.keepRetentionClock(retentionClock, bootID: bootID)
            } catch {
                logger.warning("Could not keep the retention clock for a restart in this boot", metadata: ["error": "\(error)"])
            }
        }
        // Closing those takes a write, which a full disk refuses: that must not keep the agent
        // from starting (systemd would soon give up restarting it). Their rows stay, nothing
        // reads them while the agent runs, and the next start closes them.
        do {
            for entry in try store.recoverInterrupted(now: now) {
                logger.warning(
                    "Task interrupted by the agent's stop",
                    metadata: ["app.id": "\(entry.appID?.rawValue ?? "-")", "task.id": "\(entry.taskID ?? "-")"])
            }
        } catch {
            logger.error(
                "Could not record the tasks the agent's last stop interrupted; the next start will",
                metadata: ["error": "\(error)"])
        }
        // Housekeeping and learning must not keep the agent from starting (a full disk refuses
        // a prune's writes): without them it schedules from what it has.
        do {
            let counted = retentionNow(wall: now)
            try store.pruneHistory(before: counted - Self.historyRetention)
            try pruneUsage(now: counted)
        } catch {
            logger.warning("Could not prune old history and usage; will try again later", metadata: ["error": "\(error)"])
        }
        globalEnabled = try store.globalEnabled()
        let since = now - Self.violationMemory
        for record in try store.apps() {
            var runtime = AppRuntime(record: record)
            runtime.violations = RecentViolations(try store.violations(appID: record.appID, since: since), now: now)
            apps[record.appID] = runtime
        }
        for request in try store.pendingRequests() {
            guard apps[request.appID]?.record.identifiers.contains(request.identifier) ?? false else {
                // Left by a version that kept the requests of identifiers an app withdrew.
                logger.warning(
                    "Dropped a pending request whose identifier its app no longer registers",
                    metadata: ["app.id": "\(request.appID)", "task.identifier": "\(request.identifier)"])
                try? store.deletePending(appID: request.appID, identifier: request.identifier)
                continue
            }
            pending[request.appID, default: [:]][request.identifier] = request
        }
        try loadContentWakes()
        do {
            sessionStartedUnits.restore(try store.sessionStartedUnits())
        } catch {
            logger.warning("Could not read the app units the session started", metadata: ["error": "\(error)"])
        }
        do {
            try warmPlanner(now: now)
        } catch {
            logger.error("Could not read the usage log; refresh is planned without the learned history", metadata: ["error": "\(error)"])
        }
        restorePlannerState(now: now)
        // Room for what a full disk must not lose (`spendingReserve`).
        keepReserveIfDue()
        // Apps that registered a bus_name can be started for what is already due.
        requestEvaluation()
        logger.info(
            "Tasks loaded",
            metadata: ["apps": "\(apps.count)", "pending": "\(pendingCount)", "global.enabled": "\(globalEnabled)"])
    }

    /// History is kept this long (8 weeks), pruned at start and every 1000 entries.
    static let historyRetention: UnixTime = 56 * 86_400

    /// Violations older than this no longer count against an app (`RecentViolations`).
    static let violationMemory = RecentViolations.memory

    /// How often, at most, an evaluation looks whether the store's reserve for a full disk
    /// (`TaskStore.keepReserve`) is in place, and makes it again if not: after it was spent
    /// (`spendingReserve`), once the disk has room again. One `stat` when it is there.
    static let reserveCheckInterval = 600.0

    /// Makes the store's reserve again if it is missing, at most every `reserveCheckInterval`:
    /// at an evaluation, so that no timer wakes the agent for it.
    func keepReserveIfDue() {
        let boot = Self.bootNow()
        guard boot >= nextReserveCheck else { return }
        nextReserveCheck = boot + Self.reserveCheckInterval
        keepReserve()
    }

    /// `TaskStore.keepReserve`, saying so when it made the reserve (at the first start, or
    /// again after it was spent), and, once, when it could not.
    func keepReserve() {
        // A store in memory has no disk to keep room on.
        guard store.path != nil, !store.hasReserve else { return }
        if let failure = store.keepReserve() {
            if !reserveFailureSaid {
                reserveFailureSaid = true
                logger.warning(
                    "Could not keep room in reserve for a full disk; a request put back after a failed delivery, or a content-available wake, may be lost if the disk fills",
                    metadata: ["bytes": "\(TaskStore.reserveSize)", "error": "\(failure)"])
            }
            return
        }
        reserveFailureSaid = false
        logger.info("Room kept in reserve for a full disk", metadata: ["bytes": "\(TaskStore.reserveSize)"])
    }

    static func wallNow() -> UnixTime {
        var ts = timespec()
        clock_gettime(CLOCK_REALTIME, &ts)
        return UnixTime(ts.tv_sec) + UnixTime(ts.tv_nsec) / 1e9
    }

    /// The kernel's id of this boot (`/proc/sys/kernel/random/boot_id`); nil when unreadable.
    static func bootID() -> String? {
        guard let bytes = SmallFile.read("/proc/sys/kernel/random/boot_id", limit: 64) else { return nil }
        let id = SmallFile.text(bytes).filter { !$0.isWhitespace }
        return id.isEmpty ? nil : id
    }

    /// `CLOCK_BOOTTIME` in seconds: time since boot, suspend included; never set.
    static func bootNow() -> Double {
        var boot = timespec()
        clock_gettime(CLOCK_BOOTTIME, &boot)
        return Double(boot.tv_sec) + Double(boot.tv_nsec) / 1e9
    }

    /// The time retention counts back from for a row written at `wall`: the wall clock, but
    /// no further ahead than the time that passed since the agent's start (`RetentionClock`).
    func retentionNow(wall: UnixTime) -> UnixTime {
        retentionClock.now(wall: wall, boot: Self.bootNow())
    }

    static func newID(_ prefix: String) -> String {
        prefix + String(UInt64.random(in: 0...UInt64.max), radix: 16)
    }

    var pendingCount: Int { pending.values.reduce(0) { $0 + $1.count } }

    // MARK: Facts from outside

    /// Called from the conditions hub's listener, which cannot wait for the engine. The value
    /// goes into a box and the engine takes the newest from it, so tasks that run out of order
    /// can never leave it with older facts than the last reported.
    nonisolated func noteConditions(_ new: Conditions) {
        incomingConditions.withLock { $0 = new }
        Task { await self.takeConditions() }
    }

    func takeConditions() {
        let newest = incomingConditions.withLock { $0 }
        guard newest != conditions else { return }
        if let reason = Self.opportunity(from: conditions, to: newest) {
            opportunity = Opportunity(at: Self.wallNow(), reason: reason)
            logger.debug("Opportunistic wake window", metadata: ["reason": "\(reason.rawValue)"])
        }
        conditions = newest
        followExemptionsToPower()
        if newest.isIdleForProcessing == false, slices.values.contains(where: { !$0.simulated }) {
            Task { await self.expireProcessingOnReturn() }
        }
        let lost = slices.values.contains { slice in
            !slice.simulated && slice.openMembers.contains { Self.lostConditions(of: $0.request, in: newest) != nil }
        }
        if lost { Task { await self.expireOnConditionsLost() } }
        requestEvaluation()
    }

    /// Before sleep every running slice and background task is expired, so that no app is
    /// frozen mid-work with a grant it cannot use; nothing starts until resume.
    func sleepEvent(_ event: SleepEvent) async {
        switch event {
        case .preparing:
            sleeping = true
            let toldApps = !slices.isEmpty || !backgroundTasks.isEmpty
            for id in Array(slices.keys) {
                await expireForSleep(sliceID: id)
            }
            for token in backgroundTasks.keys.sorted() {
                expireBackgroundTaskForSleep(token)
            }
            // The apps' ExpireTask calls are written to the bus before this returns and the
            // sleep inhibitor is released: queued from a task that ran later, they could go
            // out after it, as the machine went down. A bus that does not read within the
            // flush's bound (5 s, logind's usual longest delay) does not hold the sleep.
            if toldApps, !(await connection.flush()) {
                logger.warning("The apps' expiry calls were not all written to the bus before the sleep")
            }
        case .resumed:
            sleeping = false
            // What the sources said before the sleep may be hours old: a laptop suspended on
            // AC at 100 % may wake on battery at 8 %. Nothing starts until they have read
            // their inputs again (`ConditionsHub.resettle`), or `settleTimeout` passed.
            conditionsSettled = false
            settleGeneration += 1
            // The timer's monotonic clock stopped while the machine slept: a wake planned for
            // 08:00 and armed at 23:00 would come 8 hours late after a night's sleep. It is
            // dropped, and the evaluation sets it again for the time left (as `wallClockSet`).
            scheduleEvaluation(at: nil, now: Self.wallNow())
            requestEvaluation()
        }
    }

    /// A connection left the bus: unbind it, and close as failed whatever it was running.
    func connectionVanished(_ name: String) async {
        guard let appID = boundApp[name] else { return }
        await unbind(
            name, from: appID, slice: "the app left the bus during its slice; closed as failed",
            backgroundTask: "the app left the bus before ending its background task")
        logger.info("App connection left", metadata: ["app.id": "\(appID)", "bus.unique": "\(name)"])
        if apps[appID]?.connections.isEmpty ?? true {
            lastUsageReport[appID] = nil
            lastConnectionClosed(appID)
            // Unreachable now, with no bus_name to start it by: its work waits for it to
            // register again, and the evaluation timer may have been set for that work.
            if evaluationTimerDue != nil, apps[appID]?.record.busName == nil, !(pending[appID]?.isEmpty ?? true) {
                requestEvaluation()
            }
        }
    }

    /// Takes the connection `name` off `appID`, then closes as failed the tasks of its slices
    /// (`slice`) and its background tasks (`backgroundTask`): the words their history gives.
    /// A connection still on the bus (`stillConnected`: it lost the app id, it did not leave)
    /// is sent `ExpireTask` for each first, so that its handlers stop the work rather than
    /// work on unwarned and find every later report refused.
    func unbind(
        _ name: String, from appID: AppID, slice sliceDetail: String, backgroundTask taskDetail: String,
        stillConnected: Bool = false
    ) async {
        boundApp[name] = nil
        if var runtime = apps[appID] {
            runtime.connections[name] = nil
            if runtime.latestConnection == name {
                runtime.latestConnection = runtime.connections.keys.sorted().last
            }
            apps[appID] = runtime
        }
        for (id, slice) in slices where slice.connection == name {
            if stillConnected {
                for member in slice.sentOpenMembers { sendExpire(member.taskID, to: name) }
            }
            await endSlice(id, as: .vanished, detail: sliceDetail)
        }
        for (token, task) in backgroundTasks where task.connection == name {
            if stillConnected { sendExpire(token, to: name) }
            task.timer?.cancel()
            backgroundTasks[token] = nil
            appendHistory(HistoryEntry(
                time: Self.wallNow(), appID: appID, identifier: task.name, taskID: token,
                event: .backgroundTaskEnded, result: .failed, detail: taskDetail))
        }
    }

    /// Identifiers as a history entry lists them: whole while they fit in `budget` bytes, then
    /// how many more. A registration's entry named all of them, up to 64 of 255 bytes (16 KB),
    /// and an app registering again and again with a changed list filled its 20,000 entries of
    /// history with them: `GetHistory` of 10,000 could then not be answered (an array over
    /// D-Bus's 64 MiB).
    static func listed(_ identifiers: [String], within budget: Int = 512) -> String {
        var text = ""
        for (index, identifier) in identifiers.enumerated() {
            let separator = index == 0 ? "" : ", "
            guard index == 0 || text.utf8.count + separator.utf8.count + identifier.utf8.count <= budget else {
                return text + " and \(identifiers.count - index) more"
            }
            text += separator + identifier
        }
        return text
    }

    // MARK: Store failures

    /// A write (or read) the store refused, for a caller's request: logged, since the caller is
    /// told to look in the journal, and worded for the caller (`SchedulerError.storage`).
    func storeFailed(_ error: StoreError, _ what: String) -> SchedulerError {
        logger.error("The database failed on \(what); the caller was told nothing changed", metadata: ["error": "\(error)"])
        return .storage(error)
    }

    // MARK: Registration

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

    // MARK: Requests

    struct SubmitOptions {
        var earliestBegin: Int64?
        var requiresNetwork = false
        var requiresExternalPower = false
        var expectedDuration: UInt32?
    }

    func submit(caller: String, identifier: String, kind kindText: String, options: SubmitOptions) async throws(SchedulerError) {
        let appID = try app(of: caller)
        guard let runtime = apps[appID] else { throw .notRegistered }
        guard runtime.record.identifiers.contains(identifier) else {
            throw .notPermitted(identifier, app: appID, registered: runtime.record.identifiers)
        }
        guard let kind = TaskKind(rawValue: kindText) else {
            throw .invalid("kind '\(SchedulerError.shown(kindText))' is not one of: refresh, processing")
        }
        let now = Self.wallNow()
        if let begin = options.earliestBegin {
            if begin < 0 { throw .invalid("earliest_begin is Unix seconds and cannot be negative; got \(begin)") }
            let limit = configuration.limits.earliestBeginMax.seconds
            if UnixTime(begin) > now + limit {
                // Exact, so that a value just past the limit does not read as within it.
                let past = RunWhenEligiblePolicy.durationWords(UnixTime(begin) - now - limit)
                throw .invalid(
                    "earliest_begin \(begin) is \(past) past the limit of \(RunWhenEligiblePolicy.durationWords(limit)) ahead "
                        + "(the latest allowed now is \(Int64((now + limit).rounded(.down)))); submit again closer to the time")
            }
        }
        if !globalEnabled {
            throw SchedulerError(.unavailable, "background work is switched off for all apps ('bgpolicy enable --all' turns it on)")
        }
        if !runtime.record.enabled {
            throw SchedulerError(.unavailable, "the user switched background work off for \(appID) ('bgpolicy enable \(appID)' turns it on)")
        }
        let mine = pending[appID] ?? [:]
        let sameKind = mine.values.filter { $0.kind == kind && $0.identifier != identifier }
        let limit = kind == .refresh ? configuration.limits.pendingRefresh : configuration.limits.pendingProcessing
        if sameKind.count >= limit {
            throw SchedulerError(
                .tooManyPendingRequests,
                "\(appID) already has \(sameKind.count) pending \(kind.rawValue) request\(sameKind.count == 1 ? "" : "s") (the limit is \(limit)): "
                    + sameKind.map(\.identifier).sorted().joined(separator: ", ")
                    + ". Resubmit one of those identifiers to replace it, or cancel one first")
        }
        let request = TaskRequest(
            appID: appID, identifier: identifier, kind: kind, earliestBegin: options.earliestBegin.map(UnixTime.init),
            requiresNetwork: options.requiresNetwork, requiresExternalPower: options.requiresExternalPower,
            expectedDuration: options.expectedDuration, submittedAt: now)
        let previous = mine[identifier]
        let entry = HistoryEntry(
            time: now, appID: appID, identifier: identifier, event: previous != nil ? .replaced : .submitted,
            kind: DeliveryKind(kind), detail: previous != nil ? "resubmitted: replaced the pending request" : "submitted")
        // Held in memory while it is written, so that the limits count it; not evaluated
        // until it is on disk, and put back as it was if the write fails.
        pending[appID, default: [:]][identifier] = request
        beginSaving(appID)
        let change = beginPendingChange(appID, [identifier])
        // A replaced request that now waits longer (a later earliest_begin) may have been what
        // the evaluation timer was set for: every app is evaluated, which can move the timer
        // later, as an evaluation of this app alone cannot. Not for the same request sent
        // again, as apps do after every run: with 11,000 pending, a full evaluation made each
        // such Submit take 21 ms instead of 0.4 (`make bench`).
        let waitsLonger = previous.map { Self.mayWaitLonger(request, than: $0) } ?? false
        defer { endSaving(appID, removedWork: waitsLonger && evaluationTimerDue != nil) }
        let store = store
        do {
            try await writer.run { () throws(StoreError) in try store.savePending(request, history: entry) }
        } catch {
            if endPendingChange(appID, identifier, change), pending[appID]?[identifier] == request {
                restorePending(appID, identifier, else: previous)
            }
            throw storeFailed(error, "a request")
        }
        endPendingChange(appID, identifier, change)
        noteHistoryWritten(count: 1, at: now)
    }

    func cancel(caller: String, identifier: String) async throws(SchedulerError) {
        let appID = try app(of: caller)
        guard let removed = pending[appID]?[identifier] else { throw .unknownPending(identifier, app: appID) }
        pending[appID]?[identifier] = nil
        beginSaving(appID)
        defer { endSaving(appID, removedWork: true) }
        let change = beginPendingChange(appID, [identifier])
        let store = store
        let entry = HistoryEntry(
            time: Self.wallNow(), appID: appID, identifier: identifier, event: .cancelled, detail: "cancelled by the app")
        do {
            try await writer.run { () throws(StoreError) in
                try store.deletePending(appID: appID, identifier: identifier, history: entry)
            }
        } catch {
            if endPendingChange(appID, identifier, change), pending[appID]?[identifier] == nil {
                restorePending(appID, identifier, else: removed)
            }
            throw storeFailed(error, "a cancellation")
        }
        endPendingChange(appID, identifier, change)
        noteHistoryWritten(count: 1, at: entry.time)
    }

    /// Numbers a Submit, Cancel or CancelAll of the app's `identifiers` as the newest change of
    /// each while its write is on its way.
    func beginPendingChange(_ appID: AppID, _ identifiers: some Sequence<String>) -> UInt64 {
        pendingChangeCount += 1
        for identifier in identifiers { pendingChanges[PendingKey(appID: appID, identifier: identifier)] = pendingChangeCount }
        return pendingChangeCount
    }

    /// Whether `change` is still the newest of the request, whose write has ended: then it is
    /// forgotten. False when a later call changed the request meanwhile (a Cancel A, a Submit A,
    /// a Cancel A queued behind it: memory has no A, as the third made it), and then the
    /// later call's write, behind this one, makes the store agree with memory: a failed write
    /// then leaves memory alone.
    @discardableResult
    func endPendingChange(_ appID: AppID, _ identifier: String, _ change: UInt64) -> Bool {
        let key = PendingKey(appID: appID, identifier: identifier)
        guard pendingChanges[key] == change else { return false }
        pendingChanges[key] = nil
        return true
    }

    /// After a failed write of the request of `identifier` (a Submit, a Cancel), while memory
    /// still holds what that write would have made: memory takes back what the store holds.
    /// Not `fallback`, what memory held before the call: with two Submits of one identifier
    /// under way, the second's is the first's request, which a failed write never stored. Only
    /// when the store cannot be read either, `fallback`.
    func restorePending(_ appID: AppID, _ identifier: String, else fallback: TaskRequest?) {
        let stored: TaskRequest?
        do {
            stored = try store.pendingRequest(appID: appID, identifier: identifier)
        } catch {
            stored = fallback
        }
        pending[appID, default: [:]][identifier] = stored
    }

    func beginSaving(_ appID: AppID) {
        saving[appID, default: 0] += 1
    }

    /// `removedWork`: the change took work away (a Cancel), so everything is evaluated again:
    /// an evaluation of the app alone can bring the timer forward but never take it back, and
    /// the timer may have been set for the work that went.
    /// Whether `new`, replacing `old`, may be held longer than it: a later `earliest_begin`, a
    /// condition it did not have, another kind.
    static func mayWaitLonger(_ new: TaskRequest, than old: TaskRequest) -> Bool {
        (new.earliestBegin ?? -.infinity) > (old.earliestBegin ?? -.infinity)
            || (new.requiresNetwork && !old.requiresNetwork)
            || (new.requiresExternalPower && !old.requiresExternalPower)
            || new.kind != old.kind
    }

    func endSaving(_ appID: AppID, removedWork: Bool = false) {
        let left = (saving[appID] ?? 1) - 1
        saving[appID] = left > 0 ? left : nil
        if removedWork { requestEvaluation() } else { requestEvaluation(for: appID) }
    }

    /// Written through the writer, after every write queued before it, as `cancel` is. It
    /// deleted on the executor at once: a Submit of the app's other connection, in memory and
    /// its write queued, was deleted before it was written, then written: memory had no
    /// request, the store had it, and the next start delivered what the app had cancelled.
    func cancelAll(caller: String) async throws(SchedulerError) {
        let appID = try app(of: caller)
        guard let removed = pending[appID], !removed.isEmpty else { return }
        pending[appID] = nil
        beginSaving(appID)
        defer { endSaving(appID, removedWork: true) }
        let change = beginPendingChange(appID, removed.keys)
        let store = store
        let entry = HistoryEntry(
            time: Self.wallNow(), appID: appID, event: .cancelled,
            detail: "all \(removed.count) pending requests cancelled by the app")
        do {
            try await writer.run { () throws(StoreError) in try store.deleteAllPending(appID: appID, history: entry) }
        } catch {
            // Memory takes back what the store holds of those it dropped; a request submitted
            // since is the newer, and stays.
            for (identifier, request) in removed {
                guard endPendingChange(appID, identifier, change), pending[appID]?[identifier] == nil else { continue }
                restorePending(appID, identifier, else: request)
            }
            if pending[appID]?.isEmpty == true { pending[appID] = nil }
            throw storeFailed(error, "a cancellation of all requests")
        }
        for identifier in removed.keys { endPendingChange(appID, identifier, change) }
        noteHistoryWritten(count: 1, at: entry.time)
    }

    func pendingRequests(caller: String) throws(SchedulerError) -> [TaskRequest] {
        let appID = try app(of: caller)
        return (pending[appID] ?? [:]).values.sorted { $0.identifier < $1.identifier }
    }

    func reportUsage(caller: String, state text: String) throws(SchedulerError) {
        let appID = try app(of: caller)
        guard let state = UsageState(rawValue: text) else {
            throw .invalid("usage state '\(SchedulerError.shown(text))' is not one of: foreground, background")
        }
        // The state the app last reported, again: nothing changed. Not a second open for the
        // predictor, nor a row: an app that reports in a loop must not fill the usage log.
        if lastUsageReport[appID] == state { return }
        let instant = ContinuousClock.now
        var budget = usageReportBudgets[appID] ?? UsageReportBudget(at: instant)
        defer { usageReportBudgets[appID] = budget }
        guard budget.allows(at: instant) else {
            throw SchedulerError(
                .limitsExceeded,
                "\(appID) reported more changes of its usage state than a person makes (\(Int(UsageReportBudget.burst)) at once, "
                    + "then one a second); this one was not recorded. Send it again in a second, and report only "
                    + "when the user brings the app up or leaves it")
        }
        guard usageReportBudgetAll.allows(at: instant) else {
            throw SchedulerError(
                .limitsExceeded,
                "the apps together reported more changes of their usage state than a person makes "
                    + "(\(Int(UsageReportBudget.allAppsBurst)) at once, then \(Int(UsageReportBudget.allAppsPerSecond)) a second); "
                    + "this one was not recorded. Send it again in a second")
        }
        let now = Self.wallNow()
        do {
            // An app unit of it runs: the unit's appearance was its open, so the report changes
            // only what differs from the agent's view (`reportWhileUnitRuns`).
            if openedUnits.contains(appID) {
                try reportWhileUnitRuns(appID, state, at: now)
                budget.spend()
                usageReportBudgetAll.spend()
                return
            }
            // In use by its own word already (its registration counted as the open, or another
            // connection of it reported): the same use, not a second open, as for a unit.
            if state == .foreground, isInUseByItsWord(appID) {
                try noteLastUse(of: appID, at: now)
                budget.spend()
                usageReportBudgetAll.spend()
                lastUsageReport[appID] = state
                return
            }
            // Remembered once the row is in: a report the disk refused is recorded when sent again.
            try appendUsage(appID, state, at: now)
            budget.spend()
            usageReportBudgetAll.spend()
            if state == .foreground {
                selfReportedInUse.insert(appID)
                lastUsageReport[appID] = state
                try noteUse(of: appID, at: now)
            } else {
                noteLeft(appID, at: now)
                lastUsageReport[appID] = state
            }
        } catch {
            throw storeFailed(error, "a usage report")
        }
    }

    func refreshStatus(caller: String) throws(SchedulerError) -> RefreshStatus {
        let appID = try app(of: caller)
        guard let record = apps[appID]?.record else { throw .notRegistered }
        return policy.refreshStatus(app: record, context: context(now: Self.wallNow()))
    }

    // MARK: Switches

    func setAppEnabled(_ text: String, enabled: Bool) async throws(SchedulerError) {
        let appID = try SchedulerError.appID(text)
        guard var record = apps[appID]?.record else { throw .unknownApp(text) }
        guard record.enabled != enabled else { return }
        record.enabled = enabled
        do {
            try store.saveApp(record)
        } catch {
            throw storeFailed(error, "an app's switch")
        }
        apps[appID]?.record = record
        appendHistory(HistoryEntry(
            time: Self.wallNow(), appID: appID, event: enabled ? .appEnabled : .appDisabled,
            detail: enabled ? "background work switched on by the user" : "background work switched off by the user"))
        // Switched off, its work is held: the timer may have been for it (`endSaving`).
        if enabled { requestEvaluation(for: appID) } else { requestEvaluation() }
        if !enabled { await expireSwitchedOff(where: { $0 == appID }, reason: "the user switched the app's background work off") }
    }

    func setGlobalEnabled(_ enabled: Bool) async throws(SchedulerError) {
        guard globalEnabled != enabled else { return }
        do {
            try store.setGlobalEnabled(enabled)
        } catch {
            throw storeFailed(error, "the global switch")
        }
        globalEnabled = enabled
        appendHistory(HistoryEntry(
            time: Self.wallNow(), appID: nil, event: enabled ? .globalEnabled : .globalDisabled,
            detail: enabled ? "background work switched on for all apps" : "background work switched off for all apps"))
        requestEvaluation()
        if !enabled { await expireSwitchedOff(where: { _ in true }, reason: "the user switched background work off for all apps") }
    }

    // MARK: History

    /// Appends to history; a failure to write history is logged, never fatal to the caller's call,
    /// because the state change it describes has already been stored.
    /// `countingViolation: false`: the entry names a violation already counted (another task of
    /// the same slice).
    func appendHistory(_ entry: HistoryEntry, countingViolation: Bool = true) {
        do {
            try store.append(entry)
            noteHistoryWritten(count: 1, at: entry.time)
        } catch {
            logger.error("Could not write history", metadata: ["event": "\(entry.event.rawValue)", "error": "\(error)"])
        }
        if countingViolation, let kind = entry.event.violation, let appID = entry.appID {
            noteViolation(of: appID, at: entry.time, kind: kind)
        }
    }

    /// Counts history rows written, by `appendHistory` or with a change they describe (a
    /// Submit's, a Cancel's, a registration's withdrawals, a task's end), and every 1,000
    /// prunes what is past retention. Counting them all matters for an app that submits and
    /// cancels in a loop: only those rows grow the table then, and pruning at start alone would
    /// let them fill the disk while the agent runs.
    func noteHistoryWritten(count: Int, at time: UnixTime) {
        guard count > 0 else { return }
        let before = historyAppends
        historyAppends += count
        guard historyAppends / 1000 != before / 1000 else { return }
        do {
            try store.pruneHistory(before: retentionNow(wall: time) - Self.historyRetention)
        } catch {
            logger.warning("Could not prune old history; will try again later", metadata: ["error": "\(error)"])
        }
    }

    /// Counts a violation against the app's future opportunities (the store has its row):
    /// at most as many as the store keeps rows of, the newest, as a restart reads them back.
    func noteViolation(of appID: AppID, at time: UnixTime, kind: ViolationKind) {
        apps[appID]?.violations.record(at: time, kind: kind, keepingAtMost: TaskStore.historyPerAppLimit)
    }

    /// The app's violations that count at `now`, the wall clock: those of the last 7 days.
    /// Older ones are forgotten here, when they are asked about, so that they stop counting
    /// while the agent runs and not only at its next start (`RecentViolations`).
    func recentViolations(of appID: AppID, at now: UnixTime) -> RecentViolations {
        guard var violations = apps[appID]?.violations else { return RecentViolations() }
        if violations.advance(to: now) { apps[appID]?.violations = violations }
        return violations
    }

    /// `GetHistory`, or with `appID` `GetAppHistory`: the newest `limit` entries (0 for 100, at
    /// most 10,000) at or after `since`, oldest first. An app the agent does not know, with
    /// no entries either, is `NotRegistered`, as `Explain` words it; one that has entries is
    /// answered with them, or with none after `since` (not `NotRegistered`: it has some).
    func history(of appID: AppID? = nil, since: Int64, limit: UInt32) throws(SchedulerError) -> [HistoryEntry] {
        let count = limit == 0 ? 100 : min(Int(limit), 10_000)
        let entries: [HistoryEntry]
        var none = false
        do {
            entries = try store.history(since: UnixTime(since), limit: count, appID: appID)
            if let appID, entries.isEmpty, !isRegistered(appID) {
                none = try store.history(since: 0, limit: 1, appID: appID).isEmpty
            }
        } catch {
            throw storeFailed(error, "reading the history")
        }
        if let appID, none { throw .unknownApp(appID.rawValue) }
        return entries
    }

    static func format(_ value: Double) -> String {
        let rounded = (value * 10).rounded() / 10
        return rounded == rounded.rounded() ? String(Int(rounded)) : String(rounded)
    }
}
