/// Every number of the published policy table (SPEC §2), as knobs an administrator may change.
///
/// The nested groups mirror the configuration file's sections; `ConfigurationParser` reads the
/// file, `rendered()` writes it, and `validate()` checks the rules that tie knobs together.
public struct PolicyConfiguration: Sendable, Equatable {
    /// `[slices]`: how long each kind of grant lasts, and how many apps start for them at once.
    public struct Slices: Sendable, Equatable {
        /// Slice for a `refresh` task.
        public var refresh: Duration
        /// Slice for a `processing` task, granted only while idle.
        public var processing: Duration
        /// Time to finish user-started work after `BeginBackgroundTask`.
        public var completion: Duration
        /// Slice for a content-available wake.
        public var contentAvailable: Duration
        /// `ExpireTask` is sent this long before a slice ends; shorter than every slice.
        public var expirationWarning: Duration
        /// Apps started by D-Bus activation at once for their slices; the others wait their turn
        /// (not in SPEC §2).
        public var concurrentStarts: Int

        public init(
            refresh: Duration = .seconds(30),
            processing: Duration = .seconds(10 * 60),
            completion: Duration = .seconds(30),
            contentAvailable: Duration = .seconds(30),
            expirationWarning: Duration = .seconds(5),
            concurrentStarts: Int = 2
        ) {
            self.refresh = refresh
            self.processing = processing
            self.completion = completion
            self.contentAvailable = contentAvailable
            self.expirationWarning = expirationWarning
            self.concurrentStarts = concurrentStarts
        }
    }

    /// `[limits]`: how much an app may ask for.
    public struct Limits: Sendable, Equatable {
        /// Pending `refresh` requests per app.
        public var pendingRefresh: Int
        /// Pending `processing` requests per app.
        public var pendingProcessing: Int
        /// The furthest ahead `earliest_begin` may be.
        public var earliestBeginMax: Duration
        /// An app not used for this long gets no background launches until it is used again.
        public var inactiveAfter: Duration
        /// Content-available wakes per app per hour on battery (token bucket); unlimited on AC.
        public var contentAvailablePerHour: Int
        /// Registered apps the agent keeps at most: a `Register` of one more app id is refused,
        /// so that a process registering new ids in a loop cannot grow the agent and its
        /// database without end. Apps already known register again whatever the count.
        public var apps: Int

        public init(
            pendingRefresh: Int = 1,
            pendingProcessing: Int = 10,
            earliestBeginMax: Duration = .seconds(7 * 86_400),
            inactiveAfter: Duration = .seconds(7 * 86_400),
            contentAvailablePerHour: Int = 3,
            apps: Int = 4096
        ) {
            self.pendingRefresh = pendingRefresh
            self.pendingProcessing = pendingProcessing
            self.earliestBeginMax = earliestBeginMax
            self.inactiveAfter = inactiveAfter
            self.contentAvailablePerHour = contentAvailablePerHour
            self.apps = apps
        }
    }

    /// `[battery]`: levels that gate work while discharging.
    public struct Battery: Sendable, Equatable {
        /// Below this and discharging, only user-started work runs.
        public var low: Percentage
        /// Below this, nothing new starts; must be below `low`.
        public var critical: Percentage
        /// Minimum battery level for discretionary transfers when not on AC.
        public var discretionaryMin: Percentage
        /// How often the kernel's battery files are read again while udev is the battery's only
        /// source (UPower not live) and the machine runs on battery: the charge drops with no
        /// uevent. Never on AC, and never while UPower is live.
        public var udevReadInterval: Duration

        public init(
            low: Percentage = 20, critical: Percentage = 10, discretionaryMin: Percentage = 50,
            udevReadInterval: Duration = .seconds(60)
        ) {
            self.low = low
            self.critical = critical
            self.discretionaryMin = discretionaryMin
            self.udevReadInterval = udevReadInterval
        }
    }

    /// `[idle]`: when the machine counts as idle.
    public struct Idle: Sendable, Equatable {
        /// No input for this long counts as idle.
        public var noInputAfter: Duration

        public init(noInputAfter: Duration = .seconds(5 * 60)) {
            self.noInputAfter = noInputAfter
        }
    }

    /// `[cpu]`: the CPU monitor.
    public struct CPU: Sendable, Equatable {
        /// CPU use, as a share of one core, above which a slice is warned and then enforced.
        public var limit: Percentage
        /// CPU use is averaged over this window (or over the slice, if shorter).
        public var window: Duration
        /// What enforcement does.
        public var action: CPUAction
        /// The CPU quota, as a share of one core, that `throttle` applies.
        public var throttleQuota: Percentage
        /// How often CPU use is read while a slice runs. Nothing is read outside slices.
        public var sampleInterval: Duration

        public init(
            limit: Percentage = 80,
            window: Duration = .seconds(60),
            action: CPUAction = .throttle,
            throttleQuota: Percentage = 10,
            sampleInterval: Duration = .seconds(5)
        ) {
            self.limit = limit
            self.window = window
            self.action = action
            self.throttleQuota = throttleQuota
            self.sampleInterval = sampleInterval
        }
    }

    /// `[windows]`: the grid planned wake windows fall on.
    public struct Windows: Sendable, Equatable {
        /// Grid spacing on battery.
        public var gridOnBattery: Duration
        /// Grid spacing on AC.
        public var gridOnAC: Duration

        public init(gridOnBattery: Duration = .seconds(15 * 60), gridOnAC: Duration = .seconds(5 * 60)) {
            self.gridOnBattery = gridOnBattery
            self.gridOnAC = gridOnAC
        }
    }

    /// `[refresh]`: refreshing ahead of predicted use.
    public struct Refresh: Sendable, Equatable {
        /// How long before a predicted open the refresh runs.
        public var lead: Duration
        /// At most one refresh per app per this interval.
        public var minInterval: Duration
        /// Whether refreshes follow predicted use (the default) or run in every window.
        public var strategy: RefreshStrategy
        /// Under `predicted`: the refreshes a day the shared pool gains for every app known (and
        /// holds at most a day of). 2.2 is under a tenth of what an hourly timer per app spends.
        public var budget: Double
        /// Under `predicted`: the wake-ups with refreshes a day the planner aims for (its
        /// thresholds adapt to it); never more than `RefreshPlanner.maxWakesPerDay` in 24 hours.
        public var windowsPerDay: Int

        public init(
            lead: Duration = .seconds(10 * 60), minInterval: Duration = .seconds(15 * 60),
            strategy: RefreshStrategy = .predicted, budget: Double = 2.2, windowsPerDay: Int = 21
        ) {
            self.lead = lead
            self.minInterval = minInterval
            self.strategy = strategy
            self.budget = budget
            self.windowsPerDay = windowsPerDay
        }
    }

    /// `[transfers]`: background transfers.
    public struct Transfers: Sendable, Equatable {
        /// A transfer that has not finished after this long fails.
        public var resourceTimeout: Duration
        /// A request with no data for this long is retried.
        public var requestTimeout: Duration
        /// First retry delay; each further retry doubles it.
        public var backoffInitial: Duration
        /// Retry delays never grow past this.
        public var backoffMax: Duration

        public init(
            resourceTimeout: Duration = .seconds(7 * 86_400),
            requestTimeout: Duration = .seconds(60),
            backoffInitial: Duration = .seconds(30),
            backoffMax: Duration = .seconds(5 * 3600)
        ) {
            self.resourceTimeout = resourceTimeout
            self.requestTimeout = requestTimeout
            self.backoffInitial = backoffInitial
            self.backoffMax = backoffMax
        }
    }

    public var slices: Slices
    public var limits: Limits
    public var battery: Battery
    public var idle: Idle
    public var cpu: CPU
    public var windows: Windows
    public var refresh: Refresh
    public var transfers: Transfers

    public init(
        slices: Slices = Slices(),
        limits: Limits = Limits(),
        battery: Battery = Battery(),
        idle: Idle = Idle(),
        cpu: CPU = CPU(),
        windows: Windows = Windows(),
        refresh: Refresh = Refresh(),
        transfers: Transfers = Transfers()
    ) {
        self.slices = slices
        self.limits = limits
        self.battery = battery
        self.idle = idle
        self.cpu = cpu
        self.windows = windows
        self.refresh = refresh
        self.transfers = transfers
    }

    /// The published policy table, SPEC §2.
    public static let defaults = PolicyConfiguration()
}
