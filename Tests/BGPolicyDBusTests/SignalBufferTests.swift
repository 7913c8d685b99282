import Testing

@testable import BGPolicyDBus

@Suite("A subscription whose reader falls behind drops the oldest signals, and says so")
struct SignalBufferTests {
    @Test func theFirstDropAndEveryThousandthAreReportedAndTheNewestAreKept() async throws {
        let registry = SubscriptionRegistry()
        let rule = MatchRule(interface: "org.bgpolicy.Test.Signals", member: "Changed")
        let (stream, continuation) = AsyncThrowingStream.makeStream(
            of: Message.self, throwing: (any Error).self, bufferingPolicy: .bufferingNewest(2))
        registry.add(id: 1, rule: rule, continuation: continuation)
        var header = Message.signal(path: ObjectPath(checked: "/org/bgpolicy/Test"), interface: "org.bgpolicy.Test.Signals", member: "Changed")
        header.sender = ":1.7"
        var reported: [Int] = []
        for n in 0..<2_002 {
            var message = header
            message.body = [.string("\(n)")]
            let drops = try registry.deliver(header: header, stringArgument: { _ in nil }, decoded: { message })
            reported += drops.map { dropped in
                #expect(dropped.0 == rule)
                return dropped.1
            }
        }
        // 2,002 signals into a buffer of 2 nobody reads: 2,000 dropped, reported at 1, 1,000, 2,000.
        #expect(reported == [1, 1_000, 2_000])
        continuation.finish()
        var kept: [String] = []
        for try await message in stream {
            if case .string(let text)? = message.body.first { kept.append(text) }
        }
        #expect(kept == ["2000", "2001"])
    }
}
