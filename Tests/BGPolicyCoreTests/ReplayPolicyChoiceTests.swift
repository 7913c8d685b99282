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
}
