import Glibc
import Testing

@testable import BGPolicyDBus

/// `Message(decoding:)` reads bodies itself (`WireReader`) from the message's bytes; libdbus's
/// iterators read them too (`MessageCodec.readAll`, kept for file descriptors). Both must give
/// the same values, bit for bit, from the same libdbus message.
@Suite("The wire reader reads what libdbus's iterators read")
struct WireReaderTests {
    /// Both readers on the libdbus message loaded from `bytes`.
    static func both(_ bytes: [UInt8]) throws -> (ours: [DBusValue]?, libdbus: [DBusValue]) {
        let raw = try RawMessage.loading(bytes)
        return try withExtendedLifetime(raw) {
            (try WireReader.body(of: raw.pointer), try MessageCodec.readAll(from: raw.pointer))
        }
    }

    @Test("every value of the round-trip table", arguments: RoundTripTable.marshalCases)
    func sameValues(_ testCase: RoundTripCase) throws {
        for body in RoundTripTable.bodies(for: testCase) {
            let (ours, theirs) = try Self.both(TypeRoundTripTests.call(body).marshal())
            // A body whose signature names file descriptors (an empty `ah`, say) is the iterators'.
            if body.signatureText.contains("h") {
                #expect(ours == nil)
                continue
            }
            let read = try #require(ours, "the wire reader declined \(body)")
            #expect(bitExact(read, theirs), "\(read) against \(theirs)")
            #expect(bitExact(read, body))
        }
    }

    @Test("a big-endian message is read in its own byte order")
    func bigEndian() throws {
        // A method call, big-endian, serial 1, body (u 7, s "hi", a{sv} {"k": <int16 -2>}),
        // written by hand from the specification.
        var w = BigEndianWriter()
        w.bytes = [UInt8(ascii: "B"), 1, 0, 1]
        w.u32(0)  // body length, patched below
        w.u32(1)
        var fields = BigEndianWriter(base: 16)
        fields.pad(8); fields.bytes += [1, 1, UInt8(ascii: "o"), 0]; fields.string("/a")
        fields.pad(8); fields.bytes += [3, 1, UInt8(ascii: "s"), 0]; fields.string("M")
        fields.pad(8); fields.bytes += [8, 1, UInt8(ascii: "g"), 0]; fields.signature("usa{sv}")
        w.u32(UInt32(fields.bytes.count))
        w.bytes += fields.bytes
        w.pad(8)
        let bodyStart = w.bytes.count
        w.u32(7)
        w.string("hi")
        w.u32(0)  // the array's length, patched below
        let lengthAt = w.bytes.count - 4
        w.pad(8)
        let arrayStart = w.bytes.count
        w.string("k")
        w.signature("n")
        w.pad(2)
        w.bytes += [0xFF, 0xFE]
        w.patch(UInt32(w.bytes.count - arrayStart), at: lengthAt)
        w.patch(UInt32(w.bytes.count - bodyStart), at: 4)
        let (ours, theirs) = try Self.both(w.bytes)
        let expected: [DBusValue] = [
            .uint32(7), .string("hi"),
            .dictionary(key: .string, value: .variant, [DBusDictEntry(key: .string("k"), value: .variant(.int16(-2)))]),
        ]
        #expect(ours == expected)
        #expect(theirs == expected)
    }

    @Test("a body with a file descriptor, and a message without a serial, are left to the iterators")
    func declines() throws {
        let fd = UnixFD(taking: dup(0))
        let raw = try TypeRoundTripTests.call([.string("a"), .unixFD(fd)]).encode()
        raw.giveSerial(5)
        #expect(try WireReader.body(of: raw.pointer) == nil)
        let unsent = try TypeRoundTripTests.call([.string("a")]).encode()
        // The readers borrow the messages: they must outlive every read.
        defer { withExtendedLifetime((raw, unsent)) {} }
        #expect(try WireReader.body(of: unsent.pointer) == nil)
        // And both still decode.
        #expect(try Message(decoding: raw.pointer).body.count == 2)
        #expect(try Message(decoding: unsent.pointer).body == [.string("a")])
    }
}

/// A big-endian writer for hand-made test messages. `base` is the offset of its first byte in
/// the message, for alignment.
struct BigEndianWriter {
    var bytes: [UInt8] = []
    var base = 0
    init(base: Int = 0) { self.base = base }
    mutating func pad(_ n: Int) { while (base + bytes.count) % n != 0 { bytes.append(0) } }
    mutating func u32(_ v: UInt32) {
        pad(4)
        bytes += [UInt8(v >> 24), UInt8(v >> 16 & 0xFF), UInt8(v >> 8 & 0xFF), UInt8(v & 0xFF)]
    }
    mutating func string(_ s: String) {
        u32(UInt32(s.utf8.count))
        bytes += Array(s.utf8) + [0]
    }
    mutating func signature(_ s: String) { bytes += [UInt8(s.utf8.count)] + Array(s.utf8) + [0] }
    mutating func patch(_ v: UInt32, at offset: Int) {
        bytes[offset] = UInt8(v >> 24)
        bytes[offset + 1] = UInt8(v >> 16 & 0xFF)
        bytes[offset + 2] = UInt8(v >> 8 & 0xFF)
        bytes[offset + 3] = UInt8(v & 0xFF)
    }
}
