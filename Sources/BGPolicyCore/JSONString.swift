/// A string as a JSON string literal (RFC 8259): quoted, with `"` and `\` escaped, the common
/// control characters as `\n`, `\r`, `\t`, the rest of them as `\u00XX`, and everything else as
/// is (JSON text is UTF-8). For `bgpolicy --json` and the bench's report.
package enum JSONString {
    package static func quoted(_ s: String) -> String {
        var out = "\""
        for scalar in s.unicodeScalars {
            switch scalar {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            case "\n": out += "\\n"
            case "\r": out += "\\r"
            case "\t": out += "\\t"
            case _ where scalar.value < 0x20:
                let hex = String(scalar.value, radix: 16)
                out += "\\u" + String(repeating: "0", count: 4 - hex.count) + hex
            default: out.unicodeScalars.append(scalar)
            }
        }
        return out + "\""
    }
}
