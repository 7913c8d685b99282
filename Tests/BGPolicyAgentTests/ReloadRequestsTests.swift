import Synchronization
import Testing

@testable import BGPolicyAgent

/// What `Admin1.Reload` and `SIGHUP` share: one task runs the reloads, one at a time, and each
/// caller is answered by a reload that began after its call. Two reloads at once would both
/// start from the configuration in effect, and the one that read the file first could put its
/// values in effect last; an answer from a reload that began before the call would tell the
/// caller of a file it had not yet written.
@Suite("ReloadRequests: reloads run one at a time, each answering the calls made before it began", .timeLimit(.minutes(1)))
struct ReloadRequestsTests {
    /// Reloads that each wait for the test to give their outcome, counting how many run at once.
    /// Like the agent's, a reload under way is not cut short by the stop.
    final class HeldReloads: Sendable {
        typealias Outcome = ReloadRequests.Outcome
        let began: AsyncStream<Int>
        private let beganNow: AsyncStream<Int>.Continuation
        /// The reload waiting for its outcome, or outcomes given before it asked.
        private let mailbox = Mutex<(waiter: CheckedContinuation<Outcome, Never>?, given: [Outcome])>((nil, []))
        /// Reloads running now, the most that ever ran at once, and how many began.
        let counts = Mutex((running: 0, most: 0, begun: 0))

        init() {
            (began, beganNow) = AsyncStream.makeStream(of: Int.self)
        }

        /// Serves `requests` until cancelled; each reload ends with the next outcome given.
        func serve(_ requests: ReloadRequests) async {
            await requests.serve {
                let number = counts.withLock { c in
                    c.running += 1
                    c.most = max(c.most, c.running)
                    c.begun += 1
                    return c.begun
                }
                beganNow.yield(number)
                let outcome = await nextOutcome()
                counts.withLock { $0.running -= 1 }
                return outcome
            }
        }

        private func nextOutcome() async -> Outcome {
            await withCheckedContinuation { waiter in
                let given: Outcome? = mailbox.withLock { m in
                    if !m.given.isEmpty { return m.given.removeFirst() }
                    m.waiter = waiter
                    return nil
                }
                if let given { waiter.resume(returning: given) }
            }
        }

        func end(with outcome: Outcome) {
            let waiter: CheckedContinuation<Outcome, Never>? = mailbox.withLock { m in
                guard let waiter = m.waiter else {
                    m.given.append(outcome)
                    return nil
                }
                m.waiter = nil
                return waiter
            }
            waiter?.resume(returning: outcome)
        }
    }

    /// Until `count` callers wait for a reload that has not begun.
    static func waitUntil(_ requests: ReloadRequests, hasWaiting count: Int) async {
        while requests.waiting < count { await Task.yield() }
    }

    @Test("callers and a SIGHUP during a reload are answered together by the next one, never by one running beside it")
    func callersDuringAReloadShareTheNext() async {
        let requests = ReloadRequests()
        let reloads = HeldReloads()
        let server = Task { await reloads.serve(requests) }
        var began = reloads.began.makeAsyncIterator()

        let first = Task { await requests.reload() }
        #expect(await began.next() == 1)
        // While the first runs (on a file the callers below have since changed): two more
        // callers and a SIGHUP. None begins a reload beside it.
        let second = Task { await requests.reload() }
        let third = Task { await requests.reload() }
        requests.hangup()
        await Self.waitUntil(requests, hasWaiting: 2)
        reloads.end(with: .failed("bgpolicy.conf:2: [cpu] limit: expected a whole percentage"))
        #expect(await first.value == .failed("bgpolicy.conf:2: [cpu] limit: expected a whole percentage"))

        #expect(await began.next() == 2)
        reloads.end(with: .loaded)
        #expect(await second.value == .loaded)
        #expect(await third.value == .loaded)
        reloads.counts.withLock { #expect($0.most == 1 && $0.begun == 2 && $0.running == 0) }

        // The pokes of those callers were served by the second reload: the next caller's is
        // the third, and it gets that one's outcome.
        let fourth = Task { await requests.reload() }
        #expect(await began.next() == 3)
        reloads.end(with: .loaded)
        #expect(await fourth.value == .loaded)
        server.cancel()
        await server.value
    }

    @Test("at the stop, a reload under way is finished and answered; callers still waiting, and later ones, are told the agent is stopping")
    func stopping() async {
        let requests = ReloadRequests()
        let reloads = HeldReloads()
        let server = Task { await reloads.serve(requests) }
        var began = reloads.began.makeAsyncIterator()

        let first = Task { await requests.reload() }
        #expect(await began.next() == 1)
        let second = Task { await requests.reload() }
        await Self.waitUntil(requests, hasWaiting: 1)
        server.cancel()
        reloads.end(with: .loaded)
        #expect(await first.value == .loaded)
        #expect(await second.value == .stopping)
        await server.value
        #expect(await requests.reload() == .stopping)
        reloads.counts.withLock { #expect($0.begun == 1) }
    }
}
