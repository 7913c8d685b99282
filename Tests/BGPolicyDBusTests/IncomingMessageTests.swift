import BGPolicyTestSupport
import Testing

@testable import BGPolicyDBus

/// Calls and signals are routed on their headers first (`IncomingMessage`): the body is read
/// only when it will be used, and a call's arguments only within the object server's bounds.
@Suite("Incoming messages: headers first, bounded arguments")
struct IncomingMessageTests {
    @Test("the measured body length is the length libdbus writes, value for value", arguments: RoundTripTable.marshalCases)
    func bodyLength(_ testCase: RoundTripCase) throws {
        for body in RoundTripTable.bodies(for: testCase) {
            let raw = try TypeRoundTripTests.call(body).encode()
            let expected = WireWriterTests.body(of: try raw.marshalled()).count
            // `IncomingMessage` borrows the message: `raw` must outlive it.
            defer { withExtendedLifetime(raw) {} }
            defer { withExtendedLifetime(raw) {} }
        let incoming = try IncomingMessage(raw.pointer)
            #expect(incoming.bodyLength(upTo: .max) == expected, "\(body)")
            #expect(incoming.bodyLength(upTo: expected) == expected)
            if expected > 0 { #expect(incoming.bodyLength(upTo: expected - 1) == nil, "\(body)") }
            #expect(incoming.signature == body.signatureText)
            #expect(incoming.header.body.isEmpty && incoming.header.member == "Take")
        }
    }

    @Test("a top-level string argument is read alone, past a big array")
    func stringArgument() throws {
        let big = DBusValue.array(element: .byte, Array(repeating: .byte(1), count: 100_000))
        let raw = try TypeRoundTripTests.call([big, .string("two"), .int32(3), .string("four")]).encode()
        defer { withExtendedLifetime(raw) {} }
        let incoming = try IncomingMessage(raw.pointer)
        #expect(incoming.stringArgument(1) == "two")
        #expect(incoming.stringArgument(3) == "four")
        #expect(incoming.stringArgument(0) == nil && incoming.stringArgument(2) == nil && incoming.stringArgument(4) == nil)
        // Far over the bound, the walk stops early.
        #expect(incoming.bodyLength(upTo: 1000) == nil)
    }

    @Test("the type of a top-level variant is read without its value")
    func variantSignature() throws {
        let big = DBusValue.array(element: .byte, Array(repeating: .byte(1), count: 100_000))
        let raw = try TypeRoundTripTests.call([.string("one"), .variant(big), .variant(.string("x")), .int32(3)]).encode()
        defer { withExtendedLifetime(raw) {} }
        let incoming = try IncomingMessage(raw.pointer)
        #expect(incoming.variantSignature(1) == "ay")
        #expect(incoming.variantSignature(2) == "s")
        #expect(incoming.variantSignature(0) == nil && incoming.variantSignature(3) == nil && incoming.variantSignature(4) == nil)
    }
}

/// A server with a method taking bytes and one that blocks, with a small bound for tests.
private struct BoundFixture {
    static let name = "org.bgpolicy.Test.Bound"
    static let path = ObjectPath(checked: "/org/bgpolicy/Test/Bound")

    let server: DBusConnection
    let client: DBusConnection
    let serving: Task<Void, Never>
    let gate = Gate()
    let blocked = Recorder<Int>()
    let taken = Recorder<Int>()

    init(bus: PrivateBus, limits: ObjectServer.Limits) async throws {
        server = try await DBusConnection.connect(to: .address(bus.address))
        client = try await DBusConnection.connect(to: .address(bus.address))
        var names = ObjectServer.ErrorNames()
        names.limitsExceeded = "org.bgpolicy.Test.Error.TooMuch"
        names.invalidArgs = "org.bgpolicy.Test.Error.Invalid"
        names.unknownMethod = "org.bgpolicy.Test.Error.NoMethod"
        server.objects.errorNames = names
        server.objects.limits = limits
        let description = InterfaceDescription(
            name: Self.name, documentation: "Bounds.",
            methods: [
                .init("Take", inputs: [.init("data", .array(.byte))], outputs: [.init("count", .uint32)], documentation: "Counts."),
                .init("Block", documentation: "Waits for the test's gate."),
            ],
            properties: [.init("Data", .array(.byte), access: .readwrite, documentation: "Counts what is set.")])
        let (gate, blocked, taken) = (gate, blocked, taken)
        let interface = ExportedInterface(description)
            .method("Take") { call in
                guard case .array(_, let items) = call.arguments.first else { return [.uint32(0)] }
                taken.append(items.count)
                return [.uint32(UInt32(items.count))]
            }
            .method("Block") { _ in
                blocked.append(1)
                await gate.wait()
                return []
            }
            .property("Data", get: { .array(element: .byte, []) }, set: { value, _ in
                guard case .array(_, let items) = value else { return }
                taken.append(items.count)
            })
        try server.objects.export([interface], at: Self.path)
        serving = startServing(server)
    }

    func call(_ member: String, _ body: [DBusValue] = []) async throws -> [DBusValue] {
        try await client.call(destination: server.uniqueName, path: Self.path, interface: Self.name, member: member, body)
    }

    /// Sets the Data property to `data` through `Properties.Set`.
    func setData(_ data: DBusValue) async throws {
        _ = try await client.call(
            destination: server.uniqueName, path: Self.path, interface: ObjectServer.propertiesInterface, member: "Set",
            [.string(Self.name), .string("Data"), .variant(data)])
    }

    func stop() {
        gate.open()
        serving.cancel()
        server.close()
        client.close()
    }
}

private func bytes(_ count: Int) -> DBusValue {
    .array(element: .byte, Array(repeating: .byte(0), count: count))
}

@Suite("The object server's bounds on a caller's arguments")
struct CallBoundTests {
    @Test("a call over the bound gets limitsExceeded, unread; one at the bound is served")
    func bodyBound() async throws {
        let bus = try PrivateBus()
        var limits = ObjectServer.Limits()
        limits.maximumCallBodyBytes = 1004  // 4 bytes of length and 1,000 of data
        let fixture = try await BoundFixture(bus: bus, limits: limits)
        defer { fixture.stop() }
        #expect(try await fixture.call("Take", [bytes(1000)]) == [.uint32(1000)])
        let message = await expectRemoteError("org.bgpolicy.Test.Error.TooMuch") { _ = try await fixture.call("Take", [bytes(1001)]) }
        #expect(message?.contains("org.bgpolicy.Test.Bound.Take") == true && message?.contains("1004 bytes") == true, "\(message ?? "")")
        #expect(fixture.taken.all == [1000], "the handler never saw the call over the bound")
        // Routing is answered from the headers, whatever the arguments' size.
        await expectRemoteError("org.bgpolicy.Test.Error.NoMethod") {
            _ = try await fixture.client.call(
                destination: fixture.server.uniqueName, path: BoundFixture.path, interface: BoundFixture.name, member: "Nope",
                [bytes(100_000)])
        }
        await expectRemoteError("org.bgpolicy.Test.Error.Invalid") {
            _ = try await fixture.call("Take", [bytes(100_000), .byte(1)])
        }
    }

    @Test("a caller's waiting calls are bounded by bytes as well as by count")
    func queuedBytes() async throws {
        let bus = try PrivateBus()
        var limits = ObjectServer.Limits()
        limits.maximumCallBodyBytes = 10_000
        limits.maximumQueuedBytesPerCaller = 25_000
        let fixture = try await BoundFixture(bus: bus, limits: limits)
        defer { fixture.stop() }
        let other = try await DBusConnection.connect(to: .address(bus.address))
        defer { other.close() }
        let blocked = Task { try await fixture.call("Block") }
        #expect(await eventually { fixture.blocked.count == 1 })
        // Behind the blocked call: two of 9,004 bytes fit in 25,000, the third does not.
        let refused = Recorder<Int>()
        let queued = (0..<3).map { i in
            Task {
                do {
                    return try await fixture.call("Take", [bytes(9000)])
                } catch DBusError.remote(let name, let message) where name == "org.bgpolicy.Test.Error.TooMuch" {
                    // The message names the bound that refused it: bytes here, not the count.
                    #expect(message.contains("over 25000 bytes of arguments"), "\(message)")
                    refused.append(i)
                    return []
                }
            }
        }
        #expect(await eventually { refused.count == 1 }, "refused \(refused.count)")
        #expect(fixture.taken.count == 0)
        // Another caller has its own budget.
        let reply = try await withTimeout(.seconds(5), "another caller") {
            try await other.call(
                destination: fixture.server.uniqueName, path: BoundFixture.path, interface: BoundFixture.name, member: "Take",
                [bytes(9000)])
        }
        #expect(reply == [.uint32(9000)])
        fixture.gate.open()
        _ = try await withTimeout(.seconds(5), "the blocked call") { try await blocked.value }
        for task in queued { _ = try await withTimeout(.seconds(5), "a queued call") { try await task.value } }
        #expect(fixture.taken.count == 3 && refused.count == 1)
        // Once the queue has drained, the budget is whole again.
        #expect(try await fixture.call("Take", [bytes(9000)]) == [.uint32(9000)])
    }

    /// Many connections of one process each keep within a caller's bounds: together they are
    /// bounded too, by count and by bytes, and a refused caller is told the server is busy.
    @Test("the calls waiting from all callers together are bounded", arguments: [false, true])
    func queuedFromAllCallers(byBytes: Bool) async throws {
        let bus = try PrivateBus()
        var limits = ObjectServer.Limits()
        limits.maximumCallBodyBytes = 10_000
        if byBytes { limits.maximumQueuedBytes = 25_000 } else { limits.maximumQueuedCalls = 2 }
        let fixture = try await BoundFixture(bus: bus, limits: limits)
        defer { fixture.stop() }
        var callers: [DBusConnection] = []
        for _ in 0..<3 { callers.append(try await DBusConnection.connect(to: .address(bus.address))) }
        defer { for caller in callers { caller.close() } }
        // One call each blocks: three running, none waiting. One at a time, so that none
        // waits to be taken (two waiting would fill the bound of 2).
        var blocked: [Task<[DBusValue], any Error>] = []
        for (i, caller) in callers.enumerated() {
            blocked.append(Task {
                try await caller.call(
                    destination: fixture.server.uniqueName, path: BoundFixture.path, interface: BoundFixture.name, member: "Block")
            })
            #expect(await eventually { fixture.blocked.count == i + 1 })
        }
        // Then one call of 9,004 bytes from each, waiting behind its caller's blocked call:
        // two fit (2 calls; 18,008 bytes of 25,000), the third does not.
        let refused = Recorder<Int>()
        let queued = callers.enumerated().map { i, caller in
            Task {
                do {
                    return try await caller.call(
                        destination: fixture.server.uniqueName, path: BoundFixture.path, interface: BoundFixture.name,
                        member: "Take", [bytes(9000)])
                } catch DBusError.remote(let name, let message) where name == "org.bgpolicy.Test.Error.TooMuch" {
                    #expect(message.hasPrefix("busy: "), "\(message)")
                    #expect(message.contains(byBytes ? "over 25000 bytes" : "2 calls from all callers"), "\(message)")
                    refused.append(i)
                    return []
                }
            }
        }
        #expect(await eventually { refused.count == 1 }, "refused \(refused.count)")
        #expect(fixture.taken.count == 0)
        fixture.gate.open()
        for task in blocked { _ = try await withTimeout(.seconds(5), "a blocked call") { try await task.value } }
        for task in queued { _ = try await withTimeout(.seconds(5), "a queued call") { try await task.value } }
        #expect(fixture.taken.count == 2 && refused.count == 1)
        // Once the queue has drained, the budget is whole again.
        #expect(try await fixture.call("Take", [bytes(9000)]) == [.uint32(9000)])
    }

    @Test("Properties calls are held to a caller's bounds like any other call")
    func propertyBounds() async throws {
        let bus = try PrivateBus()
        var limits = ObjectServer.Limits()
        limits.maximumCallBodyBytes = 10_000
        limits.maximumQueuedBytesPerCaller = 25_000
        let fixture = try await BoundFixture(bus: bus, limits: limits)
        defer { fixture.stop() }
        let over = await expectRemoteError("org.bgpolicy.Test.Error.TooMuch") { try await fixture.setData(bytes(10_000)) }
        #expect(over?.contains("org.freedesktop.DBus.Properties.Set") == true && over?.contains("10000 bytes") == true, "\(over ?? "")")
        let blocked = Task { try await fixture.call("Block") }
        #expect(await eventually { fixture.blocked.count == 1 })
        // Behind the blocked call: two Sets of 9,000 bytes fit in 25,000, the third does not.
        let refused = Recorder<Int>()
        let queued = (0..<3).map { i in
            Task {
                do {
                    try await fixture.setData(bytes(9000))
                } catch DBusError.remote(let name, let message) where name == "org.bgpolicy.Test.Error.TooMuch" {
                    #expect(message.contains("over 25000 bytes of arguments"), "\(message)")
                    refused.append(i)
                }
            }
        }
        #expect(await eventually { refused.count == 1 }, "refused \(refused.count)")
        #expect(fixture.taken.count == 0)
        fixture.gate.open()
        _ = try await withTimeout(.seconds(5), "the blocked call") { try await blocked.value }
        for task in queued { _ = try await withTimeout(.seconds(5), "a queued call") { try await task.value } }
        #expect(fixture.taken.all == [9000, 9000] && refused.count == 1)
    }
}
