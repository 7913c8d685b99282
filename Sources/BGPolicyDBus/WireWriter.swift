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
/// A body holding a Unix file descriptor is measured here but not sent from here (the
/// descriptors travel beside the bytes, which only libdbus's own writer arranges):
/// `message(_:)` checks its length, then returns nil for it.
///
/// Lengths are checked as the bytes are written, once for each element of an array: a message
/// over its bound (`maximumLength`, at most the specification's 128 MiB) or an array over 64
/// MiB is refused as `DBusError.limitsExceeded` as soon as it passes the bound, before the
/// rest is written, and never reaches libdbus, which would build it and hand it to the bus,
/// which disconnects the sender of a message it cannot take.
struct WireWriter {
    private(set) var bytes: [UInt8] = []
    /// The most `bytes` may hold, headers included.
    private let limit: Int
    /// The Unix file descriptors written (as their indexes, as libdbus writes them).
    private var fileDescriptors: UInt32 = 0

    /// The specification's limits: 64 MiB for an array's data, 128 MiB for a message.
    static let maximumArrayLength = 1 << 26
    static let maximumMessageLength = 1 << 27

    init(limit: Int = maximumMessageLength) {
        self.limit = min(limit, Self.maximumMessageLength)
    }

    /// The message's bytes, with 1 as a placeholder serial (libdbus refuses 0, and
    /// `dbus_message_copy` of the loaded message resets it, so that sending assigns the real
    /// one); nil when the body holds a Unix file descriptor. `maximumLength` bounds the whole
    /// message, headers included (the specification's 128 MiB at most): a bus may take less
    /// (dbus-daemon's `max_message_size`), and disconnects a sender of more.
    static func message(_ message: Message, maximumLength: Int = maximumMessageLength) throws(DBusError) -> [UInt8]? {
        var writer = WireWriter(limit: maximumLength)
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
        do throws(TooLong) {
            for value in message.body { try writer.write(value) }
            // A body of no array (a long string) passes no element's check. With descriptors,
            // libdbus adds the UNIX_FDS header field, which this writer leaves out: 8 bytes.
            let length = writer.bytes.count + (writer.fileDescriptors > 0 ? 8 : 0)
            if length > writer.limit { throw TooLong(bound: .message, length: length) }
        } catch {
            throw .limitsExceeded(error.words(limit: writer.limit))
        }
        if writer.fileDescriptors > 0 { return nil }
        writer.patch(UInt32(writer.bytes.count - bodyStart), at: bodyLengthAt)
        return writer.bytes
    }

    /// How many bytes `values` take as a message body (alignment padding included: each value
    /// where the body's rules put it); nil when they hold a Unix file descriptor, which travels
    /// beside the bytes. Throws for what D-Bus cannot carry at all (an array over 64 MiB).
    static func bodyLength(of values: [DBusValue]) throws(DBusError) -> Int? {
        var writer = WireWriter()
        do throws(TooLong) {
            for value in values { try writer.write(value) }
        } catch {
            throw .limitsExceeded(error.words(limit: writer.limit))
        }
        return writer.fileDescriptors > 0 ? nil : writer.bytes.count
    }

    /// A message or an array that passed its bound: where, and what was written by then.
    struct TooLong: Error {
        enum Bound { case message, array }
        let bound: Bound
        /// The message's bytes (`.message`) or the array's (`.array`) when it passed.
        let length: Int
        /// The outermost array it was in: its elements, and the bytes of the first `written`
        /// of them (the last one perhaps in part), for an estimate of the whole.
        var outermost: (written: Int, count: Int, bytes: Int)?

        /// The words of `DBusError.limitsExceeded`.
        func words(limit: Int) -> String {
            let most =
                switch bound {
                case .message where limit == WireWriter.maximumMessageLength:
                    "the \(Self.size(limit)) (\(limit) bytes) D-Bus allows a message"
                case .message: "the \(Self.size(limit)) (\(limit) bytes) this connection sends in one message"
                case .array: "the \(Self.size(WireWriter.maximumArrayLength)) (\(WireWriter.maximumArrayLength) bytes) D-Bus allows an array"
                }
            guard let outermost, outermost.written < outermost.count else {
                return "\(bound == .message ? "the message" : "an array") takes \(length) bytes, over \(most)"
            }
            // Passed part of the way through: the rest is as large as what was written, on average.
            let estimate = Double(outermost.bytes) / Double(outermost.written) * Double(outermost.count)
            let elements = outermost.count == 1 ? "1 element" : "\(outermost.count) elements"
            return "an array of \(elements) would take about \(Self.size(Int(estimate))) (more than \(Self.size(length)) "
                + "by its \(outermost.written)\(Self.ordinalSuffix(outermost.written))), over \(most)"
        }

        /// 71303301 as "68 MiB", 1536 as "1.5 KiB": to one decimal below 10, whole above.
        static func size(_ bytes: Int) -> String {
            let (value, unit): (Double, String) =
                bytes >= 1 << 30 ? (Double(bytes) / Double(1 << 30), "GiB")
                : bytes >= 1 << 20 ? (Double(bytes) / Double(1 << 20), "MiB")
                : bytes >= 1 << 10 ? (Double(bytes) / Double(1 << 10), "KiB") : (Double(bytes), "bytes")
            guard unit != "bytes" else { return "\(bytes) bytes" }
            let rounded = value < 10 ? (value * 10).rounded() / 10 : value.rounded()
            return rounded == rounded.rounded() ? "\(Int(rounded)) \(unit)" : "\(rounded) \(unit)"
        }

        static func ordinalSuffix(_ n: Int) -> String {
            if (11...13).contains(n % 100) { return "th" }
            return switch n % 10 { case 1: "st"; case 2: "nd"; case 3: "rd"; default: "th" }
        }
    }

    // MARK: Values

    /// Writes `value` at the current position, aligned as its type requires. The value has
    /// been validated (`DBusValue.validate`): containers hold what they declare. A Unix file
    /// descriptor is written as its index among the body's, as libdbus writes it.
    mutating func write(_ value: DBusValue) throws(TooLong) {
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
        case .unixFD:
            append(fileDescriptors)
            fileDescriptors += 1
        case .variant(let inner):
            appendSignature(of: inner)
            try write(inner)
        case .array(let element, let items):
            let array = beginArray(elementAlignment: element.alignment)
            var index = 0
            do throws(TooLong) {
                while index < items.count {
                    try write(items[index])
                    try check(array)
                    index += 1
                }
            } catch {
                throw error.within(array, at: index, of: items.count, bytes: bytes.count)
            }
            endArray(array)
        case .dictionary(_, _, let entries):
            let array = beginArray(elementAlignment: 8)
            var index = 0
            do throws(TooLong) {
                while index < entries.count {
                    pad(to: 8)
                    try write(entries[index].key)
                    try write(entries[index].value)
                    try check(array)
                    index += 1
                }
            } catch {
                throw error.within(array, at: index, of: entries.count, bytes: bytes.count)
            }
            endArray(array)
        case .structure(let fields):
            pad(to: 8)
            for field in fields { try write(field) }
        }
    }

    /// An array being written: where its length goes, where its elements start, and the most
    /// `bytes` may hold while it is written (its own bound or the message's, the nearer).
    struct OpenArray {
        let lengthAt: Int
        let start: Int
        let end: Int
    }

    /// An array: its length, padding to its elements' alignment (even when there are none),
    /// then the elements (`endArray` writes the length, which counts the elements' bytes only).
    private mutating func beginArray(elementAlignment: Int) -> OpenArray {
        pad(to: 4)
        let lengthAt = bytes.count
        append(UInt32(0))
        pad(to: elementAlignment)
        return OpenArray(lengthAt: lengthAt, start: bytes.count, end: min(limit, bytes.count + Self.maximumArrayLength))
    }

    /// After each element: one comparison while within bounds.
    @inline(__always)
    private func check(_ array: OpenArray) throws(TooLong) {
        guard bytes.count > array.end else { return }
        let length = bytes.count - array.start
        throw length > Self.maximumArrayLength
            ? TooLong(bound: .array, length: length) : TooLong(bound: .message, length: bytes.count)
    }

    /// Writes the length of an array `check` has kept within its bound after each element.
    private mutating func endArray(_ array: OpenArray) {
        patch(UInt32(bytes.count - array.start), at: array.lengthAt)
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

extension WireWriter.TooLong {
    /// The failure as seen from an enclosing array: it passed its bound in (or at the end of)
    /// the array's element `index` (0-based) of `count`, with `bytes` written in all. The outermost array
    /// says it last, so its elements are the ones reported.
    func within(_ array: WireWriter.OpenArray, at index: Int, of count: Int, bytes: Int) -> Self {
        var copy = self
        copy.outermost = (written: index + 1, count: count, bytes: bytes - array.start)
        return copy
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
