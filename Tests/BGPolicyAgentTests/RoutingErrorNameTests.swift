@testable import BGPolicyAgent
import BGPolicyCore
import BGPolicyDBus
import Testing

/// The names the agent's (and the client library's) connection answers calls it cannot route
/// with are built from the domain, by `ObjectServer.ErrorNames(domain:)`: each must be one of
/// the contract's, so that a call the agent refuses before any handler still gets an
/// `org.bgpolicy.Error.*` that `bgpolicy` and the library read.
@Suite("routing failures in our domain")
struct RoutingErrorNameTests {
    @Test func everyNameIsOneOfTheContracts() {
        let names = AgentService.errorNames
        #expect(names.all.count == 9)
        for name in names.all {
            #expect(BGPolicyErrorName(dbusName: name) != nil, "\(name)")
        }
        #expect(BGPolicyErrorName(dbusName: names.invalidArgs) == .invalidArgument)
        #expect(BGPolicyErrorName(dbusName: names.unavailable) == .unavailable)
        #expect(BGPolicyErrorName(dbusName: names.limitsExceeded) == .limitsExceeded)
    }
}
