/// The `bgpolicy` refresh policy in replay: the agent's `RefreshPlanner` on a virtual clock.
///
/// Windows open on the 15-min grid (SPEC §2, on battery; aligned to the Unix epoch), and, as
/// the agent opens them (a replay has no unlock, charger or network events):
/// - a second after each open, for the refreshes the planner chooses among the apps not in
///   use (the user is at work, and apps are often opened one after another;
///   `RefreshPlanner.chooseAfterOpen`);
/// - a second after each close, for the app just left alone, if the planner chooses it
///   (`RefreshPlanner.choosesAfterUse`).
/// When one of these two opens (it chose a refresh), it also takes the apps not in use that a
/// grid window would take then (`RefreshPlanner.chooseAlongside`).
/// In each window the apps with a pending refresh request (each app resubmits after each open
/// and each refresh) are the candidates, all in good standing (a trace has no slice results).
/// A refresh at a grid point serves opens in the next 15 minutes, so its lead before a
/// predicted open is 0–15 min.
///
/// A trace need not record closes (SPEC §4 allows a trace of opens alone). An app opened again
/// with no close since its last open is taken as one whose trace records none: its earlier use
/// ended at a time not known (`RefreshPlanner.recordLeftUnseen`), and from then on each of its
/// opens is a use that ends at once, with its window after use a second later, until a close
/// of it is seen. Without this, such an app would stay in use from its first open to the end,
/// and neither window after an open nor after use would ever serve it.
public struct PredictivePolicy: ReplayPolicy {
    public var gridSeconds: Double = 900
    public private(set) var planner: RefreshPlanner
    /// Apps with a refresh request, sorted (each window lists its candidates in this order).
    /// The planner's thresholds adapt while there is one (`RefreshPlanner.refreshesWaiting`).
    private var pending = SortedStrings() {
        didSet { planner.refreshesWaiting = !pending.elements.isEmpty }
    }
    /// Apps opened and not closed since.
    private var inUse: Set<String> = []
    /// Apps whose closes the trace does not record: opened again while in use, and not closed
    /// since. Each of their opens is a use that ends at once.
    private var closesUnrecorded: Set<String> = []
    /// The window a second after the last open, until it has come.
    private var afterOpen: Double?
    /// The windows a second after each close that has not come yet, in time order: when, and
    /// the app left.
    private var afterUse: [(time: Double, appID: String)] = []
    /// Whether windows open after opens and closes (the default, as in the agent).
    public var refreshOnlyWindows = true

    /// `configuration`'s knobs that the planner acts on are applied (`RefreshPlanner.configure`):
    /// `[refresh] lead`, `min_interval`, `budget`, `windows_per_day`, `[limits] inactive_after`.
    public init(registeredAppCount: Int = 0, configuration: PolicyConfiguration = .defaults) {
        planner = RefreshPlanner(slotSeconds: 900, registeredAppCount: registeredAppCount)
        planner.configure(configuration)
        planner.refreshesWaiting = false
    }

    public mutating func observe(_ event: UsageEvent) {
        switch event.kind {
        case .open:
            if inUse.contains(event.appID) {
                // Opened again with no close between: the trace records none for this app.
                closesUnrecorded.insert(event.appID)
                planner.recordLeftUnseen(event.appID)
            }
            planner.recordOpen(of: event.appID, at: event.time)
            inUse.insert(event.appID)
            if refreshOnlyWindows { afterOpen = event.time + 1 }
            // Back within the second: there is nothing to refresh it for.
            afterUse.removeAll { $0.appID == event.appID }
            if closesUnrecorded.contains(event.appID) { left(event.appID, at: event.time) }
        case .close:
            closesUnrecorded.remove(event.appID)
            left(event.appID, at: event.time)
        }
    }

    /// The user left `appID` at `time`.
    private mutating func left(_ appID: String, at time: Double) {
        planner.recordClose(of: appID, at: time)
        inUse.remove(appID)
        if refreshOnlyWindows { afterUse.append((time + 1, appID)) }
    }

    public mutating func resubmitted(appID: String, at time: Double) {
        pending.insert(appID)
    }

    public mutating func nextWake(after time: Double) -> Double? {
        var grid = (time / gridSeconds).rounded(.down) * gridSeconds
        while grid <= time { grid += gridSeconds }
        var next = grid
        if let afterOpen, afterOpen > time { next = min(next, afterOpen) }
        if let first = afterUse.first(where: { $0.time > time }) { next = min(next, first.time) }
        return next
    }

    public mutating func wake(at time: Double) -> [String] {
        planner.advance(to: time)
        var chosen: [String] = []
        // The windows after closes that are due, in the order of the closes.
        let due = afterUse.prefix { $0.time <= time }
        afterUse.removeFirst(due.count)
        for window in due where window.time == time && pending.contains(window.appID) {
            guard planner.choosesAfterUse(RefreshPlanner.Candidate(appID: window.appID), at: time) else { continue }
            planner.recordWindow(at: time, refreshed: [window.appID], afterUse: window.appID)
            pending.remove(window.appID)
            chosen.append(window.appID)
        }
        let onGrid = time.truncatingRemainder(dividingBy: gridSeconds) == 0
        let opened = time == afterOpen
        if opened { afterOpen = nil }
        if onGrid || opened {
            // On the grid every app with a request; after an open, the apps not in use.
            let candidates = pending.elements.filter { onGrid || !inUse.contains($0) }
                .map { RefreshPlanner.Candidate(appID: $0) }
            let more = onGrid
                ? planner.choose(at: time, among: candidates, opportunistic: opened || !chosen.isEmpty)
                : planner.chooseAfterOpen(at: time, among: candidates)
            planner.recordWindow(at: time, refreshed: more)
            for app in more { pending.remove(app) }
            chosen += more
        }
        // A window after use or after an open that is opening takes what a grid window would
        // take among the apps not in use: the machine is awake for it anyway.
        if !chosen.isEmpty, !onGrid {
            let candidates = pending.elements.filter { !inUse.contains($0) }.map { RefreshPlanner.Candidate(appID: $0) }
            let more = planner.chooseAlongside(at: time, among: candidates)
            planner.recordWindow(at: time, refreshed: more)
            for app in more { pending.remove(app) }
            chosen += more
        }
        return chosen
    }
}

/// A set of strings kept sorted, for a replay's pending requests: windows read them in order,
/// many times more often than an app's request comes or goes.
struct SortedStrings {
    private(set) var elements: [String] = []

    func contains(_ element: String) -> Bool {
        let i = index(of: element)
        return i < elements.count && elements[i] == element
    }

    mutating func insert(_ element: String) {
        let i = index(of: element)
        if i == elements.count || elements[i] != element { elements.insert(element, at: i) }
    }

    mutating func remove(_ element: String) {
        let i = index(of: element)
        if i < elements.count && elements[i] == element { elements.remove(at: i) }
    }

    /// The first index whose element is not less than `element`.
    private func index(of element: String) -> Int {
        var lo = 0, hi = elements.count
        while lo < hi {
            let mid = (lo + hi) / 2
            if elements[mid] < element { lo = mid + 1 } else { hi = mid }
        }
        return lo
    }
}
