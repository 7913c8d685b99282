import BGPolicyCore
@testable import BGPolicySystem
import Foundation
import Glibc
import Logging
import Synchronization
import Testing

// MARK: - The pure sample

/// One row of the table: what sysfs shows, and the sample (and resulting `onBattery`) expected.
struct UdevSampleCase: Sendable, CustomTestStringConvertible {
    let name: String
    let devices: [PowerSupplyDevice]
    let sample: PowerSample
    let onBattery: Bool?
    var testDescription: String { name }
}

private let acOnline = PowerSupplyDevice(sysname: "AC", type: .mains, online: true)
private let acOffline = PowerSupplyDevice(sysname: "AC", type: .mains, online: false)

private func battery(
    _ name: String = "BAT0", status: String? = "Discharging", capacity: Int64? = nil, energy: (Int64, Int64)? = nil,
    present: Bool? = true, scope: PowerSupplyScope? = nil
) -> PowerSupplyDevice {
    PowerSupplyDevice(
        sysname: name, type: .battery, present: present, status: status, capacity: capacity, energyNow: energy?.0, energyFull: energy?.1,
        scope: scope)
}

private let sampleCases: [UdevSampleCase] = [
    UdevSampleCase(
        name: "AC online, battery discharging: reported on AC, but the draining battery wins",
        devices: [acOnline, battery(capacity: 60)],
        sample: PowerSample(onBatteryReported: false, batteryPresent: true, percentage: 60, state: .discharging), onBattery: true),
    UdevSampleCase(
        name: "AC offline, battery discharging, percentage from energy",
        devices: [acOffline, battery(energy: (48_000_000, 60_000_000))],
        sample: PowerSample(onBatteryReported: true, batteryPresent: true, percentage: 80, state: .discharging), onBattery: true),
    UdevSampleCase(
        name: "AC online, battery full",
        devices: [acOnline, battery(status: "Full", capacity: 100)],
        sample: PowerSample(onBatteryReported: false, batteryPresent: true, percentage: 100, state: .fullyCharged), onBattery: false),
    UdevSampleCase(
        name: "AC online, battery charging (order of devices does not matter)",
        devices: [battery(status: "Charging", capacity: 30), acOnline],
        sample: PowerSample(onBatteryReported: false, batteryPresent: true, percentage: 30, state: .charging), onBattery: false),
    UdevSampleCase(
        name: "desktop: adapter, no battery",
        devices: [acOnline],
        sample: PowerSample(onBatteryReported: false, batteryPresent: false), onBattery: false),
    UdevSampleCase(
        name: "virtual machine: no supply at all",
        devices: [],
        sample: PowerSample(onBatteryReported: nil, batteryPresent: false), onBattery: false),
    UdevSampleCase(
        name: "a mouse's battery is ignored",
        devices: [acOnline, battery("hidpp_battery_0", capacity: 5, scope: .device)],
        sample: PowerSample(onBatteryReported: false, batteryPresent: false), onBattery: false),
    UdevSampleCase(
        name: "a peripheral's charger is ignored",
        devices: [
            acOffline, PowerSupplyDevice(sysname: "wacom_ac_0", type: .mains, online: true, scope: .device), battery(capacity: 50),
        ],
        sample: PowerSample(onBatteryReported: true, batteryPresent: true, percentage: 50, state: .discharging), onBattery: true),
    UdevSampleCase(
        name: "laptop battery next to a peripheral one",
        devices: [acOffline, battery(capacity: 70), battery("hid-mouse", status: "Charging", capacity: 10, scope: .device)],
        sample: PowerSample(onBatteryReported: true, batteryPresent: true, percentage: 70, state: .discharging), onBattery: true),
    UdevSampleCase(
        name: "two batteries: weighted by energy_full, discharging if any discharges",
        devices: [acOffline, battery("BAT0", energy: (10_000_000, 20_000_000)), battery("BAT1", status: "Full", energy: (60_000_000, 60_000_000))],
        sample: PowerSample(onBatteryReported: true, batteryPresent: true, percentage: 87.5, state: .discharging), onBattery: true),
    UdevSampleCase(
        name: "two batteries: charging if any charges and none discharges",
        devices: [acOnline, battery("BAT0", status: "Full", capacity: 100), battery("BAT1", status: "Charging", capacity: 50)],
        sample: PowerSample(onBatteryReported: false, batteryPresent: true, percentage: 75, state: .charging), onBattery: false),
    UdevSampleCase(
        name: "two batteries: full when all are full",
        devices: [acOnline, battery("BAT0", status: "Full", capacity: 100), battery("BAT1", status: "Full", capacity: 100)],
        sample: PowerSample(onBatteryReported: false, batteryPresent: true, percentage: 100, state: .fullyCharged), onBattery: false),
    UdevSampleCase(
        name: "two batteries: held at a charge threshold (not charging + full)",
        devices: [acOnline, battery("BAT0", status: "Not charging", capacity: 80), battery("BAT1", status: "Full", capacity: 100)],
        sample: PowerSample(onBatteryReported: false, batteryPresent: true, percentage: 90, state: .pendingCharge), onBattery: false),
    UdevSampleCase(
        name: "two batteries: unknown when one says nothing useful",
        devices: [acOnline, battery("BAT0", status: "Unknown", capacity: 80), battery("BAT1", status: "Full", capacity: 100)],
        sample: PowerSample(onBatteryReported: false, batteryPresent: true, percentage: 90, state: .unknown), onBattery: false),
    UdevSampleCase(
        name: "one battery not charging",
        devices: [acOnline, battery(status: "Not charging", capacity: 60)],
        sample: PowerSample(onBatteryReported: false, batteryPresent: true, percentage: 60, state: .pendingCharge), onBattery: false),
    UdevSampleCase(
        name: "missing attributes: battery with only a type, adapter without online",
        devices: [PowerSupplyDevice(sysname: "AC", type: .mains), PowerSupplyDevice(sysname: "BAT0", type: .battery)],
        sample: PowerSample(onBatteryReported: nil, batteryPresent: true, percentage: nil, state: .unknown), onBattery: nil),
    UdevSampleCase(
        name: "empty battery bay (present=0)",
        devices: [acOnline, battery(status: "Unknown", capacity: 0, present: false)],
        sample: PowerSample(onBatteryReported: false, batteryPresent: false), onBattery: false),
    UdevSampleCase(
        name: "charge counters when there is no energy or capacity",
        devices: [acOffline, PowerSupplyDevice(sysname: "BAT0", type: .battery, status: "Discharging", chargeNow: 2_500_000, chargeFull: 5_000_000)],
        sample: PowerSample(onBatteryReported: true, batteryPresent: true, percentage: 50, state: .discharging), onBattery: true),
    UdevSampleCase(
        name: "USB-C charger online, ACPI adapter offline",
        devices: [acOffline, PowerSupplyDevice(sysname: "ucsi-source-psy-USBC000:001", type: .usb, online: true), battery(status: "Charging", capacity: 40)],
        sample: PowerSample(onBatteryReported: false, batteryPresent: true, percentage: 40, state: .charging), onBattery: false),
    UdevSampleCase(
        name: "all adapters offline",
        devices: [acOffline, PowerSupplyDevice(sysname: "ucsi-source-psy-USBC000:001", type: .usb, online: false), battery(capacity: 40)],
        sample: PowerSample(onBatteryReported: true, batteryPresent: true, percentage: 40, state: .discharging), onBattery: true),
    UdevSampleCase(
        name: "one adapter offline, the other cannot say",
        devices: [acOffline, PowerSupplyDevice(sysname: "ADP1", type: .mains), battery(status: nil, capacity: 40)],
        sample: PowerSample(onBatteryReported: nil, batteryPresent: true, percentage: 40, state: .unknown), onBattery: nil),
    UdevSampleCase(
        name: "a UPS is not a charger",
        devices: [PowerSupplyDevice(sysname: "UPS0", type: .ups, online: true), battery(capacity: 40)],
        sample: PowerSample(onBatteryReported: nil, batteryPresent: true, percentage: 40, state: .discharging), onBattery: true),
]

@Suite("UdevPowerSource.sample")
struct UdevPowerSampleTests {
    @Test(arguments: sampleCases)
    func table(_ row: UdevSampleCase) {
        let sample = UdevPowerSource.sample(from: row.devices)
        #expect(sample == row.sample)
        #expect(sample.onBattery == row.onBattery)
    }

    @Test func severalBatteriesWithoutEnergyAreWeightedByChargeThenEqually() {
        let byCharge = [
            PowerSupplyDevice(sysname: "BAT0", type: .battery, capacity: 100, chargeFull: 3_000_000),
            PowerSupplyDevice(sysname: "BAT1", type: .battery, capacity: 0, chargeFull: 1_000_000),
        ]
        #expect(UdevPowerSource.percentage(of: byCharge) == 75)
        // Energy for one and charge for the other cannot be compared: equal weights.
        let mixed = [
            PowerSupplyDevice(sysname: "BAT0", type: .battery, capacity: 100, energyFull: 60_000_000),
            PowerSupplyDevice(sysname: "BAT1", type: .battery, capacity: 0, chargeFull: 1_000_000),
        ]
        #expect(UdevPowerSource.percentage(of: mixed) == 50)
        // A battery without any percentage does not drag the others down.
        let oneUnknown = [
            PowerSupplyDevice(sysname: "BAT0", type: .battery, capacity: 64),
            PowerSupplyDevice(sysname: "BAT1", type: .battery),
        ]
        #expect(UdevPowerSource.percentage(of: oneUnknown) == 64)
        #expect(UdevPowerSource.percentage(of: [PowerSupplyDevice(sysname: "BAT1", type: .battery)]) == nil)
    }

    @Test func hugeCountersStayFinite() {
        let devices = [
            PowerSupplyDevice(sysname: "BAT0", type: .battery, capacity: 10, energyFull: .max),
            PowerSupplyDevice(sysname: "BAT1", type: .battery, capacity: 20, energyFull: .max),
        ]
        let percentage = UdevPowerSource.sample(from: devices).percentage
        #expect(percentage.map { $0.isFinite && (0...100).contains($0) } ?? true)
    }
}

// MARK: - The running source

/// Collects a source's reports and hands them out one at a time.
private struct ReportCollector: Sendable {
    let reports: AsyncStream<ConditionReport>
    let input: AsyncStream<ConditionReport>.Continuation
    let rereads: AsyncStream<Void>
    let reread: AsyncStream<Void>.Continuation
    let context: SourceContext

    init() {
        (reports, input) = AsyncStream.makeStream(of: ConditionReport.self)
        (rereads, reread) = AsyncStream.makeStream(of: Void.self)
        let input = self.input
        context = SourceContext(logger: Logger(label: "test.udev"), rereads: rereads) { input.yield($0) }
    }
}

@Suite("UdevPowerSource running")
struct UdevPowerSourceRunTests {
    /// On whatever machine runs the tests: the source reports once (a sample, or `.lost` where
    /// netlink is not allowed), and a cancelled run returns after releasing its thread.
    @Test(.timeLimit(.minutes(1)))
    func reportsThenStopsWhenCancelled() async {
        let collector = ReportCollector()
        let run = Task { await UdevPowerSource().run(collector.context) }
        var reports = collector.reports.makeAsyncIterator()
        let first = await reports.next()
        switch first {
        case .power?, .lost?: break
        default: Issue.record("unexpected first report \(String(describing: first))")
        }
        run.cancel()
        await run.value
    }

    @Test(.timeLimit(.minutes(1)))
    func cancelledBeforeItStartsReturns() async {
        let collector = ReportCollector()
        let run = Task { await UdevPowerSource().run(collector.context) }
        run.cancel()
        await run.value
    }

    /// Re-reads of this machine, whatever it has, still end on cancel. (What an unchanged
    /// machine's re-read reports is checked on a fake one, in UdevUmockdevTests: real hardware
    /// may change meanwhile, a battery ticks.)
    @Test(.timeLimit(.minutes(1)), .enabled(if: UdevNetlink.isAllowed, "needs /sys and a netlink uevent socket"))
    func rereadsThenCancelEnd() async throws {
        let collector = ReportCollector()
        let run = Task { await UdevPowerSource().run(collector.context) }
        var reports = collector.reports.makeAsyncIterator()
        let first = await reports.next()
        guard case .power? = first else {
            Issue.record("no sample at start, though netlink is allowed: \(String(describing: first))")
            run.cancel()
            await run.value
            return
        }
        collector.reread.yield()
        collector.reread.yield()
        try await Task.sleep(for: .milliseconds(300))
        run.cancel()
        await run.value
    }
}

// MARK: - A watch that breaks

/// A watch of the supplies that plays its part on cue, with no thread: one that breaks says so
/// and ends; one that works reports `devices` at once and again at each rescan, with the
/// battery one percent lower each time (the same each time when `steady`), until it is stopped.
/// It records the timed re-reads' periods it is given, and reads on `tick()` as a timed read
/// would, yielding only a change.
private final class CuedWatch: PowerSupplyWatch {
    private struct State {
        var percent: Int64 = 50
        var rescans = 0
        var periods: [Duration?] = []
        var stopped = false
    }
    private let state = Mutex(State())
    private let events: AsyncStream<UdevPowerSupplyMonitor.Event>.Continuation
    private let steady: Bool
    let stream: AsyncStream<UdevPowerSupplyMonitor.Event>

    init(breaks: Bool, steady: Bool = false) {
        self.steady = steady
        (stream, events) = AsyncStream.makeStream(of: UdevPowerSupplyMonitor.Event.self)
        if breaks {
            events.yield(.failed(UdevError(call: "poll(udev monitor)", code: EPIPE)))
            events.finish()
        } else {
            report()
        }
    }

    var stopped: Bool { state.withLock { $0.stopped } }
    var rescans: Int { state.withLock { $0.rescans } }
    var periods: [Duration?] { state.withLock { $0.periods } }

    private func report() {
        let steady = self.steady
        let percent = state.withLock { state in
            defer { if !steady { state.percent -= 1 } }
            return state.percent
        }
        events.yield(.devices([acOffline, battery(capacity: percent)]))
    }

    func rescan() {
        state.withLock { $0.rescans += 1 }
        report()
    }

    func reread(every period: Duration?) {
        state.withLock { $0.periods.append(period) }
    }

    /// Breaks now, as a monitor whose socket hung up: says so and ends.
    func breakNow() {
        events.yield(.failed(UdevError(call: "poll(udev monitor)", code: EPIPE)))
        events.finish()
    }

    /// A timed read, as the monitor's thread makes one: it yields only when the battery moved.
    func tick() {
        if !steady { report() }
    }

    func stop() {
        state.withLock { $0.stopped = true }
        events.finish()
    }

    func finished() async {}
}

@Suite("UdevPowerSource retrying")
struct UdevPowerSourceRetryTests {
    static func onBattery(_ percent: Double) -> ConditionReport {
        .power(PowerSample(onBatteryReported: true, batteryPresent: true, percentage: percent, state: .discharging))
    }

    /// A watch that breaks is reported lost and started again, after waits of 10, 20 and 40 s
    /// while it keeps breaking; the one that works reports the battery, and takes the re-reads
    /// asked from then on. Without the retry the source ended at the first break, and a machine
    /// without UPower had no battery or charger facts until the agent restarted.
    @Test(.timeLimit(.minutes(1)))
    func aBrokenWatchIsStartedAgainAfterWaitsThatGrow() async {
        let plan = Mutex<[Bool]>([true, true, true, false])
        let started = Mutex<[CuedWatch]>([])
        let source = UdevPowerSource {
            let watch = CuedWatch(breaks: plan.withLock { $0.isEmpty ? false : $0.removeFirst() })
            started.withLock { $0.append(watch) }
            return (watch, watch.stream)
        }
        let waits = Mutex<[Duration]>([])
        let (reports, input) = AsyncStream.makeStream(of: ConditionReport.self)
        let (rereads, reread) = AsyncStream.makeStream(of: Void.self)
        let context = SourceContext(
            logger: Logger(label: "test.udev"), rereads: rereads, sleep: { delay in waits.withLock { $0.append(delay) } },
            report: { input.yield($0) })
        let run = Task { await source.run(context) }
        var iterator = reports.makeAsyncIterator()
        for _ in 0..<3 { #expect(await iterator.next() == .lost) }
        #expect(await iterator.next() == Self.onBattery(50))
        #expect(waits.withLock { $0 } == [.seconds(10), .seconds(20), .seconds(40)])
        reread.yield()
        #expect(await iterator.next() == Self.onBattery(49))
        run.cancel()
        await run.value
        #expect(started.withLock { $0.count } == 4)
        #expect(started.withLock { $0.last?.stopped } == true)
    }

    /// A resume while the source waits to try again starts the next watch at once: a machine
    /// that slept through the wait (up to an hour) is read as it wakes. Without it the re-read
    /// was dropped, and the battery and charger stayed unknown until the wait ran out.
    @Test(.timeLimit(.minutes(1)))
    func aResumeCutsTheWaitShort() async {
        let plan = Mutex<[Bool]>([true, false])
        let source = UdevPowerSource {
            let watch = CuedWatch(breaks: plan.withLock { $0.isEmpty ? false : $0.removeFirst() })
            return (watch, watch.stream)
        }
        let (sleeping, sleepBegan) = AsyncStream.makeStream(of: Duration.self)
        let (reports, input) = AsyncStream.makeStream(of: ConditionReport.self)
        let (rereads, reread) = AsyncStream.makeStream(of: Void.self)
        let context = SourceContext(
            logger: Logger(label: "test.udev"), rereads: rereads,
            sleep: { delay in
                sleepBegan.yield(delay)
                try await Task.sleep(for: .seconds(3600))
            },
            report: { input.yield($0) })
        let run = Task { await source.run(context) }
        var iterator = reports.makeAsyncIterator()
        #expect(await iterator.next() == .lost)
        var waits = sleeping.makeAsyncIterator()
        #expect(await waits.next() == .seconds(10))
        reread.yield()
        #expect(await iterator.next() == Self.onBattery(50))
        // The new watch takes the re-reads from then on.
        reread.yield()
        #expect(await iterator.next() == Self.onBattery(49))
        run.cancel()
        await run.value
    }

    /// Polling on (on battery without UPower), the source gives the watch under way the period
    /// of its timed re-reads, and reports what they find; turned off (on AC, or UPower back),
    /// it takes the period back; a new interval (a reload) reaches it, and so does a watch
    /// started after a break. No sleep of the agent's runs for it: the executor's timer woke
    /// the agent three times a re-read, as often as the watch's own thread did.
    @Test(.timeLimit(.minutes(1)))
    func pollingGivesTheWatchItsPeriodWhileOn() async throws {
        let polling = UdevBatteryPolling(interval: .seconds(90))
        let started = Mutex<[CuedWatch]>([])
        let source = UdevPowerSource(polling: polling) {
            let watch = CuedWatch(breaks: false)
            started.withLock { $0.append(watch) }
            return (watch, watch.stream)
        }
        let sleeps = Mutex<[Duration]>([])
        let (reports, input) = AsyncStream.makeStream(of: ConditionReport.self)
        let (rereads, reread) = AsyncStream.makeStream(of: Void.self)
        let context = SourceContext(
            logger: Logger(label: "test.udev"), rereads: rereads,
            sleep: { delay in
                sleeps.withLock { $0.append(delay) }
                try await Task.sleep(for: .seconds(3600))
            },
            report: { input.yield($0) })
        let run = Task { await source.run(context) }
        var iterator = reports.makeAsyncIterator()
        #expect(await iterator.next() == Self.onBattery(50))
        let first = try #require(started.withLock { $0.first })
        // Off: the watch reads on uevents and re-reads alone (it may be told so, or not).
        try await Task.sleep(for: .milliseconds(100))
        #expect(first.periods.allSatisfy { $0 == nil }, "\(first.periods)")
        polling.set(active: true)
        try await Self.until { first.periods.last == .seconds(90) }
        first.tick()
        #expect(await iterator.next() == Self.onBattery(49))
        polling.set(interval: .seconds(30))
        try await Self.until { first.periods.last == .seconds(30) }
        polling.set(active: false)
        try await Self.until { first.periods.last == .some(nil) }
        polling.set(active: true)
        try await Self.until { first.periods.last == .seconds(30) }
        #expect(sleeps.withLock { $0 }.isEmpty, "no sleep of the agent's for the timed re-reads")

        // The watch breaks; the one started after it (at the resume that cuts the wait short)
        // takes the period as it starts.
        first.breakNow()
        #expect(await iterator.next() == .lost)
        try await Self.until { sleeps.withLock { $0 } == [.seconds(10)] }
        reread.yield()
        #expect(await iterator.next() == Self.onBattery(50))
        let second = try #require(started.withLock { $0.count == 2 ? $0[1] : nil })
        #expect(second.periods == [.seconds(30)])
        run.cancel()
        await run.value
    }

    /// Polls `condition` every 10 ms until it holds (the test's time limit ends a wait that
    /// never does).
    static func until(_ condition: () -> Bool) async throws {
        while !condition() { try await Task.sleep(for: .milliseconds(10)) }
    }

    /// A re-read asked (a resume) of a machine that did not change is answered with the same
    /// facts, for the agent waits for that answer before it starts work. Without the answer,
    /// every resume with the charger as it was held all work for 3 s, and logged that the
    /// sources never read again.
    @Test(.timeLimit(.minutes(1)))
    func aRereadIsAnsweredThoughNothingChanged() async throws {
        let watch = CuedWatch(breaks: false, steady: true)
        let source = UdevPowerSource { (watch, watch.stream) }
        let (reports, input) = AsyncStream.makeStream(of: ConditionReport.self)
        let (rereads, reread) = AsyncStream.makeStream(of: Void.self)
        let context = SourceContext(
            logger: Logger(label: "test.udev"), rereads: rereads, sleep: { _ in try await Task.sleep(for: .milliseconds(10)) },
            report: { input.yield($0) })
        let run = Task { await source.run(context) }
        var iterator = reports.makeAsyncIterator()
        #expect(await iterator.next() == Self.onBattery(50))
        reread.yield()
        #expect(await iterator.next() == Self.onBattery(50))
        run.cancel()
        await run.value
    }

    /// Cancelled while it waits to try again, the source returns at once.
    @Test(.timeLimit(.minutes(1)))
    func aWaitToTryAgainEndsWithTheTask() async {
        let source = UdevPowerSource {
            let watch = CuedWatch(breaks: true)
            return (watch, watch.stream)
        }
        let (reports, input) = AsyncStream.makeStream(of: ConditionReport.self)
        let context = SourceContext(
            logger: Logger(label: "test.udev"), rereads: AsyncStream { _ in }, sleep: Sleeping.task,
            report: { input.yield($0) })
        let run = Task { await source.run(context) }
        var iterator = reports.makeAsyncIterator()
        #expect(await iterator.next() == .lost)
        run.cancel()
        await run.value
    }
}

// MARK: - Under umockdev

/// A umockdev testbed written by hand: the directory layout `UMockdev.Testbed.add_device`
/// makes, which libumockdev-preload serves as `/sys` to this process. Creating one through
/// libumockdev would mean linking GObject; the files are all that enumeration needs.
/// (Uevents need the real testbed: see the integration tests, test_conditions.py.)
struct UmockdevTestbed {
    let root: URL

    /// Whether this process runs under `umockdev-wrapper` (libumockdev-preload loaded).
    static var isActive: Bool { ProcessInfo.processInfo.environment["LD_PRELOAD"]?.contains("umockdev") ?? false }

    init() throws {
        root = FileManager.default.temporaryDirectory.appendingPathComponent("bgpolicy-umockdev-\(UUID().uuidString)")
        for dir in ["sys/devices", "sys/class/power_supply", "sys/bus"] {
            try FileManager.default.createDirectory(at: root.appendingPathComponent(dir), withIntermediateDirectories: true)
        }
    }

    func add(_ name: String, _ attributes: [String: String]) throws {
        let device = root.appendingPathComponent("sys/devices/\(name)")
        try FileManager.default.createDirectory(at: device, withIntermediateDirectories: true)
        try Data().write(to: device.appendingPathComponent("uevent"))
        try FileManager.default.createSymbolicLink(atPath: device.appendingPathComponent("subsystem").path, withDestinationPath: "../../class/power_supply")
        try FileManager.default.createSymbolicLink(
            atPath: root.appendingPathComponent("sys/class/power_supply/\(name)").path, withDestinationPath: "../../devices/\(name)")
        for (key, value) in attributes { try set(name, key, value) }
    }

    func set(_ name: String, _ key: String, _ value: String) throws {
        try Data((value + "\n").utf8).write(to: root.appendingPathComponent("sys/devices/\(name)/\(key)"))
    }

    /// Points libumockdev-preload at this testbed for the rest of `body`.
    func serving<T>(_ body: () async throws -> T) async rethrows -> T {
        setenv("UMOCKDEV_DIR", root.path, 1)
        defer {
            unsetenv("UMOCKDEV_DIR")
            try? FileManager.default.removeItem(at: root)
        }
        return try await body()
    }
}

/// What a monitor yielded, in order, for a test to read while its reader runs.
private final class EventLog: Sendable {
    private let state = Mutex<[UdevPowerSupplyMonitor.Event]>([])
    var events: [UdevPowerSupplyMonitor.Event] { state.withLock { $0 } }
    func append(_ event: UdevPowerSupplyMonitor.Event) { state.withLock { $0.append(event) } }
}

/// Run with `umockdev-wrapper swift test --filter UdevUmockdevTests`; skipped otherwise.
@Suite("UdevPowerSource under umockdev", .serialized, .enabled(if: UmockdevTestbed.isActive, "needs umockdev-wrapper (libumockdev-preload)"))
struct UdevUmockdevTests {
    @Test(.timeLimit(.minutes(1)))
    func readsTheFakeSysfsAndRereadsOnRequest() async throws {
        let testbed = try UmockdevTestbed()
        try testbed.add("AC", ["type": "Mains", "online": "0"])
        try testbed.add(
            "BAT0",
            ["type": "Battery", "present": "1", "status": "Discharging", "energy_full": "60000000", "energy_now": "48000000"])
        try testbed.add("hidpp_battery_0", ["type": "Battery", "scope": "Device", "status": "Discharging", "capacity": "3"])
        try await testbed.serving {
            let collector = ReportCollector()
            let run = Task { await UdevPowerSource().run(collector.context) }
            var reports = collector.reports.makeAsyncIterator()
            #expect(
                await reports.next() == .power(PowerSample(onBatteryReported: true, batteryPresent: true, percentage: 80, state: .discharging)))

            // Plug in, with the testbed's files only (no uevent): the re-read picks it up.
            try testbed.set("AC", "online", "1")
            try testbed.set("BAT0", "status", "Charging")
            try testbed.set("BAT0", "energy_now", "not a number")
            collector.reread.yield()
            #expect(await reports.next() == .power(PowerSample(onBatteryReported: false, batteryPresent: true, percentage: nil, state: .charging)))
            run.cancel()
            await run.value
        }
    }

    /// A re-read of a machine that did not change reports the same facts once more (the agent
    /// waits for that answer after a resume; the same facts are no change of power to it), and
    /// nothing else.
    @Test(.timeLimit(.minutes(1)))
    func rereadOfAnUnchangedMachineReportsTheSameFacts() async throws {
        let testbed = try UmockdevTestbed()
        try testbed.add("AC", ["type": "Mains", "online": "0"])
        try testbed.add(
            "BAT0",
            ["type": "Battery", "present": "1", "status": "Discharging", "energy_full": "60000000", "energy_now": "30000000"])
        try await testbed.serving {
            let collector = ReportCollector()
            let run = Task { await UdevPowerSource().run(collector.context) }
            var reports = collector.reports.makeAsyncIterator()
            #expect(
                await reports.next() == .power(PowerSample(onBatteryReported: true, batteryPresent: true, percentage: 50, state: .discharging)))
            collector.reread.yield()
            collector.reread.yield()
            try await Task.sleep(for: .milliseconds(300))
            run.cancel()
            await run.value
            collector.input.finish()
            // Once or twice: the monitor may have read once for both.
            var rest: [ConditionReport] = []
            while let report = await reports.next() { rest.append(report) }
            #expect((1...2).contains(rest.count), "\(rest)")
            #expect(rest.allSatisfy { $0 == .power(PowerSample(onBatteryReported: true, batteryPresent: true, percentage: 50, state: .discharging)) })
        }
    }

    /// With a period set, the monitor's thread reads the supplies again on its own, and yields
    /// a read only when it found something new: the battery falling with no uevent (only its
    /// file changes) is seen within a few periods, and reads of a battery that did not move
    /// yield nothing (before, every timed read went to the agent's executor, which compared
    /// it). With the period taken back, a change is not read until something asks.
    @Test(.timeLimit(.minutes(1)))
    func monitorRereadsOnItsOwnTimerAndYieldsOnlyChanges() async throws {
        let testbed = try UmockdevTestbed()
        try testbed.add("AC", ["type": "Mains", "online": "0"])
        try testbed.add("BAT0", ["type": "Battery", "status": "Discharging", "energy_full": "60000000", "energy_now": "30000000"])
        try await testbed.serving {
            let (monitor, events) = UdevPowerSupplyMonitor.start()
            let seen = EventLog()
            let reader = Task { for await event in events { seen.append(event) } }
            func energies() -> [String?] {
                seen.events.map { event in
                    guard case .devices(let devices) = event else { return "failed" }
                    return devices.first { $0.sysname == "BAT0" }?.energyNow.map(String.init)
                }
            }
            try await UdevPowerSourceRetryTests.until { energies() == ["30000000"] }
            monitor.reread(every: .milliseconds(20))
            // About 15 timed reads of the same files: none yielded.
            try await Task.sleep(for: .milliseconds(300))
            #expect(energies() == ["30000000"])
            try testbed.set("BAT0", "energy_now", "29000000")
            try await UdevPowerSourceRetryTests.until { energies() == ["30000000", "29000000"] }
            try await Task.sleep(for: .milliseconds(100))
            #expect(energies() == ["30000000", "29000000"], "a change is yielded once")

            // Off: the file changes, and nothing reads it until a rescan.
            monitor.reread(every: nil)
            try await Task.sleep(for: .milliseconds(50))
            try testbed.set("BAT0", "energy_now", "28000000")
            try await Task.sleep(for: .milliseconds(200))
            #expect(energies() == ["30000000", "29000000"])
            monitor.rescan()
            try await UdevPowerSourceRetryTests.until { energies() == ["30000000", "29000000", "28000000"] }
            monitor.stop()
            await reader.value
            await monitor.finished()
        }
    }

    @Test(.timeLimit(.minutes(1)))
    func monitorSeesEveryDeviceAsValues() async throws {
        let testbed = try UmockdevTestbed()
        try testbed.add("ACAD", ["type": "Mains", "online": "1"])
        try testbed.add("BAT1", ["type": "Battery", "capacity": " 57 ", "status": "Full", "scope": "System"])
        await testbed.serving {
            let (monitor, events) = UdevPowerSupplyMonitor.start()
            var iterator = events.makeAsyncIterator()
            let first = await iterator.next()
            #expect(
                first
                    == .devices([
                        PowerSupplyDevice(sysname: "ACAD", type: .mains, online: true),
                        PowerSupplyDevice(sysname: "BAT1", type: .battery, status: "Full", capacity: 57, scope: .system),
                    ]))
            monitor.stop()
            while await iterator.next() != nil {}
            await monitor.finished()
        }
    }
}
