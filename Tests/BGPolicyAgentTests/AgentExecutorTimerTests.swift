import Synchronization
import Testing

@testable import BGPolicyAgent

@Suite("AgentExecutor's timers: a cancel before, during or after leaves nothing behind")
struct AgentExecutorTimerTests {
    final class Fired: Sendable {
        let outcomes = Mutex<[Bool]>([])
        func record(_ cancelled: Bool) { outcomes.withLock { $0.append(cancelled) } }
        var all: [Bool] { outcomes.withLock { $0 } }
    }

    @Test func aTimerCancelledAfterItFiredLeavesNoId() {
        let executor = AgentExecutor()
        let fired = Fired()
        let id = executor.makeTimerID()
        executor.schedule(timer: id, after: .zero) { fired.record($0) }
        executor.fireDueTimers()
        #expect(fired.all == [false])
        // The task that slept is cancelled only now (a timer replaced after its sleep ended).
        executor.cancel(timer: id)
        #expect(fired.all == [false])
        let books = executor.timerBookkeeping
        #expect(books.scheduled == 0 && books.cancelledBeforeScheduled == 0 && books.unscheduled == 0)
    }

    @Test func aTimerCancelledBeforeItIsScheduledFiresCancelledWhenItIs() {
        let executor = AgentExecutor()
        let fired = Fired()
        let id = executor.makeTimerID()
        executor.cancel(timer: id)
        #expect(executor.timerBookkeeping.cancelledBeforeScheduled == 1)
        executor.schedule(timer: id, after: .seconds(3600)) { fired.record($0) }
        #expect(fired.all == [true])
        let books = executor.timerBookkeeping
        #expect(books.scheduled == 0 && books.cancelledBeforeScheduled == 0 && books.unscheduled == 0)
    }

    @Test func aTimerCancelledWhileScheduledFiresCancelledAtOnce() {
        let executor = AgentExecutor()
        let fired = Fired()
        let id = executor.makeTimerID()
        executor.schedule(timer: id, after: .seconds(3600)) { fired.record($0) }
        #expect(executor.timerBookkeeping.scheduled == 1)
        executor.cancel(timer: id)
        #expect(fired.all == [true])
        executor.fireDueTimers()
        #expect(fired.all == [true])
        let books = executor.timerBookkeeping
        #expect(books.scheduled == 0 && books.cancelledBeforeScheduled == 0 && books.unscheduled == 0)
    }
}
