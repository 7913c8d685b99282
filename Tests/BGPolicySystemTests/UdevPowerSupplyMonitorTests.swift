@testable import BGPolicySystem
import Glibc
import Testing

/// The owner thread on the machine that runs the tests, whatever its power supplies: these
/// check the thread's life, not the values (those are covered under umockdev).
@Suite("UdevPowerSupplyMonitor")
struct UdevPowerSupplyMonitorTests {
    @Test(.timeLimit(.minutes(1)))
    func enumeratesAtStartAndOnRescanThenStops() async throws {
        let (monitor, events) = UdevPowerSupplyMonitor.start()
        var iterator = events.makeAsyncIterator()
        guard case .devices? = await iterator.next() else {
            // Where netlink or /sys is missing the thread reports why and ends by itself.
            #expect(await iterator.next() == nil)
            await monitor.finished()
            return
        }
        monitor.rescan()
        guard case .devices? = await iterator.next() else {
            Issue.record("no enumeration after rescan")
            return
        }
        monitor.stop()
        // The stream finishes only once the thread has unref'd everything.
        while await iterator.next() != nil {}
        await monitor.finished()
        // Requests after the end are ignored, not written to a closed descriptor.
        monitor.rescan()
        monitor.stop()
        await monitor.finished()
    }

    @Test(.timeLimit(.minutes(1)))
    func stopRightAfterStartEndsTheThread() async {
        for _ in 0..<50 {
            let (monitor, events) = UdevPowerSupplyMonitor.start()
            monitor.stop()
            for await _ in events {}
            await monitor.finished()
        }
    }

    @Test(.timeLimit(.minutes(1)))
    func aReaderThatGoesAwayStopsTheThread() async {
        let (monitor, events) = UdevPowerSupplyMonitor.start()
        let reader = Task {
            for await _ in events {}
        }
        reader.cancel()
        await reader.value
        await monitor.finished()
    }

    @Test func missingDevicesAreTypedErrors() throws {
        let context = try Udev.Context()
        #expect(throws: UdevError(call: "udev_device_new_from_syspath", code: ENODEV)) {
            _ = try Udev.Device(syspath: "/sys/devices/bgpolicy-no-such-device", in: context)
        }
        #expect(UdevError(call: "eventfd", code: EMFILE).description == "eventfd: Too many open files")
    }
}
