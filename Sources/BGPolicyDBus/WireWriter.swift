/// Writes a message in the D-Bus wire format (little-endian), for `Message.encode` to load
/// with `dbus_message_demarshal`, which validates the whole of it as it would a message read
/// from a socket.
///
/// Why not libdbus's iterators: they validate the signature text of every container they open
/// and keep bookkeeping per value. A `GetStatus` reply (about 900 bytes, 20 entries of `a{sv}`)
/// cost the agent about half its CPU per call through them; written here and loaded, it costs
/// about what libdbus's validation of it costs. Bytes never reach the bus unchecked: what
/// `dbus_message_demarshal` refuses throws, and the values are validated before they are
/// written (`MessageCodec.checkBody`), so its refusal would be a bug here, not bad input.
///
/// A body holding a Unix file descriptor is not written here (the descriptors travel beside
/// the bytes, which only libdbus's own writer arranges): `message(_:)` returns nil for it.
struct WireWriter {
    private(set) var bytes: [UInt8] = []

    /// The specification's limits: 64 MiB for an array's data, 128 MiB for a message.
    static let maximumArrayLength = 1 << 26
    static let maximumMessageLength = 1 << 27

    /// The message's bytes, with 1 as a placeholder serial (libdbus refuses 0, and
    /// `dbus_message_copy` of the loaded message resets it, so that sending assigns the real
    /// one); nil when the body holds a Unix file descriptor.
    static func message(_ message: Message) throws(DBusError) -> [UInt8]? {
        var writer = WireWriter()
        writer.bytes.reserveCapacity(256)
        let type: UInt8 =
            switch message.kind {
            case .methodCall: 1
            case .methodReturn: 2
            case .error: 3
            case .signal: 4
            }
        var flags: UInt8 = 0
        if message.noReplyExpected { flags |= 0x1 }
        if message.noAutoStart { flags |= 0x2 }
        if message.allowInteractiveAuthorization { flags |= 0x4 }
        writer.bytes += [UInt8(ascii: "l"), type, flags, 1]
        let bodyLengthAt = writer.bytes.count
        writer.append(UInt32(0))
        writer.append(UInt32(1))

        // The header fields, an array of (code, variant).
        let fieldsLengthAt = writer.bytes.count
        writer.append(UInt32(0))
        writer.pad(to: 8)
        let fieldsStart = writer.bytes.count
        if let path = message.path { writer.field(1, "o") { $0.appendString(path.rawValue) } }
        if let interface = message.interface { writer.field(2, "s") { $0.appendString(interface) } }
        if let member = message.member { writer.field(3, "s") { $0.appendString(member) } }
        if let errorName = message.errorName { writer.field(4, "s") { $0.appendString(errorName) } }
        if message.replySerial != 0 { writer.field(5, "u") { $0.append(message.replySerial) } }
        if let destination = message.destination { writer.field(6, "s") { $0.appendString(destination) } }
        if let sender = message.sender { writer.field(7, "s") { $0.appendString(sender) } }
        if !message.body.isEmpty {
            let signature = message.body.signatureText
            writer.field(8, "g") { $0.appendSignature(signature) }
        }
        writer.patch(UInt32(writer.bytes.count - fieldsStart), at: fieldsLengthAt)
        writer.pad(to: 8)

        let bodyStart = writer.bytes.count
        do throws(Failure) {
            for value in message.body { try writer.write(value) }
        } catch {
            switch error {
            case .unixFD: return nil
            case .tooLong(let what): throw .invalidValue(what)
            }
        }
        let bodyLength = writer.bytes.count - bodyStart
        guard writer.bytes.count <= maximumMessageLength else {
            throw .invalidValue("the message is longer than the \(maximumMessageLength) bytes D-Bus allows")
        }
        writer.patch(UInt32(bodyLength), at: bodyLengthAt)
        return writer.bytes
    }

    /// How many bytes `values` take as a message body (alignment padding included: each value
    /// where the body's rules put it); nil when they hold a Unix file descriptor, which travels
    /// beside the bytes. Throws for what D-Bus cannot carry at all (an array over 64 MiB).
    static func bodyLength(of values: [DBusValue]) throws(DBusError) -> Int? {
        var writer = WireWriter()
        do throws(Failure) {
            for value in values { try writer.write(value) }
        } catch {
            switch error {
            case .unixFD: return nil
            case .tooLong(let what): throw .invalidValue(what)
            }
        }
        return writer.bytes.count
    }

    /// Why a body could not be written here.
    enum Failure: Error {
        /// It holds a Unix file descriptor: libdbus's writer must carry it.
        case unixFD
        /// An array's data is over the specification's limit (the words say which).
        case tooLong(String)
    }

    // MARK: Values

    /// Writes `value` at the current position, aligned as its type requires. The value has
    /// been validated (`DBusValue.validate`): containers hold what they declare.
    mutating func write(_ value: DBusValue) throws(Failure) {
        switch value {
        case .byte(let v): bytes.append(v)
        case .boolean(let v): append(UInt32(v ? 1 : 0))
        case .int16(let v): append(UInt16(bitPattern: v))
        case .uint16(let v): append(v)
        case .int32(let v): append(UInt32(bitPattern: v))
        case .uint32(let v): append(v)
        case .int64(let v): append(UInt64(bitPattern: v))
        case .uint64(let v): append(v)
        case .double(let v): append(v.bitPattern)
        case .string(let s): appendString(s)
        case .objectPath(let p): appendString(p.rawValue)
        case .signature(let g): appendSignature(g.rawValue)
        case .unixFD: throw .unixFD
        case .variant(let inner):
            appendSignature(of: inner)
            try write(inner)
        case .array(let element, let items):
            let start = beginArray(elementAlignment: element.alignment)
            for item in items { try write(item) }
            try endArray(start)
        case .dictionary(_, _, let entries):
            let start = beginArray(elementAlignment: 8)
            for entry in entries {
                pad(to: 8)
                try write(entry.key)
                try write(entry.value)
            }
            try endArray(start)
        case .structure(let fields):
            pad(to: 8)
            for field in fields { try write(field) }
        }
    }

    /// An array: its length, padding to its elements' alignment (even when there are none),
    /// then the elements (`endArray` writes the length, which counts the elements' bytes only).
    /// Returns where the length goes and where the elements start.
    private mutating func beginArray(elementAlignment: Int) -> (lengthAt: Int, start: Int) {
        pad(to: 4)
        let lengthAt = bytes.count
        append(UInt32(0))
        pad(to: elementAlignment)
        return (lengthAt, bytes.count)
    }

    private mutating func endArray(_ array: (lengthAt: Int, start: Int)) throws(Failure) {
        let length = bytes.count - array.start
        guard length <= Self.maximumArrayLength else {
            throw .tooLong("an array's data is \(length) bytes, over the \(Self.maximumArrayLength) D-Bus allows")
        }
        patch(UInt32(length), at: array.lengthAt)
    }

    /// One header field: aligned to 8, its code, then a variant of the one-letter type `code`.
    private mutating func field(_ code: UInt8, _ type: Unicode.Scalar, _ value: (inout WireWriter) -> Void) {
        pad(to: 8)
        bytes.append(code)
        bytes.append(1)
        bytes.append(UInt8(ascii: type))
        bytes.append(0)
        value(&self)
    }

    // MARK: Basic values

    /// Zero bytes up to a multiple of `alignment` (a power of two).
    @inline(__always)
    mutating func pad(to alignment: Int) {
        while bytes.count & (alignment - 1) != 0 { bytes.append(0) }
    }

    /// A fixed-size integer, little-endian, aligned to its size.
    @inline(__always)
    mutating func append<T: FixedWidthInteger>(_ value: T) {
        pad(to: MemoryLayout<T>.size)
        // Low byte first, whatever the host's byte order: shifts act on the value.
        var v = value
        for _ in 0..<MemoryLayout<T>.size {
            bytes.append(UInt8(truncatingIfNeeded: v))
            v = v >> 8
        }
    }

    /// A string or object path: its length in bytes, its UTF-8, and a NUL.
    mutating func appendString(_ text: String) {
        let utf8 = text.utf8
        append(UInt32(utf8.count))
        bytes.append(contentsOf: utf8)
        bytes.append(0)
    }

    /// A signature: its length in one byte, its text, and a NUL.
    mutating func appendSignature(_ text: String) {
        let utf8 = text.utf8
        bytes.append(UInt8(truncatingIfNeeded: utf8.count))
        bytes.append(contentsOf: utf8)
        bytes.append(0)
    }

    /// A variant's signature, the type of `value`, written in place: a variant of a basic
    /// type (most of them) builds no string.
    private mutating func appendSignature(of value: DBusValue) {
        if value.isBasicValue {
            bytes.append(1)
            bytes.append(UInt8(truncatingIfNeeded: value.type.typeCode))
            bytes.append(0)
        } else {
            appendSignature(value.type.signature)
        }
    }

    /// Overwrites the 4 bytes at `offset` with `value`, little-endian.
    mutating func patch(_ value: UInt32, at offset: Int) {
        for i in 0..<4 { bytes[offset + i] = UInt8(truncatingIfNeeded: value >> (8 * i)) }
    }
}

extension DBusType {
    /// The alignment of a value of this type in the wire format.
    var alignment: Int {
        switch self {
        case .byte, .signature, .variant: 1
        case .int16, .uint16: 2
        case .boolean, .int32, .uint32, .unixFD, .string, .objectPath, .array, .dictionary: 4
        case .int64, .uint64, .double, .structure: 8
        }
    }
}
