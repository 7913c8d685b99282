import BGPolicyCore
import Testing

@Suite("CPU usage monitor")
struct CPUUsageMonitorTests {
    /// Feeds readings at `times`, with the CPU counter given by `cpu`, and returns every step
    /// that was not `.none`, with its time.
    private static func run(
        _ monitor: inout CPUUsageMonitor, times: some Sequence<Double>, cpu: (Double) -> Double
    ) -> [(time: Double, step: CPUUsageMonitor.Step)] {
        var steps: [(time: Double, step: CPUUsageMonitor.Step)] = []
        for time in times {
            let step = monitor.record(at: time, cpuSeconds: cpu(time))
            if step != .none { steps.append((time, step)) }
        }
        return steps
    }

    private static func defaultMonitor() -> CPUUsageMonitor {
        CPUUsageMonitor(window: .seconds(60), limit: 80, warningGrace: .seconds(10))
    }

    @Test("a steady 100 % burner is warned at half the window, enforced a grace later, once")
    func steadyBurner() {
        var monitor = Self.defaultMonitor()
        let steps = Self.run(&monitor, times: (0...600).map(Double.init), cpu: { $0 })
        #expect(steps.map(\.time) == [30, 40])
        #expect(steps.map(\.step) == [.warn(averagePercent: 100), .enforce(averagePercent: 100)])
        #expect(monitor.averagePercent == 100)
        #expect(monitor.totalCPUSeconds == 600)
    }

    @Test("the span the average covers grows to the window and stays there")
    func coveredSeconds() {
        var monitor = Self.defaultMonitor()
        #expect(monitor.coveredSeconds == 0)
        _ = Self.run(&monitor, times: (0...30).map(Double.init), cpu: { $0 })
        #expect(monitor.coveredSeconds == 30)
        _ = Self.run(&monitor, times: (31...200).map(Double.init), cpu: { $0 })
        #expect(monitor.coveredSeconds == 60)
    }

    @Test("usage at or under the limit is never judged over it", arguments: [50.0, 80.0])
    func underLimit(percent: Double) {
        var monitor = Self.defaultMonitor()
        let steps = Self.run(&monitor, times: stride(from: 0.0, through: 3600, by: 10), cpu: { $0 * percent / 100 })
        #expect(steps.isEmpty)
        let average = monitor.averagePercent ?? 0
        #expect(abs(average - percent) < 1e-9)
    }

    @Test("a burst shorter than half the window is not judged")
    func shortBurst() {
        var monitor = Self.defaultMonitor()
        // 100 % for 29 s, and the slice ends: the span never reaches 30 s.
        #expect(Self.run(&monitor, times: (0...29).map(Double.init), cpu: { $0 }).isEmpty)
        #expect(monitor.averagePercent == 100)
    }

    @Test("a short window (a short slice) is judged at half of it")
    func shortWindow() {
        var monitor = CPUUsageMonitor(window: .seconds(10), limit: 80, warningGrace: .seconds(3))
        let steps = Self.run(&monitor, times: stride(from: 0.0, through: 30, by: 0.5), cpu: { $0 * 2 })
        #expect(steps.map(\.time) == [5, 8])
        #expect(steps.map(\.step) == [.warn(averagePercent: 200), .enforce(averagePercent: 200)])
    }

    @Test("after the warning, enforcement waits for the grace and for usage over the limit again")
    func enforceNeedsGraceAndExcess() {
        var monitor = Self.defaultMonitor()
        // 100 % until 31 s, idle until 200 s, then 100 % again. Warned at 30 s; at 38 s the
        // average is still over 80 % but inside the grace; from 39 s it is under the limit.
        let cpu: (Double) -> Double = { min($0, 31) + max($0 - 200, 0) }
        let steps = Self.run(&monitor, times: (0...400).map(Double.init), cpu: cpu)
        // Over 80 % again once more than 48 of the last 60 s burned: at 249 s.
        #expect(steps.map(\.time) == [30, 249])
        #expect(steps.first?.step == .warn(averagePercent: 100))
        if case .enforce(let average)? = steps.last?.step {
            #expect(abs(average - 49.0 / 60 * 100) < 1e-9)
        } else {
            Issue.record("expected enforcement, got \(steps)")
        }
    }

    @Test("a counter that goes backwards counts no use since the last reading, and the window goes on")
    func counterReset() {
        var monitor = Self.defaultMonitor()
        var steps: [(Double, CPUUsageMonitor.Step)] = []
        for time in stride(from: 0.0, through: 20, by: 1) {
            let step = monitor.record(at: time, cpuSeconds: 1000 + time)
            if step != .none { steps.append((time, step)) }
        }
        // The process restarted: its counter starts near zero.
        for time in stride(from: 21.0, through: 120, by: 1) {
            let step = monitor.record(at: time, cpuSeconds: time - 21)
            if let average = monitor.averagePercent { #expect(average >= 0) }
            if step != .none { steps.append((time, step)) }
        }
        // 100 % but for the second around the restart: judged at half the window as ever.
        #expect(steps.map(\.0) == [30, 40])
        #expect(monitor.totalCPUSeconds == 20 + 99)
    }

    @Test("a counter that dips now and then (a child reaped between two reads of /proc) still gets a hog judged")
    func dippingCounter() {
        var monitor = CPUUsageMonitor(window: .seconds(60), limit: 80, warningGrace: .seconds(5))
        // A 100 % burner whose process tree loses 10 s of counted CPU every 25 s.
        let steps = Self.run(&monitor, times: stride(from: 0.0, through: 600, by: 5), cpu: { $0 - 10 * ($0 / 25).rounded(.down) })
        #expect(steps.map(\.time) == [30, 35])
    }

    @Test("a reading after a drop is averaged with the ones before it")
    func resetClearsAverage() {
        var monitor = Self.defaultMonitor()
        _ = monitor.record(at: 0, cpuSeconds: 50)
        _ = monitor.record(at: 10, cpuSeconds: 55)
        #expect(monitor.averagePercent == 50)
        _ = monitor.record(at: 11, cpuSeconds: 1)
        #expect(monitor.averagePercent == 5.0 * 100 / 11)
        _ = monitor.record(at: 13, cpuSeconds: 2)
        #expect(monitor.averagePercent == 6.0 * 100 / 13)
        #expect(monitor.totalCPUSeconds == 6)
    }

    @Test("an app that stops burning when warned is not enforced, though the trailing average stays over the limit past the grace")
    func compliantApp() {
        var monitor = CPUUsageMonitor(window: .seconds(60), limit: 80, warningGrace: .seconds(5))
        // 100 % until the warning at 30 s, then nothing: at 35 s the trailing average is still
        // 30 / 35 = 86 %, but since the warning it is 0 %.
        let steps = Self.run(&monitor, times: stride(from: 0.0, through: 600, by: 5), cpu: { min($0, 30) })
        #expect(steps.map(\.time) == [30])
        #expect(steps.map(\.step) == [.warn(averagePercent: 100)])
    }

    @Test("the average covers exactly the trailing window")
    func trailingWindow() {
        var monitor = Self.defaultMonitor()
        // 100 % for 60 s, then 0 % for 30 s: the last 60 s are half busy.
        for time in stride(from: 0.0, through: 90, by: 1) {
            _ = monitor.record(at: time, cpuSeconds: min(time, 60))
        }
        #expect(monitor.averagePercent == 50)
        #expect(monitor.totalCPUSeconds == 60)
    }

    @Test("sparse readings span the whole window through the one before it")
    func sparseReadings() {
        var monitor = Self.defaultMonitor()
        #expect(monitor.record(at: 0, cpuSeconds: 0) == .none)
        #expect(monitor.averagePercent == nil)
        // 87.5 % (exact in binary), read once after 40 s.
        #expect(monitor.record(at: 40, cpuSeconds: 35) == .warn(averagePercent: 87.5))
        // At 100 s the reading at 40 s is the last one at or before the window's start.
        #expect(monitor.record(at: 100, cpuSeconds: 87.5) == .enforce(averagePercent: 87.5))
        // At 150 s no reading falls at 90 s: the one at 40 s stays, so the span covers the window.
        #expect(monitor.record(at: 150, cpuSeconds: 87.5) == .none)
        #expect(abs((monitor.averagePercent ?? 0) - 52.5 / 110 * 100) < 1e-9)
    }

    @Test("the average is accurate for uneven sampling", arguments: [12.5, 33.3, 79.9, 80.1, 250])
    func accuracy(percent: Double) {
        var monitor = Self.defaultMonitor()
        let gaps = [0.25, 1.7, 0.9, 3.1, 0.4]
        var time = 0.0
        var steps: [CPUUsageMonitor.Step] = []
        for index in 0..<150 {
            steps.append(monitor.record(at: time, cpuSeconds: time * percent / 100))
            time += gaps[index % gaps.count]
        }
        #expect(abs((monitor.averagePercent ?? 0) - percent) < 1e-6)
        #expect(steps.contains { if case .warn = $0 { true } else { false } } == (percent > 80))
    }

    @Test("readings that do not move forward in time are ignored")
    func timeStandsStill() {
        var monitor = Self.defaultMonitor()
        _ = monitor.record(at: 10, cpuSeconds: 1)
        _ = monitor.record(at: 20, cpuSeconds: 6)
        #expect(monitor.record(at: 20, cpuSeconds: 100) == .none)
        #expect(monitor.record(at: 5, cpuSeconds: 100) == .none)
        #expect(monitor.averagePercent == 50)
        #expect(monitor.totalCPUSeconds == 5)
    }
}
