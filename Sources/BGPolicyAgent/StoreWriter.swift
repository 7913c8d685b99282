internal import CBGPolicyThread
import Glibc

/// One thread that runs store writes for the engine, so that a write stalled by the disk (a
/// WAL checkpoint's fsync, the kernel throttling a process that dirties pages while another
/// floods the disk) holds up only the caller that asked for it, not every caller the agent's
/// one executor thread serves. It waits on a condition variable with no timeout: idle, it
/// never wakes.
final class StoreWriter: @unchecked Sendable {
    private let mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
    private let condition = UnsafeMutablePointer<pthread_cond_t>.allocate(capacity: 1)
    private var jobs: [() -> Void] = []
    /// Jobs queued or running.
    private var outstanding = 0

    init() {
        pthread_mutex_init(mutex, nil)
        pthread_cond_init(condition, nil)
        let box = Unmanaged.passRetained(self)
        var thread = pthread_t()
        let created = pthread_create(&thread, nil, { argument in
            _ = bgpolicy_name_this_thread("store-writer")
            let writer = Unmanaged<StoreWriter>.fromOpaque(argument!).takeRetainedValue()
            writer.loop()
            return nil
        }, box.toOpaque())
        precondition(created == 0, "cannot start the store writer thread (error \(created))")
        pthread_detach(thread)
    }

    /// Runs `body` on the writer thread and returns its result; other work on the executor
    /// goes on meanwhile.
    func run<T: Sendable, E: Error>(_ body: @escaping @Sendable () throws(E) -> T) async throws(E) -> T {
        let result: Result<T, E> = await withCheckedContinuation { continuation in
            enqueue {
                do throws(E) {
                    continuation.resume(returning: .success(try body()))
                } catch {
                    continuation.resume(returning: .failure(error))
                }
            }
        }
        return try result.get()
    }

    /// Queues `body` to run on the writer thread after every job queued before it, and returns
    /// at once: for a write whose place in line matters and whose caller does not wait for it.
    func enqueue(_ body: @escaping @Sendable () -> Void) {
        pthread_mutex_lock(mutex)
        jobs.append(body)
        outstanding += 1
        pthread_cond_signal(condition)
        pthread_mutex_unlock(mutex)
    }

    private func loop() {
        while true {
            pthread_mutex_lock(mutex)
            while jobs.isEmpty { pthread_cond_wait(condition, mutex) }
            let batch = jobs
            jobs.removeAll(keepingCapacity: true)
            pthread_mutex_unlock(mutex)
            for job in batch {
                job()
                pthread_mutex_lock(mutex)
                outstanding -= 1
                pthread_mutex_unlock(mutex)
            }
        }
    }

    /// Whether no job is queued or running: a write made elsewhere now cannot be overtaken
    /// by one queued earlier.
    var isIdle: Bool {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        return outstanding == 0
    }
}
