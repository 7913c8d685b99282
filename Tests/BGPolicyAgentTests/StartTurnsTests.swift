import Testing

@testable import BGPolicyAgent

@Suite("StartTurns: at most so many apps start by D-Bus activation at once, the rest in order")
struct StartTurnsTests {
    @Test(arguments: [1, 2, 3, 5])
    func atMostTheLimitRunAndTheRestGoInTheOrderTheyAsked(limit: Int) {
        var turns = StartTurns<String>(limit: limit)
        let apps = (0..<7).map { "app\($0)" }
        var started: [String] = []
        for app in apps where turns.ask(app) { started.append(app) }
        #expect(started == Array(apps.prefix(limit)))
        #expect(turns.running == limit)
        #expect(turns.waiting == 7 - limit)
        // Each start that ends hands its turn to the next in line, until none waits.
        var handedOn: [String] = []
        while let next = turns.finish() {
            handedOn.append(next)
            #expect(turns.running == limit)
        }
        #expect(handedOn == Array(apps.dropFirst(limit)))
        #expect(turns.running == limit - 1)
        for _ in 0..<(limit - 1) {
            let next = turns.finish()
            #expect(next == nil)
        }
        #expect(turns.running == 0)
        #expect(turns.waiting == 0)
    }

    @Test func aNewcomerDoesNotOvertakeThoseWaiting() {
        var turns = StartTurns<String>(limit: 1)
        let first = turns.ask("first"), second = turns.ask("second")
        #expect(first && !second)
        let afterFirst = turns.finish()
        #expect(afterFirst == "second")
        // "second" runs now; a newcomer queues behind it rather than starting beside it.
        let third = turns.ask("third")
        #expect(!third)
        let afterSecond = turns.finish(), afterThird = turns.finish()
        #expect(afterSecond == "third" && afterThird == nil)
        // With nothing under way, the next asker starts at once.
        let fourth = turns.ask("fourth")
        #expect(fourth)
    }

    @Test func aLimitBelowOneStillLetsOneStart() {
        var turns = StartTurns<Int>(limit: 0)
        let one = turns.ask(1), two = turns.ask(2)
        #expect(one && !two)
    }

    @Test func aRaisedLimitStartsThoseWaitingAtOnce() {
        var turns = StartTurns<String>(limit: 1)
        for app in ["a", "b", "c", "d"] { _ = turns.ask(app) }
        #expect(turns.running == 1 && turns.waiting == 3)
        let started = turns.setLimit(3)
        #expect(started == ["b", "c"])
        #expect(turns.running == 3 && turns.waiting == 1)
        // Unchanged, it starts nobody more.
        #expect(turns.setLimit(3).isEmpty)
    }

    @Test func aLoweredLimitHandsOnNoTurnUntilFewerThanItRun() {
        var turns = StartTurns<String>(limit: 3)
        for app in ["a", "b", "c", "d", "e"] { _ = turns.ask(app) }
        #expect(turns.setLimit(1).isEmpty)
        // Three under way against a limit of one: the first two to finish hand on nothing.
        let first = turns.finish(), second = turns.finish()
        #expect(first == nil && second == nil)
        #expect(turns.running == 1 && turns.waiting == 2)
        // One under way: from here each start that ends hands its turn on, one at a time.
        let third = turns.finish()
        #expect(third == "d")
        #expect(turns.running == 1)
        let fourth = turns.finish(), fifth = turns.finish()
        #expect(fourth == "e" && fifth == nil)
        #expect(turns.running == 0)
    }
}
