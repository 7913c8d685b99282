import Foundation
import BGPolicyTestSupport
import Testing
@testable import BGPolicyDBus

@Suite("Connection on a private bus")
struct ConnectionTests {
    @Test("connects, learns its unique name, and calls the bus daemon")
    func connectAndGetId() async throws {
        let bus = try PrivateBus()
        let connection = try await DBusConnection.connect(to: .address(bus.address))
        #expect(connection.uniqueName.hasPrefix(":"))
        let id = try await connection.busID()
        #expect(id.count == 32)
        connection.close()
    }

    @Test("exports an object and calls it from a second connection")
    func exportAndCall() async throws {
        let bus = try PrivateBus()
        let server = try await DBusConnection.connect(to: .address(bus.address))
        let client = try await DBusConnection.connect(to: .address(bus.address))
        let description = InterfaceDescription(
            name: "org.bgpolicy.Test1", documentation: "test",
            methods: [.init("Add", inputs: [.init("a", .int32), .init("b", .int32)], outputs: [.init("sum", .int64)], documentation: "adds")])
        let interface = ExportedInterface(description).method("Add") { call in
            let a = try call.arguments.decode(Int32.self, at: 0)
            let b = try call.arguments.decode(Int32.self, at: 1)
            return [.int64(Int64(a) + Int64(b))]
        }
        try server.objects.export([interface], at: ObjectPath("/org/bgpolicy/Test"))
        let serving = Task { await server.objects.serve() }
        defer { serving.cancel() }
        let reply = try await client.call(
            destination: server.uniqueName, path: ObjectPath("/org/bgpolicy/Test"), interface: "org.bgpolicy.Test1", member: "Add",
            [.int32(40), .int32(2)])
        #expect(reply == [.int64(42)])

        await #expect(throws: DBusError.self) {
            _ = try await client.call(
                destination: server.uniqueName, path: ObjectPath("/org/bgpolicy/Test"), interface: "org.bgpolicy.Test1", member: "Add",
                [.string("x")])
        }
        do {
            _ = try await client.call(destination: server.uniqueName, path: ObjectPath("/nope"), interface: nil, member: "Add")
            Issue.record("expected an error")
        } catch DBusError.remote(let name, let message) {
            #expect(name == "org.freedesktop.DBus.Error.UnknownObject")
            #expect(message.contains("/nope"))
        }
        // Peer is answered by libdbus itself.
        _ = try await client.call(destination: server.uniqueName, path: .root, interface: "org.freedesktop.DBus.Peer", member: "Ping")
        server.close()
        client.close()
    }

    // MARK: Timeouts, cancellation and disconnection

    @Test("a call times out with NoReply after its timeout, not after the handler finishes")
    func callTimeout() async throws {
        let bus = try PrivateBus()
        let fixture = try await SlowFixture(bus: bus)
        defer { fixture.stop() }
        let clock = ContinuousClock()
        let start = clock.now
        let error = try await withTimeout(.seconds(5), "the call to time out") { () -> DBusError? in
            do {
                _ = try await fixture.client.call(
                    destination: fixture.server.uniqueName, path: SlowFixture.path, interface: SlowFixture.name, member: "Sleep",
                    [.uint32(5000)], timeout: .milliseconds(200))
                return nil
            } catch let error as DBusError {
                return error
            }
        }
        let elapsed = clock.now - start
        guard case .remote(let name, _)? = error else {
            Issue.record("expected a NoReply error, got \(String(describing: error))")
            return
        }
        #expect(name == DBusError.noReply)
        #expect(fixture.slept.count == 0, "the error came only after the handler finished")
        #expect(elapsed >= .milliseconds(150), "timed out too early: \(elapsed)")
        // Well before the handler's 5 s, with room for a machine that other tests load (the
        // suites run in parallel, some writing 64 MiB replies; 1.5 s was passed so).
        #expect(elapsed < .seconds(4), "took \(elapsed)")
        // The connection is still fine. (Not a call to the server: this caller's next call
        // would wait, in order, behind the handler that is still sleeping.)
        #expect(try await fixture.client.busID().count == 32)
    }

    @Test("cancelling the task awaiting a slow call throws CancellationError promptly")
    func cancellation() async throws {
        let bus = try PrivateBus()
        let fixture = try await SlowFixture(bus: bus)
        defer { fixture.stop() }
        let client = fixture.client, destination = fixture.server.uniqueName
        let call = Task {
            try await client.call(
                destination: destination, path: SlowFixture.path, interface: SlowFixture.name, member: "Sleep", [.uint32(5000)])
        }
        // Let the call reach the server before cancelling it.
        #expect(await eventually { fixture.sleeping.count == 1 })
        let clock = ContinuousClock()
        let start = clock.now
        call.cancel()
        let result = try await withTimeout(.seconds(4), "the cancelled call") { await call.result }
        // Well before the handler's 5 s: in a loaded full run the test threads have taken
        // 1.7 s to get to the cancelled task.
        #expect(clock.now - start < .seconds(4))
        #expect(throws: CancellationError.self) { try result.get() }

        // A task cancelled before it calls never sends anything.
        let early = Task {
            withUnsafeCurrentTask { $0?.cancel() }
            return try await client.call(
                destination: destination, path: SlowFixture.path, interface: SlowFixture.name, member: "Sleep", [.uint32(5000)])
        }
        let earlyResult = try await withTimeout(.seconds(3), "the call cancelled before it started") { await early.result }
        #expect(throws: CancellationError.self) { try earlyResult.get() }

        // Many calls cancelled at random moments: each ends, answered or cancelled.
        try await withTimeout(.seconds(10), "50 racing cancellations") {
            try await withThrowingTaskGroup(of: Void.self) { group in
                for i in 0..<50 {
                    let task = Task {
                        try await client.call(
                            destination: destination, path: SlowFixture.path, interface: SlowFixture.name, member: "Double", [.int32(Int32(i))])
                    }
                    group.addTask {
                        try await Task.sleep(for: .microseconds(i * 40))
                        task.cancel()
                        switch await task.result {
                        case .success(let body): #expect(body == [.int32(Int32(i * 2))])
                        case .failure(let error): #expect(error is CancellationError, "\(error)")
                        }
                    }
                }
                try await group.waitForAll()
            }
        }
        #expect(try await client.busID().count == 32, "the connection still works")
    }

    @Test("calls, sends and subscriptions after close() throw disconnected")
    func afterClose() async throws {
        let bus = try PrivateBus()
        let connection = try await DBusConnection.connect(to: .address(bus.address))
        #expect(connection.isConnected)
        connection.close()
        await #expect(throws: DBusError.disconnected) { _ = try await connection.busID() }
        try await withTimeout(.seconds(5), "waitUntilDisconnected after close") { await connection.waitUntilDisconnected() }
        #expect(!connection.isConnected)
        await #expect(throws: DBusError.disconnected) { _ = try await connection.busID() }
        #expect(throws: DBusError.disconnected) {
            try connection.emitSignal(path: .root, interface: "org.bgpolicy.Test1", member: "S")
        }
        await #expect(throws: DBusError.self) { _ = try await connection.subscribe(MatchRule(interface: "org.bgpolicy.Test1")) }
        await #expect(throws: DBusError.self) { _ = try await connection.requestName("org.bgpolicy.Test.Closed") }
        connection.close()  // twice is harmless
    }

    @Test("when the bus daemon dies, pending calls fail and waitUntilDisconnected returns")
    func daemonDies() async throws {
        let bus = try PrivateBus()
        let fixture = try await SlowFixture(bus: bus)
        defer { fixture.stop() }
        let client = fixture.client, server = fixture.server, destination = server.uniqueName
        let pending = Task {
            try await client.call(destination: destination, path: SlowFixture.path, interface: SlowFixture.name, member: "Block")
        }
        #expect(await eventually { fixture.blocked.count == 1 })
        let subscription = try await client.subscribe(MatchRule(interface: "org.bgpolicy.Test1"))

        bus.crash()

        let result = try await withTimeout(.seconds(5), "the pending call to fail") { await pending.result }
        switch result {
        case .success(let body):
            Issue.record("the call succeeded with \(body)")
        case .failure(DBusError.disconnected):
            break
        case .failure(DBusError.remote(let name, _)) where name == DBusError.noReply:
            break  // libdbus may complete pending calls with NoReply when the connection drops
        case .failure(let error):
            Issue.record("unexpected error \(error)")
        }
        try await withTimeout(.seconds(5), "the client to notice") { await client.waitUntilDisconnected() }
        try await withTimeout(.seconds(5), "the server to notice") { await server.waitUntilDisconnected() }
        #expect(!client.isConnected && !server.isConnected)
        // serve() finishes the handlers it started, then returns; the late reply goes nowhere.
        fixture.gate.open()
        try await withTimeout(.seconds(5), "serve() to return") { await fixture.serving.value }
        await #expect(throws: DBusError.disconnected) { _ = try await client.busID() }
        // The subscription ends with the connection.
        let ended = try await withTimeout(.seconds(5), "the subscription to end") { () -> (any Error)? in
            do {
                for try await _ in subscription {}
                return nil
            } catch {
                return error
            }
        }
        #expect((ended as? DBusError) == .disconnected)
    }

    // MARK: Connecting to a bus that does not answer

    @Test("connecting to a bus that takes the connection but does not answer ends when its task is cancelled")
    func connectCancelled() async throws {
        let bus = try PrivateBus()
        bus.pause()
        defer { bus.resume() }
        let connecting = Task { try await DBusConnection.connect(to: .address(bus.address)) }
        try await Task.sleep(for: .milliseconds(200))
        connecting.cancel()
        let result = try await withTimeout(.seconds(3), "the cancelled connect") { await connecting.result }
        #expect(throws: CancellationError.self) { try result.get() }
        // The bus, going on, serves the next connection.
        bus.resume()
        let connection = try await DBusConnection.connect(to: .address(bus.address))
        #expect(try await connection.busID().count == 32)
        connection.close()
    }

    @Test("connecting to a bus that does not answer fails after the timeout, naming the bus and saying it did not answer")
    func connectTimesOut() async throws {
        let bus = try PrivateBus()
        bus.pause()
        defer { bus.resume() }
        let clock = ContinuousClock()
        let start = clock.now
        do {
            let connection = try await withTimeout(.seconds(5), "connect's own timeout") {
                try await DBusConnection.connect(to: .address(bus.address), timeout: .milliseconds(300))
            }
            Issue.record("connected as \(connection.uniqueName) to a stopped bus")
        } catch DBusError.connectionFailed(let name, let message) {
            #expect(name == DBusError.timedOut)
            #expect(message.contains(bus.address), "\(message)")
            #expect(message.contains("did not answer within 300 ms"), "\(message)")
        }
        #expect(clock.now - start >= .milliseconds(250))
    }

    @Test("connecting to a socket another program listens on: one that never answers times out, one that hangs up is named")
    func connectToAForeignSocket() async throws {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("bgpolicy-foreign-\(getpid())-\(UInt32.random(in: 0...UInt32.max))").path
        let listener = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        try #require(listener >= 0)
        defer {
            close(listener)
            unlink(path)
        }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { buffer in
            for (i, byte) in path.utf8.enumerated() { buffer[i] = byte }
        }
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(listener, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        try #require(bound == 0 && listen(listener, 4) == 0)
        // Never accepted, never answered: the kernel takes the connection into the backlog.
        do {
            let connection = try await withTimeout(.seconds(5), "connect's own timeout") {
                try await DBusConnection.connect(to: .address("unix:path=\(path)"), timeout: .milliseconds(300))
            }
            Issue.record("connected as \(connection.uniqueName) to a socket that never answers")
        } catch DBusError.connectionFailed(let name, let message) {
            #expect(name == DBusError.timedOut, "\(message)")
            #expect(message.contains("did not answer"), "\(message)")
        }
        // Accepted and closed at once: not a timeout, and said so long before it.
        let hangingUp = Thread {
            while true {
                let peer = accept(listener, nil, nil)
                guard peer >= 0 else { return }
                close(peer)
            }
        }
        hangingUp.start()
        let clock = ContinuousClock()
        let start = clock.now
        do {
            let connection = try await withTimeout(.seconds(5), "connect to a socket that hangs up") {
                try await DBusConnection.connect(to: .address("unix:path=\(path)"), timeout: .seconds(4))
            }
            Issue.record("connected as \(connection.uniqueName) to a socket that hangs up")
        } catch DBusError.connectionFailed(let name, let message) {
            #expect(name == "org.freedesktop.DBus.Error.Disconnected", "\(message)")
            #expect(message.contains("closed the connection before it answered"), "\(message)")
        }
        #expect(clock.now - start < .seconds(3))
        shutdown(listener, Int32(SHUT_RDWR))
    }

    @Test("a method call that arrives while no handler is installed is answered UnknownMethod, not left to time out")
    func callWithNoHandler() async throws {
        let bus = try PrivateBus()
        let c = try await connect(2, to: bus)
        let (server, client) = (c[0], c[1])
        // As in the moment between the bus giving out the name and the handler being installed.
        await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in
            server.loop.enqueue { loop in
                loop.onMethodCall = nil
                done.resume()
            }
        }
        let clock = ContinuousClock()
        let start = clock.now
        await expectRemoteError(DBusError.unknownMethod) {
            _ = try await client.call(
                .methodCall(destination: server.uniqueName, path: ObjectPath("/org/bgpolicy/Test"), interface: "org.bgpolicy.Test1", member: "Add"),
                timeout: .seconds(3))
        }
        #expect(clock.now - start < .seconds(2))
        server.close()
        client.close()
    }

    @Test("the session bus fallback escapes the path as a D-Bus address value")
    func sessionAddressEscapesThePath() throws {
        let runtime = "/run/user/1000/odd dir,x=y;z%é\\"
        let address = try DBusConnection.sessionAddress(
            environment: { $0 == "XDG_RUNTIME_DIR" ? runtime : nil }, exists: { $0 == runtime + "/bus" })
        #expect(address == "unix:path=/run/user/1000/odd%20dir%2cx%3dy%3bz%25%c3%a9\\/bus")
        #expect(DBusConnection.escapeAddressValue("-_/.*\\azAZ09") == "-_/.*\\azAZ09")
        // DBUS_SESSION_BUS_ADDRESS is an address already: taken as it is.
        #expect(try DBusConnection.sessionAddress(environment: { $0 == "DBUS_SESSION_BUS_ADDRESS" ? "unix:path=/a%20b" : nil }, exists: { _ in true })
            == "unix:path=/a%20b")
        #expect(throws: DBusError.self) { try DBusConnection.sessionAddress(environment: { _ in nil }, exists: { _ in true }) }
    }

    // MARK: Ordering and load

    @Test("calls from one caller are handled in the order they were sent")
    func perCallerOrdering() async throws {
        let bus = try PrivateBus()
        let fixture = try await SlowFixture(bus: bus)
        defer { fixture.stop() }
        for i in 0..<200 {
            var message = Message.methodCall(
                destination: fixture.server.uniqueName, path: SlowFixture.path, interface: SlowFixture.name, member: "Append",
                body: [.int32(Int32(i))])
            message.noReplyExpected = true
            try fixture.client.send(message)
        }
        // A call with a reply from the same caller runs after all of them.
        let numbers = try await withTimeout(.seconds(10), "Numbers") {
            try await fixture.client.call(
                destination: fixture.server.uniqueName, path: SlowFixture.path, interface: SlowFixture.name, member: "Numbers")
        }
        #expect(try numbers.decode([Int32].self, at: 0) == Array(0..<200))
    }

    @Test("500 concurrent calls from several callers are all answered correctly")
    func manyConcurrentCalls() async throws {
        let bus = try PrivateBus()
        let fixture = try await SlowFixture(bus: bus)
        defer { fixture.stop() }
        let clients = [fixture.client] + (try await connect(3, to: bus))
        let destination = fixture.server.uniqueName
        let answered = try await withTimeout(.seconds(20), "500 calls") {
            try await withThrowingTaskGroup(of: Bool.self) { group in
                for i in 0..<500 {
                    let client = clients[i % clients.count]
                    group.addTask {
                        let body = try await client.call(
                            destination: destination, path: SlowFixture.path, interface: SlowFixture.name, member: "Double",
                            [.int32(Int32(i))])
                        return body == [.int32(Int32(2 * i))]
                    }
                }
                var correct = 0
                for try await ok in group where ok { correct += 1 }
                return correct
            }
        }
        #expect(answered == 500)
        for client in clients.dropFirst() { client.close() }
    }

    @Test("a caller with too many calls waiting gets LimitsExceeded; other callers are unaffected")
    func limitsExceeded() async throws {
        let bus = try PrivateBus()
        let fixture = try await SlowFixture(bus: bus)
        defer { fixture.stop() }
        let client = fixture.client, destination = fixture.server.uniqueName
        let other = try await DBusConnection.connect(to: .address(bus.address))
        defer { other.close() }

        // Block the caller's lane with one call whose handler waits for the gate.
        let blocked = Task {
            try await client.call(destination: destination, path: SlowFixture.path, interface: SlowFixture.name, member: "Block")
        }
        #expect(await eventually { fixture.blocked.count == 1 })

        let limit = ObjectServer.maximumQueuedCallsPerCaller
        let total = limit + 44
        let refused = Recorder<String>()
        let flood = Task {
            try await withThrowingTaskGroup(of: Int32?.self) { group in
                for i in 0..<total {
                    group.addTask {
                        do {
                            let body = try await client.call(
                                destination: destination, path: SlowFixture.path, interface: SlowFixture.name, member: "Double",
                                [.int32(Int32(i))])
                            return try body.decode(Int32.self, at: 0) / 2
                        } catch DBusError.remote(let name, _) where name == "org.freedesktop.DBus.Error.LimitsExceeded" {
                            refused.append(name)
                            return nil
                        }
                    }
                }
                var answered: [Int32] = []
                for try await value in group { if let value { answered.append(value) } }
                return answered
            }
        }
        // While the lane is blocked, exactly the calls beyond the limit are refused, at once.
        #expect(await eventually(.seconds(10)) { refused.count == total - limit }, "refused \(refused.count)")
        #expect(fixture.doubled.count == 0, "nothing ran behind the blocked call")
        // Another caller has its own lane.
        let otherReply = try await withTimeout(.seconds(5), "another caller") {
            try await other.call(destination: destination, path: SlowFixture.path, interface: SlowFixture.name, member: "Double", [.int32(5)])
        }
        #expect(otherReply == [.int32(10)])

        fixture.gate.open()
        let answered = try await withTimeout(.seconds(15), "the queued calls") { try await flood.value }
        #expect(answered.count == limit)
        #expect(refused.count == total - limit)
        _ = try await withTimeout(.seconds(5), "the blocked call") { try await blocked.value }
    }
}

/// A server with slow, blocking and recording methods, and a client, on one private bus.
struct SlowFixture {
    static let name = "org.bgpolicy.Test.Slow"
    static let path = ObjectPath(checked: "/org/bgpolicy/Test/Slow")

    let server: DBusConnection
    let client: DBusConnection
    let serving: Task<Void, Never>
    let gate = Gate()
    let sleeping = Recorder<UInt32>()
    let slept = Recorder<UInt32>()
    let blocked = Recorder<Int>()
    let appended = Recorder<Int32>()
    let doubled = Recorder<Int32>()

    init(bus: PrivateBus) async throws {
        server = try await DBusConnection.connect(to: .address(bus.address))
        client = try await DBusConnection.connect(to: .address(bus.address))
        let description = InterfaceDescription(
            name: Self.name, documentation: "Slow methods.",
            methods: [
                .init("Sleep", inputs: [.init("milliseconds", .uint32)], documentation: "Sleeps."),
                .init("Block", documentation: "Waits for the test's gate."),
                .init("Append", inputs: [.init("n", .int32)], documentation: "Records n."),
                .init("Numbers", outputs: [.init("numbers", .array(.int32))], documentation: "What was recorded."),
                .init("Double", inputs: [.init("n", .int32)], outputs: [.init("twice", .int32)], documentation: "2n."),
            ])
        let (gate, sleeping, slept, blocked, appended, doubled) = (gate, sleeping, slept, blocked, appended, doubled)
        let interface = ExportedInterface(description)
            .method("Sleep") { call in
                let ms = try call.arguments.decode(UInt32.self, at: 0)
                sleeping.append(ms)
                try await Task.sleep(for: .milliseconds(Int(ms)))
                slept.append(ms)
                return []
            }
            .method("Block") { _ in
                blocked.append(1)
                await gate.wait()
                return []
            }
            .method("Append") { call in
                // Suspend, so that calls run out of order would interleave.
                await Task.yield()
                appended.append(try call.arguments.decode(Int32.self, at: 0))
                return []
            }
            .method("Numbers") { _ in [appended.all.dbusValue] }
            .method("Double") { call in
                let n = try call.arguments.decode(Int32.self, at: 0)
                doubled.append(n)
                return [.int32(n &* 2)]
            }
        try server.objects.export([interface], at: Self.path)
        serving = startServing(server)
    }

    func stop() {
        gate.open()
        serving.cancel()
        server.close()
        client.close()
    }
}
