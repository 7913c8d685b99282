/// A refresh policy that `ReplayDriver` runs in virtual time over a usage trace.
///
/// The driver tells the policy everything in time order and nothing from the future: each event
/// (`observe`), each resubmitted refresh request (`resubmitted`: an app resubmits after each of
/// its opens and after each of its refreshes), and asks it when it next wants to wake. At a wake
/// it asks which apps to refresh; each refresh completes at the wake's instant.
public protocol ReplayPolicy {
    /// The user opened or closed an app at `event.time`.
    mutating func observe(_ event: UsageEvent)
    /// `appID` has (again) a pending refresh request, from `time` on.
    mutating func resubmitted(appID: String, at time: Double)
    /// The policy's next wake strictly after `time`, or nil for none before the next event.
    mutating func nextWake(after time: Double) -> Double?
    /// The policy wakes at `time`: the apps it refreshes now (each at most once).
    mutating func wake(at time: Double) -> [String]
}
