import BGPolicyDBus
import Glibc

/// The checks a client runs against a peer exporting the echo interface: our own
/// `org.bgpolicy.TestPeer1` (self-test) or Python GDBus's `org.bgpolicy.PyPeer1` (client mode).
struct ClientSuite: Sendable {
    let connection: DBusConnection
    let destination: String
    let path: ObjectPath
    let interface: String
    let report: Report
    /// The error a peer answers for setting a read-only property: GDBus says InvalidArgs.
    var readOnlyError = "org.freedesktop.DBus.Error.PropertyReadOnly"
    /// Generous enough for a run under valgrind.
    var signalTimeout: Double = 20

    func call(_ member: String, _ body: [DBusValue] = [], timeout: Duration = .seconds(25)) async throws -> [DBusValue] {
        try await connection.call(destination: destination, path: path, interface: interface, member: member, body, timeout: timeout)
    }

    /// Expects the call to fail with a D-Bus error named `name`; returns its message.
    @discardableResult
    func expectError(_ name: String, _ operation: () async throws -> Void) async throws -> String {
        do {
            try await operation()
        } catch DBusError.remote(let got, let message) {
            try expect(got == name, "expected error \(name), got \(got): \(message)")
            return message
        }
        throw CheckFailure("expected error \(name), but the call succeeded")
    }

    // MARK: Echo

    /// Every value of the table, one call each, one check line each.
    func echoEach(_ cases: [EchoCase]) async {
        for echo in cases {
            for (index, value) in echo.values.enumerated() {
                await report.check("echo.\(echo.method).\(index)") {
                    let reply = try await call(echo.method, [value])
                    try expect(reply.count == 1, "\(reply.count) values came back for \(brief(value))")
                    try expect(identical(reply[0], value), "sent \(brief(value)), got back \(brief(reply[0]))")
                }
            }
        }
    }

    /// The whole table `rounds` times, all calls in flight at once; one check line.
    func echoConcurrently(_ cases: [EchoCase], rounds: Int, check name: String) async {
        await report.check(name) {
            let work = (0..<rounds).flatMap { _ in cases.flatMap { c in c.values.map { (c.method, $0) } } }
            // At most 200 in flight: our server queues 256 calls per caller and answers the
            // rest with LimitsExceeded, by design (ObjectServer.maximumQueuedCallsPerCaller).
            var failures: [String] = []
            for start in stride(from: 0, to: work.count, by: 200) {
                failures += await echoWave(Array(work[start..<min(start + 200, work.count)]))
            }
            try expect(failures.isEmpty, "\(failures.count) of \(work.count) calls failed; first: \(failures.first ?? "")")
        }
    }

    private func echoWave(_ work: [(String, DBusValue)]) async -> [String] {
        await withTaskGroup(of: String?.self) { group in
            for (method, value) in work {
                group.addTask {
                    do {
                        let reply = try await call(method, [value])
                        return reply.count == 1 && identical(reply[0], value) ? nil : "\(method): sent \(brief(value)), got \(reply)"
                    } catch {
                        return "\(method)(\(brief(value))): \(error)"
                    }
                }
            }
            var failures: [String] = []
            for await failure in group { if let failure { failures.append(failure) } }
            return failures
        }
    }

    // MARK: File descriptors

    func fileDescriptors() async {
        await report.check("fd.ReadFD") {
            let text = "through a pipe ✓ \(getpid())"
            let fd = try makePipe(holding: text)
            let reply = try await call("ReadFD", [.unixFD(fd)])
            try expect(reply == [.string(text)], "sent a pipe holding \"\(text)\", peer read \(reply)")
        }
        await report.check("fd.MakePipe") {
            let text = "from the peer ✓ 日本語"
            let reply = try await call("MakePipe", [.string(text)])
            guard case .unixFD(let fd)? = reply.first, reply.count == 1 else { throw CheckFailure("expected one fd, got \(reply)") }
            let read = try readText(from: fd.rawValue, limit: 4096)
            try expect(read == text, "read \"\(read)\" from the returned fd, expected \"\(text)\"")
        }
        await report.check("fd.roundtrip") {
            // A descriptor the peer made goes back to the peer.
            let text = "round trip"
            let made = try await call("MakePipe", [.string(text)])
            guard case .unixFD(let fd)? = made.first else { throw CheckFailure("expected an fd, got \(made)") }
            let reply = try await call("ReadFD", [.unixFD(fd)])
            try expect(reply == [.string(text)], "peer read \(reply) from its own pipe, expected \"\(text)\"")
        }
    }

    // MARK: Signals

    func signals() async {
        await report.check("signal.Pinged") {
            let rule = MatchRule(sender: destination, interface: interface, member: "Pinged", path: path)
            let subscription = try await connection.subscribe(rule)
            let text = "ping ✓ \(getpid())"
            _ = try await call("Emit", [.string(text)])
            let signal = try await withTimeout(signalTimeout, "Pinged") {
                for try await signal in subscription { return signal }
                throw CheckFailure("the subscription ended before Pinged arrived")
            }
            try expect(signal.body == [.string(text)], "Pinged carried \(signal.body), expected \"\(text)\"")
            try expect(signal.path == path && signal.interface == interface, "Pinged came from \(signal)")
        }
    }

    // MARK: Errors

    func errors() async {
        await report.check("error.Fail") {
            let name = "org.bgpolicy.Test.Error.Custom_1"
            let message = "custom failure ✓ with 'quotes' and\nnewline"
            let got = try await expectError(name) { _ = try await call("Fail", [.string(name), .string(message)]) }
            try expect(got == message, "error message was \"\(got)\", expected \"\(message)\"")
        }
        await report.check("error.UnknownMethod") {
            try await expectError("org.freedesktop.DBus.Error.UnknownMethod") { _ = try await call("NoSuchMethod") }
        }
        await report.check("error.InvalidArgs") {
            try await expectError("org.freedesktop.DBus.Error.InvalidArgs") { _ = try await call("EchoInt32", [.string("not an int")]) }
            // and the peer still answers
            let reply = try await call("EchoInt32", [.int32(5)])
            try expect(reply == [.int32(5)], "after a bad call, EchoInt32(5) returned \(reply)")
        }
    }

    // MARK: Properties

    func properties() async {
        let props = ObjectServer.propertiesInterface
        await report.check("property.Label") {
            let label = "label ✓ \(getpid())"
            let rule = MatchRule(sender: destination, interface: props, member: "PropertiesChanged", path: path, arguments: [0: interface])
            let subscription = try await connection.subscribe(rule)
            _ = try await connection.call(
                destination: destination, path: path, interface: props, member: "Set",
                [.string(interface), .string("Label"), .variant(.string(label))])
            let signal = try await withTimeout(signalTimeout, "PropertiesChanged") {
                for try await signal in subscription { return signal }
                throw CheckFailure("the subscription ended before PropertiesChanged arrived")
            }
            let changed: [String: Variant] = try signal.body.decode([String: Variant].self, at: 1)
            try expect(changed["Label"]?.value == .string(label), "PropertiesChanged carried \(signal.body)")
            let got = try await connection.call(
                destination: destination, path: path, interface: props, member: "Get", [.string(interface), .string("Label")])
            try expect(got == [.variant(.string(label))], "Get Label returned \(got) after setting \"\(label)\"")
        }
        await report.check("property.GetAll") {
            let got = try await connection.call(destination: destination, path: path, interface: props, member: "GetAll", [.string(interface)])
            let all: [String: Variant] = try got.decode([String: Variant].self, at: 0)
            try expect(all["Label"]?.value.type == .string, "GetAll has no string Label: \(got)")
            try expect(all["Count"]?.value.type == .uint32, "GetAll has no uint32 Count: \(got)")
        }
        await report.check("property.Count.readonly") {
            try await expectError(readOnlyError) {
                _ = try await connection.call(
                    destination: destination, path: path, interface: props, member: "Set",
                    [.string(interface), .string("Count"), .variant(.uint32(0))])
            }
        }
    }

    // MARK: Introspection and the Peer interface

    func introspection() async {
        await report.check("introspect") {
            let reply = try await connection.call(
                destination: destination, path: path, interface: ObjectServer.introspectableInterface, member: "Introspect")
            guard case .string(let xml)? = reply.first else { throw CheckFailure("Introspect returned \(reply)") }
            try expect(xml.contains("<interface name=\"\(interface)\">"), "introspection lacks \(interface)")
            for (name, type) in EchoMethods.all {
                try expect(xml.contains("\"\(name)\""), "introspection lacks \(name)")
                try expect(xml.contains("type=\"\(XMLText.escape(type.signature))\""), "introspection lacks type \(type.signature)")
            }
        }
        await report.check("peer.Ping") {
            _ = try await connection.call(destination: destination, path: path, interface: ObjectServer.peerInterface, member: "Ping")
        }
        await report.check("peer.GetMachineId") {
            let reply = try await connection.call(
                destination: destination, path: path, interface: ObjectServer.peerInterface, member: "GetMachineId")
            guard case .string(let id)? = reply.first else { throw CheckFailure("GetMachineId returned \(reply)") }
            try expect(id.count == 32 && id.allSatisfy(\.isHexDigit), "GetMachineId returned \"\(id)\"")
        }
    }

    // MARK: Timeouts and cancellation (last: our peer serves one caller's calls in order)

    func timeoutsAndCancellation() async {
        await report.check("timeout.NoReply") {
            let start = monotonicMilliseconds()
            try await expectError(DBusError.noReply) { _ = try await call("Sleep", [.uint32(3000)], timeout: .milliseconds(300)) }
            let took = monotonicMilliseconds() - start
            try expect(took < 2500, "the 300 ms timeout took \(took) ms")
        }
        await report.check("cancel.inflight") {
            let start = monotonicMilliseconds()
            let task = Task { try await call("Sleep", [.uint32(3000)]) }
            try await Task.sleep(for: .milliseconds(200))
            task.cancel()
            do {
                let reply = try await task.value
                throw CheckFailure("the cancelled call returned \(reply)")
            } catch is CancellationError {
                let took = monotonicMilliseconds() - start
                try expect(took < 2500, "cancelling took until \(took) ms")
            }
        }
        await report.check("cancel.before") {
            let task = Task {
                withUnsafeCurrentTask { $0?.cancel() }
                return try await call("EchoInt32", [.int32(1)])
            }
            do {
                let reply = try await task.value
                throw CheckFailure("a call made by a cancelled task returned \(reply)")
            } catch is CancellationError {}
        }
        await report.check("sleep.short") {
            let reply = try await call("Sleep", [.uint32(10)])
            try expect(reply.isEmpty, "Sleep returned \(reply)")
        }
    }
}

enum XMLText {
    static func escape(_ text: String) -> String {
        var out = ""
        for c in text {
            switch c {
            case "&": out += "&amp;"
            case "<": out += "&lt;"
            case ">": out += "&gt;"
            case "\"": out += "&quot;"
            default: out.append(c)
            }
        }
        return out
    }
}
