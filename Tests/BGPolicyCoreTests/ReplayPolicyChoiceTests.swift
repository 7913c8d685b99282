import BGPolicyCore
import Testing

@Suite("ReplayPolicyChoice")
struct ReplayPolicyChoiceTests {
    static let valid: [(String, ReplayPolicyChoice, String)] = [
        ("bgpolicy", .bgpolicy, "bgpolicy"),
        ("periodic:60m", .periodic(seconds: 3600), "periodic:1h"),
        ("periodic:15min", .periodic(seconds: 900), "periodic:15min"),
        ("oracle:10m", .oracle(seconds: 600), "oracle:10min"),
        ("oracle:0s", .oracle(seconds: 0), "oracle:0s"),
        ("oracle:90s", .oracle(seconds: 90), "oracle:90s"),
        ("periodic:1min", .periodic(seconds: 60), "periodic:1min"),
        ("periodic:1h30m", .periodic(seconds: 5400), "periodic:90min"),
        ("periodic:30m 30s", .periodic(seconds: 1830), "periodic:1830s"),
    ]

    @Test(arguments: valid)
    func parses(_ example: (String, ReplayPolicyChoice, String)) throws {
        let choice = try ReplayPolicyChoice(parsing: example.0)
        #expect(choice == example.1)
        #expect(choice.description == example.2)
    }

    @Test(arguments: ["", "periodic", "periodic:", "periodic:0s", "periodic:30s", "periodic:60", "oracle:-5m", "cron:1h", "periodic:8d"])
    func rejects(_ text: String) {
        #expect(throws: ReplayPolicyChoice.ParseError.self) { try ReplayPolicyChoice(parsing: text) }
    }

    /// The part that is wrong is named, not the unit before it: "60m" alone is a period.
    @Test(arguments: [
        ("periodic:60m:x", #"periodic:60m:x: expected a duration such as "30s", "10min", "2h", "7d" or "1h30min", got "60m:x", where ":x" is not part of one"#),
        ("oracle:10m,", #"oracle:10m,: expected a duration such as "30s", "10min", "2h", "7d" or "1h30min", got "10m,", where "," is not part of one"#),
        ("periodic:1h 5x", #"periodic:1h 5x: expected a duration, but "1h 5x" has the unknown unit "x"; units are ms, s, min, h and d"#),
        ("periodic:0m", #"periodic:0m: expected a duration from 1min to 7d, like "60min", got "0m""#),
    ])
    func namesWhatIsWrong(_ example: (String, String)) {
        let error = #expect(throws: ReplayPolicyChoice.ParseError.self) { try ReplayPolicyChoice(parsing: example.0) }
        #expect(error?.description == example.1)
    }
}
