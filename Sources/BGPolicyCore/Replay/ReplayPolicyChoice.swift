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
    public func refreshes(over trace: UsageTrace) -> [ReplayRefresh] {
        var refreshes: [ReplayRefresh] = []
        replay(trace) { refreshes.append($0) }
        return refreshes
    }

    /// Replays `trace` under this policy, handing each refresh to `made` as it is made (in time
    /// order), so that nothing holds them all.
    public func replay(_ trace: UsageTrace, each made: (ReplayRefresh) -> Void) {
        switch self {
        case .bgpolicy:
            var policy = PredictivePolicy(registeredAppCount: trace.appIDs.count)
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
    public func metrics(over trace: UsageTrace) -> ReplayMetrics {
        var scorer = ReplayScorer(trace: trace)
        replay(trace) { scorer.add($0) }
        return scorer.finish()
    }
}
