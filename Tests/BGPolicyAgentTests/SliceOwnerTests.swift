import BGPolicyCore
import BGPolicySystem
import Testing

@testable import BGPolicyAgent

@Suite("SliceOwner: which owner of the bus name a slice was delivered to is attached to it")
struct SliceOwnerTests {
    static let snap = AppID(rawValue: "snap.sneaky")!
    static let feeds = AppID(rawValue: "org.example.Feeds")!

    static func owner(_ appID: String?, _ source: IdentitySource) -> ProcessIdentity {
        ProcessIdentity(pid: 4242, appID: appID.flatMap(AppID.init(rawValue:)), source: source)
    }

    /// (owner's app id, its source, the bus name, the slice's app) → attached.
    static let cases: [(String?, IdentitySource, String, AppID, Bool)] = [
        // Identified as the app: attached, whatever the name.
        ("snap.sneaky", .snap, "org.example.Victim", snap, true),
        ("org.example.Feeds", .flatpak, "org.example.Feeds", feeds, true),
        ("org.example.Feeds", .systemdUnit, "org.example.Feeds.Service", feeds, true),
        // Identified as another app: never, not even under a name of the slice's app.
        ("org.example.Burner", .systemdUnit, "org.example.Victim", snap, false),
        ("org.example.Burner", .flatpak, "org.example.Feeds", feeds, false),
        ("snap.other", .snap, "org.example.Feeds", feeds, false),
        // Unverified (a host program, one the bus started in a dbus-….service unit): only under
        // the app's own names, which a snap's bus_name need not be.
        (nil, .unverified, "org.example.Feeds", feeds, true),
        (nil, .unverified, "org.example.Feeds.Background", feeds, true),
        (nil, .unverified, "org.example.FeedsX", feeds, false),
        (nil, .unverified, "org.example.Victim", snap, false),
    ]

    @Test("the owner attached to a slice", arguments: cases)
    func attached(_ row: (String?, IdentitySource, String, AppID, Bool)) {
        let (ownerID, source, busName, appID, expected) = row
        #expect(TaskEngine.mayAttach(owner: Self.owner(ownerID, source), of: busName, to: appID) == expected)
    }
}
