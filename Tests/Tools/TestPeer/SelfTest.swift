import BGPolicyDBus
import Glibc

/// `bgpolicy-testpeer self-test`: serves org.bgpolicy.TestPeer1 on one connection and calls
/// it from a second, through the bus, then closes both and checks that nothing is left open.
/// scripts/leakcheck.sh runs this under valgrind, so it ends on its own and in bounded time.
enum SelfTest {
    static func run(bus: DBusConnection.Bus, rounds: Int) async -> Int32 {
        let report = Report()
        // Let the runtime open what it keeps for good (timers, the executor) before counting.
        try? await Task.sleep(for: .milliseconds(1))
        let descriptorsBefore = openDescriptors()

        do {
            try await session(bus: bus, rounds: rounds, report: report)
        } catch {
            report.fail("self-test", "\(error)")
        }

        await report.check("leak.descriptors") {
            // The connections' threads finish a moment after they report the disconnection.
            var now = openDescriptorCount()
            for _ in 0..<100 where now > descriptorsBefore.count {
                try await Task.sleep(for: .milliseconds(50))
                now = openDescriptorCount()
            }
            try expect(
                now <= descriptorsBefore.count,
                "\(now) descriptors open after closing, \(descriptorsBefore.count) before connecting; new: \(newDescriptors(since: descriptorsBefore))")
        }
        warn("self-test: \(report.passed) checks passed, \(report.failed) failed")
        return report.failed == 0 ? 0 : 1
    }

    private static func session(bus: DBusConnection.Bus, rounds: Int, report: Report) async throws {
        let server = try await DBusConnection.connect(to: bus)
        let client = try await DBusConnection.connect(to: bus)
        let state = TestPeerInterface.State()
        try server.objects.export([TestPeerInterface.exported(on: server, state: state)], at: TestPeerInterface.path)
        let serving = Task { await server.objects.serve() }

        let name = TestPeerInterface.busName
        let owned = try await server.requestName(name, flags: .doNotQueue)
        guard owned == .primaryOwner else {
            serving.cancel()
            throw CheckFailure("could not own \(name) (\(owned)): another peer runs on this bus")
        }
        let suite = ClientSuite(
            connection: client, destination: name, path: TestPeerInterface.path, interface: TestPeerInterface.name, report: report)
        let cases = try EchoTable.cases()

        await suite.echoEach(cases)
        await suite.echoConcurrently(cases, rounds: rounds, check: "echo.concurrent")
        await suite.fileDescriptors()
        await descriptorChurn(suite, report: report)
        await suite.signals()
        await suite.errors()
        await suite.properties()
        await suite.introspection()
        await routing(suite, report: report)
        await busCalls(server: server, client: client, report: report)
        await report.check("property.Count") {
            let reply = try await client.call(
                destination: name, path: TestPeerInterface.path, interface: ObjectServer.propertiesInterface, member: "Get",
                [.string(TestPeerInterface.name), .string("Count")])
            try expect(reply == [.variant(.uint32(state.count))], "Count is \(reply), the peer counted \(state.count)")
            try expect(state.count > 100, "only \(state.count) calls were served")
        }
        await suite.timeoutsAndCancellation()

        // Shut down: stop serving, close both connections, and check that calls now fail cleanly.
        serving.cancel()
        await serving.value
        await report.check("close") {
            try await server.releaseName(name)
            client.close()
            server.close()
            await client.waitUntilDisconnected()
            await server.waitUntilDisconnected()
            try expect(!client.isConnected && !server.isConnected, "a connection still reports itself connected")
            do {
                _ = try await client.call(
                    destination: name, path: TestPeerInterface.path, interface: TestPeerInterface.name, member: "EchoInt32", [.int32(1)])
                throw CheckFailure("a call on a closed connection succeeded")
            } catch DBusError.disconnected {}
            do {
                try client.emitSignal(
                    path: TestPeerInterface.path, interface: TestPeerInterface.name, member: "Pinged", body: [.string("x")])
                throw CheckFailure("a signal on a closed connection was accepted")
            } catch DBusError.disconnected {}
        }
    }

    /// Many descriptors both ways; every one must be closed again once its value is gone.
    private static func descriptorChurn(_ suite: ClientSuite, report: Report) async {
        await report.check("fd.churn") {
            let before = openDescriptors()
            for i in 0..<25 {
                let text = "churn \(i)"
                let made = try await suite.call("MakePipe", [.string(text)])
                guard case .unixFD(let fd)? = made.first else { throw CheckFailure("MakePipe returned \(made)") }
                let back = try await suite.call("ReadFD", [.unixFD(fd)])
                try expect(back == [.string(text)], "round trip \(i) read \(back)")
            }
            var after = openDescriptorCount()
            for _ in 0..<40 where after > before.count {
                try await Task.sleep(for: .milliseconds(50))
                after = openDescriptorCount()
            }
            try expect(after <= before.count, "descriptors left open by 25 round trips: \(newDescriptors(since: before))")
        }
    }

    /// What our object server answers by itself: routing errors, signature and property checks.
    private static func routing(_ suite: ClientSuite, report: Report) async {
        let connection = suite.connection
        let name = suite.destination
        let path = suite.path
        let props = ObjectServer.propertiesInterface
        await report.check("routing.UnknownObject") {
            try await suite.expectError("org.freedesktop.DBus.Error.UnknownObject") {
                _ = try await connection.call(
                    destination: name, path: ObjectPath("/org/bgpolicy/Nope"), interface: suite.interface, member: "EchoInt32", [.int32(1)])
            }
        }
        await report.check("routing.UnknownInterface") {
            try await suite.expectError("org.freedesktop.DBus.Error.UnknownInterface") {
                _ = try await connection.call(
                    destination: name, path: path, interface: "org.bgpolicy.Nope1", member: "EchoInt32", [.int32(1)])
            }
        }
        await report.check("routing.noInterface") {
            let reply = try await connection.call(destination: name, path: path, interface: nil, member: "EchoInt32", [.int32(-7)])
            try expect(reply == [.int32(-7)], "a call without an interface returned \(reply)")
        }
        await report.check("routing.UnknownProperty") {
            try await suite.expectError("org.freedesktop.DBus.Error.UnknownProperty") {
                _ = try await connection.call(
                    destination: name, path: path, interface: props, member: "Get", [.string(suite.interface), .string("Nope")])
            }
        }
        await report.check("routing.SetWrongType") {
            try await suite.expectError("org.freedesktop.DBus.Error.InvalidArgs") {
                _ = try await connection.call(
                    destination: name, path: path, interface: props, member: "Set", [.string(suite.interface), .string("Label"), .variant(.int32(1))])
            }
        }
        await report.check("routing.FailInvalidName") {
            try await suite.expectError("org.freedesktop.DBus.Error.InvalidArgs") {
                _ = try await suite.call("Fail", [.string("not a name"), .string("x")])
            }
        }
        await report.check("routing.MakePipeTooLong") {
            try await suite.expectError("org.freedesktop.DBus.Error.InvalidArgs") {
                _ = try await suite.call("MakePipe", [.string(String(repeating: "x", count: 5000))])
            }
        }
        await report.check("local.invalidValue") {
            // Refused before it reaches libdbus (which would abort the process).
            do {
                _ = try await suite.call("EchoString", [.string("nul\0inside")])
                throw CheckFailure("a string with a NUL was sent")
            } catch DBusError.invalidValue {}
            do {
                _ = try await suite.call("EchoStrings", [.array(element: .string, [.int32(1)])])
                throw CheckFailure("an array holding the wrong type was sent")
            } catch DBusError.invalidValue {}
        }
        await report.check("noReplyExpected") {
            var message = Message.methodCall(
                destination: name, path: path, interface: suite.interface, member: "Emit", body: [.string("quiet")])
            message.noReplyExpected = true
            let rule = MatchRule(sender: name, interface: suite.interface, member: "Pinged", path: path, arguments: [0: "quiet"])
            let subscription = try await connection.subscribe(rule)
            try connection.send(message)
            let signal = try await withTimeout(suite.signalTimeout, "Pinged from a no-reply call") {
                for try await signal in subscription { return signal }
                throw CheckFailure("the subscription ended")
            }
            try expect(signal.body == [.string("quiet")], "Pinged carried \(signal.body)")
        }
    }

    /// Calls on the bus daemon: owners, credentials, name watching.
    private static func busCalls(server: DBusConnection, client: DBusConnection, report: Report) async {
        await report.check("bus.nameOwner") {
            let owner = try await client.nameOwner(of: TestPeerInterface.busName)
            try expect(owner == server.uniqueName, "owner of \(TestPeerInterface.busName) is \(owner ?? "nobody"), not \(server.uniqueName)")
            let none = try await client.nameOwner(of: "org.bgpolicy.NobodyOwnsThis")
            try expect(none == nil, "an unowned name has owner \(none ?? "")")
        }
        await report.check("bus.credentials") {
            let credentials = try await client.credentials(of: server.uniqueName)
            try expect(credentials.pid == UInt32(getpid()), "credentials say pid \(String(describing: credentials.pid)), we are \(getpid())")
            try expect(credentials.uid == getuid(), "credentials say uid \(String(describing: credentials.uid))")
        }
        await report.check("bus.busID") {
            let id = try await client.busID()
            try expect(id.count == 32, "bus id \"\(id)\"")
        }
        await report.check("bus.watchNameOwner") {
            let extra = "org.bgpolicy.TestPeer.Extra"
            let owners = try await client.watchNameOwner(extra)
            let lost = try await server.nameLostSignals()
            let seen = Task { () -> [String?] in
                var seen: [String?] = []
                for try await owner in owners {
                    seen.append(owner)
                    if seen.count == 3 { break }
                }
                return seen
            }
            try await expect(server.requestName(extra, flags: .doNotQueue) == .primaryOwner, "could not own \(extra)")
            try await expect(server.releaseName(extra) == .released, "could not release \(extra)")
            let got = try await withTimeout(20, "owner changes of \(extra)") { try await seen.value }
            try expect(got == [nil, server.uniqueName, nil], "owner changes were \(got)")
            let signal = try await withTimeout(20, "NameLost") {
                for try await signal in lost where signal.body.first == .string(extra) { return signal }
                throw CheckFailure("the NameLost subscription ended")
            }
            try expect(signal.destination == server.uniqueName, "NameLost went to \(signal.destination ?? "nobody")")
        }
    }
}
