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
    /// Oldest first. The first one is at or before the window's start, so that the span covers
    /// the whole window once enough time has passed.
    private var readings: [Reading] = []
    private var phase = Phase.watching
    /// CPU used before the counter last went backwards.
    private var cpuBeforeReset = 0.0
    /// The first reading since the counter last went backwards.
    private var segmentStart: Double?

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
            if cpuSeconds < last.cpuSeconds {
                // The process restarted (or the cgroup was recreated): earlier readings would
                // give negative usage, so the window starts again from this one.
                cpuBeforeReset += last.cpuSeconds - (segmentStart ?? last.cpuSeconds)
                segmentStart = nil
                readings.removeAll()
            }
        }
        if segmentStart == nil { segmentStart = cpuSeconds }
        readings.append(Reading(time: time, cpuSeconds: cpuSeconds))
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
            phase = .enforced
            return .enforce(averagePercent: average)
        case .warned, .enforced:
            return .none
        }
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

    /// Last reading − first reading; across a counter reset, the sum of the stretches before and
    /// after it (what the restarted process used before its first reading is not known).
    public var totalCPUSeconds: Double {
        guard let last = readings.last, let segmentStart else { return cpuBeforeReset }
        return cpuBeforeReset + last.cpuSeconds - segmentStart
    }
}
