import BGPolicyCore
import BGPolicyDBus
import BGPolicyStore

/// A grant of time to one app for one or more tasks (SPEC §1, Slice).
struct Slice {
    struct Member {
        let taskID: String
        /// The pending request it came from; for a content-available wake, a stand-in with an
        /// empty identifier that was never pending.
        let request: TaskRequest
        var kind: DeliveryKind
        /// A content-available wake, its payload passed in `RunTask`'s info; put back as it
        /// was (first received, times notified) if the delivery fails.
        var contentWake: ContentAvailableQueue<[String: Variant]>.Wake? = nil
        var payload: [String: Variant]? { contentWake?.payload }
        var done = false
        /// Its `RunTask` has been sent (it may still be on its way). A member not yet sent when
        /// its slice ends is put back (`returnUnsent`), not recorded as ended: the app never had it.
        var sent = false

        init(taskID: String, request: TaskRequest) {
            self.taskID = taskID
            self.request = request
            self.kind = DeliveryKind(request.kind)
        }

        init(taskID: String, contentWake wake: ContentAvailableQueue<[String: Variant]>.Wake, appID: AppID, at now: UnixTime) {
            self.taskID = taskID
            self.request = TaskRequest(appID: appID, identifier: "", kind: .refresh, submittedAt: now)
            self.kind = .contentAvailable
            self.contentWake = wake
        }
    }

    /// What the CPU monitor did to the app, undone when the slice closes; stored too
    /// (`cpu_enforcement`), so that it is undone even if the agent ends first.
    typealias Enforcement = EnforcementRecord.Action

    let id: String
    let appID: AppID
    /// The unique name, or the activatable well-known name, the tasks were delivered to.
    var connection: String
    var members: [Member]
    let startedAt: UnixTime
    let started: ContinuousClock.Instant
    let length: Duration
    var timers: [Task<Void, Never>] = []
    var monitorTask: Task<Void, Never>?
    var monitor: CPUUsageMonitor?
    var firstCPUSeconds: Double?
    var lastCPUPercent: Double?
    /// The app's process the CPU monitor watches, from the identity of the connection the slice
    /// was delivered to; nil when there is none, or once it is gone (`forgetGoneProcess`).
    var pid: UInt32?
    /// When that process started (`ProcessIdentity.startTime`), checked at every reading and
    /// before any signal: a pid that another process has now is not the app's. Nil when it
    /// could not be read: nothing tells them apart then, and no SIGSTOP is sent.
    var processStarted: Double?
    var cgroupPath: String?
    var unit: String?
    var backgroundOnly = false
    var enforcement: Enforcement?
    /// The violations already counted against the app for this slice: one per kind, however
    /// many of its tasks the history names (sharing a slice is the agent's choice).
    var violationsCounted: Set<HistoryEvent> = []
    /// Only `requires_external_power` processing: the CPU monitor leaves it alone while on AC.
    var externalPowerProcessing = false
    /// External-power processing while on AC (`externalPowerProcessing`, now): the CPU monitor
    /// leaves it alone. Follows the charger for the slice's life (`followExemptionsToPower`).
    var exempt = false
    /// A simulated launch (`bgpolicy simulate launch`), which ignores the rules: its processing
    /// tasks run on when the user comes back (`expireProcessingOnReturn`), and its tasks when
    /// the charger or the network they asked for goes (`expireOnConditionsLost`).
    var simulated = false

    var deadline: UnixTime { startedAt + length.seconds }
    var openMembers: [Member] { members.filter { !$0.done } }
    /// The open members whose `RunTask` was sent: those the app may be running, to be told
    /// to stop (`ExpireTask`).
    var sentOpenMembers: [Member] { members.filter { !$0.done && $0.sent } }
    var elapsed: Double { (ContinuousClock.now - started).seconds }
}
