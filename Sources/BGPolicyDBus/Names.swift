/// Validation of the names the D-Bus specification constrains. libdbus aborts the process
/// when handed an invalid name, so every name is checked here first, and remote input is
/// always checked before it reaches libdbus.
public enum DBusNames {
    public static let maximumLength = 255

    private static func isNameByte(_ b: UInt8) -> Bool {
        (b >= UInt8(ascii: "a") && b <= UInt8(ascii: "z")) || (b >= UInt8(ascii: "A") && b <= UInt8(ascii: "Z"))
            || (b >= UInt8(ascii: "0") && b <= UInt8(ascii: "9")) || b == UInt8(ascii: "_")
    }

    private static func isDigit(_ b: UInt8) -> Bool { b >= UInt8(ascii: "0") && b <= UInt8(ascii: "9") }

    /// An interface or error name: two or more dot-separated elements of `[A-Za-z0-9_]`,
    /// none starting with a digit.
    public static func isValidInterface(_ name: String) -> Bool {
        let bytes = Array(name.utf8)
        guard !bytes.isEmpty, bytes.count <= maximumLength else { return false }
        let elements = bytes.split(separator: UInt8(ascii: "."), omittingEmptySubsequences: false)
        guard elements.count >= 2 else { return false }
        for element in elements {
            guard let first = element.first, !isDigit(first), element.allSatisfy(isNameByte) else { return false }
        }
        return true
    }

    public static func isValidErrorName(_ name: String) -> Bool { isValidInterface(name) }

    /// A member (method or signal) name: one element of `[A-Za-z0-9_]`, not starting with a digit.
    public static func isValidMember(_ name: String) -> Bool {
        let bytes = Array(name.utf8)
        guard let first = bytes.first, bytes.count <= maximumLength, !isDigit(first) else { return false }
        return bytes.allSatisfy(isNameByte)
    }

    /// A bus name: a unique name (`:1.42`) or a well-known name (`org.bgpolicy.Agent1`).
    public static func isValidBusName(_ name: String) -> Bool {
        let bytes = Array(name.utf8)
        guard !bytes.isEmpty, bytes.count <= maximumLength else { return false }
        let unique = bytes[0] == UInt8(ascii: ":")
        let body = unique ? bytes.dropFirst() : bytes[...]
        let elements = body.split(separator: UInt8(ascii: "."), omittingEmptySubsequences: false)
        guard elements.count >= 2 else { return false }
        for element in elements {
            guard let first = element.first else { return false }
            if !unique && isDigit(first) { return false }
            guard element.allSatisfy({ isNameByte($0) || $0 == UInt8(ascii: "-") }) else { return false }
        }
        return true
    }

    public static func isUniqueName(_ name: String) -> Bool { name.hasPrefix(":") && isValidBusName(name) }

    static func checkInterface(_ name: String) throws(DBusError) {
        guard isValidInterface(name) else { throw DBusError.invalidName(name, kind: "interface name") }
    }
    static func checkMember(_ name: String) throws(DBusError) {
        guard isValidMember(name) else { throw DBusError.invalidName(name, kind: "member name") }
    }
    static func checkBusName(_ name: String) throws(DBusError) {
        guard isValidBusName(name) else { throw DBusError.invalidName(name, kind: "bus name") }
    }
    static func checkErrorName(_ name: String) throws(DBusError) {
        guard isValidErrorName(name) else { throw DBusError.invalidName(name, kind: "error name") }
    }
}

/// A validated object path, such as `/org/bgpolicy/Agent1`.
public struct ObjectPath: Sendable, Hashable, Comparable {
    public let rawValue: String

    public init(_ text: String) throws(DBusError) {
        guard ObjectPath.isValid(text) else { throw DBusError.invalidName(text, kind: "object path") }
        rawValue = text
    }

    public static let root = try! ObjectPath("/")

    public static func isValid(_ text: String) -> Bool {
        let bytes = Array(text.utf8)
        guard bytes.first == UInt8(ascii: "/") else { return false }
        if bytes.count == 1 { return true }
        guard bytes.last != UInt8(ascii: "/") else { return false }
        var previousSlash = true  // the leading "/": "//a" has an empty element
        for b in bytes.dropFirst() {
            if b == UInt8(ascii: "/") {
                if previousSlash { return false }
                previousSlash = true
            } else {
                let ok = (b >= UInt8(ascii: "a") && b <= UInt8(ascii: "z")) || (b >= UInt8(ascii: "A") && b <= UInt8(ascii: "Z"))
                    || (b >= UInt8(ascii: "0") && b <= UInt8(ascii: "9")) || b == UInt8(ascii: "_")
                guard ok else { return false }
                previousSlash = false
            }
        }
        return true
    }

    /// True if `self` is `other` or lies below it.
    public func isDescendant(of other: ObjectPath) -> Bool {
        if other.rawValue == "/" || other == self { return true }
        return rawValue.hasPrefix(other.rawValue + "/")
    }

    public static func < (lhs: ObjectPath, rhs: ObjectPath) -> Bool { lhs.rawValue < rhs.rawValue }
}

extension ObjectPath: CustomStringConvertible {
    public var description: String { rawValue }
}
