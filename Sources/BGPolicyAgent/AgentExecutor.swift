internal import CBGPolicyRuntime
internal import CBGPolicyThread
import Glibc

/// Swift concurrency's global executor for `bgpolicyd`: one thread that sleeps on a condition
/// variable and wakes only for work or for a timer that is due.
///
/// Why: on Linux, the default global executor is libdispatch's thread pool, whose workqueue
/// monitor re-arms a one-second timer for as long as the process lives. An agent that should
/// cost nothing while idle cannot have that. SwiftNIO takes over the global executor the same
/// way (`swift_task_enqueueGlobal_hook`), which this follows; if the hook is missing, the agent
/// keeps the default executor and says so.
///
/// Sleeps: Swift 6.3 schedules `Task.sleep` outside that hook, on libdispatch; the agent uses
/// `AgentExecutor.sleep(for:)`, which runs on this executor's own timer list.
///
/// One thread suits the agent: its blocking work (libdbus, libudev) has threads of its own,
/// and everything on this executor is short.
public final class AgentExecutor: SerialExecutor, @unchecked Sendable {
    // pthread objects need stable addresses: they live in allocated memory.
    private let mutex: UnsafeMutablePointer<pthread_mutex_t>
    private let condition: UnsafeMutablePointer<pthread_cond_t>
    // Guarded by `mutex`.
    private var jobs: [UnownedJob] = []
    private var timers: [UInt64: Timer] = [:]
    private var cancelledBeforeScheduled: Set<UInt64> = []
    /// Ids given out and not yet scheduled: only these can be cancelled before they are (a
    /// cancel after a timer fired has nothing to do, and must leave nothing behind).
    private var unscheduled: Set<UInt64> = []
    private var nextTimer: UInt64 = 1

    private struct Timer {
        let deadline: UInt64
        let fire: @Sendable (_ cancelled: Bool) -> Void
    }

    /// The executor installed as the global one, if any. Set once, before any task runs.
    nonisolated(unsafe) public private(set) static var installed: AgentExecutor?

    /// Internal for tests, which drive the timers with `fireDueTimers` and no thread.
    init() {
        mutex = .allocate(capacity: 1)
        condition = .allocate(capacity: 1)
        pthread_mutex_init(mutex, nil)
        var attributes = pthread_condattr_t()
        pthread_condattr_init(&attributes)
        pthread_condattr_setclock(&attributes, CLOCK_MONOTONIC)
        pthread_cond_init(condition, &attributes)
        pthread_condattr_destroy(&attributes)
    }

    /// Only an executor that was never installed ends (the tests' own): the installed one is
    /// held by `installed` for the life of the process.
    deinit {
        pthread_cond_destroy(condition)
        pthread_mutex_destroy(mutex)
        condition.deallocate()
        mutex.deallocate()
    }

    // MARK: Installing

    private typealias EnqueueGlobalHook = @convention(thin) (UnownedJob, @convention(thin) (UnownedJob) -> Void) -> Void

    /// Starts the executor's thread and makes it Swift concurrency's global executor. Call it
    /// first thing in a synchronous `main`, before any task exists. Returns false (and changes
    /// nothing) if the runtime has no hook, or one is already installed.
    @discardableResult
    public static func installAsGlobal() -> Bool {
        guard installed == nil else { return false }
        // Referenced at link time (CBGPolicyRuntime), so this works with a static runtime too.
        let hook = UnsafeMutableRawPointer(bgpolicy_swift_task_enqueueGlobal_hook_address())
            .assumingMemoryBound(to: EnqueueGlobalHook?.self)
        guard hook.pointee == nil else { return false }
        let executor = AgentExecutor()
        installed = executor
        var thread = pthread_t()
        let started = pthread_create(&thread, nil, { _ in
            _ = bgpolicy_name_this_thread("executor")
            AgentExecutor.installed!.run()
            return nil
        }, nil)
        guard started == 0 else {
            installed = nil
            return false
        }
        pthread_detach(thread)
        hook.pointee = { job, _ in AgentExecutor.installed!.enqueue(job) }
        return true
    }

    // MARK: SerialExecutor

    public func enqueue(_ job: UnownedJob) {
        pthread_mutex_lock(mutex)
        jobs.append(job)
        pthread_cond_signal(condition)
        pthread_mutex_unlock(mutex)
    }

    public func asUnownedSerialExecutor() -> UnownedSerialExecutor {
        UnownedSerialExecutor(ordinary: self)
    }

    // MARK: Timers

    static func now() -> UInt64 {
        var ts = timespec()
        clock_gettime(CLOCK_MONOTONIC, &ts)
        return UInt64(ts.tv_sec) * 1_000_000_000 + UInt64(ts.tv_nsec)
    }

    func makeTimerID() -> UInt64 {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        nextTimer += 1
        unscheduled.insert(nextTimer)
        return nextTimer
    }

    /// Calls `fire(false)` on the executor's thread once `duration` has passed, or
    /// `fire(true)` as soon as `cancel(timer:)` is called, whichever comes first.
    func schedule(timer id: UInt64, after duration: Duration, fire: @escaping @Sendable (Bool) -> Void) {
        let (seconds, attoseconds) = duration.components
        let nanoseconds = UInt64(clamping: max(0, seconds)) &* 1_000_000_000 &+ UInt64(max(0, attoseconds) / 1_000_000_000)
        pthread_mutex_lock(mutex)
        unscheduled.remove(id)
        if cancelledBeforeScheduled.remove(id) != nil {
            pthread_mutex_unlock(mutex)
            fire(true)
            return
        }
        timers[id] = Timer(deadline: Self.now() &+ nanoseconds, fire: fire)
        pthread_cond_signal(condition)
        pthread_mutex_unlock(mutex)
    }

    func cancel(timer id: UInt64) {
        pthread_mutex_lock(mutex)
        guard let timer = timers.removeValue(forKey: id) else {
            // Fired already: nothing to do. Not scheduled yet: `schedule` fires it cancelled.
            if unscheduled.contains(id) { cancelledBeforeScheduled.insert(id) }
            pthread_mutex_unlock(mutex)
            return
        }
        pthread_mutex_unlock(mutex)
        timer.fire(true)
    }

    /// Sleeps on the installed executor's timers, or with `Task.sleep` when none is installed
    /// (tests, other programs). Throws `CancellationError` when the task is cancelled.
    public static func sleep(for duration: Duration) async throws {
        guard let executor = installed else {
            try await Task.sleep(for: duration)
            return
        }
        let id = executor.makeTimerID()
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
                executor.schedule(timer: id, after: duration) { cancelled in
                    if cancelled { continuation.resume(throwing: CancellationError()) } else { continuation.resume() }
                }
            }
        } onCancel: {
            executor.cancel(timer: id)
        }
    }

    // MARK: The thread

    private func run() {
        while true {
            var batch: [UnownedJob] = []
            var due: [Timer] = []
            pthread_mutex_lock(mutex)
            while true {
                due = takeDueTimers(now: Self.now())
                if !jobs.isEmpty || !due.isEmpty { break }
                if let next = timers.values.map(\.deadline).min() {
                    var until = timespec(tv_sec: Int(next / 1_000_000_000), tv_nsec: Int(next % 1_000_000_000))
                    pthread_cond_timedwait(condition, mutex, &until)
                } else {
                    // Nothing due and no timer: sleep until someone enqueues.
                    pthread_cond_wait(condition, mutex)
                }
            }
            swap(&batch, &jobs)
            pthread_mutex_unlock(mutex)
            for timer in due { timer.fire(false) }
            for job in batch { job.runSynchronously(on: asUnownedSerialExecutor()) }
        }
    }

    /// Removes and returns the timers due at `now`. With `mutex` held.
    private func takeDueTimers(now: UInt64) -> [Timer] {
        var due: [Timer] = []
        for (id, timer) in timers where timer.deadline <= now {
            timers[id] = nil
            due.append(timer)
        }
        return due
    }

    // MARK: For tests

    /// Fires the timers due now, as the thread does (tests run no thread).
    func fireDueTimers() {
        pthread_mutex_lock(mutex)
        let due = takeDueTimers(now: Self.now())
        pthread_mutex_unlock(mutex)
        for timer in due { timer.fire(false) }
    }

    /// How many timer ids the executor holds in each of its books.
    var timerBookkeeping: (scheduled: Int, cancelledBeforeScheduled: Int, unscheduled: Int) {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        return (timers.count, cancelledBeforeScheduled.count, unscheduled.count)
    }
}
