internal import CBGPolicyUdev
import Glibc

/// A libudev or system call that failed, with the errno it left.
public struct UdevError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The C function that failed.
    public let call: String
    public let code: Int32

    public init(call: String, code: Int32) {
        self.call = call
        self.code = code
    }

    public var description: String { "\(call): \(String(cString: strerror(code)))" }
}

/// Owners of libudev objects (STYLE.md examples 4 and 5).
///
/// libudev(3): "only a single specific thread may operate on a given object during its entire
/// lifetime … it's not safe to allocate such an object in one thread, and operate or free it
/// from any other, even if locking is used". So each wrapper is non-copyable (one owner, one
/// `udev_*_unref` in `deinit`) and not `Sendable` (it cannot leave the thread that made it).
/// Only plain Swift values — strings, `PowerSupplyDevice` — come out of them.
enum Udev {
    /// Turns a libudev constructor's result into an owned pointer or a typed error. libudev
    /// sets errno when it returns NULL; should it leave 0, the error says ENOMEM (allocation
    /// is the one failure those constructors have that may not set errno).
    static func check(_ call: String, _ make: () -> OpaquePointer?) throws(UdevError) -> OpaquePointer {
        errno = 0
        guard let pointer = make() else { throw UdevError(call: call, code: errno == 0 ? ENOMEM : errno) }
        return pointer
    }

    /// libudev's setters return 0 or a negative errno.
    static func check(_ call: String, _ result: Int32) throws(UdevError) {
        guard result >= 0 else { throw UdevError(call: call, code: -result) }
    }

    /// `struct udev`: the library context.
    struct Context: ~Copyable {
        let pointer: OpaquePointer

        /// Adopts a reference the caller owns; it is dropped exactly once, in `deinit`.
        init(taking pointer: OpaquePointer) {
            self.pointer = pointer
        }

        init() throws(UdevError) {
            self.init(taking: try Udev.check("udev_new") { udev_new() })
        }

        deinit { udev_unref(pointer) }
    }

    /// `struct udev_device`: one device, read once. libudev caches sysattrs per device
    /// object, so a fresh object is made for every enumeration.
    struct Device: ~Copyable {
        let pointer: OpaquePointer

        init(taking pointer: OpaquePointer) {
            self.pointer = pointer
        }

        init(syspath: String, in context: borrowing Context) throws(UdevError) {
            let udev = context.pointer
            self.init(taking: try Udev.check("udev_device_new_from_syspath") { syspath.withCString { udev_device_new_from_syspath(udev, $0) } })
        }

        deinit { udev_device_unref(pointer) }

        var sysname: String? { udev_device_get_sysname(pointer).map { String(cString: $0) } }

        /// The attribute's text (libudev strips the trailing newline), or nil when the file is
        /// missing or unreadable. Bytes that are not UTF-8 are repaired, never trapped on.
        func attribute(_ name: String) -> String? {
            name.withCString { udev_device_get_sysattr_value(pointer, $0) }.map { String(cString: $0) }
        }
    }

    /// `struct udev_enumerate`: a scan of one subsystem.
    struct Enumerator: ~Copyable {
        let pointer: OpaquePointer

        init(taking pointer: OpaquePointer) {
            self.pointer = pointer
        }

        /// The object owns its reference from the first line on, so a failing filter call
        /// still releases it (in `deinit`, as the error propagates).
        static func matching(subsystem: String, in context: borrowing Context) throws(UdevError) -> Enumerator {
            let udev = context.pointer
            let enumerator = Enumerator(taking: try Udev.check("udev_enumerate_new") { udev_enumerate_new(udev) })
            try Udev.check(
                "udev_enumerate_add_match_subsystem", subsystem.withCString { udev_enumerate_add_match_subsystem(enumerator.pointer, $0) })
            return enumerator
        }

        deinit { udev_enumerate_unref(pointer) }

        /// Scans sysfs and returns the syspaths found. The list entries are borrowed from
        /// the enumerator and are copied out before it goes away.
        func scan() throws(UdevError) -> [String] {
            try Udev.check("udev_enumerate_scan_devices", udev_enumerate_scan_devices(pointer))
            var paths: [String] = []
            var entry = udev_enumerate_get_list_entry(pointer)
            while let current = entry {
                if let name = udev_list_entry_get_name(current) { paths.append(String(cString: name)) }
                entry = udev_list_entry_get_next(current)
            }
            return paths
        }
    }

    /// `struct udev_monitor`: uevents for one subsystem, after udevd has processed them.
    struct Monitor: ~Copyable {
        let pointer: OpaquePointer

        init(taking pointer: OpaquePointer) {
            self.pointer = pointer
        }

        /// Opens the netlink socket, filters it in the kernel to `subsystem` and starts
        /// receiving. Fails where netlink is not allowed (`RestrictAddressFamilies`, some
        /// containers).
        static func listening(subsystem: String, in context: borrowing Context) throws(UdevError) -> Monitor {
            let udev = context.pointer
            let monitor = Monitor(taking: try Udev.check("udev_monitor_new_from_netlink") { udev_monitor_new_from_netlink(udev, "udev") })
            try Udev.check(
                "udev_monitor_filter_add_match_subsystem_devtype",
                subsystem.withCString { udev_monitor_filter_add_match_subsystem_devtype(monitor.pointer, $0, nil) })
            try Udev.check("udev_monitor_enable_receiving", udev_monitor_enable_receiving(monitor.pointer))
            return monitor
        }

        deinit { udev_monitor_unref(pointer) }

        /// The socket to sleep on; owned by the monitor (closed by its unref).
        var fd: Int32 { udev_monitor_get_fd(pointer) }

        /// Reads every uevent that is waiting, without blocking (libudev's socket is
        /// non-blocking), and drops them: the caller enumerates afresh instead of applying
        /// deltas. Returns how many arrived; a lost burst (ENOBUFS) also ends the loop, and
        /// the caller's re-enumeration covers it.
        func drain() -> Int {
            var count = 0
            while let device = udev_monitor_receive_device(pointer) {
                _ = Device(taking: device)
                count += 1
            }
            return count
        }

        /// Reads and clears the error pending on a socket (`SO_ERROR`): 0 when there is none.
        /// On the monitor's netlink socket that is ENOBUFS, set when uevents overflowed the
        /// receive buffer and were dropped; until it is read, `poll` keeps reporting `POLLERR`.
        /// Static, on a descriptor, so that the owner thread's loop can be tested on any socket.
        static func takeSocketError(_ socket: Int32) throws(UdevError) -> Int32 {
            var error: Int32 = 0
            var length = socklen_t(MemoryLayout<Int32>.size)
            guard getsockopt(socket, SOL_SOCKET, SO_ERROR, &error, &length) == 0 else {
                throw UdevError(call: "getsockopt(SO_ERROR)", code: errno)
            }
            return error
        }
    }
}

@available(*, unavailable) extension Udev.Context: Sendable {}
@available(*, unavailable) extension Udev.Device: Sendable {}
@available(*, unavailable) extension Udev.Enumerator: Sendable {}
@available(*, unavailable) extension Udev.Monitor: Sendable {}
