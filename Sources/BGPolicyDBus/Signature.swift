/// A validated D-Bus signature: zero or more complete types.
public struct Signature: Sendable, Hashable {
    public static let maximumLength = 255
    public static let maximumArrayNesting = 32
    public static let maximumStructNesting = 32

    public let rawValue: String
    public let types: [DBusType]

    /// Parses and validates signature text. Never traps on hostile input.
    public init(_ text: String) throws(DBusError) {
        self.types = try SignatureParser.parse(text)
        self.rawValue = text
    }

    /// A signature for the given types. Throws if they break the specification's limits.
    public init(types: [DBusType]) throws(DBusError) {
        var text = ""
        for type in types { type.appendSignature(to: &text) }
        try self.init(text)
    }

    public static let empty = try! Signature("")

    /// The single complete type this signature holds, if it holds exactly one.
    public var singleType: DBusType? { types.count == 1 ? types[0] : nil }
}

extension Signature: CustomStringConvertible {
    public var description: String { rawValue }
}

extension DBusType {
    /// Parses one complete type, such as `a{sv}`.
    public init(signature text: String) throws(DBusError) {
        let types = try SignatureParser.parse(text)
        guard types.count == 1 else {
            throw DBusError.invalidSignature(text, reason: "expected exactly one complete type, found \(types.count)")
        }
        self = types[0]
    }
}

/// A recursive-descent parser over the signature's bytes with explicit depth counters,
/// so hostile input can neither overflow the stack nor trap.
enum SignatureParser {
    static func parse(_ text: String) throws(DBusError) -> [DBusType] {
        let bytes = Array(text.utf8)
        guard bytes.count <= Signature.maximumLength else {
            throw DBusError.invalidSignature(text, reason: "longer than \(Signature.maximumLength) bytes")
        }
        var index = 0
        var types: [DBusType] = []
        while index < bytes.count {
            types.append(try parseOne(bytes, &index, arrays: 0, structs: 0, text: text))
        }
        return types
    }

    private static func parseOne(
        _ bytes: [UInt8], _ index: inout Int, arrays: Int, structs: Int, text: String
    ) throws(DBusError) -> DBusType {
        guard index < bytes.count else {
            throw DBusError.invalidSignature(text, reason: "ends in the middle of a type")
        }
        let code = bytes[index]
        index += 1
        if let basic = DBusType.basic(code: code) { return basic }
        switch code {
        case UInt8(ascii: "v"):
            return .variant
        case UInt8(ascii: "a"):
            guard arrays + 1 <= Signature.maximumArrayNesting else {
                throw DBusError.invalidSignature(text, reason: "arrays nested deeper than \(Signature.maximumArrayNesting)")
            }
            if index < bytes.count, bytes[index] == UInt8(ascii: "{") {
                index += 1
                guard structs + 1 <= Signature.maximumStructNesting else {
                    throw DBusError.invalidSignature(text, reason: "structs nested deeper than \(Signature.maximumStructNesting)")
                }
                let key = try parseOne(bytes, &index, arrays: arrays + 1, structs: structs + 1, text: text)
                guard key.isBasic else {
                    throw DBusError.invalidSignature(text, reason: "a dictionary key must be a basic type, not '\(key.signature)'")
                }
                let value = try parseOne(bytes, &index, arrays: arrays + 1, structs: structs + 1, text: text)
                guard index < bytes.count, bytes[index] == UInt8(ascii: "}") else {
                    throw DBusError.invalidSignature(text, reason: "a dictionary entry must hold exactly a key and a value, closed by '}'")
                }
                index += 1
                return .dictionary(key: key, value: value)
            }
            return .array(try parseOne(bytes, &index, arrays: arrays + 1, structs: structs, text: text))
        case UInt8(ascii: "("):
            guard structs + 1 <= Signature.maximumStructNesting else {
                throw DBusError.invalidSignature(text, reason: "structs nested deeper than \(Signature.maximumStructNesting)")
            }
            var fields: [DBusType] = []
            while true {
                guard index < bytes.count else {
                    throw DBusError.invalidSignature(text, reason: "a struct is not closed by ')'")
                }
                if bytes[index] == UInt8(ascii: ")") {
                    index += 1
                    break
                }
                fields.append(try parseOne(bytes, &index, arrays: arrays, structs: structs + 1, text: text))
            }
            guard !fields.isEmpty else {
                throw DBusError.invalidSignature(text, reason: "a struct must have at least one field")
            }
            return .structure(fields)
        case UInt8(ascii: "{"):
            throw DBusError.invalidSignature(text, reason: "a dictionary entry may only appear as an array's element")
        default:
            let shown = code >= 0x20 && code < 0x7f ? String(UnicodeScalar(code)) : "\\x" + String(code, radix: 16)
            throw DBusError.invalidSignature(text, reason: "'\(shown)' is not a type code")
        }
    }
}
