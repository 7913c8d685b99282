/// `periodic:<period>`: every app seen anywhere in the trace has its own timer of `period`, and
/// the timers are aligned the way coalesced systemd timers are (`OnCalendar=` on multiples of the
/// period since the Unix epoch, e.g. `hourly` fires at :00). So there is one wake at every
/// multiple of `period` inside the replay, and it refreshes every app of the trace, whether or
/// not the app has been opened yet: that is what a per-app timer does.
public struct PeriodicPolicy: ReplayPolicy {
    public let period: Double
    public let appIDs: [String]

    public init(period: Double, appIDs: [String]) {
        precondition(period > 0, "a period is positive")
        self.period = period
        self.appIDs = appIDs.sorted()
    }

    public mutating func observe(_ event: UsageEvent) {}
    public mutating func resubmitted(appID: String, at time: Double) {}

    public mutating func nextWake(after time: Double) -> Double? {
        var wake = (time / period).rounded(.down) * period
        while wake <= time { wake += period }
        return wake
    }

    public mutating func wake(at time: Double) -> [String] { appIDs }
}
