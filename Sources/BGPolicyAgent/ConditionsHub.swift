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
    private let logger: Logger
    /// The latest conditions in their D-Bus form (built once per change, not per call),
    /// readable without a hop onto the actor by handlers that answer on the connection's thread.
    private let latest = Mutex(Conditions.unknown.dbusDictionary.dbusValue)

    init(logger: Logger) {
        self.logger = logger
    }

    var current: Conditions { model.conditions }

    /// The latest conditions as the `a{sv}` of `org.bgpolicy.Admin1.Conditions`.
    nonisolated var snapshotDBusValue: DBusValue { latest.withLock { $0 } }

    func onChange(_ listener: @escaping @Sendable (Conditions) -> Void) {
        listeners.append(listener)
    }

    func apply(_ report: ConditionReport, from source: ConditionSourceName) {
        guard model.apply(report, from: source) else { return }
        let conditions = model.conditions
        let encoded = conditions.dbusDictionary.dbusValue
        latest.withLock { $0 = encoded }
        logger.info(
            "Conditions changed",
            metadata: ["source": "\(source.rawValue)", "conditions": "\(conditions.summary)",
                       "live": "\(conditions.sources.sorted().map(\.rawValue).joined(separator: ","))"])
        for listener in listeners { listener(conditions) }
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
