@testable import BGPolicyAgent
import BGPolicyStore
import Synchronization
import Testing

/// The agent's stop returned while writes no caller waits for (a clock step's move of the
/// stored content-available times, a withdrawal's second delete) were still queued on the
/// store writer; the process then ended, and they were lost with it.
@Suite("The stop waits for the store writer's queue")
struct StopDrainsWriterTests {
    @Test func queuedWritesRunBeforeTheStopReturns() async throws {
        let store = try TaskStore.inMemory()
        let harness = try await TestEngine(store: store)
        defer { harness.close() }
        let engine = harness.engine

        // A write held up by the disk, and one queued behind it.
        let gate = Gate()
        await engine.writer.enqueue { gate.wait() }
        let ran = Mutex(false)
        await engine.writer.enqueue { ran.withLock { $0 = true } }

        let stopped = Mutex(false)
        let stop = Task {
            await engine.stop()
            stopped.withLock { $0 = true }
        }
        try await Task.sleep(for: .milliseconds(200))
        #expect(!stopped.withLock { $0 }, "the stop returned with writes still queued")
        gate.open()
        await stop.value
        #expect(ran.withLock { $0 })
    }
}
