@testable import BGPolicyAgent
import BGPolicyDBus
import Testing

/// A reply over `AgentService.maximumReplyBytes` is answered LimitsExceeded by the object
/// server (Tests/BGPolicyDBusTests/ReplyBoundTests), ending with the method's advice: each
/// Admin1 method whose reply grows with the apps, requests or entries the agent keeps says
/// what to ask instead.
@Suite("what Admin1 advises for a reply too large")
struct OversizedReplyAdviceTests {
    @Test func everyListHasAdviceNamingACommand() {
        let advice = AdminInterface.oversizedReplyAdvice
        for method in ["ListApps", "ListPending", "GetHistory", "GetAppHistory", "GetTimeline"] {
            #expect(advice[method]?.contains("'bgpolicy ") == true, "\(method): \(advice[method] ?? "none")")
        }
        for method in advice.keys {
            #expect(AgentInterfaces.admin.method(named: method) != nil, "\(method) is no Admin1 method")
        }
        // `bgpolicy pending APP` reads the whole of ListPending: no way round it.
        #expect(advice["ListPending"]?.contains("'bgpolicy pending") == false)
    }

    /// dbus-daemon's own default max_message_size: a bus whose configuration sets none
    /// disconnects a sender of more, and the agent would lose its name.
    @Test func theBoundIsTheLeastABusTakes() {
        #expect(AgentService.maximumReplyBytes == 33_554_432)
    }
}
