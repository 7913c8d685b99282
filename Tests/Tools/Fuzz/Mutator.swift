/// Mutations of wire-format messages: blind ones (bit flips, interesting bytes and words,
/// truncation, extension, splicing) and ones that know the layout (the fixed header's
/// endianness, type, flags, version, body length, serial and field-array length; the header
/// fields' values, the signature field above all; array lengths in the body).
struct WireLayout {
    struct Field {
        var code: UInt8
        var typeCode: UInt8
        /// Where the value starts: the length word for strings, the length byte for signatures.
        var valueOffset: Int
        /// Where the text starts and how long it is, for string-like values.
        var textOffset: Int
        var textLength: Int
    }

    var littleEndian: Bool
    var fieldsLength: Int
    var bodyStart: Int
    var bodyLength: Int
    var fields: [Field] = []

    static func read32(_ b: [UInt8], _ at: Int, little: Bool) -> Int? {
        guard at >= 0, at + 4 <= b.count else { return nil }
        let v: UInt32 =
            little
            ? UInt32(b[at]) | UInt32(b[at + 1]) << 8 | UInt32(b[at + 2]) << 16 | UInt32(b[at + 3]) << 24
            : UInt32(b[at + 3]) | UInt32(b[at + 2]) << 8 | UInt32(b[at + 1]) << 16 | UInt32(b[at]) << 24
        return Int(v)
    }

    static func write32(_ b: inout [UInt8], _ at: Int, _ value: UInt32, little: Bool) {
        guard at >= 0, at + 4 <= b.count else { return }
        for i in 0..<4 {
            let byte = UInt8(truncatingIfNeeded: value >> (8 * UInt32(i)))
            b[at + (little ? i : 3 - i)] = byte
        }
    }

    /// Parses as much of the layout as the bytes allow; nil if even the fixed header is short.
    init?(_ b: [UInt8]) {
        guard b.count >= 16 else { return nil }
        littleEndian = b[0] != UInt8(ascii: "B")
        bodyLength = WireLayout.read32(b, 4, little: littleEndian) ?? 0
        fieldsLength = WireLayout.read32(b, 12, little: littleEndian) ?? 0
        let fieldsEnd = min(b.count, 16 + min(fieldsLength, 1 << 20))
        bodyStart = (16 + fieldsLength + 7) & ~7
        var p = 16
        while p + 4 <= fieldsEnd && fields.count < 16 {
            p = (p + 7) & ~7
            guard p + 4 <= fieldsEnd else { break }
            let code = b[p]
            let sigLength = Int(b[p + 1])
            guard sigLength == 1 else { break }
            let typeCode = b[p + 2]
            var v = p + 4
            switch typeCode {
            case UInt8(ascii: "s"), UInt8(ascii: "o"):
                v = (v + 3) & ~3
                guard let n = WireLayout.read32(b, v, little: littleEndian), v + 4 + n < fieldsEnd else { return }
                fields.append(Field(code: code, typeCode: typeCode, valueOffset: v, textOffset: v + 4, textLength: n))
                p = v + 4 + n + 1
            case UInt8(ascii: "g"):
                guard v < fieldsEnd else { return }
                let n = Int(b[v])
                guard v + 1 + n < fieldsEnd else { return }
                fields.append(Field(code: code, typeCode: typeCode, valueOffset: v, textOffset: v + 1, textLength: n))
                p = v + 1 + n + 1
            case UInt8(ascii: "u"):
                v = (v + 3) & ~3
                guard v + 4 <= fieldsEnd else { return }
                fields.append(Field(code: code, typeCode: typeCode, valueOffset: v, textOffset: v, textLength: 4))
                p = v + 4
            default:
                return
            }
        }
    }
}

struct Mutator {
    static let interestingBytes: [UInt8] = [
        0x00, 0xff, 0x7f, 0x80, 0x01, 0x20,
        UInt8(ascii: "a"), UInt8(ascii: "("), UInt8(ascii: ")"), UInt8(ascii: "{"), UInt8(ascii: "}"),
        UInt8(ascii: "v"), UInt8(ascii: "s"), UInt8(ascii: "h"), UInt8(ascii: "/"), UInt8(ascii: "."), UInt8(ascii: "l"),
        UInt8(ascii: "B"),
    ]
    static let interestingWords: [UInt32] = [
        0, 1, 2, 3, 4, 7, 8, 0xff, 0x100, 0xffff, 0x7fff_ffff, 0x8000_0000, 0xffff_ffff, 0xffff_fffe,
        0x0400_0000, 0x0400_0001, 0x0800_0000, 0x0800_0001,
    ]
    static let signatureCodes = Array("ybnqiuxtdsoghva(){}".utf8)

    /// Applies one to four mutations. `other` is a second message to splice with.
    static func mutate(_ input: [UInt8], other: [UInt8], r: inout Rand) -> (bytes: [UInt8], names: [String]) {
        var b = input
        var names: [String] = []
        for _ in 0..<(r.chance(2, 3) ? 1 : r.int(2...4)) {
            names.append(mutateOnce(&b, other: other, r: &r))
        }
        return (b, names)
    }

    private static func mutateOnce(_ b: inout [UInt8], other: [UInt8], r: inout Rand) -> String {
        let layout = WireLayout(b)
        let little = layout?.littleEndian ?? true
        switch r.below(22) {
        case 0, 1:
            guard !b.isEmpty else { return "flip(empty)" }
            for _ in 0..<r.int(1...4) {
                let i = r.below(b.count)
                b[i] ^= 1 << UInt8(r.below(8))
            }
            return "bit-flip"
        case 2, 3:
            guard !b.isEmpty else { return "byte(empty)" }
            b[r.below(b.count)] = r.pick(interestingBytes)
            return "interesting-byte"
        case 4:
            guard b.count >= 4 else { return "word(short)" }
            let at = r.below(b.count / 4) * 4
            WireLayout.write32(&b, at, r.pick(interestingWords), little: little)
            return "interesting-word"
        case 5:
            b = Array(b.prefix(r.below(b.count + 1)))
            return "truncate"
        case 6:
            switch r.below(3) {
            case 0: b += (0..<r.int(1...64)).map { _ in r.byte() }
            case 1: b += [UInt8](repeating: 0, count: r.int(1...16))
            default: b += b.prefix(r.below(b.count + 1))
            }
            return "extend"
        case 7:
            // Splice: a prefix of one message and a suffix of the other.
            let cut = r.below(b.count + 1)
            let from = r.below(other.count + 1)
            b = Array(b.prefix(cut)) + Array(other.suffix(from: from))
            return "splice"
        case 8:
            guard !b.isEmpty else { return "endian(empty)" }
            b[0] = r.chance(3, 4) ? (b[0] == UInt8(ascii: "l") ? UInt8(ascii: "B") : UInt8(ascii: "l")) : r.byte()
            return "endianness"
        case 9:
            guard b.count > 3 else { return "fixed(short)" }
            switch r.below(3) {
            case 0: b[1] = r.pick([0, 1, 2, 3, 4, 5, 0xff])
            case 1: b[2] = r.byte()
            default: b[3] = r.pick([0, 1, 2, 0xff])
            }
            return "type/flags/version"
        case 10, 11:
            // Body length: slightly off, or wild.
            guard let l = layout else { return "body-length(short)" }
            let v = r.bool() ? UInt32(truncatingIfNeeded: l.bodyLength + r.int(-9...9)) : r.pick(interestingWords)
            WireLayout.write32(&b, 4, v, little: little)
            return "body-length"
        case 12:
            guard b.count >= 12 else { return "serial(short)" }
            WireLayout.write32(&b, 8, r.bool() ? 0 : r.pick(interestingWords), little: little)
            return "serial"
        case 13:
            guard let l = layout else { return "fields-length(short)" }
            let v = r.bool() ? UInt32(truncatingIfNeeded: l.fieldsLength + r.int(-9...9)) : r.pick(interestingWords)
            WireLayout.write32(&b, 12, v, little: little)
            return "fields-length"
        case 14, 15, 16:
            // The signature header field (code 8): rewrite one type code, or its length byte.
            guard let l = layout, let f = l.fields.first(where: { $0.code == 8 }) else { return "signature(none)" }
            if f.textLength > 0 && r.chance(3, 4) {
                b[f.textOffset + r.below(f.textLength)] = r.pick(signatureCodes)
            } else {
                b[f.valueOffset] = UInt8(truncatingIfNeeded: f.textLength + r.int(-2...2))
            }
            return "signature-field"
        case 17, 18:
            // Another header field: path, interface, member, error name, destination, sender,
            // reply serial, unix-fd count.
            guard let l = layout, !l.fields.isEmpty else { return "field(none)" }
            let f = r.pick(l.fields)
            if f.typeCode == UInt8(ascii: "u") {
                WireLayout.write32(&b, f.valueOffset, r.pick(interestingWords), little: little)
            } else if f.textLength > 0 && r.chance(3, 4) {
                b[f.textOffset + r.below(f.textLength)] = r.pick(interestingBytes + Array("0-_:é".utf8))
            } else if r.bool() {
                b[f.valueOffset] = r.pick([0, 1, 0xff])  // length (first byte either endianness)
            } else {
                b[f.code == 8 ? f.valueOffset : max(0, f.valueOffset - 4)] = r.byte()  // the field's code/type
            }
            return "header-field"
        case 19:
            // Array and string lengths live in aligned words of the body.
            guard let l = layout, l.bodyStart + 4 <= b.count else { return "array-length(none)" }
            let words = (b.count - l.bodyStart) / 4
            let at = l.bodyStart + r.below(words) * 4
            let current = UInt32(truncatingIfNeeded: WireLayout.read32(b, at, little: little) ?? 0)
            WireLayout.write32(&b, at, r.bool() ? current &+ UInt32(bitPattern: Int32(r.int(-8...8))) : r.pick(interestingWords), little: little)
            return "body-word"
        case 20:
            guard b.count > 1 else { return "delete(short)" }
            let at = r.below(b.count)
            let n = min(b.count - at, r.int(1...16))
            b.removeSubrange(at..<(at + n))
            return "delete"
        default:
            let at = r.below(b.count + 1)
            if r.bool() && !b.isEmpty {
                let from = r.below(b.count)
                let n = min(b.count - from, r.int(1...16))
                b.insert(contentsOf: b[from..<(from + n)], at: at)
            } else {
                b.insert(contentsOf: (0..<r.int(1...8)).map { _ in r.pick(interestingBytes) }, at: at)
            }
            return "insert"
        }
    }

    /// Completely random bytes, or random bytes behind a plausible fixed header.
    static func randomBytes(r: inout Rand) -> [UInt8] {
        let n = r.chance(1, 10) ? r.int(0...2048) : r.int(0...200)
        var b = (0..<n).map { _ in r.byte() }
        if r.bool() && b.count >= 16 {
            let little = r.chance(3, 4)
            b[0] = little ? UInt8(ascii: "l") : UInt8(ascii: "B")
            b[1] = UInt8(r.int(1...4))
            b[2] = r.byte() & 7
            b[3] = 1
            WireLayout.write32(&b, 4, UInt32(r.int(0...max(0, n - 16))), little: little)
            WireLayout.write32(&b, 8, UInt32(r.int(1...1000)), little: little)
            WireLayout.write32(&b, 12, UInt32(r.int(0...max(0, n - 16))), little: little)
        }
        return b
    }
}

extension Array {
    func suffix(from index: Int) -> ArraySlice<Element> { self[Swift.min(index, count)...] }
}
