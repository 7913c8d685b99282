/// A D-Bus match rule for signals. The bus routes by it, and the connection matches each
/// incoming signal against it again locally to hand it to the right subscribers.
public struct MatchRule: Sendable, Hashable {
    public var sender: String?
    public var interface: String?
    public var member: String?
    public var path: ObjectPath?
    public var pathNamespace: ObjectPath?
    /// String arguments that must be equal, by index (`arg0='…'`).
    public var arguments: [Int: String]

    public init(
        sender: String? = nil, interface: String? = nil, member: String? = nil,
        path: ObjectPath? = nil, pathNamespace: ObjectPath? = nil, arguments: [Int: String] = [:]
    ) {
        self.sender = sender
        self.interface = interface
        self.member = member
        self.path = path
        self.pathNamespace = pathNamespace
        self.arguments = arguments
    }

    public func validate() throws(DBusError) {
        if let sender { try DBusNames.checkBusName(sender) }
        if let interface { try DBusNames.checkInterface(interface) }
        if let member { try DBusNames.checkMember(member) }
        if path != nil && pathNamespace != nil {
            throw .invalidValue("a match rule cannot have both path and path_namespace")
        }
        for (index, value) in arguments {
            guard (0...63).contains(index) else { throw .invalidValue("match rule argument index \(index) is not in 0...63") }
            guard !DBusValue.containsNUL(value) else { throw .invalidValue("match rule argument contains a NUL character") }
        }
    }

    /// The rule in the bus's text form, with values quoted as the specification requires.
    public var text: String {
        var parts = ["type='signal'"]
        func add(_ key: String, _ value: String?) {
            guard let value else { return }
            // A quote cannot appear inside quotes: close, escape it, reopen.
            parts.append("\(key)='" + value.replacingAll("'", with: "'\\''") + "'")
        }
        add("sender", sender)
        add("interface", interface)
        add("member", member)
        add("path", path?.rawValue)
        add("path_namespace", pathNamespace?.rawValue)
        for index in arguments.keys.sorted() { add("arg\(index)", arguments[index]) }
        return parts.joined(separator: ",")
    }

    /// Whether `message` matches, given the current owner of a well-known `sender`.
    func matches(_ message: Message, senderOwner: String?) -> Bool {
        matchesHeaders(message, senderOwner: senderOwner) && matchesArguments { index in
            guard index < message.body.count, case .string(let actual) = message.body[index] else { return nil }
            return actual
        }
    }

    /// The arguments (`argN`), given what reads top-level argument N when it is a string.
    func matchesArguments(_ stringArgument: (Int) -> String?) -> Bool {
        arguments.allSatisfy { index, expected in stringArgument(index) == expected }
    }

    /// Everything but the arguments: what can be told from the headers alone.
    func matchesHeaders(_ message: Message, senderOwner: String?) -> Bool {
        guard message.kind == .signal else { return false }
        if let sender {
            guard message.sender == sender || (senderOwner != nil && message.sender == senderOwner) else { return false }
        }
        if let interface, message.interface != interface { return false }
        if let member, message.member != member { return false }
        if let path, message.path != path { return false }
        if let pathNamespace {
            guard let messagePath = message.path, messagePath.isDescendant(of: pathNamespace) else { return false }
        }
        return true
    }

    /// Whether the sender names a well-known name that the connection must resolve to its owner.
    var needsOwnerTracking: Bool {
        guard let sender else { return false }
        return !sender.hasPrefix(":") && sender != DBusConnection.busName
    }
}

extension String {
    func replacingAll(_ target: Character, with replacement: String) -> String {
        var out = ""
        out.reserveCapacity(count)
        for c in self {
            if c == target { out += replacement } else { out.append(c) }
        }
        return out
    }
}
