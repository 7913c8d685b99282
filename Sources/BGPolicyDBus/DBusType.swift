/// One complete D-Bus type, as a signature describes it.
///
/// The limits are the specification's: a signature is at most 255 bytes, and arrays and
/// structs (dict entries count as structs) nest at most 32 deep each.
public indirect enum DBusType: Sendable, Hashable {
    case byte
    case boolean
    case int16
    case uint16
    case int32
    case uint32
    case int64
    case uint64
    case double
    case string
    case objectPath
    case signature
    case unixFD
    case variant
    case array(DBusType)
    case dictionary(key: DBusType, value: DBusType)
    case structure([DBusType])

    /// Basic types may be dictionary keys.
    public var isBasic: Bool {
        switch self {
        case .variant, .array, .dictionary, .structure: false
        default: true
        }
    }

    /// Fixed-size basic types (everything basic but strings, paths and signatures).
    public var isFixed: Bool {
        switch self {
        case .string, .objectPath, .signature: false
        default: isBasic
        }
    }

    /// The type code libdbus uses for this type (`dbus_message_iter_get_arg_type`).
    var typeCode: Int32 {
        switch self {
        case .byte: 121  // y
        case .boolean: 98  // b
        case .int16: 110  // n
        case .uint16: 113  // q
        case .int32: 105  // i
        case .uint32: 117  // u
        case .int64: 120  // x
        case .uint64: 116  // t
        case .double: 100  // d
        case .string: 115  // s
        case .objectPath: 111  // o
        case .signature: 103  // g
        case .unixFD: 104  // h
        case .variant: 118  // v
        case .array, .dictionary: 97  // a
        case .structure: 114  // r
        }
    }

    /// The signature text of this single complete type.
    public var signature: String {
        var out = ""
        appendSignature(to: &out)
        return out
    }

    func appendSignature(to out: inout String) {
        switch self {
        case .byte: out += "y"
        case .boolean: out += "b"
        case .int16: out += "n"
        case .uint16: out += "q"
        case .int32: out += "i"
        case .uint32: out += "u"
        case .int64: out += "x"
        case .uint64: out += "t"
        case .double: out += "d"
        case .string: out += "s"
        case .objectPath: out += "o"
        case .signature: out += "g"
        case .unixFD: out += "h"
        case .variant: out += "v"
        case .array(let element):
            out += "a"
            element.appendSignature(to: &out)
        case .dictionary(let key, let value):
            out += "a{"
            key.appendSignature(to: &out)
            value.appendSignature(to: &out)
            out += "}"
        case .structure(let fields):
            out += "("
            for field in fields { field.appendSignature(to: &out) }
            out += ")"
        }
    }

    /// The length of `signature`, without building it.
    var signatureLength: Int {
        switch self {
        case .array(let element): 1 + element.signatureLength
        case .dictionary(let key, let value): 3 + key.signatureLength + value.signatureLength
        case .structure(let fields): fields.reduce(2) { $0 + $1.signatureLength }
        default: 1
        }
    }

    /// Whether a signature parser accepts this type, its limits (length, nesting) aside: no
    /// empty struct, and only basic dictionary keys, anywhere in it.
    var isWellFormed: Bool {
        switch self {
        case .array(let element): element.isWellFormed
        case .dictionary(let key, let value): key.isBasic && value.isWellFormed
        case .structure(let fields): !fields.isEmpty && fields.allSatisfy(\.isWellFormed)
        default: true
        }
    }

    /// Array and struct nesting of this type, for the specification's limits.
    var nesting: (arrays: Int, structs: Int) {
        switch self {
        case .array(let element):
            let inner = element.nesting
            return (inner.arrays + 1, inner.structs)
        case .dictionary(let key, let value):
            let k = key.nesting, v = value.nesting
            return (max(k.arrays, v.arrays) + 1, max(k.structs, v.structs) + 1)
        case .structure(let fields):
            var arrays = 0, structs = 0
            for field in fields {
                let n = field.nesting
                arrays = max(arrays, n.arrays)
                structs = max(structs, n.structs)
            }
            return (arrays, structs + 1)
        default:
            return (0, 0)
        }
    }

    static func basic(code: UInt8) -> DBusType? {
        switch code {
        case UInt8(ascii: "y"): .byte
        case UInt8(ascii: "b"): .boolean
        case UInt8(ascii: "n"): .int16
        case UInt8(ascii: "q"): .uint16
        case UInt8(ascii: "i"): .int32
        case UInt8(ascii: "u"): .uint32
        case UInt8(ascii: "x"): .int64
        case UInt8(ascii: "t"): .uint64
        case UInt8(ascii: "d"): .double
        case UInt8(ascii: "s"): .string
        case UInt8(ascii: "o"): .objectPath
        case UInt8(ascii: "g"): .signature
        case UInt8(ascii: "h"): .unixFD
        default: nil
        }
    }
}

extension DBusType: CustomStringConvertible {
    public var description: String { signature }
}
