/// The policies `bgpolicy replay --policy` knows: `bgpolicy`, `periodic:<period>` and
/// `oracle:<lead>`, with durations in the syntax of the configuration file (`15min`, `1h`, `90s`;
/// `m` is accepted for minutes too, as issue 5 writes `periodic:60m`, anywhere `min` is: `1h30m`).
/// A period is 1 min to
/// 7 days (shorter ones would only fill memory with refreshes); a lead is 0 to 7 days.
public enum ReplayPolicyChoice: Sendable, Equatable, CustomStringConvertible {
    case bgpolicy
    case periodic(seconds: Double)
    case oracle(seconds: Double)

    public struct ParseError: Error, Equatable, Sendable, CustomStringConvertible {
        public let description: String
    }

    public init(parsing text: String) throws(ParseError) {
        if text == "bgpolicy" {
            self = .bgpolicy
            return
        }
        let parts = text.split(separator: ":", maxSplits: 1, omittingEmptySubsequences: false)
        guard parts.count == 2, parts[0] == "periodic" || parts[0] == "oracle" else {
            throw ParseError(description: "unknown policy \"\(text)\"; expected bgpolicy, periodic:<period> (like periodic:60m) or oracle:<lead> (like oracle:10m)")
        }
        let amount = String(parts[1])
        let periodic = parts[0] == "periodic"
        let range: ClosedRange<Duration> = periodic ? .seconds(60) ... .seconds(7 * 86_400) : .zero ... .seconds(7 * 86_400)
        do {
            let duration = try ConfigurationSyntax.duration(amount, in: range, example: periodic ? "60min" : "10min")
            self = periodic ? .periodic(seconds: duration.seconds) : .oracle(seconds: duration.seconds)
        } catch {
            throw ParseError(description: "\(parts[0]):\(parts[1]): \(error.message)")
        }
    }

    public var description: String {
        switch self {
        case .bgpolicy: "bgpolicy"
        case .periodic(let s): "periodic:\(ConfigurationSyntax.render(.nanoseconds(Int64((s * 1e9).rounded()))))"
        case .oracle(let s): "oracle:\(ConfigurationSyntax.render(.nanoseconds(Int64((s * 1e9).rounded()))))"
        }
    }

    /// Replays `trace` under this policy and returns the refreshes it made, in time order.
    public func refreshes(
        over trace: UsageTrace, apps: ReplayApps = .registeredAtStart, configuration: PolicyConfiguration = .defaults
    ) -> [ReplayRefresh] {
        var refreshes: [ReplayRefresh] = []
        replay(trace, apps: apps, configuration: configuration) { refreshes.append($0) }
        return refreshes
    }

    /// Replays `trace` under this policy, handing each refresh to `made` as it is made (in time
    /// order), so that nothing holds them all. `apps` is what `bgpolicy` is told of the trace's
    /// apps; the baselines take every app of the trace, as they are defined to. `configuration`
    /// sets `bgpolicy`'s knobs (`PredictivePolicy.init`); the baselines have none.
    public func replay(
        _ trace: UsageTrace, apps: ReplayApps = .registeredAtStart, configuration: PolicyConfiguration = .defaults,
        each made: (ReplayRefresh) -> Void
    ) {
        switch self {
        case .bgpolicy:
            var policy = PredictivePolicy(
                registeredAppCount: apps == .registeredAtStart ? trace.appIDs.count : 0, configuration: configuration)
            ReplayDriver.run(trace, policy: &policy, each: made)
        case .periodic(let period):
            var policy = PeriodicPolicy(period: period, appIDs: trace.appIDs)
            ReplayDriver.run(trace, policy: &policy, each: made)
        case .oracle(let lead):
            var policy = OraclePolicy(trace: trace, lead: lead)
            ReplayDriver.run(trace, policy: &policy, each: made)
        }
    }

    /// Replays `trace` under this policy and scores it, as the refreshes are made.
    public func metrics(
        over trace: UsageTrace, apps: ReplayApps = .registeredAtStart, configuration: PolicyConfiguration = .defaults
    ) -> ReplayMetrics {
        var scorer = ReplayScorer(trace: trace)
        replay(trace, apps: apps, configuration: configuration) { scorer.add($0) }
        return scorer.finish()
    }
}

/// What the `bgpolicy` policy is told, at the start of a replay, of the apps in the trace.
///
/// The planner's budget is per app known to it (`[refresh] budget`, 2.2 refreshes a day each). In the agent that is
/// every app registered with it, which on a machine in use for a while is every app the user
/// runs, including those not yet opened this week. A trace has no registrations, so a replay
/// must choose: this number is the one fact of the whole trace that the policy may be given,
/// and it names no time of any open.
public enum ReplayApps: Sendable, Equatable {
    /// Every app of the trace is registered before the first event (the default): the agent
    /// of a machine in use for a while, which knows its apps before the trace begins.
    case registeredAtStart
    /// An app becomes known when it is first opened, and brings half a day of its budget then,
    /// as an app registered with a running agent does: nothing beyond the past, not even how
    /// many apps will come.
    case firstSeen
}
