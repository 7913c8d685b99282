import BGPolicyCore
import BGPolicyTestSupport
import Testing

private typealias Queue = ContentAvailableQueue<String>

private let mail = AppID(rawValue: "org.example.Mail")!
private let chat = AppID(rawValue: "org.example.Chat")!
private let start: UnixTime = 1_700_000_000

/// The time the queue is told, moved by hand.
private struct ManualClock {
    var now: UnixTime = start
    mutating func advance(by seconds: Double) { now += seconds }
}

/// One thing that happens to the queue, and what must come of it.
private enum Step: Sendable {
    /// Moves the clock by this many seconds (negative: the clock is set back).
    case advance(Double)
    case notify(AppID, String, onBattery: Bool?, expect: Queue.Outcome)
    /// Notifies and checks only that it was queued (for long runs).
    case notifyQueued(AppID, onBattery: Bool?, times: Int)
    /// Takes the app's wake and checks its payload and how many notifications it stands for.
    case take(AppID, payload: String?, count: Int?)
    case remove(AppID)
    case tokens(AppID, Double)
}

private struct Scenario: Sendable, CustomTestStringConvertible {
    var name: String
    var perHour = 3
    var steps: [Step]
    var testDescription: String { name }
}

private let battery: Bool? = true
private let ac: Bool? = false
private let unknown: Bool? = nil

private func queued(_ replaced: Bool = false, left: Double?) -> Queue.Outcome {
    .queued(replaced: replaced, tokensLeft: left)
}

private func limited(after seconds: Double) -> Queue.Outcome {
    .rateLimited(nextAllowedAt: start + seconds)
}

private let scenarios: [Scenario] = [
    Scenario(name: "3 accepted on battery, the 4th refused until the first token is back, an hour on", steps: [
        .notify(mail, "a", onBattery: battery, expect: queued(left: 2)), .take(mail, payload: "a", count: 1),
        .notify(mail, "b", onBattery: battery, expect: queued(left: 1)), .take(mail, payload: "b", count: 1),
        .notify(mail, "c", onBattery: battery, expect: queued(left: 0)), .take(mail, payload: "c", count: 1),
        .notify(mail, "d", onBattery: battery, expect: limited(after: 3600)),
        .take(mail, payload: nil, count: nil),
        // Refused notifications spend nothing, and nothing comes back before the hour.
        .advance(1800),
        .notify(mail, "e", onBattery: battery, expect: limited(after: 3600)),
        .tokens(mail, 0),
    ]),
    Scenario(name: "each token comes back an hour after it was spent, not before", steps: [
        .notify(mail, "a", onBattery: battery, expect: queued(left: 2)), .take(mail, payload: "a", count: 1),
        .advance(1200),
        .notify(mail, "b", onBattery: battery, expect: queued(left: 1)), .take(mail, payload: "b", count: 1),
        .advance(1200),
        .notify(mail, "c", onBattery: battery, expect: queued(left: 0)), .take(mail, payload: "c", count: 1),
        .advance(1199),
        .notify(mail, "d", onBattery: battery, expect: limited(after: 3600)),
        .advance(1),
        .tokens(mail, 1),
        .notify(mail, "e", onBattery: battery, expect: queued(left: 0)), .take(mail, payload: "e", count: 1),
        .notify(mail, "f", onBattery: battery, expect: limited(after: 1200 + 3600)),
        .advance(1200),
        .tokens(mail, 1),
    ]),
    Scenario(name: "a notification at exactly nextAllowedAt is accepted, a moment before it is not", steps: [
        .notifyQueued(mail, onBattery: battery, times: 3),
        .advance(3599.5),
        .notify(mail, "a", onBattery: battery, expect: limited(after: 3600)),
        .advance(0.5),
        .notify(mail, "b", onBattery: battery, expect: queued(left: 2)),
    ]),
    Scenario(name: "unlimited on AC: 100 in a row, no token spent", steps: [
        .notifyQueued(mail, onBattery: ac, times: 100),
        .tokens(mail, 3),
        .notify(mail, "a", onBattery: ac, expect: queued(left: nil)), .take(mail, payload: "a", count: 1),
    ]),
    Scenario(name: "unknown power counts as battery", steps: [
        .notifyQueued(mail, onBattery: unknown, times: 3),
        .notify(mail, "a", onBattery: unknown, expect: limited(after: 3600)),
        // Plugging in lifts the limit at once.
        .notify(mail, "b", onBattery: ac, expect: queued(left: nil)),
    ]),
    Scenario(name: "a notification while one is undelivered replaces it and spends nothing", steps: [
        .notify(mail, "old", onBattery: battery, expect: queued(left: 2)),
        .advance(10),
        .notify(mail, "new", onBattery: battery, expect: queued(true, left: 2)),
        .take(mail, payload: "new", count: 2),
    ]),
    Scenario(name: "replacing works with an empty bucket, and on AC", steps: [
        .notify(mail, "a", onBattery: battery, expect: queued(left: 2)), .take(mail, payload: "a", count: 1),
        .notify(mail, "b", onBattery: battery, expect: queued(left: 1)), .take(mail, payload: "b", count: 1),
        .notify(mail, "c", onBattery: battery, expect: queued(left: 0)),
        .notify(mail, "d", onBattery: battery, expect: queued(true, left: 0)),
        .notify(mail, "e", onBattery: ac, expect: queued(true, left: nil)),
        .take(mail, payload: "e", count: 3),
    ]),
    Scenario(name: "after the wake is taken, a notification spends a token again", steps: [
        .notify(mail, "a", onBattery: battery, expect: queued(left: 2)),
        .notify(mail, "b", onBattery: battery, expect: queued(true, left: 2)),
        .take(mail, payload: "b", count: 2),
        .notify(mail, "c", onBattery: battery, expect: queued(left: 1)),
        .take(mail, payload: "c", count: 1),
    ]),
    Scenario(name: "the clock set back gives no token back; they come back an hour after the new time", steps: [
        .notifyQueued(mail, onBattery: battery, times: 3),
        .advance(-86_400),
        .tokens(mail, 0),
        .notify(mail, "a", onBattery: battery, expect: limited(after: -86_400 + 3600)),
        .advance(3599),
        .notify(mail, "a", onBattery: battery, expect: limited(after: -86_400 + 3600)),
        .advance(1),
        .notify(mail, "b", onBattery: battery, expect: queued(left: 2)),
    ]),
    Scenario(name: "the clock set back with tokens left keeps them, no more", steps: [
        .notify(mail, "a", onBattery: battery, expect: queued(left: 2)), .take(mail, payload: "a", count: 1),
        .advance(-3600),
        .notify(mail, "b", onBattery: battery, expect: queued(left: 1)), .take(mail, payload: "b", count: 1),
    ]),
    Scenario(name: "a long idle, or a huge jump forward, refills to the capacity only", steps: [
        .notifyQueued(mail, onBattery: battery, times: 3),
        .advance(30 * 86_400),
        .tokens(mail, 3),
        .notifyQueued(mail, onBattery: battery, times: 3),
        .notify(mail, "a", onBattery: battery, expect: limited(after: 30 * 86_400 + 3600)),
        .advance(1e300),
        .tokens(mail, 3),
    ]),
    Scenario(name: "remove forgets the wake and the bucket", steps: [
        .notify(mail, "a", onBattery: battery, expect: queued(left: 2)), .take(mail, payload: "a", count: 1),
        .notify(mail, "b", onBattery: battery, expect: queued(left: 1)),
        .remove(mail),
        .take(mail, payload: nil, count: nil),
        .tokens(mail, 3),
        .notify(mail, "c", onBattery: battery, expect: queued(left: 2)), .take(mail, payload: "c", count: 1),
    ]),
    Scenario(name: "each app has its own bucket and its own wake", steps: [
        .notifyQueued(mail, onBattery: battery, times: 3),
        .notify(mail, "m", onBattery: battery, expect: limited(after: 3600)),
        .notify(chat, "c1", onBattery: battery, expect: queued(left: 2)),
        .notify(chat, "c2", onBattery: battery, expect: queued(true, left: 2)),
        .take(chat, payload: "c2", count: 2),
        .take(mail, payload: nil, count: nil),
        .tokens(chat, 2),
        .tokens(mail, 0),
        .remove(chat),
        .tokens(mail, 0),
    ]),
    Scenario(name: "perHour = 0 refuses everything on battery, for ever; AC is still unlimited", perHour: 0, steps: [
        .notify(mail, "a", onBattery: battery, expect: .rateLimited(nextAllowedAt: .infinity)),
        .notify(mail, "b", onBattery: unknown, expect: .rateLimited(nextAllowedAt: .infinity)),
        .advance(1e9),
        .notify(mail, "c", onBattery: battery, expect: .rateLimited(nextAllowedAt: .infinity)),
        .notify(mail, "d", onBattery: ac, expect: queued(left: nil)),
        // Once a wake waits, a battery notification only replaces it.
        .notify(mail, "e", onBattery: battery, expect: queued(true, left: 0)),
        .take(mail, payload: "e", count: 2),
    ]),
    Scenario(name: "perHour = 1 gives the token back an hour after it was spent", perHour: 1, steps: [
        .notify(mail, "a", onBattery: battery, expect: queued(left: 0)), .take(mail, payload: "a", count: 1),
        .notify(mail, "b", onBattery: battery, expect: limited(after: 3600)),
        .advance(1800),
        .tokens(mail, 0),
        .advance(1800),
        .notify(mail, "c", onBattery: battery, expect: queued(left: 0)),
    ]),
]

@Suite("ContentAvailable queue")
struct ContentAvailableQueueTests {
    @Test("scenarios with a manual clock", arguments: scenarios)
    fileprivate func scenario(_ scenario: Scenario) {
        var queue = Queue(perHour: scenario.perHour)
        var clock = ManualClock()
        for (index, step) in scenario.steps.enumerated() {
            let at = "step \(index) at \(clock.now - start) s"
            switch step {
            case .advance(let seconds):
                clock.advance(by: seconds)
            case .notify(let appID, let payload, let onBattery, let expected):
                let outcome = queue.notify(appID, payload: payload, at: clock.now, onBattery: onBattery)
                #expect(Self.same(outcome, expected), "\(at): \(outcome)")
            case .notifyQueued(let appID, let onBattery, let times):
                for time in 0..<times {
                    let outcome = queue.notify(appID, payload: "\(time)", at: clock.now, onBattery: onBattery)
                    guard case .queued = outcome else {
                        Issue.record("\(at), notification \(time): \(outcome)")
                        break
                    }
                    #expect(queue.take(appID)?.notificationCount == 1, "\(at)")
                }
            case .take(let appID, let payload, let count):
                let wake = queue.take(appID)
                #expect(wake?.payload == payload, "\(at)")
                #expect(wake?.notificationCount == count, "\(at)")
                #expect(queue.wake(for: appID) == nil, "\(at)")
            case .remove(let appID):
                queue.remove(appID)
            case .tokens(let appID, let expected):
                let tokens = queue.tokensLeft(for: appID, at: clock.now)
                #expect(abs(tokens - expected) < 1e-9, "\(at): \(tokens)")
            }
        }
    }

    /// Outcomes compared with a little slack on token counts.
    private static func same(_ a: Queue.Outcome, _ b: Queue.Outcome) -> Bool {
        switch (a, b) {
        case (.queued(let r1, let t1?), .queued(let r2, let t2?)): r1 == r2 && abs(t1 - t2) < 1e-9
        default: a == b
        }
    }

    @Test("the wake keeps the newest payload, the newest time and the first time")
    func wakeTimes() {
        var queue = Queue(perHour: 3)
        _ = queue.notify(mail, payload: "first", at: start, onBattery: true)
        _ = queue.notify(mail, payload: "second", at: start + 5, onBattery: true)
        _ = queue.notify(mail, payload: "third", at: start + 9, onBattery: false)
        let expected = Queue.Wake(payload: "third", receivedAt: start + 9, firstReceivedAt: start, notificationCount: 3)
        #expect(queue.wake(for: mail) == expected)
        #expect(queue.undelivered == [mail])
        #expect(queue.take(mail) == expected)
        #expect(queue.take(mail) == nil)
        #expect(queue.undelivered.isEmpty)
    }

    @Test("undelivered lists the apps with a wake, sorted")
    func undeliveredSorted() {
        var queue = Queue(perHour: 3)
        let apps = ["org.example.Zed", "com.example.Alpha", "org.example.Mail"].map { AppID(rawValue: $0)! }
        for app in apps { _ = queue.notify(app, payload: "x", at: start, onBattery: true) }
        #expect(queue.undelivered == apps.sorted())
        _ = queue.take(apps[0])
        queue.remove(apps[1])
        #expect(queue.undelivered == [apps[2]])
    }

    @Test("a refused notification queues nothing")
    func refusedQueuesNothing() {
        var queue = Queue(perHour: 1)
        _ = queue.notify(mail, payload: "a", at: start, onBattery: true)
        _ = queue.take(mail)
        #expect(queue.notify(mail, payload: "b", at: start + 1, onBattery: true) == .rateLimited(nextAllowedAt: start + 3600))
        #expect(queue.wake(for: mail) == nil)
        #expect(queue.undelivered.isEmpty)
    }

    @Test("a lower perHour after a reload caps the buckets, counting the wakes of the last hour; a higher one adds tokens")
    func perHourChanges() {
        var queue = Queue(perHour: 3)
        #expect(queue.tokensLeft(for: mail, at: start) == 3)
        queue.perHour = 1
        #expect(queue.tokensLeft(for: mail, at: start) == 1)
        queue.perHour = 6
        _ = queue.notify(mail, payload: "a", at: start, onBattery: true)
        #expect(queue.tokensLeft(for: mail, at: start) == 5)
        // One wake in the last hour of 2 allowed: 1 left.
        queue.perHour = 2
        #expect(queue.tokensLeft(for: mail, at: start) == 1)
    }

    @Test("a perHour of 0 for a while keeps the spent buckets spent when it is raised again")
    func perHourZeroKeepsBuckets() {
        var queue = Queue(perHour: 3)
        for payload in ["a", "b", "c"] {
            _ = queue.notify(mail, payload: payload, at: start, onBattery: true)
            _ = queue.take(mail)
        }
        queue.perHour = 0
        // Another app's notification, refused, looks for full buckets to drop.
        #expect(queue.notify(chat, payload: "x", at: start + 1, onBattery: true) == .rateLimited(nextAllowedAt: .infinity))
        queue.perHour = 3
        // Mail's bucket is as empty as it was, not full.
        #expect(queue.tokensLeft(for: mail, at: start + 2) == 0)
        #expect(queue.notify(mail, payload: "d", at: start + 2, onBattery: true) == .rateLimited(nextAllowedAt: start + 3600))
    }

    @Test("the wall clock set moves the buckets and wakes with it: no token comes back sooner or later")
    func wallClockStepped() {
        var queue = Queue(perHour: 6)
        for n in 0..<6 {
            _ = queue.notify(mail, payload: "\(n)", at: start + 3000, onBattery: true)
            _ = queue.take(mail)
        }
        _ = queue.notify(chat, payload: "c", at: start, onBattery: true)
        // 60 s later the clock is set 11 min ahead: the tokens come back 11 min later too.
        queue.wallClockStepped(by: 660)
        #expect(queue.notify(mail, payload: "6", at: start + 3600 + 60 + 660, onBattery: true)
            == .rateLimited(nextAllowedAt: start + 3000 + 3600 + 660))
        #expect(queue.wake(for: chat)?.receivedAt == start + 660)
        #expect(queue.wake(for: chat)?.firstReceivedAt == start + 660)
        // Set back by 11 min: they come back when they would have, not an hour after the new time.
        queue.wallClockStepped(by: -660)
        #expect(queue.tokensLeft(for: mail, at: start + 3000 + 3599) == 0)
        #expect(queue.tokensLeft(for: mail, at: start + 3000 + 3600) == 6)
    }

    @Test("queues that saw the same notifications are equal, whichever buckets were dropped")
    func fullBucketsAreDropped() {
        var used = Queue(perHour: 3)
        _ = used.notify(mail, payload: "a", at: start, onBattery: true)
        _ = used.take(mail)
        // An hour later mail's bucket is full again; the next notification drops it.
        _ = used.notify(chat, payload: "c", at: start + 3600, onBattery: true)
        var fresh = Queue(perHour: 3)
        _ = fresh.notify(chat, payload: "c", at: start + 3600, onBattery: true)
        #expect(used == fresh)
    }

    @Test("a non-finite time neither crashes nor mints tokens")
    func nonFiniteTime() {
        var queue = Queue(perHour: 3)
        for _ in 0..<3 {
            _ = queue.notify(mail, payload: "a", at: start, onBattery: true)
            _ = queue.take(mail)
        }
        for time in [UnixTime.nan, .infinity, -.infinity] {
            guard case .rateLimited = queue.notify(mail, payload: "x", at: time, onBattery: true) else {
                Issue.record("accepted at \(time)")
                continue
            }
        }
        #expect(queue.tokensLeft(for: mail, at: start) == 0)
        #expect(queue.notify(mail, payload: "b", at: start + 3599, onBattery: true) == .rateLimited(nextAllowedAt: start + 3600))
        #expect(queue.notify(mail, payload: "b", at: start + 3600, onBattery: true) == .queued(replaced: false, tokensLeft: 2))
    }

    @Test(
        "the refusal message names the app, the limit, the wait and the way out",
        arguments: [
            (3, 720.0, "org.example.Mail has used its 3 content-available wakes per hour on battery; "
                + "the next is allowed in 12 min (unlimited on AC)"),
            (3, 1199.5, "org.example.Mail has used its 3 content-available wakes per hour on battery; "
                + "the next is allowed in 20 min (unlimited on AC)"),
            (1, 3600.0, "org.example.Mail has used its 1 content-available wake per hour on battery; "
                + "the next is allowed in 1 h (unlimited on AC)"),
            (60, 0.4, "org.example.Mail has used its 60 content-available wakes per hour on battery; "
                + "the next is allowed in 1 s (unlimited on AC)"),
            (0, .infinity, "org.example.Mail may not be woken by content-available notifications on battery "
                + "(limits.content_available_per_hour is 0); they are unlimited on AC"),
        ])
    func refusalMessage(perHour: Int, wait: Double, expected: String) {
        let message = Queue.refusalMessage(appID: mail, perHour: perHour, nextAllowedAt: start + wait, now: start)
        #expect(message == expected)
    }

    @Test("the message for a real refusal reads the time the bucket gave")
    func refusalMessageFromOutcome() {
        var queue = Queue(perHour: 3)
        for _ in 0..<3 {
            _ = queue.notify(mail, payload: "a", at: start, onBattery: nil)
            _ = queue.take(mail)
        }
        let now = start + 2880
        guard case .rateLimited(let next) = queue.notify(mail, payload: "b", at: now, onBattery: nil) else {
            Issue.record("not refused")
            return
        }
        #expect(next == start + 3600)
        #expect(
            Queue.refusalMessage(appID: mail, perHour: queue.perHour, nextAllowedAt: next, now: now)
                == "org.example.Mail has used its 3 content-available wakes per hour on battery; "
                + "the next is allowed in 12 min (unlimited on AC)")
    }

    // MARK: Saving and restoring

    /// Copies what the agent stores for `apps` into a fresh queue, as a restart does.
    private static func restarted(_ queue: Queue, apps: [AppID]) -> Queue {
        var fresh = Queue(perHour: queue.perHour)
        for app in apps {
            fresh.restore(app, wake: queue.wake(for: app), bucket: queue.bucket(for: app))
        }
        return fresh
    }

    @Test("a restored queue keeps the wake, the count and when each token comes back")
    func restoreKeepsEverything() {
        var queue = Queue(perHour: 3)
        _ = queue.notify(mail, payload: "a", at: start, onBattery: true)
        _ = queue.take(mail)
        _ = queue.notify(mail, payload: "b", at: start + 60, onBattery: true)
        _ = queue.take(mail)
        _ = queue.notify(mail, payload: "c", at: start + 120, onBattery: true)
        _ = queue.notify(mail, payload: "d", at: start + 130, onBattery: true)
        _ = queue.notify(chat, payload: "x", at: start + 140, onBattery: false)
        // Spent at start, start + 60 and start + 120, each back an hour after.
        #expect(queue.bucket(for: mail) == ContentAvailableBucket(charges: [start, start + 60, start + 120]))

        var restored = Self.restarted(queue, apps: [mail, chat])
        #expect(restored == queue)
        #expect(restored.undelivered == [chat, mail])
        #expect(restored.wake(for: mail) == Queue.Wake(
            payload: "d", receivedAt: start + 130, firstReceivedAt: start + 120, notificationCount: 2))
        // A fourth wake is refused until the first token has come back, an hour after the start.
        _ = restored.take(mail)
        #expect(restored.notify(mail, payload: "e", at: start + 200, onBattery: true) == limited(after: 3600))
        #expect(restored.tokensLeft(for: mail, at: start + 3600 + 60) == 2)
    }

    @Test("a spent bucket stays spent through a restore, and its tokens come back on time")
    func restoreSpentBucket() {
        var queue = Queue(perHour: 3)
        for n in 0..<3 {
            _ = queue.notify(mail, payload: "\(n)", at: start, onBattery: true)
            _ = queue.take(mail)
        }
        var restored = Self.restarted(queue, apps: [mail])
        #expect(restored.notify(mail, payload: "4", at: start + 10, onBattery: true) == limited(after: 3600))
        #expect(restored.notify(mail, payload: "4", at: start + 3600, onBattery: true) == queued(left: 2))
    }

    @Test("restoring nothing for an app forgets it; a queue with no bucket reads full")
    func restoreNothing() {
        var queue = Queue(perHour: 3)
        _ = queue.notify(mail, payload: "a", at: start, onBattery: true)
        #expect(queue.bucket(for: chat) == nil)
        queue.restore(mail, wake: nil, bucket: nil)
        #expect(queue.wake(for: mail) == nil)
        #expect(queue.bucket(for: mail) == nil)
        #expect(queue.tokensLeft(for: mail, at: start) == 3)
        #expect(queue == Queue(perHour: 3))
    }

    @Test(
        "a damaged stored bucket never mints tokens",
        arguments: [
            ContentAvailableBucket(charges: [.nan, .nan, .nan]),
            ContentAvailableBucket(charges: [-.infinity, -.infinity, -.infinity]),
            ContentAvailableBucket(charges: [.infinity, .infinity, .infinity]),
            ContentAvailableBucket(charges: [start + 600, .nan, start - 7200, start + 1e9, start - 1]),
            // As an earlier agent stored them: tokens, refilling continuously from updatedAt.
            ContentAvailableBucket(tokens: -2, updatedAt: start, perHour: 3),
            ContentAvailableBucket(tokens: .nan, updatedAt: start, perHour: 3),
            ContentAvailableBucket(tokens: 0, updatedAt: .nan, perHour: 3),
            ContentAvailableBucket(tokens: 0, updatedAt: -.infinity, perHour: 3),
            ContentAvailableBucket(tokens: 0, updatedAt: .infinity, perHour: 3),
        ])
    func restoreDamaged(bucket: ContentAvailableBucket) {
        var queue = Queue(perHour: 3)
        queue.restore(mail, wake: nil, bucket: bucket)
        guard case .rateLimited = queue.notify(mail, payload: "a", at: start, onBattery: true) else {
            Issue.record("accepted with \(bucket)")
            return
        }
        // Its tokens come back an hour after the time it was first read at, as any bucket's do.
        #expect(queue.notify(mail, payload: "b", at: start + 3599, onBattery: true) == limited(after: 3600))
        #expect(queue.tokensLeft(for: mail, at: start + 3600) >= 2)
        #expect(queue.notify(mail, payload: "b", at: start + 3600, onBattery: true) != limited(after: 3600))
    }

    @Test("an earlier agent's full bucket, or one with too many tokens, is full and no more")
    func restoreTooMany() {
        for tokens in [3.0, 50] {
            var queue = Queue(perHour: 3)
            queue.restore(mail, wake: nil, bucket: ContentAvailableBucket(tokens: tokens, updatedAt: start, perHour: 3))
            #expect(queue.tokensLeft(for: mail, at: start) == 3)
            #expect(queue.notify(mail, payload: "a", at: start, onBattery: true) == queued(left: 2))
        }
    }

    @Test(
        "an earlier agent's bucket short of any token gives no wake for an hour after it was stored",
        arguments: [0, 0.999, 1, 2.5, 2.9999])
    func restoreEarlierAgentsBucket(tokens: Double) {
        var queue = Queue(perHour: 3)
        queue.restore(mail, wake: nil, bucket: ContentAvailableBucket(tokens: tokens, updatedAt: start - 600, perHour: 3))
        #expect(queue.notify(mail, payload: "a", at: start, onBattery: true) == .rateLimited(nextAllowedAt: start + 3000))
        #expect(queue.notify(mail, payload: "a", at: start + 3000, onBattery: true) == queued(left: 2))
    }

    @Test("more stored charges than perHour leave no token until enough are back")
    func restoreMoreCharges() {
        var queue = Queue(perHour: 3)
        let charges = (0..<5).map { start + Double($0) * 600 }
        queue.restore(mail, wake: nil, bucket: ContentAvailableBucket(charges: charges))
        #expect(queue.notify(mail, payload: "a", at: start + 2400, onBattery: true) == limited(after: 1200 + 3600))
        #expect(queue.notify(mail, payload: "a", at: start + 1200 + 3600, onBattery: true) == queued(left: 0))
    }

    // MARK: At most perHour in any hour (SPEC: "at most 3 per app per hour on battery")

    @Test(
        "notifications on battery, each taken at once: which are accepted",
        arguments: [
            // A full bucket refilling continuously accepted 0, 1, 2, 1200 and 2400: 5 in 40 min.
            ([0.0, 1, 2, 1200, 2400, 3599, 3600], [true, true, true, false, false, false, true]),
            ([0.0, 1, 2, 3600, 3601, 3602, 3603], [true, true, true, true, true, true, false]),
            ([0.0, 1200, 2400, 3000, 3599, 3600, 4799, 4800], [true, true, true, false, false, true, false, true]),
            ([0.0, 1800, 1800, 3599, 5399, 5400, 5401], [true, true, true, false, true, true, true]),
        ])
    func acceptedOnBattery(times: [Double], accepted: [Bool]) {
        var queue = Queue(perHour: 3)
        var clock = ManualClock()
        let outcomes = times.map { time -> Bool in
            clock.now = start + time
            let outcome = queue.notify(mail, payload: "x", at: clock.now, onBattery: true)
            _ = queue.take(mail)
            if case .queued = outcome { return true }
            return false
        }
        #expect(outcomes == accepted)
    }

    @Test("no span of an hour holds more than perHour accepted wakes, over a long seeded run", arguments: [1, 3, 6])
    func noHourHoldsMore(perHour: Int) {
        var queue = Queue(perHour: perHour)
        var random = SplitMix64(seed: 0x5EED_0000 + UInt64(perHour))
        var now = start
        var accepted: [UnixTime] = []
        for _ in 0..<20_000 {
            // Bursts, steady streams and long pauses; some wakes replaced before they are taken.
            now += [0, 1, 59, 600, 1199, 1200, 1201, 3599, 3600, 7200][Int(random.next() % 10)]
                + Double(random.next() % 1000) / 1000
            if case .queued(replaced: false, _) = queue.notify(mail, payload: "x", at: now, onBattery: true) {
                accepted.append(now)
            }
            if random.next() % 4 != 0 { _ = queue.take(mail) }
        }
        #expect(accepted.count > 1000)
        var first = 0
        for (last, time) in accepted.enumerated() {
            // The span (time - 1 h, time]: a wake an hour before is outside it, as the queue counts.
            while accepted[first] + 3600 <= time { first += 1 }
            #expect(last - first + 1 <= perHour, "\(last - first + 1) accepted in the hour up to \(time - start)")
            if last - first + 1 > perHour { return }
        }
    }
}
