import Glibc
import Logging
import BGPolicyTestSupport
import Synchronization
import Testing

@testable import BGPolicyDBus

@Suite("A connection whose thread cannot start, or cannot watch its descriptors")
struct ConnectionThreadTests {
    @Test("connect throws connectionFailed, rather than returning a connection whose calls hang")
    func threadCannotStart() async throws {
        let bus = try PrivateBus()
        do {
            let connection = try await withTimeout(.seconds(5), "connect") {
                try await DBusConnection.connect(to: .address(bus.address), logger: Logger(label: "test"), spawn: { _, _ in EAGAIN })
            }
            Issue.record("connect returned \(connection.uniqueName)")
        } catch DBusError.connectionFailed(_, let message) {
            #expect(message.contains("could not start the D-Bus thread"), "\(message)")
        }
        // An ordinary connect still works.
        let connection = try await DBusConnection.connect(to: .address(bus.address))
        #expect(connection.uniqueName.hasPrefix(":"))
        connection.close()
    }

    @Test("connect throws connectionFailed naming epoll_ctl when the thread's wake-up descriptor cannot be watched")
    func wakeCannotBeWatched() async throws {
        let bus = try PrivateBus()
        do {
            let connection = try await withTimeout(.seconds(5), "connect") {
                try await DBusConnection.connect(
                    to: .address(bus.address), logger: Logger(label: "test"), spawn: ConnectionLoop.spawnDetachedThread,
                    epollControl: { _, _, _, _ in
                        errno = ENOSPC
                        return -1
                    })
            }
            Issue.record("connect returned \(connection.uniqueName)")
        } catch DBusError.connectionFailed(_, let message) {
            #expect(message.contains("epoll_ctl"), "\(message)")
        }
    }

    @Test("connect throws connectionFailed naming the bus when its socket cannot be watched")
    func socketCannotBeWatched() async throws {
        let bus = try PrivateBus()
        let adds = AddCounter()
        do {
            let connection = try await withTimeout(.seconds(5), "connect") {
                try await DBusConnection.connect(
                    to: .address(bus.address), logger: Logger(label: "test"), spawn: ConnectionLoop.spawnDetachedThread,
                    epollControl: { epfd, op, fd, event in
                        // The first add is the thread's own eventfd; the socket's come after.
                        if op == ConnectionLoop.epollAdd, adds.next() > 1 {
                            errno = ENOSPC
                            return -1
                        }
                        return ConnectionLoop.systemEpollControl(epfd, op, fd, event)
                    })
            }
            Issue.record("connect returned \(connection.uniqueName)")
        } catch DBusError.connectionFailed(_, let message) {
            #expect(message.contains("could not watch the socket of \(bus.address)"), "\(message)")
        }
    }
}

/// Counts the `epoll_ctl` adds a test's stand-in sees.
private final class AddCounter: Sendable {
    private let count = Atomic<Int>(0)
    func next() -> Int { count.add(1, ordering: .relaxed).newValue }
}
