import DequeModule

/// Turns to start apps by D-Bus activation (`[slices] concurrent_starts`): at most `limit`
/// starts under way at once, the others waiting in the order they asked.
///
/// A wake window may launch many apps together (the window after an open can refresh most of
/// them at a session's first open). Those already running get their slices at once; those the
/// bus must start take turns, so that a window does not start a dozen processes together just
/// as the user begins to work. A start is under way from its turn until the app has answered
/// its first `RunTask`, or the call failed.
///
/// Pure: the engine keeps one, with continuations as waiters.
struct StartTurns<Waiter> {
    private(set) var limit: Int
    /// Starts under way.
    private(set) var running = 0
    private var queue = Deque<Waiter>()

    init(limit: Int) {
        self.limit = max(1, limit)
    }

    /// Starts waiting for a turn.
    var waiting: Int { queue.count }

    /// Asks for a turn: `true` if it is taken now (and counted as under way), else `waiter`
    /// queues until `finish()` hands it a turn.
    mutating func ask(_ waiter: Waiter) -> Bool {
        if running < limit && waiting == 0 {
            running += 1
            return true
        }
        queue.append(waiter)
        return false
    }

    /// Ends a start under way. Returns the waiter whose turn it is now, if one waits (its start
    /// is under way from here).
    mutating func finish() -> Waiter? {
        precondition(running > 0, "a start finished that never began")
        // Over the limit (lowered by a reload while more were under way): no turn is handed on.
        guard running <= limit, let next = queue.popFirst() else {
            running -= 1
            return nil
        }
        return next
    }

    /// Sets a new limit (a configuration reload). Returns the waiters whose turn it is now, a
    /// higher limit letting them start at once; a lower one lets the starts under way finish,
    /// and hands on no turn until fewer than it are.
    mutating func setLimit(_ newLimit: Int) -> [Waiter] {
        limit = max(1, newLimit)
        var started: [Waiter] = []
        while running < limit, let next = queue.popFirst() {
            running += 1
            started.append(next)
        }
        return started
    }
}
