import Synchronization

extension Task where Success: Sendable, Failure == any Error {
    /// The task's value, or `CancellationError` as soon as the waiting task is cancelled.
    ///
    /// For work several callers share (a connection being opened, a `Register` in flight):
    /// awaiting `value` of an unstructured task does not end when the waiter is cancelled, and
    /// cancelling the shared task would fail it for every other waiter. This leaves it running.
    func valueUnlessCancelled() async throws -> Success {
        let waiter = SharedTaskWaiter<Success>()
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Success, any Error>) in
                guard waiter.wait(continuation) else {
                    continuation.resume(throwing: _Concurrency.CancellationError())
                    return
                }
                // Ends with the shared task, however long that takes; resumes the waiter only
                // if the cancellation has not.
                Task<Void, Never> {
                    let result = await self.result
                    waiter.take()?.resume(with: result)
                }
            }
        } onCancel: {
            waiter.take()?.resume(throwing: _Concurrency.CancellationError())
        }
    }
}

/// One waiter of `valueUnlessCancelled`: resumed once, by the shared task's end or by the
/// cancellation, whichever comes first.
private final class SharedTaskWaiter<Value: Sendable>: Sendable {
    private enum State {
        case notStarted
        case waiting(CheckedContinuation<Value, any Error>)
        case done
    }
    private let state = Mutex(State.notStarted)

    /// Holds `continuation`; false when the wait was cancelled before it began.
    func wait(_ continuation: CheckedContinuation<Value, any Error>) -> Bool {
        state.withLock { s in
            guard case .notStarted = s else { return false }
            s = .waiting(continuation)
            return true
        }
    }

    /// The continuation to resume, if nobody has yet. A cancellation that comes before the
    /// wait began ends it: `wait` then returns false.
    func take() -> CheckedContinuation<Value, any Error>? {
        state.withLock { s in
            defer { s = .done }
            guard case .waiting(let continuation) = s else { return nil }
            return continuation
        }
    }
}
