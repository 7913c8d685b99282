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
        planner.configure(configuration)
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
