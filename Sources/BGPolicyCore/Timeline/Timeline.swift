/// The agent's picture of the next hours (Admin1 `GetTimeline`): for each app the chance that
/// the user opens it in each slot and the refreshes planned for it, and the agent's own wake
/// windows. A plain value: `TimelineText` and `TimelineSVG` draw it, without I/O.
public struct Timeline: Sendable, Equatable {
    public struct App: Sendable, Equatable {
        public var appID: String
        /// One value per slot: the probability that the user opens the app in it. The
        /// renderers clamp values outside [0, 1] (and NaN, to 0) and read missing ones as 0.
        public var probabilities: [Double]
        /// The planned refresh windows of this app in the span.
        public var refreshes: [UnixTime]
        /// Its pending task identifiers.
        public var pending: [String]
        /// Not used for `[limits] inactive_after` (`Timeline.inactiveAfterSeconds`): nothing is
        /// planned for it.
        public var inactive: Bool

        public init(appID: String, probabilities: [Double], refreshes: [UnixTime] = [], pending: [String] = [], inactive: Bool = false) {
            self.appID = appID
            self.probabilities = probabilities
            self.refreshes = refreshes
            self.pending = pending
            self.inactive = inactive
        }
    }

    /// When the agent answered.
    public var now: UnixTime
    /// The start of the first slot (aligned to the slot grid, at or before `now`).
    public var start: UnixTime
    public var slotSeconds: Int
    public var slots: Int
    /// The grid of planned windows now: 900 s on battery, 300 s on AC.
    public var gridSeconds: Int
    /// The agent's planned wake windows in the span.
    public var windows: [UnixTime]
    public var apps: [App]
    /// How the agent places refreshes (`[refresh] strategy`). With `every-window` it predicts
    /// nothing: the apps come without probabilities, and a pending refresh runs in the next
    /// wake window.
    public var strategy: RefreshStrategy
    /// `[limits] inactive_after`: how long unused makes an app `inactive`. Nil when the agent
    /// did not say (one from before it did).
    public var inactiveAfterSeconds: Double?

    public init(
        now: UnixTime, start: UnixTime, slotSeconds: Int = 900, slots: Int = 96, gridSeconds: Int = 900,
        windows: [UnixTime] = [], apps: [App] = [], strategy: RefreshStrategy = .predicted,
        inactiveAfterSeconds: Double? = nil
    ) {
        self.now = now
        self.start = start
        self.slotSeconds = slotSeconds
        self.slots = slots
        self.gridSeconds = gridSeconds
        self.windows = windows
        self.apps = apps
        self.strategy = strategy
        self.inactiveAfterSeconds = inactiveAfterSeconds
    }

    /// What an inactive app's strip says: for how long unused, as the agent is configured
    /// (`[limits] inactive_after`, 7 days by default, may be set to 2 days or 30).
    public var inactiveWords: String {
        guard let seconds = inactiveAfterSeconds, seconds.isFinite, seconds > 0 else {
            return "inactive: unused for [limits] inactive_after, nothing planned"
        }
        return "inactive: unused for \(RunWhenEligiblePolicy.durationWords(seconds, roundingUp: false)), nothing planned"
    }

    /// What an app's strip says when the agent predicts nothing (`strategy` `every-window`).
    public static let everyWindowWords = "nothing predicted ([refresh] strategy = every-window): "
        + "a pending refresh runs in the next wake window"

    /// The end of the last slot.
    public var end: UnixTime { start + Double(max(0, slots)) * Double(max(1, slotSeconds)) }

    /// A probability made fit to draw: in [0, 1], NaN as 0.
    public static func clamp(_ p: Double) -> Double {
        guard p.isFinite else { return p == .infinity ? 1 : 0 }
        return min(1, max(0, p))
    }

    /// The app's probability in each slot, clamped, exactly `slots` of them.
    public func slotProbabilities(_ app: App) -> [Double] {
        (0..<max(0, slots)).map { $0 < app.probabilities.count ? Self.clamp(app.probabilities[$0]) : 0 }
    }

    /// Whether the agent sent any prediction for the app.
    public static func hasData(_ app: App) -> Bool { !app.probabilities.isEmpty }

    /// The one chance the app has in every slot, when all its slots have the same (of at least
    /// 0.5 %): the agent's prior for an app whose use it has not seen, which has no pattern to
    /// draw. On the shared scale it would fill every cell, and on a fresh agent, where every
    /// app has it, read as "certain all day". `nil` when the slots differ or show nothing.
    public func flatChance(_ app: App) -> Double? {
        guard Self.hasData(app), slots > 1 else { return nil }
        let p = slotProbabilities(app)
        guard let first = p.first, first >= TimelineText.visible, p.allSatisfy({ $0 == first }) else { return nil }
        return first
    }

    /// What an app's strip says in place of a flat one (`flatChance`).
    public func flatWords(_ chance: Double) -> String {
        "no use seen yet: \(TimelineSafeText.percent(chance)) in every \(TimelineSafeText.span(max(1, slotSeconds))) slot until it is learned"
    }
}

/// Text made safe to show: control characters (an escape sequence an app put in its id)
/// become "?", so a timeline cannot drive the terminal or break an SVG.
enum TimelineSafeText {
    static func clean(_ text: String) -> String {
        var out = ""
        for scalar in text.unicodeScalars {
            switch scalar.value {
            case 0x00..<0x20, 0x7F..<0xA0, 0xFFFE, 0xFFFF: out.unicodeScalars.append("?")
            default: out.unicodeScalars.append(scalar)
            }
        }
        return out
    }

    /// At most `width` characters; a longer id keeps its end (the app's own name, in a
    /// reverse-DNS id) after "…".
    static func truncated(_ text: String, to width: Int) -> String {
        guard text.count > width else { return text }
        guard width > 1 else { return String(repeating: "…", count: max(0, width)) }
        return "…" + String(text.suffix(width - 1))
    }

    /// "UTC", "UTC+01:00", "UTC-03:30".
    static func offset(_ seconds: Int) -> String {
        guard seconds != 0 else { return "UTC" }
        let minutes = abs(seconds) / 60
        return "UTC" + (seconds < 0 ? "-" : "+") + twoDigits(minutes / 60) + ":" + twoDigits(minutes % 60)
    }

    /// "14:05" for a Unix time shown at a UTC offset.
    static func clock(_ unix: UnixTime, offset: Int) -> String {
        let minute = Int(floorDiv(unix + Double(offset), 60))
        let dayMinute = ((minute % 1440) + 1440) % 1440
        return twoDigits(dayMinute / 60) + ":" + twoDigits(dayMinute % 60)
    }

    /// "45 s", "15 min", "90 min", "24 h": the largest unit that divides it.
    static func span(_ seconds: Int) -> String {
        if seconds > 0 && seconds % 3600 == 0 { return "\(seconds / 3600) h" }
        if seconds > 0 && seconds % 60 == 0 { return "\(seconds / 60) min" }
        return "\(seconds) s"
    }

    static func twoDigits(_ n: Int) -> String { n < 10 ? "0\(n)" : "\(n)" }

    static func floorDiv(_ a: Double, _ b: Double) -> Double { (a / b).rounded(.down) }

    /// "62 %", "8 %", "0.4 %": a probability as people read it.
    static func percent(_ p: Double) -> String {
        let tenths = Int((p * 1000).rounded())
        if tenths >= 100 || tenths % 10 == 0 { return "\(Int((p * 100).rounded())) %" }
        return "\(tenths / 10).\(tenths % 10) %"
    }
}
