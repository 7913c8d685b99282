import BGPolicyTestSupport
import Testing

@testable import BGPolicyDBus

@Suite("followOwner: a name's owner as the connection has read it", .timeLimit(.minutes(1)))
struct NameOwnerFollowerTests {
    static let name = "org.bgpolicy.Test.Followed"

    @Test("the owner at the start, each new one, none; stopping ends it")
    func followsTheOwner() async throws {
        let bus = try PrivateBus()
        let c = try await connect(3, to: bus)
        let (watcher, a, b) = (c[0], c[1], c[2])
        defer { for connection in c { connection.close() } }
        #expect(try await a.requestName(Self.name, flags: [.allowReplacement, .doNotQueue]) == .primaryOwner)
        let follower = try await watcher.followOwner(of: Self.name)
        #expect(follower.owner == a.uniqueName)

        #expect(try await b.requestName(Self.name, flags: .replaceExisting) == .primaryOwner)
        #expect(await eventually { follower.owner == b.uniqueName })
        b.close()
        #expect(await eventually { follower.owner == nil })
        #expect(try await a.requestName(Self.name) == .primaryOwner)
        #expect(await eventually { follower.owner == a.uniqueName })

        follower.stop()
        #expect(follower.owner == nil, "a stopped follower knows no owner")
        follower.stop()

        // A unique name has no owner to follow.
        await #expect(throws: DBusError.self) { _ = try await watcher.followOwner(of: a.uniqueName) }
    }

    /// `GetNameOwner`'s reply is handled by a task that can run after the connection's thread
    /// has read a later `NameOwnerChanged`: the reply must not undo it.
    @Test("an owner read from GetNameOwner does not undo a change read since")
    func aLateReplyDoesNotUndoAChange() throws {
        let registry = SubscriptionRegistry()
        let (tracking, isFirst) = registry.retainOwnerTracking(Self.name)
        #expect(isFirst)
        registry.ownerTrackingMatched(tracking)
        var change = Message.signal(path: DBusConnection.busPath, interface: DBusConnection.busName, member: "NameOwnerChanged")
        change.sender = DBusConnection.busName
        var message = change
        message.body = [.string(Self.name), .string(":1.4"), .string(":1.9")]
        try registry.deliver(header: change, stringArgument: { _ in nil }, decoded: { message })
        #expect(registry.ownerTrackingReady(tracking, owner: ":1.4"))
        #expect(registry.owner(of: Self.name) == ":1.9")

        // Tracking that starts again starts afresh: the reply counts until a change is read.
        #expect(registry.releaseOwnerTracking(tracking))
        #expect(!registry.releaseOwnerTracking(tracking), "a share given back twice")
        let (again, isFirstAgain) = registry.retainOwnerTracking(Self.name)
        #expect(isFirstAgain && again !== tracking)
        registry.ownerTrackingMatched(again)
        #expect(registry.ownerTrackingReady(again, owner: ":1.9"))
        #expect(registry.owner(of: Self.name) == ":1.9")
    }
}
