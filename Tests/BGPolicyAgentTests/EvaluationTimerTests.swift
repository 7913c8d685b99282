import BGPolicyCore
import Testing

@testable import BGPolicyAgent

@Suite("The evaluation timer waits until its due time, never short of it")
struct EvaluationTimerTests {
    @Test(arguments: [0.0015, 0.05, 0.0501, 1.0004, 12.345_678_9, 899.9999, 86_399.9995])
    func theWaitReachesTheDueTime(ahead: Double) {
        let now = 1_795_352_400.123_456
        let delay = TaskEngine.timerDelay(until: now + ahead, now: now)
        let (seconds, attoseconds) = delay.components
        let waited = Double(seconds) + Double(attoseconds) * 1e-18
        // Not short of the due time (cut to whole milliseconds it was, by up to 1 ms, and the
        // evaluation found the window not yet open), and not more than 2 ms past it.
        #expect(waited >= max(ahead, 0.05))
        #expect(waited <= max(ahead, 0.05) + 0.002)
    }

    @Test func aDueTimePastOrFarIsBounded() {
        let now = 1_795_352_400.0
        #expect(TaskEngine.timerDelay(until: now - 60, now: now) == .milliseconds(51))
        #expect(TaskEngine.timerDelay(until: now + 3 * 86_400, now: now) == .milliseconds(86_400_001))
    }
}

@Suite("A replacing Submit evaluates every app only when the request may now wait longer")
struct ReplacementTests {
    static let old = TaskRequest(
        appID: AppID(rawValue: "org.example.Mail")!, identifier: "org.example.Mail.refresh", kind: .refresh,
        earliestBegin: 1_795_352_400, submittedAt: 1_795_352_000)

    @Test func theSameRequestSentAgainDoesNot() {
        var again = Self.old
        again.submittedAt += 60
        #expect(!TaskEngine.mayWaitLonger(again, than: Self.old))
        again.earliestBegin = Self.old.earliestBegin! - 600
        #expect(!TaskEngine.mayWaitLonger(again, than: Self.old))
    }

    @Test func laterOrWithMoreConditionsDoes() {
        var later = Self.old
        later.earliestBegin = Self.old.earliestBegin! + 3600
        #expect(TaskEngine.mayWaitLonger(later, than: Self.old))
        var network = Self.old
        network.requiresNetwork = true
        #expect(TaskEngine.mayWaitLonger(network, than: Self.old))
        var power = Self.old
        power.requiresExternalPower = true
        #expect(TaskEngine.mayWaitLonger(power, than: Self.old))
        var processing = Self.old
        processing.kind = .processing
        #expect(TaskEngine.mayWaitLonger(processing, than: Self.old))
        var anytime = Self.old
        anytime.earliestBegin = nil
        #expect(!TaskEngine.mayWaitLonger(anytime, than: Self.old))
        #expect(TaskEngine.mayWaitLonger(Self.old, than: anytime))
    }
}
