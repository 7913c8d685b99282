internal import CBGPolicyDBus
import Glibc

/// Reads a message's body from its bytes in the wire format, for `Message(decoding:)`: the
/// counterpart of `WireWriter`.
///
/// Why not libdbus's iterators: they answer one value at a time through calls that walk the
/// signature again, and a container's type came back only as signature text to parse. A
/// `GetStatus` reply took a client about as long to read through them as libdbus took to
/// validate it on arrival. Here the message is copied out once (`dbus_message_marshal`) and
/// read in one pass.
///
/// Every message that reaches this reader was validated whole by libdbus (on arrival from the
/// socket, by `dbus_message_demarshal`, or built by libdbus itself), but the reader does not
/// rely on it: every read is bounds-checked and every inconsistency throws
/// `DBusError.malformedMessage`; nothing traps. Both byte orders are read.
///
/// A body holding Unix file descriptors is not read here (each is an index into descriptors
/// that only libdbus's iterators hand out): `body(of:)` returns nil for it, as for a message
/// libdbus will not copy out (one without a serial yet).
struct WireReader {
    private let bytes: UnsafeRawBufferPointer
    private let bigEndian: Bool
    /// Where reading stops: the message's end while the header is read, then the body's.
    private var end: Int
    private var offset: Int

    static func body(of message: OpaquePointer) throws(DBusError) -> [DBusValue]? {
        guard let rawSignature = dbus_message_get_signature(message) else { return [] }
        let types: [DBusType]
        if rawSignature.pointee == 0 {
            return []
        } else if dbus_message_contains_unix_fds(message) != 0 || strchr(rawSignature, Int32(UInt8(ascii: "h"))) != nil {
            // (An `h` without descriptors is read by the iterators too, which say so.)
            return nil
        } else {
            let text = String(cString: rawSignature)
            do {
                types = try SignatureParser.parse(text)
            } catch {
                throw .malformedMessage("unreadable body signature \"\(text)\"")
            }
        }
        guard dbus_message_get_serial(message) != 0 else { return nil }
        return try withMarshalledBytes(of: message) { bytes throws(DBusError) in try body(of: bytes, types: types) }
    }

    /// The body of the message in `bytes`, values of `types` (its signature's).
    private static func body(of bytes: UnsafeRawBufferPointer, types: [DBusType]) throws(DBusError) -> [DBusValue] {
        guard bytes.count >= 16 else { throw .malformedMessage("a message shorter than its fixed header") }
        let bigEndian: Bool
        switch bytes[0] {
        case UInt8(ascii: "l"): bigEndian = false
        case UInt8(ascii: "B"): bigEndian = true
        default: throw .malformedMessage("unknown byte order \(bytes[0])")
        }
        var reader = WireReader(bytes: bytes, bigEndian: bigEndian, end: bytes.count, offset: 4)
        let bodyLength = Int(try reader.read(UInt32.self))
        reader.offset = 12
        let fieldsLength = Int(try reader.read(UInt32.self))
        let bodyStart = (16 + fieldsLength + 7) & ~7
        guard bodyStart <= bytes.count, bodyLength <= bytes.count - bodyStart else {
            throw .malformedMessage("the header's lengths run past the message")
        }
        reader.offset = bodyStart
        reader.end = bodyStart + bodyLength
        var values: [DBusValue] = []
        values.reserveCapacity(types.count)
        for type in types { values.append(try reader.read(type, depth: 0)) }
        guard reader.offset == bodyStart + bodyLength else {
            throw .malformedMessage("the body is \(bodyLength) bytes, its values \(reader.offset - bodyStart)")
        }
        return values
    }

    private init(bytes: UnsafeRawBufferPointer, bigEndian: Bool, end: Int, offset: Int) {
        self.bytes = bytes
        self.bigEndian = bigEndian
        self.end = end
        self.offset = offset
    }

    // MARK: Values

    private mutating func read(_ type: DBusType, depth: Int) throws(DBusError) -> DBusValue {
        guard depth <= DBusValue.maximumDepth else { throw .malformedMessage("values nested too deeply") }
        switch type {
        case .byte: return .byte(try read(UInt8.self))
        case .boolean:
            switch try read(UInt32.self) {
            case 0: return .boolean(false)
            case 1: return .boolean(true)
            case let other: throw .malformedMessage("a boolean of \(other)")
            }
        case .int16: return .int16(Int16(bitPattern: try read(UInt16.self)))
        case .uint16: return .uint16(try read(UInt16.self))
        case .int32: return .int32(Int32(bitPattern: try read(UInt32.self)))
        case .uint32: return .uint32(try read(UInt32.self))
        case .int64: return .int64(Int64(bitPattern: try read(UInt64.self)))
        case .uint64: return .uint64(try read(UInt64.self))
        case .double: return .double(Double(bitPattern: try read(UInt64.self)))
        case .string: return .string(try readString())
        case .objectPath:
            let text = try readString()
            do { return .objectPath(try ObjectPath(text)) } catch {
                throw .malformedMessage("invalid object path \"\(text)\"")
            }
        case .signature:
            let text = try readSignatureText()
            do { return .signature(try Signature(text)) } catch {
                throw .malformedMessage("invalid signature value \"\(text)\"")
            }
        case .unixFD:
            // Only in a variant: the message carries no descriptor (else the iterators read it).
            throw .malformedMessage("a file descriptor argument refers to no passed descriptor")
        case .variant:
            let inner = try readVariantType()
            return .variant(try read(inner, depth: depth + 1))
        case .array(let element):
            let stop = try arrayBounds(elementAlignment: element.alignment)
            var items: [DBusValue] = []
            while offset < stop { items.append(try read(element, depth: depth + 1)) }
            guard offset == stop else { throw .malformedMessage("an array's elements run past its length") }
            return .array(element: element, items)
        case .dictionary(let key, let value):
            let stop = try arrayBounds(elementAlignment: 8)
            var entries: [DBusDictEntry] = []
            while offset < stop {
                try align(8)
                let k = try read(key, depth: depth + 2)
                let v = try read(value, depth: depth + 2)
                entries.append(DBusDictEntry(key: k, value: v))
            }
            guard offset == stop else { throw .malformedMessage("a dictionary's entries run past its length") }
            return .dictionary(key: key, value: value, entries)
        case .structure(let fields):
            guard !fields.isEmpty else { throw .malformedMessage("empty struct") }
            try align(8)
            var values: [DBusValue] = []
            values.reserveCapacity(fields.count)
            for field in fields { values.append(try read(field, depth: depth + 1)) }
            return .structure(values)
        }
    }

    /// An array's length, then the padding to its elements: where its elements end.
    private mutating func arrayBounds(elementAlignment: Int) throws(DBusError) -> Int {
        let length = Int(try read(UInt32.self))
        try align(elementAlignment)
        guard length <= WireWriter.maximumArrayLength, length <= end - offset else {
            throw .malformedMessage("an array of \(length) bytes runs past the message")
        }
        return offset + length
    }

    /// A variant's signature: one complete type (a single basic code needs no parser).
    private mutating func readVariantType() throws(DBusError) -> DBusType {
        let length = Int(try read(UInt8.self))
        guard length <= end - offset - 1 else { throw .malformedMessage("a variant's signature runs past the message") }
        if length == 1, let basic = DBusType.basic(code: bytes[offset]), bytes[offset + 1] == 0 {
            offset += 2
            return basic
        }
        offset -= 1
        let text = try readSignatureText()
        do {
            return try DBusType(signature: text)
        } catch {
            throw .malformedMessage("a variant's signature \"\(text)\" is not one complete type")
        }
    }

    // MARK: Basic values

    private mutating func align(_ alignment: Int) throws(DBusError) {
        let aligned = (offset + alignment - 1) & ~(alignment - 1)
        guard aligned <= end else { throw .malformedMessage("the message ends inside padding") }
        offset = aligned
    }

    /// A fixed-size integer in the message's byte order, aligned to its size.
    private mutating func read<T: FixedWidthInteger>(_: T.Type) throws(DBusError) -> T {
        let size = MemoryLayout<T>.size
        try align(size)
        guard size <= end - offset else { throw .malformedMessage("the message ends inside a value") }
        var value: T = 0
        for i in 0..<size {
            let byte = T(bytes[offset + (bigEndian ? i : size - 1 - i)])
            value = value << 8 | byte
        }
        offset += size
        return value
    }

    /// A string or object path: its length, its UTF-8 and a NUL.
    private mutating func readString() throws(DBusError) -> String {
        try readText(length: Int(try read(UInt32.self)), what: "a string")
    }

    /// A signature's text: its length in one byte, the text and a NUL.
    private mutating func readSignatureText() throws(DBusError) -> String {
        try readText(length: Int(try read(UInt8.self)), what: "a signature")
    }

    /// `length` bytes of text and the NUL after them. Invalid UTF-8 is repaired, never trapped
    /// on (libdbus has already refused it).
    private mutating func readText(length: Int, what: String) throws(DBusError) -> String {
        guard length < end - offset, bytes[offset + length] == 0 else {
            throw .malformedMessage("\(what) runs past the message or is not terminated")
        }
        let text = String(decoding: UnsafeRawBufferPointer(rebasing: bytes[offset..<offset + length]), as: UTF8.self)
        offset += length + 1
        return text
    }
}
