@testable import BGPolicySystem
import Glibc
import Testing

/// Whether this machine lets a process watch udev as the owner thread does: `/sys` is there,
/// and a netlink uevent socket can be opened and bound (some containers and sandboxes refuse
/// netlink, `RestrictAddressFamilies` too). Tests that need a working watch are enabled by it,
/// so that where it is missing they show as skipped (which CI's unit stage fails on) rather
/// than pass having checked nothing.
enum UdevNetlink {
    /// <linux/netlink.h>, which Glibc does not bring: the protocol, and `struct sockaddr_nl`'s
    /// size (family, padding, port id, groups).
    static let kobjectUevent: Int32 = 15
    static let addressSize = socklen_t(12)

    static var isAllowed: Bool {
        guard access("/sys", F_OK) == 0 else { return false }
        let fd = socket(AF_NETLINK, Int32(SOCK_RAW.rawValue) | Int32(SOCK_CLOEXEC.rawValue), kobjectUevent)
        guard fd >= 0 else { return false }
        defer { close(fd) }
        // All zero but the family: the kernel picks the port id, and no group is joined.
        var address = sockaddr_storage()
        address.ss_family = sa_family_t(AF_NETLINK)
        return withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, addressSize) }
        } == 0
    }
}

/// The owner thread on the machine that runs the tests, whatever its power supplies: these
/// check the thread's life, not the values (those are covered under umockdev).
@Suite("UdevPowerSupplyMonitor")
struct UdevPowerSupplyMonitorTests {
    @Test(.timeLimit(.minutes(1)), .enabled(if: UdevNetlink.isAllowed, "needs /sys and a netlink uevent socket"))
    func enumeratesAtStartAndOnRescanThenStops() async throws {
        let (monitor, events) = UdevPowerSupplyMonitor.start()
        var iterator = events.makeAsyncIterator()
        let first = await iterator.next()
        guard case .devices? = first else {
            Issue.record("no enumeration at start, though netlink is allowed: \(String(describing: first))")
            monitor.stop()
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

    /// A real `POLLERR` with nothing to read, as netlink reports uevents dropped from a full
    /// receive buffer (ENOBUFS): the loop clears the error, enumerates again and goes on. It
    /// used to throw, which ended the thread and left the agent without udev's power facts
    /// until it restarted. The socket is a UDP one whose datagram to a closed port came back
    /// refused (ECONNREFUSED pending): an overflowed netlink socket also has uevents queued
    /// (`POLLIN` with `POLLERR`, which the loop always handled by draining), and under
    /// umockdev the "netlink" socket is a Unix one, which never overflows into an error.
    @Test(.timeLimit(.minutes(1)))
    func anErrorOnTheSocketIsClearedAndCoveredByAnEnumeration() throws {
        let socket = try Self.refusedUDPSocket()
        defer { close(socket) }
        var pending = pollfd(fd: socket, events: Int16(POLLIN), revents: 0)
        try #require(poll(&pending, 1, 5000) == 1 && pending.revents == Int16(POLLERR), "no lone POLLERR: \(pending.revents)")
        let wake = try Self.pipePair()
        defer { close(wake.read); close(wake.write) }
        var stop = false
        var enumerations = 0
        try UdevPowerSupplyMonitor.wait(
            socket: socket, wake: wake.read, requests: { UdevPowerSupplyMonitor.Requests(stop: stop) },
            drain: { Issue.record("drained a socket with nothing to read") },
            enumerate: { _ in
                enumerations += 1
                // The loop carries on after the rescan: ask it to stop, as `stop()` does.
                stop = true
                var one: UInt64 = 1
                _ = withUnsafeBytes(of: &one) { write(wake.write, $0.baseAddress, 8) }
            })
        #expect(enumerations == 1)
        // Cleared, not just seen: poll would otherwise report it again at once, for ever.
        #expect(try Udev.Monitor.takeSocketError(socket) == 0)
    }

    /// A descriptor that is not open (`POLLNVAL`) still ends the loop, with an error.
    @Test(.timeLimit(.minutes(1)))
    func aSocketThatIsNotOpenEndsTheLoop() throws {
        let wake = try Self.pipePair()
        defer { close(wake.read); close(wake.write) }
        #expect(throws: UdevError(call: "poll(udev monitor)", code: EPIPE)) {
            try UdevPowerSupplyMonitor.wait(
                socket: 1_000_000, wake: wake.read, requests: { UdevPowerSupplyMonitor.Requests() }, drain: {},
                enumerate: { _ in Issue.record("enumerated for a socket that is not open") })
        }
    }

    /// A connected UDP socket with ECONNREFUSED pending: its datagram went to a loopback port
    /// nobody listens on (bound, read and closed first).
    static func refusedUDPSocket() throws -> Int32 {
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = UInt32(0x7f00_0001).bigEndian
        let size = socklen_t(MemoryLayout<sockaddr_in>.size)
        func withAddress<R>(_ body: (UnsafeMutablePointer<sockaddr>) -> R) -> R {
            withUnsafeMutablePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1, body) }
        }
        let probe = Glibc.socket(AF_INET, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        try #require(probe >= 0)
        var length = size
        try #require(withAddress { bind(probe, $0, size) } == 0 && withAddress { getsockname(probe, $0, &length) } == 0)
        close(probe)
        let socket = Glibc.socket(AF_INET, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        try #require(socket >= 0)
        try #require(withAddress { connect(socket, $0, size) } == 0)
        try #require(send(socket, "x", 1, 0) == 1)
        return socket
    }

    static func pipePair() throws -> (read: Int32, write: Int32) {
        var fds: [Int32] = [-1, -1]
        try #require(pipe(&fds) == 0)
        return (fds[0], fds[1])
    }

    @Test func missingDevicesAreTypedErrors() throws {
        let context = try Udev.Context()
        #expect(throws: UdevError(call: "udev_device_new_from_syspath", code: ENODEV)) {
            _ = try Udev.Device(syspath: "/sys/devices/bgpolicy-no-such-device", in: context)
        }
        #expect(UdevError(call: "eventfd", code: EMFILE).description == "eventfd: Too many open files")
    }
}
