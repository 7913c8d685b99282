import Glibc
/// A D-Bus value of any type: a `Sendable` Swift value that never holds libdbus memory.
public enum DBusValue: Sendable, Hashable {
    case byte(UInt8)
    case boolean(Bool)
    case int16(Int16)
    case uint16(UInt16)
    case int32(Int32)
    case uint32(UInt32)
    case int64(Int64)
    case uint64(UInt64)
    case double(Double)
    case string(String)
    case objectPath(ObjectPath)
    case signature(Signature)
    case unixFD(UnixFD)
    indirect case variant(DBusValue)
    /// An array whose elements all have `element` type (needed to send an empty array).
    case array(element: DBusType, [DBusValue])
    /// An `a{kv}` dictionary; entries keep their wire order.
    case dictionary(key: DBusType, value: DBusType, [DBusDictEntry])
    case structure([DBusValue])

    /// The value's type. For containers this is the declared type.
    public var type: DBusType {
        switch self {
        case .byte: .byte
        case .boolean: .boolean
        case .int16: .int16
        case .uint16: .uint16
        case .int32: .int32
        case .uint32: .uint32
        case .int64: .int64
        case .uint64: .uint64
        case .double: .double
        case .string: .string
        case .objectPath: .objectPath
        case .signature: .signature
        case .unixFD: .unixFD
        case .variant: .variant
        case .array(let element, _): .array(element)
        case .dictionary(let key, let value, _): .dictionary(key: key, value: value)
        case .structure(let fields): .structure(fields.map { $0.type })
        }
    }

    /// Whether this is a value of a basic type (cheaper than building `type`).
    var isBasicValue: Bool {
        switch self {
        case .variant, .array, .dictionary, .structure: false
        default: true
        }
    }

    /// Whether this value is of type `expected`: `type == expected`, without building a
    /// container's type for a variant (every value of an `a{sv}`, checked on each reply).
    func isOfType(_ expected: DBusType) -> Bool {
        switch self {
        case .variant:
            if case .variant = expected { return true }
            return false
        default:
            return type == expected
        }
    }

    /// Whether `s` holds a NUL byte (which a D-Bus string cannot carry): a scan of its
    /// contiguous UTF-8 when it has one, as native strings do.
    static func containsNUL(_ s: String) -> Bool {
        // memchr: a byte at a time was a second for a 64 MiB string in a debug build.
        s.utf8.withContiguousStorageIfAvailable { bytes in
            guard let base = bytes.baseAddress, !bytes.isEmpty else { return false }
            return memchr(base, 0, bytes.count) != nil
        } ?? s.utf8.contains(0)
    }

    /// How many containers deep this value goes (a basic value is 0; dict entries count).
    public var containerDepth: Int {
        switch self {
        case .variant(let inner): 1 + inner.containerDepth
        case .array(_, let items): 1 + (items.map(\.containerDepth).max() ?? 0)
        case .dictionary(_, _, let entries): 2 + (entries.map { max($0.key.containerDepth, $0.value.containerDepth) }.max() ?? 0)
        case .structure(let fields): 1 + (fields.map(\.containerDepth).max() ?? 0)
        default: 0
        }
    }

    /// The total container depth (arrays, structs, dict entries and variants), which the
    /// specification caps at 64 for a whole message.
    public static let maximumDepth = 64

    /// Checks that containers hold what they declare, that strings carry no NUL byte, and that
    /// nesting stays within the specification. The writer runs this before touching libdbus.
    public func validate() throws(DBusError) {
        // A basic type's signature is one valid code: nothing to check (a hot path).
        if case .variant = self {} else if !type.isBasic { try DBusValue.checkSignature(of: type, "value") }
        try validate(depth: 0)
    }

    /// libdbus aborts the process when a variant's content signature breaks the limits (255
    /// bytes, 32 nested structs or arrays), and writes unloadable messages for a body that
    /// does: both are checked here, before libdbus sees them.
    static func checkSignature(of type: DBusType, _ what: String) throws(DBusError) {
        let n = type.nesting
        guard n.arrays <= Signature.maximumArrayNesting, n.structs <= Signature.maximumStructNesting else {
            throw .invalidValue("\(what) type '\(type.signature)' nests too deeply")
        }
        guard type.signatureLength <= Signature.maximumLength else {
            throw .invalidValue("\(what) signature is longer than \(Signature.maximumLength) bytes")
        }
        // So is an empty struct or a non-basic dictionary key anywhere in the type (in an
        // empty array's element type, say, which no value check reaches). Tested on the type
        // itself (every reply's `a{sv}` passes here); the parser gives the words when it fails.
        guard type.isWellFormed else {
            do {
                _ = try Signature(types: [type])
            } catch {
                throw .invalidValue("\(what) type '\(type.signature)' is not a valid D-Bus type: \(error.message)")
            }
            throw .invalidValue("\(what) type '\(type.signature)' is not a valid D-Bus type")
        }
    }

    private func validate(depth: Int) throws(DBusError) {
        guard depth <= DBusValue.maximumDepth else {
            throw .invalidValue("values are nested deeper than \(DBusValue.maximumDepth) containers")
        }
        switch self {
        case .string(let s):
            guard !DBusValue.containsNUL(s) else { throw .invalidValue("a D-Bus string cannot contain a NUL character") }
        case .variant(let inner):
            if !inner.isBasicValue { try DBusValue.checkSignature(of: inner.type, "variant content") }
            try inner.validate(depth: depth + 1)
        case .array(let element, let items):
            let n = element.nesting
            guard n.arrays < Signature.maximumArrayNesting, n.structs <= Signature.maximumStructNesting else {
                throw .invalidValue("array element type '\(element.signature)' nests too deeply")
            }
            for item in items {
                guard item.isOfType(element) else {
                    throw .invalidValue("array of '\(element.signature)' holds a '\(item.type.signature)' element")
                }
                try item.validate(depth: depth + 1)
            }
        case .dictionary(let key, let value, let entries):
            guard key.isBasic else { throw .invalidValue("dictionary key type '\(key.signature)' is not basic") }
            for entry in entries {
                guard entry.key.isOfType(key), entry.value.isOfType(value) else {
                    throw .invalidValue(
                        "dictionary of '{\(key.signature)\(value.signature)}' holds an entry of '{\(entry.key.type.signature)\(entry.value.type.signature)}'")
                }
                try entry.key.validate(depth: depth + 2)
                try entry.value.validate(depth: depth + 2)
            }
        case .structure(let fields):
            guard !fields.isEmpty else { throw .invalidValue("a D-Bus struct must have at least one field") }
            for field in fields { try field.validate(depth: depth + 1) }
        default:
            break
        }
    }
}

extension DBusValue {
    /// How many bytes the value takes in the D-Bus wire format as a message body of its own,
    /// alignment padding included (an `a{sv}` entry starts on 8 bytes); nil when it holds a
    /// Unix file descriptor, or is more than D-Bus can carry.
    public var marshalledLength: Int? {
        (try? WireWriter.bodyLength(of: [self])) ?? nil
    }
}

/// One entry of a D-Bus dictionary.
public struct DBusDictEntry: Sendable, Hashable {
    public var key: DBusValue
    public var value: DBusValue
    public init(key: DBusValue, value: DBusValue) {
        self.key = key
        self.value = value
    }
}

/// An owned Unix file descriptor that travels in a message. Closed when the last reference goes.
public final class UnixFD: Sendable, Hashable {
    public let rawValue: Int32

    /// Takes ownership of `fd`: it is closed when this object is released.
    public init(taking fd: Int32) {
        rawValue = fd
    }

    deinit {
        if rawValue >= 0 { _ = SystemCalls.close(rawValue) }
    }

    public static func == (lhs: UnixFD, rhs: UnixFD) -> Bool { lhs.rawValue == rhs.rawValue }
    public func hash(into hasher: inout Hasher) { hasher.combine(rawValue) }
}

extension DBusValue: CustomStringConvertible {
    /// A GVariant-like text form, for logs and test failures.
    public var description: String {
        switch self {
        case .byte(let v): "byte \(v)"
        case .boolean(let v): v ? "true" : "false"
        case .int16(let v): "int16 \(v)"
        case .uint16(let v): "uint16 \(v)"
        case .int32(let v): "\(v)"
        case .uint32(let v): "uint32 \(v)"
        case .int64(let v): "int64 \(v)"
        case .uint64(let v): "uint64 \(v)"
        case .double(let v): "\(v)"
        case .string(let v): "'\(v)'"
        case .objectPath(let v): "objectpath '\(v)'"
        case .signature(let v): "signature '\(v)'"
        case .unixFD(let v): "handle \(v.rawValue)"
        case .variant(let v): "<\(v)>"
        case .array(_, let items): "[" + items.map(\.description).joined(separator: ", ") + "]"
        case .dictionary(_, _, let entries):
            "{" + entries.map { "\($0.key): \($0.value)" }.joined(separator: ", ") + "}"
        case .structure(let fields): "(" + fields.map(\.description).joined(separator: ", ") + ")"
        }
    }
}
