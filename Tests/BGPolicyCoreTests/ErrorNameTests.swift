import BGPolicyCore
import Testing

@Suite("org.bgpolicy.Error names")
struct ErrorNameTests {
    @Test("every error name round-trips through its D-Bus name", arguments: BGPolicyErrorName.allCases)
    func roundTrip(name: BGPolicyErrorName) {
        #expect(name.dbusName == "org.bgpolicy.Error." + name.rawValue)
        #expect(BGPolicyErrorName(dbusName: name.dbusName) == name)
    }

    @Test("the SPEC's error names are all present")
    func specNames() {
        for spec in ["NotRegistered", "NotPermitted", "TooManyPendingRequests", "Unavailable", "InvalidArgument", "AccessDenied", "UnknownTask"] {
            #expect(BGPolicyErrorName(rawValue: spec) != nil, "\(spec)")
        }
        #expect(BGPolicyErrorName(dbusName: "org.freedesktop.DBus.Error.Failed") == nil)
    }
}
