import Glibc
import Testing

@testable import BGPolicyDBus

/// `Message.encode` writes bodies itself (`WireWriter`) and has libdbus load them; libdbus's
/// own iterators write the same values too (`buildThroughIterators`, kept for file
/// descriptors). Both must give the same bytes, value for value: the iterators are the
/// reference implementation of the wire format here.
@Suite("The wire writer writes what libdbus's iterators write")
struct WireWriterTests {
    /// The body of a message in wire format: after the 16 fixed bytes and the header fields'
    /// array (its length at offset 12, little-endian), padded to 8.
    static func body(of bytes: [UInt8]) -> ArraySlice<UInt8> {
        let fields = Int(bytes[12]) | Int(bytes[13]) << 8 | Int(bytes[14]) << 16 | Int(bytes[15]) << 24
        let start = (16 + fields + 7) / 8 * 8
        return bytes[start...]
    }

    static func both(_ message: Message) throws -> (ours: [UInt8], libdbus: [UInt8]) {
        (try message.encode().marshalled(), try message.buildThroughIterators().marshalled())
    }

    @Test("every value of the round-trip table, byte for byte", arguments: RoundTripTable.marshalCases)
    func sameBody(_ testCase: RoundTripCase) throws {
        for body in RoundTripTable.bodies(for: testCase) {
            let (ours, theirs) = try Self.both(TypeRoundTripTests.call(body))
            #expect(Self.body(of: ours) == Self.body(of: theirs), "\(body)")
            // The fixed header too: byte order, type, flags, version, body length, serial.
            #expect(ours.prefix(12) == theirs.prefix(12))
        }
    }

    /// What `NotifyContentAvailable` bounds its payload by: the bytes libdbus writes for it.
    @Test("a value's marshalled length is the length of the body libdbus writes for it", arguments: RoundTripTable.marshalCases)
    func marshalledLength(_ testCase: RoundTripCase) throws {
        for body in RoundTripTable.bodies(for: testCase) where body.count == 1 {
            let theirs = Self.body(of: try TypeRoundTripTests.call(body).buildThroughIterators().marshalled())
            #expect(body[0].marshalledLength == theirs.count, "\(body)")
        }
    }

    @Test("an a{sv} of small entries counts each entry's padding to 8 bytes")
    func marshalledLengthPads() {
        let entries = (0..<300).map { n in
            DBusDictEntry(key: .string(String(1000 + n).dropFirst().description), value: .variant(.byte(1)))
        }
        // 4 for the length, 4 to reach 8, then 16 an entry (12 of them used) but the last.
        #expect(DBusValue.dictionary(key: .string, value: .variant, entries).marshalledLength == 8 + 299 * 16 + 12)
        #expect(DBusValue.unixFD(UnixFD(taking: -1)).marshalledLength == nil)
    }

    @Test("headers and flags of every message kind: the same message, whatever the fields' order")
    func sameHeaders() throws {
        var call = TypeRoundTripTests.call([.string("x"), .uint32(3)])
        call.sender = ":1.7"
        call.noReplyExpected = true
        call.noAutoStart = true
        call.allowInteractiveAuthorization = true
        var reply = call.makeReply([.dictionary(key: .string, value: .variant, [DBusDictEntry(key: .string("a"), value: .variant(.double(1)))])])
        reply.replySerial = 42
        var error = call.makeError(name: "org.bgpolicy.Error.Denied", message: "no")
        error.replySerial = 43
        let signal = Message.signal(path: ObjectPath(checked: "/a"), interface: "org.bgpolicy.Test1", member: "Changed")
        for message in [call, reply, error, signal, TypeRoundTripTests.call([])] {
            let (ours, theirs) = try Self.both(message)
            #expect(ours.count == theirs.count, "\(message)")
            #expect(ours.prefix(12) == theirs.prefix(12), "\(message)")
            #expect(Self.body(of: ours) == Self.body(of: theirs), "\(message)")
            let a = try Message.demarshal(ours)
            let b = try Message.demarshal(theirs)
            #expect(a.kind == b.kind && a.path == b.path && a.interface == b.interface && a.member == b.member)
            #expect(a.errorName == b.errorName && a.replySerial == b.replySerial && a.destination == b.destination)
            #expect(a.sender == b.sender && a.signature == b.signature)
            #expect(a.noReplyExpected == b.noReplyExpected && a.noAutoStart == b.noAutoStart)
            #expect(a.allowInteractiveAuthorization == b.allowInteractiveAuthorization)
        }
    }

    @Test("a body with a file descriptor goes through libdbus's iterators")
    func fileDescriptorsFallBack() throws {
        let fd = UnixFD(taking: dup(0))
        #expect(try WireWriter.message(TypeRoundTripTests.call([.string("a"), .variant(.unixFD(fd))])) == nil)
        #expect(try WireWriter.message(TypeRoundTripTests.call([.string("a")])) != nil)
        // And it is still encoded.
        _ = try TypeRoundTripTests.call([.unixFD(fd)]).encode()
    }

    @Test("an array over 64 MiB is refused in words, not handed to libdbus")
    func arrayTooLong() throws {
        // One string of 64 MiB: its length, its bytes and a NUL make the array's data 5 bytes too long.
        let big = DBusValue.array(element: .string, [.string(String(repeating: "a", count: WireWriter.maximumArrayLength))])
        #expect(throws: DBusError.limitsExceeded(
            "an array takes \(WireWriter.maximumArrayLength + 5) bytes, over the 64 MiB (67108864 bytes) D-Bus allows an array")) {
            try TypeRoundTripTests.call([big]).encode()
        }
    }

    /// `maximumLength` bounds the whole message; it is checked after each element of an array,
    /// and the words estimate the whole from the outermost array's elements written.
    @Test("a message over its bound is refused once it passes it, with an estimate of its size")
    func messageOverBound() throws {
        let item = DBusValue.string(String(repeating: "b", count: 1020))  // 1 KiB with its length and NUL
        let call = TypeRoundTripTests.call([.array(element: .string, Array(repeating: item, count: 100))])
        let fits = try #require(try WireWriter.message(call, maximumLength: 200 << 10))
        #expect(fits.count > 100 << 10)
        #expect(throws: DBusError.limitsExceeded(
            "an array of 100 elements would take about 100 KiB (more than 10 KiB by its 10th), "
                + "over the 10 KiB (10240 bytes) this connection sends in one message")) {
            try WireWriter.message(call, maximumLength: 10 << 10)
        }
        // Nested: the outermost array is the one counted (10 lists of 10 strings of 1 KiB).
        let inner = DBusValue.array(element: .string, Array(repeating: item, count: 10))
        let nested = TypeRoundTripTests.call([.array(element: inner.type, Array(repeating: inner, count: 10))])
        #expect(throws: DBusError.limitsExceeded(
            "an array of 10 elements would take about 100 KiB (more than 10 KiB by its 1st), "
                + "over the 10 KiB (10240 bytes) this connection sends in one message")) {
            try WireWriter.message(nested, maximumLength: 10 << 10)
        }
        // No array: the message's length, checked at its end.
        let length = try #require(try WireWriter.message(TypeRoundTripTests.call([item]))).count
        #expect(throws: DBusError.limitsExceeded(
            "the message takes \(length) bytes, "
                + "over the 1 KiB (1024 bytes) this connection sends in one message")) {
            try WireWriter.message(TypeRoundTripTests.call([item]), maximumLength: 1 << 10)
        }
    }

    /// A body that carries a descriptor is built through libdbus's iterators, which check no
    /// length: it is measured here first, and refused as any other.
    @Test("a body with a file descriptor is measured against the bound before libdbus builds it")
    func fileDescriptorBodyBound() throws {
        let fd = UnixFD(taking: dup(0))
        let call = TypeRoundTripTests.call([.unixFD(fd), .array(element: .string, Array(repeating: .string(String(repeating: "c", count: 1020)), count: 4))])
        #expect(try WireWriter.message(call, maximumLength: 8 << 10) == nil)
        #expect(throws: DBusError.limitsExceeded(
            "an array of 4 elements would take about 4 KiB (more than 2.2 KiB by its 2nd), "
                + "over the 2 KiB (2048 bytes) this connection sends in one message")) {
            try call.encode(maximumLength: 2 << 10)
        }
    }

    /// libdbus adds a UNIX_FDS header field (8 bytes, aligned) to a message with descriptors,
    /// which this writer does not write: measured without it, such a message up to 8 bytes
    /// over the bound passed. The same body with a `u` in the descriptor's place is as long.
    @Test("a body with a file descriptor is measured with libdbus's UNIX_FDS header field")
    func fileDescriptorHeaderField() throws {
        let fd = UnixFD(taking: dup(0))
        let strings = DBusValue.array(element: .string, Array(repeating: .string(String(repeating: "c", count: 100)), count: 4))
        let withoutFD = try #require(try WireWriter.message(TypeRoundTripTests.call([.uint32(0), strings])))
        let call = TypeRoundTripTests.call([.unixFD(fd), strings])
        #expect(try WireWriter.message(call, maximumLength: withoutFD.count + 8) == nil)
        #expect(throws: DBusError.self) { try WireWriter.message(call, maximumLength: withoutFD.count + 7) }
    }
}
