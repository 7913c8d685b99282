/// A D-Bus message as a plain Swift value. Messages are converted to and from libdbus only
/// at the edge, so handlers and tests never touch C memory.
public struct Message: Sendable {
    public enum Kind: Sendable, Hashable {
        case methodCall, methodReturn, error, signal
    }

    public var kind: Kind
    /// Assigned by libdbus when the message is sent; 0 until then.
    public var serial: UInt32 = 0
    public var replySerial: UInt32 = 0
    public var path: ObjectPath?
    public var interface: String?
    public var member: String?
    public var errorName: String?
    public var destination: String?
    public var sender: String?
    public var body: [DBusValue]
    public var noReplyExpected = false
    public var noAutoStart = false
    public var allowInteractiveAuthorization = false

    public init(kind: Kind, body: [DBusValue] = []) {
        self.kind = kind
        self.body = body
    }

    /// The body's signature text.
    public var signature: String { body.signatureText }

    public static func methodCall(
        destination: String?, path: ObjectPath, interface: String?, member: String, body: [DBusValue] = []
    ) -> Message {
        var m = Message(kind: .methodCall, body: body)
        m.destination = destination
        m.path = path
        m.interface = interface
        m.member = member
        return m
    }

    public static func signal(path: ObjectPath, interface: String, member: String, body: [DBusValue] = []) -> Message {
        var m = Message(kind: .signal, body: body)
        m.path = path
        m.interface = interface
        m.member = member
        return m
    }

    /// A successful reply to this method call.
    public func makeReply(_ body: [DBusValue] = []) -> Message {
        var m = Message(kind: .methodReturn, body: body)
        m.replySerial = serial
        m.destination = sender
        return m
    }

    /// An error reply to this method call.
    public func makeError(name: String, message text: String) -> Message {
        var m = Message(kind: .error, body: [.string(text)])
        m.errorName = name
        m.replySerial = serial
        m.destination = sender
        return m
    }

    /// For an error reply: its name and human message as a Swift error.
    public var asError: DBusError? {
        guard kind == .error else { return nil }
        var text = ""
        if case .string(let s)? = body.first { text = s }
        return .remote(name: errorName ?? "org.freedesktop.DBus.Error.Failed", message: text)
    }
}

extension Message: CustomStringConvertible {
    public var description: String {
        var parts = ["\(kind)"]
        if let sender { parts.append("sender=\(sender)") }
        if let destination { parts.append("dest=\(destination)") }
        if let path { parts.append("path=\(path)") }
        if let interface { parts.append("interface=\(interface)") }
        if let member { parts.append("member=\(member)") }
        if let errorName { parts.append("error=\(errorName)") }
        parts.append("signature=\"\(signature)\"")
        return parts.joined(separator: " ")
    }
}
