public import BGPolicyCore
import Logging
import Synchronization

/// Battery and charger from udev and sysfs (`power_supply`): the fallback when UPower is
/// absent or goes away, and the only power source on machines without UPower.
///
/// It reads the kernel's plain attributes and turns them into the same `PowerSample` UPower
/// gives (STYLE.md example 1); a machine without any supply is simply "no battery", which the
/// core reads as on AC (example 2). Every uevent and every resume make it read all supplies
/// again: there are a handful, and a full read cannot drift the way applying deltas can.
///
/// It does not poll. Firmware that changes `capacity` without a uevent is seen at the next
/// uevent (plug, unplug, status change) or resume.
///
/// A watch that breaks (libudev cannot be set up, the uevent socket hangs up, an enumeration
/// fails) is reported lost, and started again after a wait: `firstRetry`, doubled after each
/// failure up to `longestRetry`, and back to the first after a watch that ran that long. On a
/// machine without UPower these are the only battery and charger facts, and they would
/// otherwise stay unknown until the agent restarted. Nothing runs between the retries.
public struct UdevPowerSource: ConditionSource {
    public let name = ConditionSourceName.udev

    /// Starts a watch of the supplies: libudev's thread (`UdevPowerSupplyMonitor`), or a test's.
    let startWatch: @Sendable () -> (any PowerSupplyWatch, AsyncStream<UdevPowerSupplyMonitor.Event>)

    public init() {
        self.init { UdevPowerSupplyMonitor.start() }
    }

    init(startWatch: @escaping @Sendable () -> (any PowerSupplyWatch, AsyncStream<UdevPowerSupplyMonitor.Event>)) {
        self.startWatch = startWatch
    }

    /// The wait before the first retry after a watch broke.
    static let firstRetry: Duration = .seconds(10)
    /// The longest wait between retries, and how long a watch must have run for its failure to
    /// count as a first one.
    static let longestRetry: Duration = .seconds(3600)

    public func run(_ context: SourceContext) async {
        // The re-reads are followed once, for every watch in turn: a stream's reader that is
        // cancelled ends the stream.
        let current = CurrentWatch()
        await withTaskGroup(of: Void.self) { group in
            group.addTask {
                for await _ in context.rereads { current.rescan() }
            }
            var delay = Self.firstRetry
            while !Task.isCancelled {
                let began = ContinuousClock.now
                guard await watch(context, current: current) else { break }
                if began.duration(to: .now) >= Self.longestRetry { delay = Self.firstRetry }
                context.logger.info(
                    "Reading power supplies from udev again after a wait",
                    metadata: ["retry.seconds": "\(delay.components.seconds)"])
                do { try await context.sleep(delay) } catch { break }
                delay = min(delay * 2, Self.longestRetry)
            }
            group.cancelAll()
        }
    }

    /// One watch, to its end: true when it broke (its facts are reported lost), false when the
    /// task was cancelled. Returns only once the watch has let go of everything.
    private func watch(_ context: SourceContext, current: CurrentWatch) async -> Bool {
        let (monitor, events) = startWatch()
        current.set(monitor)
        let broke = await withTaskCancellationHandler {
            var last: PowerSample?
            var broke = false
            // Ends when the task is cancelled or the thread has ended (after a failure).
            for await event in events {
                switch event {
                case .devices(let devices):
                    let sample = Self.sample(from: devices)
                    if sample != last {
                        last = sample
                        await context.report(.power(sample))
                    }
                case .failed(let error):
                    context.logger.warning("Cannot read power supplies from udev", metadata: ["error": "\(error)"])
                    await context.report(.lost)
                    broke = true
                }
            }
            return broke
        } onCancel: {
            monitor.stop()
        }
        current.set(nil)
        monitor.stop()
        await monitor.finished()
        return broke && !Task.isCancelled
    }

    /// The watch under way, if any, for the re-reads to reach.
    private final class CurrentWatch: Sendable {
        private let watch = Mutex<(any PowerSupplyWatch)?>(nil)
        func set(_ new: (any PowerSupplyWatch)?) { watch.withLock { $0 = new } }
        func rescan() { watch.withLock { $0 }?.rescan() }
    }

    /// Turns one enumeration into a sample. Pure; peripherals (`scope=Device`) are ignored.
    ///
    /// - `onBatteryReported`: no adapter (Mains, USB) online; nil without any adapter, or
    ///   when no adapter says it is online and one cannot say.
    /// - `batteryPresent`: a system battery whose `present` is not 0 (drivers without the
    ///   attribute have their battery built in, as UPower also assumes).
    /// - `percentage`: per battery from `capacity` or `energy`/`charge` now/full; several
    ///   batteries are averaged weighted by `energy_full` (or by `charge_full` when some lack
    ///   energy, or equally when neither is known for all).
    /// - `state`: discharging if any battery discharges, else charging if any charges, else
    ///   fully charged if all are full, else not charging (pending charge) if all are full or
    ///   not charging — a laptop holding a charge threshold on AC — else unknown.
    public static func sample(from devices: [PowerSupplyDevice]) -> PowerSample {
        let system = devices.filter(\.isSystem)
        let adapters = system.filter(\.isAdapter)
        let onBatteryReported: Bool?
        if adapters.isEmpty || adapters.contains(where: { $0.online == true }) {
            onBatteryReported = adapters.isEmpty ? nil : false
        } else {
            onBatteryReported = adapters.contains(where: { $0.online == nil }) ? nil : true
        }
        let batteries = system.filter { $0.isBattery && $0.present != false }
        guard !batteries.isEmpty else { return PowerSample(onBatteryReported: onBatteryReported, batteryPresent: false) }
        return PowerSample(
            onBatteryReported: onBatteryReported, batteryPresent: true, percentage: percentage(of: batteries),
            state: state(of: batteries))
    }

    static func percentage(of batteries: [PowerSupplyDevice]) -> Double? {
        let known = batteries.compactMap { battery in battery.percentage.map { (battery, $0) } }
        guard !known.isEmpty else { return nil }
        func weights(_ full: (PowerSupplyDevice) -> Int64?) -> [Double]? {
            let values = known.map { full($0.0) ?? 0 }
            return values.allSatisfy { $0 > 0 } ? values.map(Double.init) : nil
        }
        let w = weights(\.energyFull) ?? weights(\.chargeFull) ?? Array(repeating: 1, count: known.count)
        let total = w.reduce(0, +)
        let sum = zip(known, w).reduce(0) { $0 + $1.0.1 * $1.1 }
        let value = sum / total
        return value.isFinite ? min(max(value, 0), 100) : nil
    }

    static func state(of batteries: [PowerSupplyDevice]) -> BatteryState {
        let states = batteries.map { $0.status.map(BatteryState.init(sysfs:)) ?? .unknown }
        if states.contains(.discharging) { return .discharging }
        if states.contains(.charging) { return .charging }
        if states.allSatisfy({ $0 == .fullyCharged }) { return .fullyCharged }
        if states.allSatisfy({ $0 == .fullyCharged || $0 == .pendingCharge }) { return .pendingCharge }
        return .unknown
    }
}
