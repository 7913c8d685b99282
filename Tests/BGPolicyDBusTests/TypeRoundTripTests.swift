import Foundation
import Glibc
import BGPolicyTestSupport
import Testing

@testable import BGPolicyDBus

/// One value for the round-trip tables, named for the test report.
struct RoundTripCase: Sendable, CustomTestStringConvertible {
    let name: String
    let value: DBusValue
    /// Whether the value can also travel wrapped in a variant through the `Echo` method (a
    /// value already at the 64-container limit cannot be wrapped once more).
    var viaBus = true
    var testDescription: String { name }
}

enum RoundTripTable {
    static let basicTypes: [DBusType] = [
        .byte, .boolean, .int16, .uint16, .int32, .uint32, .int64, .uint64, .double, .string, .objectPath, .signature, .unixFD,
    ]

    /// Every element type an empty array is tested with: each basic type and each container kind.
    static let elementTypes: [DBusType] =
        basicTypes + [
            .variant, .array(.int32), .array(.array(.string)), .dictionary(key: .string, value: .variant),
            .structure([.int32, .string]), .structure([.structure([.byte]), .array(.variant)]),
        ]

    static func path(_ text: String) -> DBusValue { .objectPath(ObjectPath(checked: text)) }
    static func sig(_ text: String) -> DBusValue {
        do { return .signature(try Signature(text)) } catch { fatalError("invalid test signature \(text)") }
    }

    static func nestedArrays(_ depth: Int, innermost: DBusValue) -> DBusValue {
        var value = innermost
        for _ in 0..<depth { value = .array(element: value.type, [value]) }
        return value
    }

    static func nestedStructs(_ depth: Int, innermost: DBusValue) -> DBusValue {
        var value = innermost
        for _ in 0..<depth { value = .structure([value]) }
        return value
    }

    static func nestedVariants(_ depth: Int, innermost: DBusValue) -> DBusValue {
        var value = innermost
        for _ in 0..<depth { value = .variant(value) }
        return value
    }

    static func dict(_ key: DBusType, _ value: DBusType, _ pairs: [(DBusValue, DBusValue)]) -> DBusValue {
        .dictionary(key: key, value: value, pairs.map { DBusDictEntry(key: $0.0, value: $0.1) })
    }

    static let cases: [RoundTripCase] = {
        var c: [RoundTripCase] = []
        func add(_ name: String, _ value: DBusValue, viaBus: Bool = true) {
            c.append(RoundTripCase(name: name, value: value, viaBus: viaBus))
        }
        // Basic types, with their edge values.
        add("byte 0", .byte(0))
        add("byte 255", .byte(255))
        add("boolean true", .boolean(true))
        add("boolean false", .boolean(false))
        add("int16 min", .int16(.min))
        add("int16 max", .int16(.max))
        add("uint16 max", .uint16(.max))
        add("int32 min", .int32(.min))
        add("int32 -1", .int32(-1))
        add("int32 max", .int32(.max))
        add("uint32 max", .uint32(.max))
        add("int64 min", .int64(.min))
        add("int64 max", .int64(.max))
        add("uint64 0", .uint64(0))
        add("uint64 max", .uint64(.max))
        add("double 0", .double(0))
        add("double -0", .double(-0.0))
        add("double +inf", .double(.infinity))
        add("double -inf", .double(-.infinity))
        add("double pi", .double(.pi))
        add("double subnormal", .double(.leastNonzeroMagnitude))
        add("double max", .double(.greatestFiniteMagnitude))
        add("double NaN", .double(.nan))
        add("double NaN with payload", .double(Double(bitPattern: 0x7ff8_0000_dead_beef)))
        add("empty string", .string(""))
        add("ASCII string", .string("hello, world"))
        add("unicode string", .string("héllo wörld ✓ 🎉 日本語 Ελληνικά"))
        add("decomposed unicode string", .string("e\u{301}te\u{301}"))
        add("control characters", .string("\u{1}\u{7}\t\n\r\u{1b}\u{7f}"))
        add("long string", .string(String(repeating: "0123456789abcdef", count: 8192)))
        add("root path", .objectPath(.root))
        add("object path", path("/org/bgpolicy/Agent1"))
        add("object path with digits and underscores", path("/0/_a/B_9"))
        add("empty signature", .signature(.empty))
        add("signature a{sv}", sig("a{sv}"))
        add("signature of several types", sig("ya{s(vv)}a(ia{ta(h)})dg"))

        // Empty arrays of every element type.
        for element in elementTypes { add("empty array of \(element.signature)", .array(element: element, [])) }

        // Non-empty arrays of each basic type (file descriptors only through the bus).
        add("ay", .array(element: .byte, (0...255).map { .byte(UInt8($0)) }))
        add("ab", .array(element: .boolean, [.boolean(true), .boolean(false), .boolean(true)]))
        add("an", .array(element: .int16, [.int16(.min), .int16(0), .int16(.max)]))
        add("aq", .array(element: .uint16, [.uint16(0), .uint16(.max)]))
        add("ai", .array(element: .int32, [.int32(.min), .int32(1), .int32(.max)]))
        add("au", .array(element: .uint32, [.uint32(0), .uint32(.max)]))
        add("ax", .array(element: .int64, [.int64(.min), .int64(.max)]))
        add("at", .array(element: .uint64, [.uint64(0), .uint64(.max)]))
        add("ad", .array(element: .double, [.double(-0.0), .double(.infinity), .double(.nan), .double(1.5)]))
        add("as", .array(element: .string, [.string(""), .string("ü"), .string("two words")]))
        add("ao", .array(element: .objectPath, [.objectPath(.root), path("/a/b")]))
        add("ag", .array(element: .signature, [.signature(.empty), sig("a{sv}")]))
        add("av", .array(element: .variant, [.variant(.int32(1)), .variant(.string("x")), .variant(.array(element: .byte, []))]))

        // Arrays of arrays.
        add(
            "aai",
            .array(
                element: .array(.int32),
                [.array(element: .int32, [.int32(1), .int32(2)]), .array(element: .int32, []), .array(element: .int32, [.int32(3)])]))
        add(
            "aas",
            .array(
                element: .array(.string),
                [.array(element: .string, [.string("a")]), .array(element: .string, [.string("b"), .string("c")])]))
        add("aa{sv}", .array(element: .dictionary(key: .string, value: .variant), [dict(.string, .variant, [(.string("k"), .variant(.byte(1)))])]))

        // Dictionaries.
        add(
            "a{sv}",
            dict(
                .string, .variant,
                [
                    (.string("count"), .variant(.uint32(3))), (.string("name"), .variant(.string("bg"))),
                    (.string("nested"), .variant(dict(.string, .variant, [(.string("inner"), .variant(.boolean(true)))]))),
                    (.string("list"), .variant(.array(element: .int64, [.int64(-1)]))),
                ]))
        add("empty a{sv}", dict(.string, .variant, []))
        add(
            "a{ya(iv)}",
            dict(
                .byte, .array(.structure([.int32, .variant])),
                [
                    (.byte(1), .array(element: .structure([.int32, .variant]), [.structure([.int32(7), .variant(.string("seven"))])])),
                    (.byte(2), .array(element: .structure([.int32, .variant]), [])),
                ]))
        // Dictionaries with every basic key type (file descriptors only in the empty case).
        add("a{yi}", dict(.byte, .int32, [(.byte(0), .int32(1)), (.byte(255), .int32(2))]))
        add("a{bs}", dict(.boolean, .string, [(.boolean(false), .string("no")), (.boolean(true), .string("yes"))]))
        add("a{ni}", dict(.int16, .int32, [(.int16(.min), .int32(1))]))
        add("a{qi}", dict(.uint16, .int32, [(.uint16(.max), .int32(1))]))
        add("a{iv}", dict(.int32, .variant, [(.int32(-5), .variant(.double(2)))]))
        add("a{ui}", dict(.uint32, .int32, [(.uint32(.max), .int32(1))]))
        add("a{xs}", dict(.int64, .string, [(.int64(.min), .string("min"))]))
        add("a{ts}", dict(.uint64, .string, [(.uint64(.max), .string("max"))]))
        add("a{ds}", dict(.double, .string, [(.double(-0.0), .string("negative zero"))]))
        add("a{ss}", dict(.string, .string, [(.string(""), .string("empty key")), (.string("k"), .string("v"))]))
        add("a{os}", dict(.objectPath, .string, [(.objectPath(.root), .string("root"))]))
        add("a{gs}", dict(.signature, .string, [(.signature(.empty), .string("empty"))]))
        add("empty a{hs}", dict(.unixFD, .string, []))
        add("a{s(iav)}", dict(.string, .structure([.int32, .array(.variant)]), [(.string("x"), .structure([.int32(1), .array(element: .variant, [])]))]))

        // Structs.
        add(
            "struct of every basic type but h",
            .structure([
                .byte(1), .boolean(true), .int16(-2), .uint16(3), .int32(-4), .uint32(5), .int64(-6), .uint64(7), .double(8.5),
                .string("nine"), path("/ten"), sig("a{sv}"),
            ]))
        add("nested structs", .structure([.int32(1), .structure([.string("a"), .structure([.double(2)])]), .byte(3)]))
        add("struct holding containers", .structure([.array(element: .string, [.string("x")]), dict(.string, .variant, []), .variant(.int16(1))]))
        add("struct of 253 bytes (signature of 255)", .structure((0..<253).map { .byte(UInt8(truncatingIfNeeded: $0)) }))

        // Variants.
        add("variant of int32", .variant(.int32(42)))
        add("variant in variant in variant", .variant(.variant(.variant(.string("deep")))))
        add("variant of a{sv}", .variant(dict(.string, .variant, [(.string("k"), .variant(.variant(.uint64(1))))])))
        add("variant of a struct", .variant(.structure([.int32(1), .variant(.boolean(false))])))
        add("variant of an empty array", .variant(.array(element: .structure([.string, .variant]), [])))

        // Nesting at the limits.
        add("32 nested arrays", nestedArrays(32, innermost: .int32(7)))
        add("31 nested arrays around a{si}", nestedArrays(31, innermost: dict(.string, .int32, [(.string("k"), .int32(1))])))
        add("32 nested structs", nestedStructs(32, innermost: .int32(7)))
        add("32 arrays inside 31 structs", nestedStructs(31, innermost: nestedArrays(32, innermost: .byte(1))))
        add("63 nested variants", nestedVariants(63, innermost: .int32(1)))
        add("64 nested variants", nestedVariants(64, innermost: .int32(1)), viaBus: false)
        add(
            "variants restart the signature limits",
            nestedArrays(20, innermost: .variant(nestedArrays(32, innermost: .string("x")))))
        return c
    }()

    static let marshalCases = cases.filter { !$0.value.containsFileDescriptor }

    /// The bodies the wire writer's and reader's tests try a case in: alone; after a byte, so
    /// that it starts at an odd offset and must pad; and in a variant, whose signature is
    /// written in place (these two when the limits leave room).
    static func bodies(for testCase: RoundTripCase) -> [[DBusValue]] {
        let room = testCase.value.type.signatureLength < 255
        return [[testCase.value]] + (room ? [[.byte(7), testCase.value]] : [])
            + (room && testCase.viaBus ? [[.int16(-2), .variant(testCase.value)]] : [])
    }
}

extension DBusValue {
    var containsFileDescriptor: Bool {
        switch self {
        case .unixFD: true
        case .variant(let v): v.containsFileDescriptor
        case .array(_, let items), .structure(let items): items.contains { $0.containsFileDescriptor }
        case .dictionary(_, _, let entries): entries.contains { $0.key.containsFileDescriptor || $0.value.containsFileDescriptor }
        default: false
        }
    }
}

@Suite("Every D-Bus type round-trips through our writer and reader")
struct TypeRoundTripTests {
    static func call(_ body: [DBusValue]) -> Message {
        Message.methodCall(
            destination: "org.bgpolicy.Test", path: ObjectPath(checked: "/org/bgpolicy/Test"), interface: "org.bgpolicy.Test1",
            member: "Take", body: body)
    }

    @Test("marshal, then demarshal, gives the same body", arguments: RoundTripTable.marshalCases)
    func marshalRoundTrip(_ testCase: RoundTripCase) throws {
        let bytes = try Self.call([testCase.value]).marshal()
        let decoded = try Message.demarshal(bytes)
        #expect(decoded.body.count == 1)
        #expect(bitExact(decoded.body, [testCase.value]), "decoded \(decoded.body)")
        #expect(decoded.signature == testCase.value.type.signature)
        // The declared type of every container survives, even when it is empty.
        #expect(decoded.body.first?.type == testCase.value.type)
    }

    @Test("a body of several arguments keeps their order and types")
    func severalArguments() throws {
        let body: [DBusValue] = [
            .string("first"), .int32(2), .array(element: .string, []), .variant(.byte(4)), .double(-0.0),
            .dictionary(key: .string, value: .variant, []), .structure([.boolean(true)]), .objectPath(.root),
        ]
        let decoded = try Message.demarshal(Self.call(body).marshal())
        #expect(bitExact(decoded.body, body))
        #expect(decoded.signature == "siasvda{sv}(b)o")
    }

    @Test("an empty body stays empty")
    func emptyBody() throws {
        let decoded = try Message.demarshal(Self.call([]).marshal())
        #expect(decoded.body.isEmpty)
        #expect(decoded.signature == "")
    }

    @Test("headers and flags of every message kind survive marshalling")
    func headers() throws {
        var call = Self.call([.int32(1)])
        call.serial = 42
        call.sender = ":1.7"
        call.noReplyExpected = true
        call.noAutoStart = true
        call.allowInteractiveAuthorization = true
        let c = try Message.demarshal(call.marshal())
        #expect(c.kind == .methodCall)
        #expect(c.serial == 42)
        #expect(c.path?.rawValue == "/org/bgpolicy/Test")
        #expect(c.interface == "org.bgpolicy.Test1")
        #expect(c.member == "Take")
        #expect(c.destination == "org.bgpolicy.Test")
        #expect(c.sender == ":1.7")
        #expect(c.noReplyExpected && c.noAutoStart && c.allowInteractiveAuthorization)

        let plain = try Message.demarshal(Self.call([]).marshal())
        #expect(!plain.noReplyExpected && !plain.noAutoStart && !plain.allowInteractiveAuthorization)
        #expect(plain.serial == 1, "marshal() gives a message without a serial the serial 1")

        var reply = call.makeReply([.string("ok")])
        reply.serial = 43
        let r = try Message.demarshal(reply.marshal())
        #expect(r.kind == .methodReturn)
        #expect(r.replySerial == 42)
        #expect(r.destination == ":1.7")
        #expect(r.body == [.string("ok")])

        var error = call.makeError(name: "org.bgpolicy.Error.Denied", message: "no, thanks")
        error.serial = 44
        let e = try Message.demarshal(error.marshal())
        #expect(e.kind == .error)
        #expect(e.errorName == "org.bgpolicy.Error.Denied")
        #expect(e.replySerial == 42)
        #expect(e.asError == .remote(name: "org.bgpolicy.Error.Denied", message: "no, thanks"))

        let signal = Message.signal(path: ObjectPath(checked: "/a"), interface: "org.bgpolicy.Test1", member: "Changed", body: [.uint32(9)])
        let s = try Message.demarshal(signal.marshal())
        #expect(s.kind == .signal)
        #expect(s.path?.rawValue == "/a")
        #expect(s.interface == "org.bgpolicy.Test1")
        #expect(s.member == "Changed")
        #expect(s.destination == nil)
        #expect(s.body == [.uint32(9)])
    }

    @Test("completeLength reports a whole message, and 0 or nil for part of one")
    func completeLength() throws {
        let bytes = try Self.call([.string("x"), .int64(1)]).marshal()
        #expect(Message.completeLength(of: bytes) == bytes.count)
        #expect(Message.completeLength(of: bytes + [1, 2, 3]) == bytes.count)
        #expect(Message.completeLength(of: Array(bytes.prefix(8))) == 0)
        #expect(Message.completeLength(of: []) == 0)
        var garbage = bytes
        garbage[0] = UInt8(ascii: "X")  // not an endianness marker
        #expect(Message.completeLength(of: garbage) == nil)
    }

    @Test("every truncation of a message is rejected, never trapping")
    func truncated() throws {
        let body: [DBusValue] = [
            .dictionary(key: .string, value: .variant, [DBusDictEntry(key: .string("k"), value: .variant(.array(element: .int32, [.int32(1)])))]),
            .string("tail"),
        ]
        let bytes = try Self.call(body).marshal()
        for length in 0..<bytes.count {
            #expect(throws: DBusError.self, "prefix of \(length) bytes") { try Message.demarshal(Array(bytes.prefix(length))) }
        }
        #expect(bitExact(try Message.demarshal(bytes).body, body))
    }

    @Test("corrupted bytes decode to an error or to a message that can be encoded again")
    func corrupted() throws {
        let body: [DBusValue] = [
            .dictionary(
                key: .string, value: .variant,
                [DBusDictEntry(key: .string("key"), value: .variant(.structure([.int32(1), .array(element: .double, [.double(2)])])))]),
            .variant(.variant(.signature(.empty))), .objectPath(ObjectPath(checked: "/p/q")),
        ]
        let bytes = try Self.call(body).marshal()
        var generator = SplitMix64(seed: 20_261_122)
        var decodedCount = 0
        for _ in 0..<2000 {
            var mutated = bytes
            for _ in 0..<Int(generator.next() % 3 + 1) {
                let index = Int(generator.next() % UInt64(mutated.count))
                mutated[index] = UInt8(truncatingIfNeeded: generator.next())
            }
            guard let message = try? Message.demarshal(mutated) else { continue }
            decodedCount += 1
            // Whatever the reader accepts, the writer must accept too, headers and body: libdbus's
            // reader already refuses a kind without the headers it needs, and the reserved Local
            // path and interface.
            for value in message.body { try value.validate() }
            var again = message
            again.serial = max(message.serial, 1)
            do {
                _ = try again.marshal()
            } catch {
                Issue.record("decoded, but cannot be encoded again (\(error)): \(message)")
            }
        }
        #expect(decodedCount > 0, "some mutations (in string bytes, say) must still decode")
    }

    @Test("a hand-encoded big-endian message decodes (the reader follows the specification, not our writer)")
    func handEncodedBigEndian() throws {
        for bigEndian in [true, false] {
            let bytes = WireEncoder.signal(bigEndian: bigEndian)
            let message = try Message.demarshal(bytes)
            #expect(message.kind == .signal)
            #expect(message.serial == 0x0102_0304)
            #expect(message.path?.rawValue == "/org/bgpolicy/Wire")
            #expect(message.interface == "org.bgpolicy.Wire1")
            #expect(message.member == "Sent")
            #expect(message.body == [.byte(7), .string("héllo"), .int64(-2), .double(1.5)])
        }
    }

    @Test("a message carrying a file descriptor cannot be demarshalled, and says so without trapping")
    func fileDescriptorsDoNotMarshal() throws {
        let fd = dup(1)
        let message = Self.call([.unixFD(UnixFD(taking: fd))])
        let bytes = try message.marshal()
        do {
            let decoded = try Message.demarshal(bytes)
            Issue.record("demarshalled a message whose descriptor was not passed: \(decoded.body)")
        } catch {
            guard case .malformedMessage = error else {
                Issue.record("expected malformedMessage, got \(error)")
                return
            }
        }
    }

    // MARK: Through a real bus

    @Test("through a private bus, Echo returns every value unchanged", .serialized, arguments: RoundTripTable.cases.filter(\.viaBus))
    func echoThroughBus(_ testCase: RoundTripCase) async throws {
        let bus = try PrivateBus()
        let connections = try await connect(2, to: bus)
        let (server, client) = (connections[0], connections[1])
        try server.objects.export([Echo.interface], at: Echo.path)
        let serving = startServing(server)
        defer { serving.cancel() }
        let sent: [DBusValue] = [.variant(testCase.value)]
        let reply = try await withTimeout(.seconds(10), "Echo") {
            try await client.call(destination: server.uniqueName, path: Echo.path, interface: Echo.name, member: "Echo", sent)
        }
        #expect(bitExact(reply, sent), "got \(reply)")
        server.close()
        client.close()
    }

    @Test("a pipe's read end passes through the bus as a new descriptor for the same pipe")
    func fileDescriptorThroughBus() async throws {
        let bus = try PrivateBus()
        let connections = try await connect(2, to: bus)
        let (server, client) = (connections[0], connections[1])
        try server.objects.export([Echo.interface], at: Echo.path)
        let serving = startServing(server)
        defer { serving.cancel() }

        var ends: [Int32] = [-1, -1]
        #expect(pipe(&ends) == 0)
        let readEnd = UnixFD(taking: ends[0])
        let writeEnd = UnixFD(taking: ends[1])
        let reply = try await withTimeout(.seconds(10), "Echo") {
            try await client.call(
                destination: server.uniqueName, path: Echo.path, interface: Echo.name, member: "Echo", [.variant(.unixFD(readEnd))])
        }
        guard reply.count == 1, case .variant(.unixFD(let received)) = reply[0] else {
            Issue.record("expected a variant holding a file descriptor, got \(reply)")
            return
        }
        #expect(received.rawValue >= 0)
        #expect(received.rawValue != readEnd.rawValue, "the received descriptor is a new number")

        // The same pipe: same inode, and bytes written to our write end come out of it.
        var a = stat(), b = stat()
        #expect(fstat(readEnd.rawValue, &a) == 0)
        #expect(fstat(received.rawValue, &b) == 0)
        #expect(a.st_ino == b.st_ino && a.st_dev == b.st_dev)
        let text = Array("through the bus".utf8)
        #expect(text.withUnsafeBytes { write(writeEnd.rawValue, $0.baseAddress, $0.count) } == text.count)
        var buffer = [UInt8](repeating: 0, count: 64)
        let n = buffer.withUnsafeMutableBytes { read(received.rawValue, $0.baseAddress, $0.count) }
        #expect(n == text.count)
        #expect(Array(buffer.prefix(max(0, n))) == text)

        // An array of descriptors, and a struct holding one, travel too.
        var more: [Int32] = [-1, -1]
        #expect(pipe(&more) == 0)
        let second = UnixFD(taking: more[0])
        let secondWrite = UnixFD(taking: more[1])
        let nested: DBusValue = .structure([.string("fds"), .array(element: .unixFD, [.unixFD(readEnd), .unixFD(second)])])
        let nestedReply = try await withTimeout(.seconds(10), "Echo") {
            try await client.call(destination: server.uniqueName, path: Echo.path, interface: Echo.name, member: "Echo", [.variant(nested)])
        }
        guard case .variant(.structure(let fields))? = nestedReply.first, fields.count == 2,
            case .array(element: .unixFD, let fds) = fields[1], fds.count == 2, case .unixFD(let secondReceived) = fds[1]
        else {
            Issue.record("unexpected reply \(nestedReply)")
            return
        }
        #expect(bitExact(nestedReply, [.variant(nested)]))
        #expect(write(secondWrite.rawValue, "!", 1) == 1)
        var one: UInt8 = 0
        #expect(read(secondReceived.rawValue, &one, 1) == 1)
        #expect(one == UInt8(ascii: "!"))
        server.close()
        client.close()
    }

    @Test("a server that takes no descriptors refuses a call carrying one")
    func fileDescriptorRefused() async throws {
        let bus = try PrivateBus()
        let connections = try await connect(2, to: bus)
        let (server, client) = (connections[0], connections[1])
        server.objects.limits.acceptsFileDescriptors = false
        try server.objects.export([Echo.interface], at: Echo.path)
        let serving = startServing(server)
        defer { serving.cancel() }

        var ends: [Int32] = [-1, -1]
        #expect(pipe(&ends) == 0)
        let readEnd = UnixFD(taking: ends[0])
        let writeEnd = UnixFD(taking: ends[1])
        do {
            let reply = try await withTimeout(.seconds(10), "Echo") {
                try await client.call(
                    destination: server.uniqueName, path: Echo.path, interface: Echo.name, member: "Echo", [.variant(.unixFD(readEnd))])
            }
            Issue.record("a call carrying a descriptor was served: \(reply)")
        } catch DBusError.remote(let name, let message) {
            #expect(name == server.objects.errorNames.invalidArgs)
            #expect(message.contains("\(Echo.name).Echo takes no file descriptors"), "\(message)")
        }
        withExtendedLifetime(writeEnd) {}
        // Without descriptors, the same method is served.
        let reply = try await withTimeout(.seconds(10), "Echo") {
            try await client.call(destination: server.uniqueName, path: Echo.path, interface: Echo.name, member: "Echo", [.variant(.string("x"))])
        }
        #expect(bitExact(reply, [.variant(.string("x"))]))
        server.close()
        client.close()
    }
}

/// A tiny, independent encoder of the D-Bus wire format, for checking the reader against the
/// specification rather than against our own writer.
enum WireEncoder {
    struct Writer {
        let bigEndian: Bool
        var bytes: [UInt8] = []

        mutating func align(_ n: Int) { while bytes.count % n != 0 { bytes.append(0) } }
        mutating func byte(_ v: UInt8) { bytes.append(v) }
        mutating func uint32(_ v: UInt32) {
            align(4)
            let b = bigEndian ? v.bigEndian : v.littleEndian
            withUnsafeBytes(of: b) { bytes += $0 }
        }
        mutating func uint64(_ v: UInt64) {
            align(8)
            let b = bigEndian ? v.bigEndian : v.littleEndian
            withUnsafeBytes(of: b) { bytes += $0 }
        }
        mutating func string(_ s: String) {
            uint32(UInt32(s.utf8.count))
            bytes += s.utf8
            bytes.append(0)
        }
        mutating func signature(_ s: String) {
            byte(UInt8(s.utf8.count))
            bytes += s.utf8
            bytes.append(0)
        }
    }

    /// A signal with body `ysxd` = (7, "héllo", -2, 1.5) and serial 0x01020304.
    static func signal(bigEndian: Bool) -> [UInt8] {
        var body = Writer(bigEndian: bigEndian)
        body.byte(7)
        body.string("héllo")
        body.uint64(UInt64(bitPattern: -2))
        body.uint64(1.5.bitPattern)

        var fields = Writer(bigEndian: bigEndian)
        // Header fields start at offset 16 of the message, which is 8-aligned, so aligning
        // within this separate buffer gives the same padding.
        func field(_ code: UInt8, _ sig: String, _ write: (inout Writer) -> Void) {
            fields.align(8)
            fields.byte(code)
            fields.signature(sig)
            write(&fields)
        }
        field(1, "o") { $0.string("/org/bgpolicy/Wire") }
        field(2, "s") { $0.string("org.bgpolicy.Wire1") }
        field(3, "s") { $0.string("Sent") }
        field(8, "g") { $0.signature("ysxd") }

        var message = Writer(bigEndian: bigEndian)
        message.byte(bigEndian ? UInt8(ascii: "B") : UInt8(ascii: "l"))
        message.byte(4)  // signal
        message.byte(0)  // flags
        message.byte(1)  // protocol version
        message.uint32(UInt32(body.bytes.count))
        message.uint32(0x0102_0304)
        message.uint32(UInt32(fields.bytes.count))
        message.bytes += fields.bytes
        message.align(8)
        message.bytes += body.bytes
        return message.bytes
    }
}
