import BGPolicyCore
import BGPolicyDBus
import BGPolicySystem
import Logging
import Synchronization

/// Holds the machine's conditions: folds every source's reports into one `Conditions` value
/// and tells listeners (the Admin1 `PropertiesChanged` emitter) when it changes.
actor ConditionsHub {
    private var model = ConditionsModel()
    private var listeners: [@Sendable (Conditions) -> Void] = []
    /// The sources whose first report (a fact, or that they are missing) the agent waits for
    /// before it starts any work: the battery and the power profile, whose unknown values hold
    /// nothing back (an unknown network or idle state holds the work that needs them).
    static let settling: Set<ConditionSourceName> = [.udev, .upower, .powerProfiles]
    private var reported: Set<ConditionSourceName> = []
    private var settledListeners: [@Sendable () -> Void] = []
    /// Every source of `settling` has reported once.
    private(set) var settled = false
    private let logger: Logger
    /// The latest conditions in their D-Bus form (built once per change, not per call),
    /// readable without a hop onto the actor by handlers that answer on the connection's thread.
    private let latest = Mutex(Conditions.unknown.dbusDictionary.dbusValue)

    /// udev's timer for the battery, on while udev alone says the machine runs on battery
    /// (`ConditionsModel.udevNeedsRereads`): set after every report and resume.
    nonisolated let udevPolling: UdevBatteryPolling

    init(logger: Logger, udevPolling: UdevBatteryPolling) {
        self.logger = logger
        self.udevPolling = udevPolling
    }

    var current: Conditions { model.conditions }

    /// The latest conditions as the `a{sv}` of `org.bgpolicy.Admin1.Conditions`.
    nonisolated var snapshotDBusValue: DBusValue { latest.withLock { $0 } }

    func onChange(_ listener: @escaping @Sendable (Conditions) -> Void) {
        listeners.append(listener)
    }

    /// Calls `listener` once, when every source of `settling` has reported (at once if so).
    func onSettled(_ listener: @escaping @Sendable () -> Void) {
        if settled { return listener() }
        settledListeners.append(listener)
    }

    /// The machine resumed: what the sources said before may be hours old, and they are
    /// about to read their inputs again. Waits again, as at start, for a report from each
    /// source of `settling` that is live now (one that is not cannot say anything new before
    /// it comes back); `onSettled` listeners added from now on are called when they have
    /// reported, at once when none is live. Until UPower has answered, power comes from udev
    /// once udev has read again (`ConditionsModel.rereadRequested`).
    func resettle() {
        let awaited = Self.settling.intersection(model.conditions.sources)
        reported = Self.settling.subtracting(awaited)
        settled = awaited.isEmpty
        let before = model.conditions
        defer { followPowerSource() }
        if model.rereadRequested(awaited) { publish(from: before, source: "resume") }
    }

    func apply(_ report: ConditionReport, from source: ConditionSourceName) {
        defer { noteReported(source) }
        let before = model.conditions
        let changed = model.apply(report, from: source)
        followPowerSource()
        guard changed else { return }
        publish(from: before, source: source.rawValue)
    }

    /// Turns udev's battery timer on or off as the power source and the charger say.
    private func followPowerSource() {
        let needed = model.udevNeedsRereads
        guard udevPolling.set(active: needed) else { return }
        logger.debug(
            needed
                ? "On battery without UPower: udev reads the battery again on a timer"
                : "udev's battery timer is off (on AC, no battery, or UPower is live)",
            metadata: ["interval.seconds": "\(udevPolling.interval.components.seconds)"])
    }

    /// The conditions changed from `before`: logs it and tells the listeners.
    private func publish(from before: Conditions, source: String) {
        let conditions = model.conditions
        let encoded = conditions.dbusDictionary.dbusValue
        latest.withLock { $0 = encoded }
        // A battery draining on its own moves the level every minute or two, all day: in the
        // journal at info that would be a hundred lines a charge saying nothing new.
        var levelAside = before
        levelAside.percentage = conditions.percentage
        logger.log(
            level: levelAside == conditions ? .debug : .info,
            "Conditions changed",
            metadata: ["source": "\(source)", "conditions": "\(conditions.summary)",
                       "live": "\(conditions.sources.sorted().map(\.rawValue).joined(separator: ","))"])
        for listener in listeners { listener(conditions) }
    }

    /// After the listeners heard the report: the work they release sees its facts.
    private func noteReported(_ source: ConditionSourceName) {
        guard !settled else { return }
        reported.insert(source)
        guard Self.settling.isSubset(of: reported) else { return }
        settled = true
        let waiting = settledListeners
        settledListeners = []
        for listener in waiting { listener() }
    }
}

extension Conditions {
    /// The `a{sv}` of `org.bgpolicy.Admin1.Conditions`. Unknown booleans and numbers are left
    /// out; unknown strings are "unknown"; `sources` lists the live inputs.
    var dbusDictionary: [String: Variant] {
        var d: [String: Variant] = [
            "battery_state": Variant(batteryState.rawValue),
            "power_profile": Variant(powerProfile.rawValue),
            "connectivity": Variant(connectivity.rawValue),
            "network_type": Variant(networkType.rawValue),
            "sources": Variant(sources.sorted().map(\.rawValue)),
            "summary": Variant(summary),
        ]
        if let onBattery { d["on_battery"] = Variant(onBattery) }
        if let percentage { d["percentage"] = Variant(percentage) }
        if let metered { d["metered"] = Variant(metered) }
        if let idle { d["idle"] = Variant(idle) }
        if let locked { d["locked"] = Variant(locked) }
        return d
    }
}
