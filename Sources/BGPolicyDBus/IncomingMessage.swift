internal import CBGPolicyDBus
import Glibc

/// A method call or signal as it arrived, before its body is read: its headers and the body's
/// signature, from libdbus. Routing and signal matching look at this first, so that a body
/// nobody will use (a call to an unknown method, a signal no subscription wants, arguments
/// over the size bound) is never decoded: decoding an `ay` takes about 24 bytes per byte.
///
/// It borrows libdbus's message: use it only inside the callback that receives it, on the
/// connection's thread.
struct IncomingMessage {
    private let pointer: OpaquePointer
    /// The headers, with an empty body.
    let header: Message
    /// The body's signature text, as the message declares it.
    let signature: String

    init(_ pointer: OpaquePointer) throws(DBusError) {
        self.pointer = pointer
        header = try Message(decodingHeadersOf: pointer)
        signature = dbus_message_get_signature(pointer).map { String(cString: $0) } ?? ""
    }

    /// Whether file descriptors came with it. libdbus holds them, open in this process, until
    /// the message is freed: a call that carries some is refused before it can wait in a queue.
    var carriesFileDescriptors: Bool { dbus_message_contains_unix_fds(pointer) != 0 }

    /// The whole message, body included.
    func decoded() throws(DBusError) -> Message {
        var message = header
        message.body = try Message.decodeBody(of: pointer)
        return message
    }

    /// The body's length in the wire format, or nil when it is more than `limit` bytes: the
    /// walk stops there. Nothing is copied, and arrays are measured at once from their length
    /// on the wire, so the walk takes a step per top-level argument and struct field, never
    /// one per element (an `av` of 260,000 bytes is one step, not 260,000).
    func bodyLength(upTo limit: Int) -> Int? {
        var iter = DBusMessageIter()
        guard dbus_message_iter_init(pointer, &iter) != 0 else { return 0 }
        var walk = BodyWalk(limit: limit)
        return walk.measure(&iter) ? walk.offset : nil
    }

    /// Top-level argument `index` when it is a string (what a match rule's `argN` compares),
    /// read without reading the arguments before it: arrays are skipped by their length.
    func stringArgument(_ index: Int) -> String? {
        var iter = DBusMessageIter()
        guard dbus_message_iter_init(pointer, &iter) != 0 else { return nil }
        for _ in 0..<index {
            guard dbus_message_iter_next(&iter) != 0 else { return nil }
        }
        guard dbus_message_iter_get_arg_type(&iter) == DBusType.string.typeCode else { return nil }
        var text: UnsafePointer<CChar>? = nil
        dbus_message_iter_get_basic(&iter, &text)
        return text.map { String(cString: $0) }
    }

    /// The signature of the value in top-level argument `index` when it is a variant (the type
    /// `Properties.Set` is sent), read without reading the value or the arguments before it.
    func variantSignature(_ index: Int) -> String? {
        var iter = DBusMessageIter()
        guard dbus_message_iter_init(pointer, &iter) != 0 else { return nil }
        for _ in 0..<index {
            guard dbus_message_iter_next(&iter) != 0 else { return nil }
        }
        guard dbus_message_iter_get_arg_type(&iter) == DBusType.variant.typeCode else { return nil }
        var sub = DBusMessageIter()
        dbus_message_iter_recurse(&iter, &sub)
        guard let signature = dbus_message_iter_get_signature(&sub) else { return nil }
        defer { dbus_free(signature) }
        return String(cString: signature)
    }
}

/// Measures a body through libdbus's iterators, following the wire format's alignment (the
/// body starts on an 8-byte boundary, so offsets from its start align as in the message).
private struct BodyWalk {
    let limit: Int
    var offset = 0

    init(limit: Int) {
        self.limit = limit
    }

    private mutating func align(_ alignment: Int) {
        offset = (offset + alignment - 1) & ~(alignment - 1)
    }

    private static func code(_ c: Character) -> Int32 { Int32(c.asciiValue!) }

    /// Size and alignment of a fixed-size type code, nil for the others.
    private static func fixedSize(_ code: Int32) -> Int? {
        switch code {
        case Self.code("y"): 1
        case Self.code("n"), Self.code("q"): 2
        case Self.code("b"), Self.code("i"), Self.code("u"), Self.code("h"): 4
        case Self.code("x"), Self.code("t"), Self.code("d"): 8
        default: nil
        }
    }

    private static func alignment(_ code: Int32) -> Int {
        if let size = fixedSize(code) { return size }
        switch code {
        case Self.code("s"), Self.code("o"), Self.code("a"): return 4
        case Self.code("("), Self.code("{"), Self.code("r"), Self.code("e"): return 8
        default: return 1  // g, v
        }
    }

    /// Adds every value from the iterator's position to the end of its container. False once
    /// past the limit.
    mutating func measure(_ iter: inout DBusMessageIter) -> Bool {
        while true {
            let code = dbus_message_iter_get_arg_type(&iter)
            if code == MessageCodec.invalidTypeCode { return true }
            guard measureOne(&iter, code: code), offset <= limit else { return false }
            if dbus_message_iter_next(&iter) == 0 { return true }
        }
    }

    private mutating func measureOne(_ iter: inout DBusMessageIter, code: Int32) -> Bool {
        if let size = Self.fixedSize(code) {
            align(size)
            offset += size
            return true
        }
        switch code {
        case Self.code("s"), Self.code("o"):
            var text: UnsafePointer<CChar>? = nil
            dbus_message_iter_get_basic(&iter, &text)
            align(4)
            offset += 4 + (text.map { strlen($0) } ?? 0) + 1
        case Self.code("g"):
            var text: UnsafePointer<CChar>? = nil
            dbus_message_iter_get_basic(&iter, &text)
            offset += 1 + (text.map { strlen($0) } ?? 0) + 1
        case Self.code("a"):
            align(4)
            offset += 4
            let element = dbus_message_iter_get_element_type(&iter)
            align(Self.alignment(element))
            // Asked of the array's own reader, which holds its length.
            var sub = DBusMessageIter()
            dbus_message_iter_recurse(&iter, &sub)
            offset += Int(max(bgpolicy_dbus_iter_array_bytes(&sub), 0))
        case Self.code("r"), Self.code("e"), Self.code("("), Self.code("{"):
            align(8)
            var sub = DBusMessageIter()
            dbus_message_iter_recurse(&iter, &sub)
            return measure(&sub)
        case Self.code("v"):
            var sub = DBusMessageIter()
            dbus_message_iter_recurse(&iter, &sub)
            if let signature = dbus_message_iter_get_signature(&sub) {
                offset += 1 + strlen(signature) + 1
                dbus_free(signature)
            }
            return measure(&sub)
        default:
            break
        }
        return true
    }
}
