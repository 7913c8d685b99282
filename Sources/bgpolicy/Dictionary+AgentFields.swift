import BGPolicyDBus

/// Lenient reads of the agent's `a{sv}` dictionaries for display: a key that is missing, or
/// has a type this version does not expect, reads as nil, so that a newer or older agent
/// degrades one cell rather than the whole command.
extension Dictionary where Key == String, Value == Variant {
    func string(_ key: String) -> String? {
        if case .string(let s)? = self[key]?.value.unwrappedVariant { return s }
        return nil
    }

    func bool(_ key: String) -> Bool? {
        if case .boolean(let b)? = self[key]?.value.unwrappedVariant { return b }
        return nil
    }

    func strings(_ key: String) -> [String]? {
        guard case .array(_, let items)? = self[key]?.value.unwrappedVariant else { return nil }
        return items.compactMap { if case .string(let s) = $0.unwrappedVariant { s } else { nil } }
    }

    /// Any integer type, or a double (history times are `d`), as whole Unix seconds or a count.
    func integer(_ key: String) -> Int64? {
        switch self[key]?.value.unwrappedVariant {
        case .byte(let x)?: Int64(x)
        case .int16(let x)?: Int64(x)
        case .uint16(let x)?: Int64(x)
        case .int32(let x)?: Int64(x)
        case .uint32(let x)?: Int64(x)
        case .int64(let x)?: x
        case .uint64(let x)?: Int64(clamping: x)
        case .double(let x)?: TimeText.seconds(x)
        default: nil
        }
    }

    func double(_ key: String) -> Double? {
        switch self[key]?.value.unwrappedVariant {
        case .double(let x)?: x.isFinite ? x : nil
        default: integer(key).map(Double.init)
        }
    }

    /// A cell for a table: the string, "yes"/"no", a number, or "—" when the key is missing.
    func cell(_ key: String) -> String {
        switch self[key]?.value.unwrappedVariant {
        case nil: TableText.none
        case .string(let s)?: s.isEmpty ? TableText.none : s
        case .boolean(let b)?: b ? "yes" : "no"
        case let value?: JSONText.value(value)
        }
    }
}
