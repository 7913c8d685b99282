import Glibc

/// A Swift type with a fixed D-Bus type, convertible both ways. Decoding throws on a type
/// mismatch; it never traps.
public protocol DBusRepresentable: Sendable {
    static var dbusType: DBusType { get }
    init(dbusValue: DBusValue) throws(DBusError)
    var dbusValue: DBusValue { get }
}

extension DBusValue {
    func mismatch(_ expected: DBusType) -> DBusError {
        .typeMismatch(expected: expected.signature, got: type.signature)
    }

    /// Decodes into a Swift type, or throws a type mismatch.
    public func decode<T: DBusRepresentable>(_: T.Type = T.self) throws(DBusError) -> T {
        try T(dbusValue: self)
    }

    /// The value inside a variant; other values are returned as they are.
    public var unwrappedVariant: DBusValue {
        if case .variant(let inner) = self { return inner.unwrappedVariant }
        return self
    }
}

extension UInt8: DBusRepresentable {
    public static var dbusType: DBusType { .byte }
    public init(dbusValue: DBusValue) throws(DBusError) {
        guard case .byte(let v) = dbusValue else { throw dbusValue.mismatch(Self.dbusType) }
        self = v
    }
    public var dbusValue: DBusValue { .byte(self) }
}

extension Bool: DBusRepresentable {
    public static var dbusType: DBusType { .boolean }
    public init(dbusValue: DBusValue) throws(DBusError) {
        guard case .boolean(let v) = dbusValue else { throw dbusValue.mismatch(Self.dbusType) }
        self = v
    }
    public var dbusValue: DBusValue { .boolean(self) }
}

extension Int16: DBusRepresentable {
    public static var dbusType: DBusType { .int16 }
    public init(dbusValue: DBusValue) throws(DBusError) {
        guard case .int16(let v) = dbusValue else { throw dbusValue.mismatch(Self.dbusType) }
        self = v
    }
    public var dbusValue: DBusValue { .int16(self) }
}

extension UInt16: DBusRepresentable {
    public static var dbusType: DBusType { .uint16 }
    public init(dbusValue: DBusValue) throws(DBusError) {
        guard case .uint16(let v) = dbusValue else { throw dbusValue.mismatch(Self.dbusType) }
        self = v
    }
    public var dbusValue: DBusValue { .uint16(self) }
}

extension Int32: DBusRepresentable {
    public static var dbusType: DBusType { .int32 }
    public init(dbusValue: DBusValue) throws(DBusError) {
        guard case .int32(let v) = dbusValue else { throw dbusValue.mismatch(Self.dbusType) }
        self = v
    }
    public var dbusValue: DBusValue { .int32(self) }
}

extension UInt32: DBusRepresentable {
    public static var dbusType: DBusType { .uint32 }
    public init(dbusValue: DBusValue) throws(DBusError) {
        guard case .uint32(let v) = dbusValue else { throw dbusValue.mismatch(Self.dbusType) }
        self = v
    }
    public var dbusValue: DBusValue { .uint32(self) }
}

extension Int64: DBusRepresentable {
    public static var dbusType: DBusType { .int64 }
    public init(dbusValue: DBusValue) throws(DBusError) {
        guard case .int64(let v) = dbusValue else { throw dbusValue.mismatch(Self.dbusType) }
        self = v
    }
    public var dbusValue: DBusValue { .int64(self) }
}

extension UInt64: DBusRepresentable {
    public static var dbusType: DBusType { .uint64 }
    public init(dbusValue: DBusValue) throws(DBusError) {
        guard case .uint64(let v) = dbusValue else { throw dbusValue.mismatch(Self.dbusType) }
        self = v
    }
    public var dbusValue: DBusValue { .uint64(self) }
}

extension Double: DBusRepresentable {
    public static var dbusType: DBusType { .double }
    public init(dbusValue: DBusValue) throws(DBusError) {
        guard case .double(let v) = dbusValue else { throw dbusValue.mismatch(Self.dbusType) }
        self = v
    }
    public var dbusValue: DBusValue { .double(self) }
}

extension String: DBusRepresentable {
    public static var dbusType: DBusType { .string }
    public init(dbusValue: DBusValue) throws(DBusError) {
        guard case .string(let v) = dbusValue else { throw dbusValue.mismatch(Self.dbusType) }
        self = v
    }
    public var dbusValue: DBusValue { .string(self) }
}

extension ObjectPath: DBusRepresentable {
    public static var dbusType: DBusType { .objectPath }
    public init(dbusValue: DBusValue) throws(DBusError) {
        guard case .objectPath(let v) = dbusValue else { throw dbusValue.mismatch(Self.dbusType) }
        self = v
    }
    public var dbusValue: DBusValue { .objectPath(self) }
}

extension Signature: DBusRepresentable {
    public static var dbusType: DBusType { .signature }
    public init(dbusValue: DBusValue) throws(DBusError) {
        guard case .signature(let v) = dbusValue else { throw dbusValue.mismatch(Self.dbusType) }
        self = v
    }
    public var dbusValue: DBusValue { .signature(self) }
}

extension UnixFD: DBusRepresentable {
    public static var dbusType: DBusType { .unixFD }
    public convenience init(dbusValue: DBusValue) throws(DBusError) {
        guard case .unixFD(let v) = dbusValue else { throw dbusValue.mismatch(Self.dbusType) }
        // Share ownership by duplicating: each UnixFD closes its own descriptor. Close-on-exec,
        // as libdbus's own copies are, so a child never inherits it (a logind inhibitor would
        // live as long as the child).
        let fd = fcntl(v.rawValue, F_DUPFD_CLOEXEC, 3)
        guard fd >= 0 else { throw .invalidValue("could not duplicate file descriptor \(v.rawValue)") }
        self.init(taking: fd)
    }
    public var dbusValue: DBusValue { .unixFD(self) }
}

/// A value of any type, sent as a D-Bus variant (`v`).
public struct Variant: DBusRepresentable, Hashable, CustomStringConvertible {
    public var value: DBusValue
    public init(_ value: DBusValue) { self.value = value }
    public init<T: DBusRepresentable>(_ value: T) { self.value = value.dbusValue }
    public static var dbusType: DBusType { .variant }
    public init(dbusValue: DBusValue) throws(DBusError) {
        guard case .variant(let v) = dbusValue else { throw dbusValue.mismatch(Self.dbusType) }
        value = v
    }
    public var dbusValue: DBusValue { .variant(value) }
    public var description: String { value.description }

    /// Decodes the variant's content into a Swift type.
    public func decode<T: DBusRepresentable>(_: T.Type = T.self) throws(DBusError) -> T { try T(dbusValue: value) }
}

extension Array: DBusRepresentable where Element: DBusRepresentable {
    public static var dbusType: DBusType { .array(Element.dbusType) }
    public init(dbusValue: DBusValue) throws(DBusError) {
        guard case .array(let element, let items) = dbusValue, element == Element.dbusType else {
            throw dbusValue.mismatch(Self.dbusType)
        }
        var out: [Element] = []
        out.reserveCapacity(items.count)
        for item in items { out.append(try Element(dbusValue: item)) }
        self = out
    }
    public var dbusValue: DBusValue { .array(element: Element.dbusType, map { $0.dbusValue }) }
}

extension Dictionary: DBusRepresentable where Key: DBusRepresentable, Value: DBusRepresentable {
    public static var dbusType: DBusType { .dictionary(key: Key.dbusType, value: Value.dbusType) }
    /// Later entries with the same key win, as GLib does.
    public init(dbusValue: DBusValue) throws(DBusError) {
        guard case .dictionary(let k, let v, let entries) = dbusValue, k == Key.dbusType, v == Value.dbusType else {
            throw dbusValue.mismatch(Self.dbusType)
        }
        var out: [Key: Value] = [:]
        out.reserveCapacity(entries.count)
        for entry in entries {
            out[try Key(dbusValue: entry.key)] = try Value(dbusValue: entry.value)
        }
        self = out
    }
    /// Entries are sorted by key text so that output is stable; each key's text is made once.
    public var dbusValue: DBusValue {
        let entries = map { (text: "\($0.key)", entry: DBusDictEntry(key: $0.key.dbusValue, value: $0.value.dbusValue)) }
            .sorted { $0.text < $1.text }
            .map(\.entry)
        return .dictionary(key: Key.dbusType, value: Value.dbusType, entries)
    }
}

/// `a{sv}`, the usual options and properties dictionary.
public typealias VariantDictionary = [String: Variant]

extension Dictionary where Key == String, Value == Variant {
    /// Reads an optional entry, throwing a clear error if it has the wrong type.
    public func optional<T: DBusRepresentable>(_ key: String, as _: T.Type = T.self) throws(DBusError) -> T? {
        guard let v = self[key] else { return nil }
        do {
            return try T(dbusValue: v.value)
        } catch {
            throw .invalidValue("option \"\(key)\" must be of type '\(T.dbusType.signature)', not '\(v.value.type.signature)'")
        }
    }
}

/// Argument-list helpers: decode a message body into Swift values with clear errors.
extension Array where Element == DBusValue {
    /// The body's signature text.
    public var signatureText: String {
        var out = ""
        for value in self { value.type.appendSignature(to: &out) }
        return out
    }

    /// Checks the body's signature exactly, so handlers can index safely.
    public func expect(_ signature: String) throws(DBusError) {
        guard signatureText == signature else { throw .typeMismatch(expected: signature, got: signatureText) }
    }

    public func decode<T: DBusRepresentable>(_: T.Type, at index: Int) throws(DBusError) -> T {
        guard indices.contains(index) else {
            throw .invalidValue("missing argument \(index + 1) of type '\(T.dbusType.signature)'")
        }
        return try T(dbusValue: self[index])
    }
}

