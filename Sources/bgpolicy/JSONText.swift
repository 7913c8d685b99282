import BGPolicyCore
import BGPolicyDBus

/// D-Bus values as JSON text for `--json`: keys sorted, variants unwrapped, 64-bit integers
/// as numbers, byte arrays as arrays of numbers, non-finite doubles as null.
enum JSONText {
    static func object(_ dict: [String: Variant]) -> String {
        "{" + dict.keys.sorted().map { string($0) + ": " + value(dict[$0]!.value) }.joined(separator: ", ") + "}"
    }

    static func value(_ v: DBusValue) -> String {
        switch v {
        case .byte(let x): "\(x)"
        case .boolean(let x): x ? "true" : "false"
        case .int16(let x): "\(x)"
        case .uint16(let x): "\(x)"
        case .int32(let x): "\(x)"
        case .uint32(let x): "\(x)"
        case .int64(let x): "\(x)"
        case .uint64(let x): "\(x)"
        case .double(let x): x.isFinite ? "\(x)" : "null"
        case .string(let x): string(x)
        case .objectPath(let x): string(x.rawValue)
        case .signature(let x): string(x.rawValue)
        case .unixFD(let x): "\(x.rawValue)"
        case .variant(let inner): value(inner)
        case .array(_, let items): "[" + items.map(value).joined(separator: ", ") + "]"
        case .structure(let fields): "[" + fields.map(value).joined(separator: ", ") + "]"
        case .dictionary(_, _, let entries):
            // Sorted at every depth, as `object` sorts the top level: the bus keeps the
            // sender's order, which may change from one answer to the next.
            "{" + entries.map { entry in
                let key: String = if case .string(let s) = entry.key { s } else { value(entry.key) }
                return (key, value(entry.value))
            }.sorted { $0.0 < $1.0 }.map { string($0.0) + ": " + $0.1 }.joined(separator: ", ") + "}"
        }
    }

    static func string(_ s: String) -> String { JSONString.quoted(s) }
}
