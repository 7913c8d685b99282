/// The description of one D-Bus interface, with documentation for every member.
///
/// Both the runtime introspection data and the `dbus/*.xml` files are generated from this one
/// value, so they cannot drift apart.
public struct InterfaceDescription: Sendable, Hashable {
    public struct Argument: Sendable, Hashable {
        public var name: String
        public var type: DBusType
        public var documentation: String
        public init(_ name: String, _ type: DBusType, _ documentation: String = "") {
            self.name = name
            self.type = type
            self.documentation = documentation
        }
    }

    public struct Method: Sendable, Hashable {
        public var name: String
        public var inputs: [Argument]
        public var outputs: [Argument]
        public var documentation: String
        public init(_ name: String, inputs: [Argument] = [], outputs: [Argument] = [], documentation: String) {
            self.name = name
            self.inputs = inputs
            self.outputs = outputs
            self.documentation = documentation
        }
        public var inputSignature: String { inputs.map { $0.type.signature }.joined() }
        public var outputSignature: String { outputs.map { $0.type.signature }.joined() }
    }

    public struct Property: Sendable, Hashable {
        public enum Access: String, Sendable { case read, write, readwrite }
        /// The `org.freedesktop.DBus.Property.EmitsChangedSignal` annotation.
        public enum EmitsChanged: String, Sendable { case `true`, invalidates, const, `false` }
        public var name: String
        public var type: DBusType
        public var access: Access
        public var emitsChanged: EmitsChanged
        public var documentation: String
        public init(_ name: String, _ type: DBusType, access: Access = .read, emitsChanged: EmitsChanged = .true, documentation: String) {
            self.name = name
            self.type = type
            self.access = access
            self.emitsChanged = emitsChanged
            self.documentation = documentation
        }
        public var isReadable: Bool { access != .write }
        public var isWritable: Bool { access != .read }
    }

    public struct Signal: Sendable, Hashable {
        public var name: String
        public var arguments: [Argument]
        public var documentation: String
        public init(_ name: String, arguments: [Argument] = [], documentation: String) {
            self.name = name
            self.arguments = arguments
            self.documentation = documentation
        }
    }

    public var name: String
    public var documentation: String
    public var methods: [Method]
    public var properties: [Property]
    public var signals: [Signal]

    public init(name: String, documentation: String, methods: [Method] = [], properties: [Property] = [], signals: [Signal] = []) {
        self.name = name
        self.documentation = documentation
        self.methods = methods
        self.properties = properties
        self.signals = signals
    }

    public func method(named name: String) -> Method? { methods.first { $0.name == name } }
    public func property(named name: String) -> Property? { properties.first { $0.name == name } }

    /// Checks every name, so a typo fails at export instead of on the bus.
    public func validate() throws(DBusError) {
        try DBusNames.checkInterface(name)
        var seen = Set<String>()
        for member in methods.map(\.name) + properties.map(\.name) + signals.map(\.name) {
            try DBusNames.checkMember(member)
            guard seen.insert(member).inserted else { throw .usage("interface \(name) declares \(member) twice") }
        }
    }

    // MARK: XML

    /// The `<interface>` element, with each member's documentation as a comment before it.
    public func xml(indent: String = "  ", documented: Bool = true) -> String {
        var out = ""
        let i1 = indent, i2 = indent + indent, i3 = indent + indent + indent
        if documented { out += XML.comment(documentation, indent: i1) }
        out += "\(i1)<interface name=\"\(XML.escape(name))\">\n"
        for method in methods {
            if documented { out += XML.comment(Self.document(method.documentation, method.inputs + method.outputs), indent: i2) }
            if method.inputs.isEmpty && method.outputs.isEmpty {
                out += "\(i2)<method name=\"\(XML.escape(method.name))\"/>\n"
                continue
            }
            out += "\(i2)<method name=\"\(XML.escape(method.name))\">\n"
            for arg in method.inputs { out += "\(i3)<arg name=\"\(XML.escape(arg.name))\" type=\"\(arg.type.signature)\" direction=\"in\"/>\n" }
            for arg in method.outputs { out += "\(i3)<arg name=\"\(XML.escape(arg.name))\" type=\"\(arg.type.signature)\" direction=\"out\"/>\n" }
            out += "\(i2)</method>\n"
        }
        for signal in signals {
            if documented { out += XML.comment(Self.document(signal.documentation, signal.arguments), indent: i2) }
            if signal.arguments.isEmpty {
                out += "\(i2)<signal name=\"\(XML.escape(signal.name))\"/>\n"
                continue
            }
            out += "\(i2)<signal name=\"\(XML.escape(signal.name))\">\n"
            for arg in signal.arguments { out += "\(i3)<arg name=\"\(XML.escape(arg.name))\" type=\"\(arg.type.signature)\"/>\n" }
            out += "\(i2)</signal>\n"
        }
        for property in properties {
            if documented { out += XML.comment(property.documentation, indent: i2) }
            let head = "\(i2)<property name=\"\(XML.escape(property.name))\" type=\"\(property.type.signature)\" access=\"\(property.access.rawValue)\""
            if property.emitsChanged == .true {
                out += head + "/>\n"
            } else {
                out += head + ">\n"
                out += "\(i3)<annotation name=\"org.freedesktop.DBus.Property.EmitsChangedSignal\" value=\"\(property.emitsChanged.rawValue)\"/>\n"
                out += "\(i2)</property>\n"
            }
        }
        out += "\(i1)</interface>\n"
        return out
    }

    private static func document(_ text: String, _ arguments: [Argument]) -> String {
        var lines = [text]
        for arg in arguments where !arg.documentation.isEmpty {
            lines.append("@\(arg.name): \(arg.documentation)")
        }
        return lines.joined(separator: "\n")
    }

    /// A whole introspection document holding only this interface: what `dbus/NAME.xml` holds.
    public func documentXML() -> String {
        XML.doctype + "<node>\n" + xml() + "</node>\n"
    }
}

enum XML {
    static let doctype =
        "<!DOCTYPE node PUBLIC \"-//freedesktop//DTD D-BUS Object Introspection 1.0//EN\"\n"
        + " \"http://www.freedesktop.org/standards/dbus/1.0/introspect.dtd\">\n"

    static func escape(_ text: String) -> String {
        var out = ""
        for c in text {
            switch c {
            case "&": out += "&amp;"
            case "<": out += "&lt;"
            case ">": out += "&gt;"
            case "\"": out += "&quot;"
            case "'": out += "&apos;"
            default: out.append(c)
            }
        }
        return out
    }

    /// A comment block; "--" may not appear inside an XML comment.
    static func comment(_ text: String, indent: String) -> String {
        let trimmed = text.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
        guard !(trimmed.count == 1 && trimmed[0].isEmpty) else { return "" }
        var out = "\(indent)<!--\n"
        for line in trimmed {
            var safe = line
            while safe.contains("--") { safe = safe.replacing("--", with: "- -") }
            out += line.isEmpty ? "\n" : "\(indent)  \(safe)\n"
        }
        out += "\(indent)-->\n"
        return out
    }
}
