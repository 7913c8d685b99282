public import BGPolicyCore
public import BGPolicyDBus
import Logging

/// Battery and charger from UPower (system bus): `OnBattery` and the DisplayDevice's
/// `Percentage`, `State`, `WarningLevel`, `TimeToEmpty` and `IsPresent`.
///
/// A `PropertiesChanged` of either object, a device added or removed, or a resume makes it
/// read both objects again: re-reading whole objects is cheap and cannot drift the way
/// applying deltas can.
public struct UPowerSource: ConditionSource {
    public static let busName = "org.freedesktop.UPower"
    static let managerPath = try! ObjectPath("/org/freedesktop/UPower")
    static let displayDevicePath = try! ObjectPath("/org/freedesktop/UPower/devices/DisplayDevice")
    static let deviceInterface = "org.freedesktop.UPower.Device"

    public let name = ConditionSourceName.upower
    let connection: DBusConnection

    public init(systemBus: DBusConnection) {
        connection = systemBus
    }

    public func run(_ context: SourceContext) async {
        let follower = DaemonFollower(connection: connection, name: Self.busName, logger: context.logger, sleep: context.sleep)
        await follower.run(rereads: context.rereads, lost: { await context.report(.lost) }) { owner, succeeded in
            try await session(owner: owner, context: context, succeeded: succeeded)
        }
    }

    private func session(owner: String, context: SourceContext, succeeded: () -> Void) async throws {
        let manager = RemoteObject(connection: connection, owner: owner, path: Self.managerPath, interface: Self.busName)
        let display = RemoteObject(connection: connection, owner: owner, path: Self.displayDevicePath, interface: Self.deviceInterface)
        // Subscribe first, then read: a change between the two cannot be missed.
        // Only the two objects read here: upowerd also announces every device's own changes
        // (its update timestamps among them), which would wake the agent for nothing.
        let changes = try await manager.propertiesChanged()
        let displayChanges = try await display.propertiesChanged()
        let added = try await connection.subscribe(MatchRule(sender: owner, interface: Self.busName, member: "DeviceAdded", path: Self.managerPath))
        let removed = try await connection.subscribe(MatchRule(sender: owner, interface: Self.busName, member: "DeviceRemoved", path: Self.managerPath))

        var last: PowerSample?
        func read() async throws {
            let sample = Self.sample(manager: try await manager.getAll(), display: try await display.getAll(), logger: context.logger)
            if sample != last {
                last = sample
                await context.report(.power(sample))
            }
        }
        try await read()
        succeeded()
        try await rereadOnSignals([changes, displayChanges, added, removed], read: read)
    }

    /// Turns UPower's properties into a sample. Missing or mistyped properties stay unknown.
    static func sample(manager: [String: Variant], display: [String: Variant], logger: Logger) -> PowerSample {
        let daemon = busName
        let state = display.property("State", as: UInt32.self, logger: logger, from: daemon).map(BatteryState.init(upower:)) ?? .unknown
        // Without a readable IsPresent, a battery whose state UPower knows is there: taking it
        // as absent would read as "on AC", and let work that waits for the charger run on the
        // battery.
        let present = display.property("IsPresent", as: Bool.self, logger: logger, from: daemon) ?? (state != .unknown)
        return PowerSample(
            onBatteryReported: manager.property("OnBattery", as: Bool.self, logger: logger, from: daemon),
            batteryPresent: present,
            percentage: display.property("Percentage", as: Double.self, logger: logger, from: daemon).flatMap { $0.isFinite ? min(max($0, 0), 100) : nil },
            state: state,
            warningLevel: display.property("WarningLevel", as: UInt32.self, logger: logger, from: daemon).map(BatteryWarningLevel.init(upower:)) ?? .unknown,
            timeToEmpty: display.property("TimeToEmpty", as: Int64.self, logger: logger, from: daemon).flatMap { $0 > 0 ? $0 : nil })
    }
}
