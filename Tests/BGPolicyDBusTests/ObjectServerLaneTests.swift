import Testing

@testable import BGPolicyDBus

/// Something a queued call holds on to, to see when the lane lets go of it.
private final class Token: Sendable {}

/// A call of `bytes` whose handler holds `token`.
private func work(_ loop: ConnectionLoop, bytes: Int = 10, holding token: Token = Token()) -> ObjectServer.Work {
    let message = Message.methodCall(
        destination: ":1.1", path: ObjectPath(checked: "/org/bgpolicy/Test"), interface: "org.bgpolicy.Test1", member: "Add")
    return ObjectServer.Work(message: message, loop: loop, run: { _ in withExtendedLifetime(token) { [] } }, bytes: bytes)
}

/// A caller's lane lets go of each call as it is taken, however long the caller keeps calls
/// waiting: before, the queue was emptied only when its last call was taken, so a caller that
/// always kept one waiting behind the running one grew it (and kept every message) forever.
@Suite("A caller's lane of queued calls")
struct ObjectServerLaneTests {
    @Test("with a call always waiting, the lane's storage stays small and its count and bytes exact")
    func alwaysOneWaiting() throws {
        let loop = try ConnectionLoop()
        var lane = ObjectServer.Lane()
        lane.append(work(loop))
        for _ in 0..<10_000 {
            lane.append(work(loop))
            #expect(lane.next() != nil)
            #expect(lane.count == 1 && lane.bytes == 10)
        }
        #expect(lane.storedSlots <= 32, "the lane holds \(lane.storedSlots) slots for 1 call waiting")
        #expect(lane.next() != nil)
        #expect(lane.next() == nil && lane.count == 0 && lane.bytes == 0)
    }

    @Test("a taken call is let go of at once, while others still wait")
    func takenCallIsReleased() throws {
        let loop = try ConnectionLoop()
        var lane = ObjectServer.Lane()
        weak var taken: Token?
        do {
            let token = Token()
            taken = token
            lane.append(work(loop, holding: token))
        }
        lane.append(work(loop))
        lane.append(work(loop))
        do {
            let first = lane.next()
            #expect(first != nil && taken != nil)
        }
        #expect(taken == nil, "the lane still holds a call it has handed out")
        #expect(lane.count == 2)
    }

    @Test("calls come out in the order they went in")
    func order() throws {
        let loop = try ConnectionLoop()
        var lane = ObjectServer.Lane()
        var sizes: [Int] = []
        var next = 1
        // Uneven batches in and out, so that the front is dropped with calls still waiting.
        for round in 0..<200 {
            for _ in 0..<(round % 7 + 1) {
                lane.append(work(loop, bytes: next))
                next += 1
            }
            for _ in 0..<(round % 5 + 1) {
                guard let taken = lane.next() else { break }
                sizes.append(taken.bytes)
            }
        }
        while let taken = lane.next() { sizes.append(taken.bytes) }
        #expect(sizes == Array(1..<next))
    }
}
