import Logging
import Synchronization
import Testing

@testable import BGPolicySystem

/// `DaemonFollower`'s retries, with the name's owner fed by the test and the waits recorded
/// (each ends at once): no bus, no timer.
@Suite("Following a daemon")
struct DaemonFollowerTests {
    struct Failed: Error {}

    /// What the follower did: the waits it asked for, the sessions it started, its `lost` calls.
    final class Record: Sendable {
        let waits = Mutex<[Duration]>([])
        let sessions = Mutex(0)
        let lost = Mutex(0)
        /// The owner streams handed out, kept open: one that ends is the bus gone.
        let owners = Mutex<[AsyncThrowingStream<String?, any Error>.Continuation]>([])

        var seconds: [Int64] { waits.withLock { $0 }.map(\.components.seconds) }
        var sessionCount: Int { sessions.withLock { $0 } }

        /// Waits (bounded, 60 s) until `count` sessions started. The bound is wide because in a
        /// full parallel run other suites' blocking calls have held the test threads for over
        /// 10 s: the wait then woke past a 10 s bound before the follower's tasks had run.
        func sessions(atLeast count: Int) async throws {
            let deadline = ContinuousClock.now + .seconds(60)
            while sessionCount < count, ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(5)) }
        }
    }

    /// A follower of `org.example.Daemon` whose owner is `:1.7` from the start, and whose name
    /// watch fails `watchFailures` times first.
    static func follower(_ record: Record, watchFailures: Int = 0) -> DaemonFollower {
        let failures = Mutex(watchFailures)
        return DaemonFollower(
            name: "org.example.Daemon", logger: Logger(label: "test.follower"),
            sleep: { wait in record.waits.withLock { $0.append(wait) } },
            watchOwner: {
                if failures.withLock({ n in defer { n -= 1 }; return n > 0 }) { throw Failed() }
                let (owners, owner) = AsyncThrowingStream.makeStream(of: String?.self)
                owner.yield(":1.7")
                record.owners.withLock { $0.append(owner) }
                return owners
            })
    }

    /// Runs `follower` until `done` returns, then cancels it and waits for it to end.
    static func run(
        _ follower: DaemonFollower, _ record: Record,
        session: @escaping @Sendable (_ number: Int, _ succeeded: @escaping @Sendable () -> Void) async throws -> Void,
        until done: () async throws -> Void
    ) async rethrows {
        let (rereads, keepAlive) = AsyncStream.makeStream(of: Void.self)
        let run = Task {
            await follower.run(rereads: rereads, lost: { record.lost.withLock { $0 += 1 } }) { owner, succeeded in
                #expect(owner == ":1.7")
                let number = record.sessions.withLock { n in
                    n += 1
                    return n
                }
                try await session(number, succeeded)
            }
        }
        defer { keepAlive.finish() }
        try await done()
        run.cancel()
        await run.value
    }

    @Test("a session that keeps failing is tried again after 1 s doubling to 5 min, 12 times")
    func failuresInARow() async throws {
        let record = Record()
        try await Self.run(Self.follower(record), record, session: { _, _ in throw Failed() }) {
            try await record.sessions(atLeast: DaemonFollower.retries + 1)
            try await Task.sleep(for: .milliseconds(100))
        }
        #expect(record.sessionCount == DaemonFollower.retries + 1)
        #expect(record.seconds == [1, 2, 4, 8, 16, 32, 64, 128, 256, 300, 300, 300])
        #expect(record.lost.withLock { $0 } == DaemonFollower.retries + 1)
    }

    /// Stalls days apart, each after the daemon was read, are each a first failure: tried
    /// again after 1 s, and never given up. They used to count as failures in a row, the
    /// waits grew, and after the 13th the daemon was given up until it restarted or the machine
    /// resumed, its facts unknown meanwhile.
    @Test("a session that read its daemon ends a row of failures")
    func aSuccessEndsTheRow() async throws {
        let record = Record()
        let stalls = DaemonFollower.retries + 1
        try await Self.run(Self.follower(record), record, session: { number, succeeded in
            succeeded()
            guard number > stalls else { throw Failed() }
            await waitUntilCancelled()
        }) {
            try await record.sessions(atLeast: stalls + 1)
        }
        #expect(record.sessionCount == stalls + 1, "the daemon was given up")
        #expect(record.seconds == Array(repeating: 1, count: stalls))
    }

    /// A name watch that fails (AddMatch or GetNameOwner refused, or timing out on a system bus
    /// busy at boot) is tried again on the same schedule; the daemon's facts are lost meanwhile.
    /// It used to be given up at once, until the system bus was connected anew.
    @Test("a name watch that failed is tried again")
    func aFailedWatchIsTriedAgain() async throws {
        let record = Record()
        try await Self.run(Self.follower(record, watchFailures: 2), record, session: { _, succeeded in
            succeeded()
            await waitUntilCancelled()
        }) {
            try await record.sessions(atLeast: 1)
        }
        #expect(record.sessionCount == 1)
        #expect(record.seconds == [1, 2])
        #expect(record.lost.withLock { $0 } == 1)
    }

    @Test("a name watch that keeps failing is given up after 12 retries")
    func aWatchThatKeepsFailingIsGivenUp() async {
        let record = Record()
        let follower = Self.follower(record, watchFailures: .max)
        let (rereads, keepAlive) = AsyncStream.makeStream(of: Void.self)
        defer { keepAlive.finish() }
        // Returns on its own: nothing is left to follow.
        await follower.run(rereads: rereads, lost: { record.lost.withLock { $0 += 1 } }) { _, _ in
            record.sessions.withLock { $0 += 1 }
        }
        #expect(record.sessionCount == 0)
        #expect(record.seconds == [1, 2, 4, 8, 16, 32, 64, 128, 256, 300, 300, 300])
        #expect(record.lost.withLock { $0 } == 1)
    }
}
