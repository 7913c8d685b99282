/// The pure part of the CPU monitor (SPEC §2 "CPU monitor"): fed cumulative CPU readings of one
/// slice, it says when to warn and when to enforce. The agent samples `cpu.stat` or `/proc` on
/// its own timer and does what the answer says; this type reads nothing and keeps no clock.
public struct CPUUsageMonitor: Sendable {
    public enum Step: Sendable, Equatable {
        /// Nothing to do.
        case none
        /// First time over the limit: send `ExpireTask`.
        case warn(averagePercent: Double)
        /// Still over the limit `warningGrace` after the warning: apply `cpu.action`. Given once.
        case enforce(averagePercent: Double)
    }

    private struct Reading {
        var time: Double
        var cpuSeconds: Double
    }

    private enum Phase {
        case watching
        case warned(at: Double)
        case enforced
    }

    private let window: Double
    private let limit: Double
    private let warningGrace: Double
    /// Oldest first, in counted CPU seconds (the raw counter plus `offset`). The first one is at
    /// or before the window's start, so that the span covers the whole window once enough time
    /// has passed.
    private var readings: [Reading] = []
    private var phase = Phase.watching
    /// Added to the raw counter: what it lost each time it went backwards.
    private var offset = 0.0
    /// The raw counter's last value.
    private var lastRaw: Double?
    /// The first counted reading.
    private var firstCounted: Double?

    /// window: min(cpu.window, slice length), chosen by the caller; limit: cpu.limit.
    public init(window: Duration, limit: Percentage, warningGrace: Duration) {
        self.window = window.seconds
        self.limit = Double(limit.value)
        self.warningGrace = warningGrace.seconds
    }

    /// Feeds one reading (monotonic seconds, cumulative CPU seconds of the app) and says what to do.
    public mutating func record(at time: Double, cpuSeconds: Double) -> Step {
        guard time.isFinite, cpuSeconds.isFinite else { return .none }
        if let last = readings.last {
            // A monotonic clock does not repeat or go back; such a reading carries no rate.
            guard time > last.time else { return .none }
        }
        if let lastRaw, cpuSeconds < lastRaw {
            // The counter went backwards: a process of the tree read from /proc was reaped or
            // moved between two readings, or the process restarted. Counted as no use since the
            // last reading, and the window goes on: starting it again would leave a hog
            // unjudged for half a window at every such dip.
            offset += lastRaw - cpuSeconds
        }
        lastRaw = cpuSeconds
        let counted = cpuSeconds + offset
        if firstCounted == nil { firstCounted = counted }
        readings.append(Reading(time: time, cpuSeconds: counted))
        // Keep exactly one reading at or before the window's start.
        let windowStart = time - window
        var drop = 0
        while readings.count - drop >= 2, readings[drop + 1].time <= windowStart { drop += 1 }
        readings.removeFirst(drop)

        guard let first = readings.first, let average = averagePercent,
            time - first.time >= window / 2, average > limit
        else { return .none }
        switch phase {
        case .watching:
            phase = .warned(at: time)
            return .warn(averagePercent: average)
        case .warned(let warnedAt) where time - warnedAt >= warningGrace:
            // Still over the limit is judged on the use since the warning (within the window):
            // an app that calms down when warned is not held to what it burned before, which
            // keeps a trailing average over the limit long after the grace.
            guard let since = averagePercent(since: max(warnedAt, windowStart)), since > limit else { return .none }
            phase = .enforced
            return .enforce(averagePercent: since)
        case .warned, .enforced:
            return .none
        }
    }

    /// The average from the last reading at or before `start` (or the first there is) to now.
    private func averagePercent(since start: Double) -> Double? {
        guard let last = readings.last else { return nil }
        let from = readings.last { $0.time <= start } ?? readings.first!
        guard last.time > from.time else { return nil }
        return (last.cpuSeconds - from.cpuSeconds) * 100 / (last.time - from.time)
    }

    /// Over the trailing window, as % of one core; `nil` until two readings span some time.
    /// Available before the span covers half the window, for display, but not judged before then.
    public var averagePercent: Double? {
        guard let first = readings.first, let last = readings.last, last.time > first.time else { return nil }
        // Scaled before dividing, so that a whole-number rate such as 48 s in 60 s reads exactly 80.
        return (last.cpuSeconds - first.cpuSeconds) * 100 / (last.time - first.time)
    }

    /// How many seconds `averagePercent` covers: the window once it has filled, less before.
    public var coveredSeconds: Double {
        guard let first = readings.first, let last = readings.last else { return 0 }
        return last.time - first.time
    }

    /// Last reading − first reading, in counted CPU seconds: across a counter that went
    /// backwards, the sum of the stretches before and after (what was used between the two
    /// readings around the drop is not known).
    public var totalCPUSeconds: Double {
        guard let last = readings.last, let firstCounted else { return 0 }
        return last.cpuSeconds - firstCounted
    }
}
