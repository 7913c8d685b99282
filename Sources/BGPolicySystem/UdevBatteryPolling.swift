import Synchronization

/// Whether `UdevPowerSource` reads the supplies again on a timer, and how often: the agent
/// turns it on while udev is the battery's only source and the machine runs on battery
/// (`ConditionsModel.udevNeedsRereads`), and off on AC or once UPower is live.
///
/// Many ACPI batteries send no uevent as the charge drops (UPower polls for it, about every
/// 2 minutes on battery). Without UPower, udev would keep the percentage it read at the unplug
/// for hours, while the battery fell below the low and critical levels. The timer exists only
/// while it is on: on AC, or with UPower live, nothing wakes the agent.
public final class UdevBatteryPolling: Sendable {
    private struct State {
        var active = false
        var interval: Duration
        /// Counts the changes of `active` and `interval`, for a waiter to tell one happened.
        var version = 0
        var waiters: [Int: CheckedContinuation<Void, Never>] = [:]
        var nextWaiter = 0
    }
    private let state: Mutex<State>

    /// - Parameter interval: `[battery] udev_read_interval`.
    public init(interval: Duration) {
        state = Mutex(State(interval: interval))
    }

    /// Turns the timer on or off; true when that changed.
    @discardableResult
    public func set(active: Bool) -> Bool {
        change { state in
            guard state.active != active else { return false }
            state.active = active
            return true
        }
    }

    /// Sets the period (a reload); a wait under way starts again with it. True when it changed.
    @discardableResult
    public func set(interval: Duration) -> Bool {
        change { state in
            guard state.interval != interval else { return false }
            state.interval = interval
            return true
        }
    }

    public var isActive: Bool { state.withLock { $0.active } }
    public var interval: Duration { state.withLock { $0.interval } }

    /// Whether the timer is on, its period, and the version to wait for a change from.
    var current: (active: Bool, interval: Duration, version: Int) {
        state.withLock { ($0.active, $0.interval, $0.version) }
    }

    /// Returns once the state differs from `version` (at once if it does already), or when
    /// the task is cancelled.
    func changed(from version: Int) async {
        let id = state.withLock { state -> Int in
            defer { state.nextWaiter += 1 }
            return state.nextWaiter
        }
        await withTaskCancellationHandler {
            await withCheckedContinuation { (waiter: CheckedContinuation<Void, Never>) in
                let now = state.withLock { state -> Bool in
                    if state.version != version || Task.isCancelled { return true }
                    state.waiters[id] = waiter
                    return false
                }
                if now { waiter.resume() }
            }
        } onCancel: {
            state.withLock { $0.waiters.removeValue(forKey: id) }?.resume()
        }
    }

    private func change(_ body: (inout State) -> Bool) -> Bool {
        let (changed, waiters) = state.withLock { state -> (Bool, [CheckedContinuation<Void, Never>]) in
            guard body(&state) else { return (false, []) }
            state.version += 1
            defer { state.waiters = [:] }
            return (true, Array(state.waiters.values))
        }
        for waiter in waiters { waiter.resume() }
        return changed
    }
}
