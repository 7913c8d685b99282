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
/// It polls in one state only. Many ACPI batteries change `capacity` and `energy_now` without a
/// uevent, so a battery draining is seen only at the next uevent (plug, unplug, status change)
/// or resume. UPower polls for it; when UPower is not live and the machine runs on battery, the
/// agent turns `polling` on, and the watch reads the supplies again every `[battery]
/// udev_read_interval` (60 s), on its own thread (`PowerSupplyWatch.reread(every:)`), with no
/// timer of the agent's. A timed re-read that finds the same devices yields nothing, and one
/// that finds the same facts reports nothing; one asked through `context.rereads` (a resume)
/// reports them all the same, for the agent waits for that answer before it starts work
/// (`ConditionsHub.resettle`). On AC, or with UPower live, the timer does not exist.
///
/// A watch that breaks (libudev cannot be set up, the uevent socket hangs up, an enumeration
/// fails) is reported lost, and started again after a wait: `firstRetry`, doubled after each
/// failure up to `longestRetry`, and back to the first after a watch that ran that long. On a
/// machine without UPower these are the only battery and charger facts, and they would
/// otherwise stay unknown until the agent restarted. Nothing runs between the retries, and a
/// resume cuts the wait short: a machine that slept through its hour of waiting, with the
/// charger plugged or pulled meanwhile, is read as it wakes, not up to an hour later.
public struct UdevPowerSource: ConditionSource {
    public let name = ConditionSourceName.udev

    /// Starts a watch of the supplies: libudev's thread (`UdevPowerSupplyMonitor`), or a test's.
    let startWatch: @Sendable () -> (any PowerSupplyWatch, AsyncStream<UdevPowerSupplyMonitor.Event>)
    /// When to read the supplies again on a timer (on battery without UPower); nil: never.
    let polling: UdevBatteryPolling?

    /// - Parameter polling: turned on by the agent while udev alone says the machine runs on
    ///   battery; nil for a source that reads on uevents and re-read requests alone.
    public init(polling: UdevBatteryPolling? = nil) {
        self.init(polling: polling) { UdevPowerSupplyMonitor.start() }
    }

    init(
        polling: UdevBatteryPolling? = nil,
        startWatch: @escaping @Sendable () -> (any PowerSupplyWatch, AsyncStream<UdevPowerSupplyMonitor.Event>)
    ) {
        self.polling = polling
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
            if let polling {
                group.addTask { await follow(polling, current: current) }
            }
            var delay = Self.firstRetry
            while !Task.isCancelled {
                let began = ContinuousClock.now
                guard await watch(context, current: current) else { break }
                if began.duration(to: .now) >= Self.longestRetry { delay = Self.firstRetry }
                context.logger.info(
                    "Reading power supplies from udev again after a wait",
                    metadata: ["retry.seconds": "\(delay.components.seconds)"])
                let end = await wait(delay, context: context, current: current)
                if end == .cancelled { break }
                if end == .reread {
                    context.logger.info("Resumed: reading power supplies from udev now, before the wait ends")
                }
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
                    // A re-read asked (a resume) is answered even when nothing changed: the
                    // agent waits for the answer. Any enumeration from now on answers it.
                    let asked = current.takeAnswerDue()
                    if sample != last || asked {
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

    /// Follows `polling`: while it is on, the watch under way (and each one started after)
    /// reads the supplies again every interval on its own thread, and reports only what
    /// changed; while it is off, it does not. No timer of the agent's runs for it. Runs until
    /// the task is cancelled. A broken watch is not hurried: its retry keeps its own wait (and
    /// it has no facts, so the agent turns polling off).
    private func follow(_ polling: UdevBatteryPolling, current: CurrentWatch) async {
        while !Task.isCancelled {
            let now = polling.current
            current.reread(every: now.active ? now.interval : nil)
            await polling.changed(from: now.version)
        }
    }

    private enum WaitEnd { case elapsed, reread, cancelled }

    /// The wait before the next watch: `delay`, or until a re-read is asked (a resume), or the
    /// task is cancelled, whichever comes first.
    private func wait(_ delay: Duration, context: SourceContext, current: CurrentWatch) async -> WaitEnd {
        await withTaskGroup(of: WaitEnd.self) { group in
            group.addTask { (try? await context.sleep(delay)) == nil ? .cancelled : .elapsed }
            group.addTask { await current.rereadAsked() ? .reread : .cancelled }
            let first = await group.next() ?? .cancelled
            group.cancelAll()
            return Task.isCancelled ? .cancelled : first
        }
    }

    /// The watch under way, if any, for the re-reads to reach; between watches, whether one
    /// was asked, for the wait to end at.
    private final class CurrentWatch: Sendable {
        private struct State {
            var watch: (any PowerSupplyWatch)?
            /// The timed re-reads' period, for the watch under way and each started after.
            var period: Duration?
            /// A re-read asked while no watch ran, not yet taken by a wait.
            var asked = false
            /// A re-read asked of the watch under way, not yet answered by an enumeration.
            var answerDue = false
            var waiter: CheckedContinuation<Bool, Never>?
        }
        private let state = Mutex(State())

        /// A new watch enumerates as it starts, which answers any re-read asked before; it
        /// takes the timed re-reads' period.
        /// (The watch is told under the lock, so that two periods set at once reach it in the
        /// order they were set; a watch's `reread` only records it and wakes its thread.)
        func set(_ new: (any PowerSupplyWatch)?) {
            state.withLock { state in
                state.watch = new
                if new != nil { (state.asked, state.answerDue) = (false, false) }
                if let new, let period = state.period { new.reread(every: period) }
            }
        }

        /// The timed re-reads' period: the watch under way takes it now, the next ones as they
        /// start. Between watches the retry's wait stands (a re-read asked then would end it,
        /// as a resume does).
        func reread(every period: Duration?) {
            state.withLock { state in
                state.period = period
                state.watch?.reread(every: period)
            }
        }

        /// A re-read asked (a resume): the next enumeration is reported even if nothing changed.
        func rescan() {
            let (watch, waiter) = state.withLock { state -> ((any PowerSupplyWatch)?, CheckedContinuation<Bool, Never>?) in
                if let watch = state.watch {
                    state.answerDue = true
                    return (watch, nil)
                }
                if let waiter = state.waiter {
                    state.waiter = nil
                    return (nil, waiter)
                }
                state.asked = true
                return (nil, nil)
            }
            watch?.rescan()
            waiter?.resume(returning: true)
        }

        /// Whether the enumeration at hand answers a re-read asked of the watch; takes it.
        func takeAnswerDue() -> Bool {
            state.withLock { state in
                defer { state.answerDue = false }
                return state.answerDue
            }
        }

        /// Returns true once a re-read has been asked since the last watch ended (at once if
        /// one was), false if the task is cancelled first.
        func rereadAsked() async -> Bool {
            await withTaskCancellationHandler {
                await withCheckedContinuation { (waiter: CheckedContinuation<Bool, Never>) in
                    let answer = state.withLock { state -> Bool? in
                        if state.asked {
                            state.asked = false
                            return true
                        }
                        if Task.isCancelled { return false }
                        state.waiter = waiter
                        return nil
                    }
                    if let answer { waiter.resume(returning: answer) }
                }
            } onCancel: {
                state.withLock { state in
                    defer { state.waiter = nil }
                    return state.waiter
                }?.resume(returning: false)
            }
        }
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
