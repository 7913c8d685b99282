@testable import BGPolicySystem
import Synchronization
import Testing

@Suite("Looking for the logind session again after a failure")
struct SessionRetryTests {
    /// The waits asked for, each ending at once; and the pokes that followed.
    final class Recorder: Sendable {
        let waits = Mutex<[Duration]>([])
        let pokes = Mutex(0)
    }

    static func pokes(_ recorder: Recorder, atLeast count: Int) async {
        for _ in 0..<2000 where recorder.pokes.withLock({ $0 }) < count { await Task.yield() }
    }

    @Test("1 s doubling to 5 min, at most DaemonFollower.retries in a row; a success starts over")
    func backoff() async {
        let recorder = Recorder()
        let retry = SessionRetry(sleep: { wait in recorder.waits.withLock { $0.append(wait) } }) {
            recorder.pokes.withLock { $0 += 1 }
        }
        var words: [String] = []
        for n in 1...DaemonFollower.retries + 1 {
            words.append(retry.failed())
            await Self.pokes(recorder, atLeast: min(n, DaemonFollower.retries))
        }
        let seconds = recorder.waits.withLock { $0 }.map(\.components.seconds)
        #expect(seconds == [1, 2, 4, 8, 16, 32, 64, 128, 256, 300, 300, 300])
        #expect(recorder.pokes.withLock { $0 } == DaemonFollower.retries)
        #expect(words.first == "in 1 s, or when sessions change")
        #expect(words.last == "when sessions change (it failed 13 times in a row)")
        retry.succeeded()
        _ = retry.failed()
        await Self.pokes(recorder, atLeast: DaemonFollower.retries + 1)
        #expect(recorder.waits.withLock { $0 }.last == .seconds(1))
    }

    @Test("a success or a cancel before the wait ends: no poke")
    func cancelled() async throws {
        let recorder = Recorder()
        // Each wait of the retry's (1 s after a first failure) takes 20 ms here, so a pending
        // poke that the success or the cancel failed to stop comes well within the 500 ms
        // this test waits.
        let retry = SessionRetry(sleep: { try await Task.sleep(for: .milliseconds($0.components.seconds * 20)) }) {
            recorder.pokes.withLock { $0 += 1 }
        }
        _ = retry.failed()
        retry.succeeded()
        _ = retry.failed()
        retry.cancel()
        try await Task.sleep(for: .milliseconds(500))
        #expect(recorder.pokes.withLock { $0 } == 0)
    }
}
