internal import CBGPolicyDBus

extension Message {
    static let localPath = "/org/freedesktop/DBus/Local"
    static let localInterface = "org.freedesktop.DBus.Local"

    /// Decodes a libdbus message. Never traps: anything unreadable throws.
    init(decoding raw: OpaquePointer) throws(DBusError) {
        try self.init(decodingHeadersOf: raw)
        body = try Message.decodeBody(of: raw)
    }

    /// The message's headers, with an empty body: what routing and signal matching look at
    /// before deciding whether the body is worth reading.
    init(decodingHeadersOf raw: OpaquePointer) throws(DBusError) {
        let kind: Kind
        switch dbus_message_get_type(raw) {
        case 1: kind = .methodCall
        case 2: kind = .methodReturn
        case 3: kind = .error
        case 4: kind = .signal
        default: throw .malformedMessage("unknown message type \(dbus_message_get_type(raw))")
        }
        self.init(kind: kind)
        serial = dbus_message_get_serial(raw)
        replySerial = dbus_message_get_reply_serial(raw)
        if let p = dbus_message_get_path(raw) {
            let text = String(cString: p)
            guard let path = try? ObjectPath(text) else { throw .malformedMessage("invalid path header \"\(text)\"") }
            self.path = path
        }
        interface = dbus_message_get_interface(raw).map { String(cString: $0) }
        member = dbus_message_get_member(raw).map { String(cString: $0) }
        errorName = dbus_message_get_error_name(raw).map { String(cString: $0) }
        destination = dbus_message_get_destination(raw).map { String(cString: $0) }
        sender = dbus_message_get_sender(raw).map { String(cString: $0) }
        noReplyExpected = dbus_message_get_no_reply(raw) != 0
        noAutoStart = dbus_message_get_auto_start(raw) == 0
        allowInteractiveAuthorization = dbus_message_get_allow_interactive_authorization(raw) != 0
    }

    /// The message's body, read in one pass (`WireReader`) or, with file descriptors, through
    /// libdbus's iterators.
    static func decodeBody(of raw: OpaquePointer) throws(DBusError) -> [DBusValue] {
        if let values = try WireReader.body(of: raw) { return values }
        return try MessageCodec.readAll(from: raw)
    }

    /// Checks every header the message kind requires, so libdbus never sees invalid input.
    func validateHeaders() throws(DBusError) {
        if let interface { try DBusNames.checkInterface(interface) }
        if let member { try DBusNames.checkMember(member) }
        if let destination { try DBusNames.checkBusName(destination) }
        if let errorName { try DBusNames.checkErrorName(errorName) }
        if let sender { try DBusNames.checkBusName(sender) }
        if path?.rawValue == Message.localPath || interface == Message.localInterface {
            throw .invalidValue("the path and interface org.freedesktop.DBus.Local are reserved by libdbus")
        }
        switch kind {
        case .methodCall:
            guard path != nil, member != nil else { throw .invalidValue("a method call needs a path and a member") }
        case .signal:
            guard path != nil, interface != nil, member != nil else {
                throw .invalidValue("a signal needs a path, an interface and a member")
            }
        case .error:
            guard errorName != nil, replySerial != 0 else { throw .invalidValue("an error needs a name and a reply serial") }
        case .methodReturn:
            guard replySerial != 0 else { throw .invalidValue("a method return needs a reply serial") }
        }
    }

    /// Builds a new libdbus message from this value, validating everything first: written in
    /// the wire format (`WireWriter`) and loaded by libdbus, which checks it whole, or, for a
    /// body with Unix file descriptors, measured so and built through libdbus's iterators.
    /// A message over `maximumLength` bytes (headers included; the specification's 128 MiB
    /// at most), or with an array over 64 MiB, is `DBusError.limitsExceeded`.
    func encode(maximumLength: Int = WireWriter.maximumMessageLength) throws(DBusError) -> RawMessage {
        try validateHeaders()
        try MessageCodec.checkBody(body)
        guard let bytes = try WireWriter.message(self, maximumLength: maximumLength) else { return try buildThroughIterators() }
        return try RawMessage.loading(written: bytes).unsentCopy()
    }

    /// `encode` for a reply, through `templates`: a method return whose body is the same as the
    /// last one of `method` is a copy of that one (see `ReplyTemplates`).
    func encodeReply(
        method: ReplyTemplates.Method, templates: ReplyTemplates, maximumLength: Int = WireWriter.maximumMessageLength
    ) throws(DBusError) -> RawMessage {
        if let copy = try templates.copy(for: self, method: method) { return copy }
        let raw = try encode(maximumLength: maximumLength)
        templates.keep(raw, for: self, method: method)
        return try raw.unsentCopy()
    }

    /// The message built through libdbus's iterators, for bodies that carry Unix file
    /// descriptors: only for headers and values `encode` has validated (libdbus aborts the
    /// process on invalid ones).
    func buildThroughIterators() throws(DBusError) -> RawMessage {
        let type: Int32 =
            switch kind {
            case .methodCall: 1
            case .methodReturn: 2
            case .error: 3
            case .signal: 4
            }
        guard let pointer = dbus_message_new(type) else { throw .outOfMemory }
        let raw = RawMessage(taking: pointer)
        func set(_ text: String?, _ setter: (OpaquePointer, UnsafePointer<CChar>?) -> dbus_bool_t) throws(DBusError) {
            guard let text else { return }
            guard text.withCString({ setter(pointer, $0) }) != 0 else { throw .outOfMemory }
        }
        try set(path?.rawValue, dbus_message_set_path)
        try set(interface, dbus_message_set_interface)
        try set(member, dbus_message_set_member)
        try set(errorName, dbus_message_set_error_name)
        try set(destination, dbus_message_set_destination)
        try set(sender, dbus_message_set_sender)
        if replySerial != 0 {
            guard dbus_message_set_reply_serial(pointer, replySerial) != 0 else { throw .outOfMemory }
        }
        if noReplyExpected { dbus_message_set_no_reply(pointer, 1) }
        if noAutoStart { dbus_message_set_auto_start(pointer, 0) }
        if allowInteractiveAuthorization { dbus_message_set_allow_interactive_authorization(pointer, 1) }
        try MessageCodec.append(body, to: pointer)
        return raw
    }

    /// The message in wire format (for tests and the fuzzer).
    public func marshal() throws(DBusError) -> [UInt8] {
        try encode().marshalled(serial: max(serial, 1))
    }

    /// Parses a message in wire format. Hostile bytes produce an error, never a trap.
    public static func demarshal(_ bytes: [UInt8]) throws(DBusError) -> Message {
        let raw = try RawMessage.loading(bytes)
        // The message must outlive the read: a temporary would be released once its pointer is read.
        return try withExtendedLifetime(raw) { () throws(DBusError) -> Message in try Message(decoding: raw.pointer) }
    }

    /// How many bytes of `bytes` form a complete message, 0 if more are needed, or an error.
    public static func completeLength(of bytes: [UInt8]) -> Int? {
        let n = bytes.withUnsafeBufferPointer { buffer in
            buffer.withMemoryRebound(to: CChar.self) { dbus_message_demarshal_bytes_needed($0.baseAddress, Int32(clamping: $0.count)) }
        }
        return n < 0 ? nil : Int(n)
    }
}

extension RawMessage {
    /// The libdbus message in `bytes`, validated whole by libdbus. Hostile bytes produce an
    /// error, never a trap.
    static func loading(_ bytes: [UInt8]) throws(DBusError) -> RawMessage {
        // libdbus rejects messages with unix fds here (it cannot carry them in a buffer).
        let (pointer, error) = bytes.withUnsafeBufferPointer { buffer in
            withCError { err in
                buffer.withMemoryRebound(to: CChar.self) { chars in
                    dbus_message_demarshal(chars.baseAddress, Int32(clamping: chars.count), err)
                }
            }
        }
        if let error { throw .malformedMessage("\(error.name): \(error.message)") }
        guard let pointer else { throw .malformedMessage("libdbus could not parse the bytes") }
        return RawMessage(taking: pointer)
    }

    /// The libdbus message in `bytes` that this layer wrote (`WireWriter`), validated whole: a
    /// refusal is this layer's fault, and says so.
    static func loading(written bytes: [UInt8]) throws(DBusError) -> RawMessage {
        do {
            return try loading(bytes)
        } catch {
            throw .invalidValue("libdbus refused the message as written: \(error.message)")
        }
    }

    /// A copy of the message with serial 0, so that sending gives it the connection's next one.
    func unsentCopy() throws(DBusError) -> RawMessage {
        guard let copy = withExtendedLifetime(self, { dbus_message_copy(pointer) }) else { throw .outOfMemory }
        return RawMessage(taking: copy)
    }

    /// The message in wire format, as libdbus writes it; a message without a serial is given
    /// `serial` first (libdbus refuses to marshal one without).
    func marshalled(serial: UInt32 = 1) throws(DBusError) -> [UInt8] {
        giveSerial(serial)
        return try withMarshalledBytes(of: pointer) { bytes throws(DBusError) in Array(bytes) }
    }

    /// Gives a message without a serial `serial` (at least 1), as sending would.
    func giveSerial(_ serial: UInt32) {
        if dbus_message_get_serial(pointer) == 0 { dbus_message_set_serial(pointer, max(serial, 1)) }
    }
}

/// Runs `body` on the bytes of `message` in wire format (`dbus_message_marshal`'s copy, freed
/// afterwards). The message needs a serial: libdbus refuses to marshal one without.
func withMarshalledBytes<R>(
    of message: OpaquePointer, _ body: (UnsafeRawBufferPointer) throws(DBusError) -> R
) throws(DBusError) -> R {
    var buffer: UnsafeMutablePointer<CChar>? = nil
    var length: Int32 = 0
    guard dbus_message_marshal(message, &buffer, &length) != 0, let buffer else { throw .outOfMemory }
    defer { dbus_free(buffer) }
    return try body(UnsafeRawBufferPointer(start: buffer, count: Int(length)))
}
