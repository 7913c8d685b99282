import BGPolicyDBus

/// An independent model of what the D-Bus specification and libdbus 1.14 accept, written
/// from the specification and libdbus's validators (dbus-marshal-validate.c), not from our
/// layer's code. The fuzzer compares our layer against it.
///
/// Two notions matter:
/// - *libdbus-valid*: what libdbus checks when it builds or loads a message. Handing libdbus
///   a value that breaks these either aborts the process (a "check failed" on a signature,
///   name or path) or produces bytes no peer can load. Our layer must refuse them.
/// - *strict*: our layer's documented, slightly stricter rules (array nesting counted through
///   structs, dict entries counted as structs, every value within 64 containers even in
///   fixed-size arrays). Values that are libdbus-valid but not strict may go either way.
enum Oracle {
    static let maximumNameLength = 255
    static let maximumSignatureLength = 255
    static let maximumDepth = 64
    static let localPath = "/org/freedesktop/DBus/Local"
    static let localInterface = "org.freedesktop.DBus.Local"

    // MARK: Names (D-Bus specification, "Valid names"; libdbus's character classes)

    private static func isInitialNameByte(_ c: UInt8) -> Bool {
        (c >= 0x41 && c <= 0x5A) || (c >= 0x61 && c <= 0x7A) || c == 0x5F
    }
    private static func isNameByte(_ c: UInt8) -> Bool { isInitialNameByte(c) || (c >= 0x30 && c <= 0x39) }
    private static func isBusNameByte(_ c: UInt8) -> Bool { isNameByte(c) || c == 0x2D }

    static func isValidMember(_ s: String) -> Bool {
        let b = Array(s.utf8)
        guard !b.isEmpty, b.count <= maximumNameLength, isInitialNameByte(b[0]) else { return false }
        return b.allSatisfy(isNameByte)
    }

    static func isValidInterface(_ s: String) -> Bool {
        let b = Array(s.utf8)
        guard !b.isEmpty, b.count <= maximumNameLength else { return false }
        var elements = 1
        var atElementStart = true
        for c in b {
            if c == 0x2E {
                if atElementStart { return false }
                elements += 1
                atElementStart = true
            } else if atElementStart {
                guard isInitialNameByte(c) else { return false }
                atElementStart = false
            } else {
                guard isNameByte(c) else { return false }
            }
        }
        return !atElementStart && elements >= 2
    }

    static func isValidErrorName(_ s: String) -> Bool { isValidInterface(s) }

    /// The specification's rule: unique names are ':' and two or more elements that may start
    /// with a digit; well-known names have two or more elements that may not.
    static func isValidBusName(_ s: String) -> Bool {
        let b = Array(s.utf8)
        guard !b.isEmpty, b.count <= maximumNameLength else { return false }
        let unique = b[0] == 0x3A
        var elements = 1
        var atElementStart = true
        for c in b.dropFirst(unique ? 1 : 0) {
            if c == 0x2E {
                if atElementStart { return false }
                elements += 1
                atElementStart = true
            } else {
                guard isBusNameByte(c) else { return false }
                if atElementStart && !unique && c >= 0x30 && c <= 0x39 { return false }
                atElementStart = false
            }
        }
        return !atElementStart && elements >= 2
    }

    /// libdbus's own, laxer rule: after ':' it accepts any run of name characters and dots
    /// without empty elements, even none at all (":" and ":1" load fine).
    static func isLibdbusBusName(_ s: String) -> Bool {
        let b = Array(s.utf8)
        guard !b.isEmpty, b.count <= maximumNameLength else { return false }
        guard b[0] == 0x3A else { return isValidBusName(s) }
        var i = 1
        while i < b.count {
            if b[i] == 0x2E {
                guard i + 1 < b.count, isBusNameByte(b[i + 1]) else { return false }
                i += 2
            } else {
                guard isBusNameByte(b[i]) else { return false }
                i += 1
            }
        }
        return true
    }

    static func isValidPath(_ s: String) -> Bool {
        let b = Array(s.utf8)
        guard b.first == 0x2F else { return false }
        if b.count == 1 { return true }
        var previousSlash = true
        for c in b.dropFirst() {
            if c == 0x2F {
                if previousSlash { return false }
                previousSlash = true
            } else {
                guard isNameByte(c) else { return false }
                previousSlash = false
            }
        }
        return !previousSlash
    }

    // MARK: Signatures

    /// A port of libdbus's `_dbus_validate_signature_with_reason`: arrays are counted only in
    /// runs of consecutive 'a', structs and dict entries separately, each up to 32.
    static func isLibdbusSignature(_ text: String) -> Bool {
        let p = Array(text.utf8)
        guard p.count <= maximumSignatureLength else { return false }
        var structDepth = 0, arrayDepth = 0, dictDepth = 0
        var last: UInt8 = 0
        var counts: [Int] = [0]
        var i = 0
        while i < p.count {
            let c = p[i]
            switch c {
            case UInt8(ascii: "y"), UInt8(ascii: "b"), UInt8(ascii: "n"), UInt8(ascii: "q"), UInt8(ascii: "i"),
                UInt8(ascii: "u"), UInt8(ascii: "h"), UInt8(ascii: "x"), UInt8(ascii: "t"), UInt8(ascii: "d"),
                UInt8(ascii: "s"), UInt8(ascii: "o"), UInt8(ascii: "g"), UInt8(ascii: "v"):
                break
            case UInt8(ascii: "a"):
                arrayDepth += 1
                if arrayDepth > 32 { return false }
            case UInt8(ascii: "("):
                structDepth += 1
                if structDepth > 32 { return false }
                counts.append(0)
            case UInt8(ascii: ")"):
                if structDepth == 0 || last == UInt8(ascii: "(") { return false }
                counts.removeLast()
                structDepth -= 1
            case UInt8(ascii: "{"):
                if last != UInt8(ascii: "a") { return false }
                dictDepth += 1
                if dictDepth > 32 { return false }
                counts.append(0)
            case UInt8(ascii: "}"):
                if dictDepth == 0 { return false }
                dictDepth -= 1
                if counts.removeLast() != 2 { return false }
            default:
                return false
            }
            if c != UInt8(ascii: "a") && c != UInt8(ascii: "{") && c != UInt8(ascii: "(") {
                counts[counts.count - 1] += 1
            }
            if arrayDepth > 0 {
                if c == UInt8(ascii: "a") {
                    if i + 1 < p.count && (p[i + 1] == UInt8(ascii: ")") || p[i + 1] == UInt8(ascii: "}")) { return false }
                } else {
                    arrayDepth = 0
                }
            }
            if last == UInt8(ascii: "{") {
                guard "ybnqiuhxtdsog".utf8.contains(c) else { return false }
            }
            last = c
            i += 1
        }
        return arrayDepth == 0 && structDepth == 0 && dictDepth == 0
    }

    /// The layer's stricter rule for one complete type: array nesting counted along the whole
    /// path (also through structs), dict entries counting as structs, each at most 32.
    static func strictNesting(_ type: DBusType) -> (arrays: Int, structs: Int) {
        switch type {
        case .array(let e):
            let n = strictNesting(e)
            return (n.arrays + 1, n.structs)
        case .dictionary(let k, let v):
            let a = strictNesting(k), b = strictNesting(v)
            return (max(a.arrays, b.arrays) + 1, max(a.structs, b.structs) + 1)
        case .structure(let fields):
            var a = 0, s = 0
            for f in fields {
                let n = strictNesting(f)
                a = max(a, n.arrays)
                s = max(s, n.structs)
            }
            return (a, s + 1)
        default:
            return (0, 0)
        }
    }

    static func isStrictType(_ type: DBusType) -> Bool {
        let n = strictNesting(type)
        return n.arrays <= 32 && n.structs <= 32 && signatureText(type).utf8.count <= maximumSignatureLength
    }

    static func signatureText(_ type: DBusType) -> String { type.signature }

    /// Splits signature text that libdbus accepts into complete types (no limit checks:
    /// libdbus's have already bounded the input).
    static func types(ofValidSignature text: String) -> [DBusType] {
        let b = Array(text.utf8)
        var i = 0
        func one() -> DBusType {
            let c = b[i]
            i += 1
            switch c {
            case UInt8(ascii: "a"):
                if b[i] == UInt8(ascii: "{") {
                    i += 1
                    let k = one()
                    let v = one()
                    i += 1  // "}"
                    return .dictionary(key: k, value: v)
                }
                return .array(one())
            case UInt8(ascii: "("):
                var fields: [DBusType] = []
                while b[i] != UInt8(ascii: ")") { fields.append(one()) }
                i += 1
                return .structure(fields)
            case UInt8(ascii: "v"): return .variant
            case UInt8(ascii: "y"): return .byte
            case UInt8(ascii: "b"): return .boolean
            case UInt8(ascii: "n"): return .int16
            case UInt8(ascii: "q"): return .uint16
            case UInt8(ascii: "i"): return .int32
            case UInt8(ascii: "u"): return .uint32
            case UInt8(ascii: "x"): return .int64
            case UInt8(ascii: "t"): return .uint64
            case UInt8(ascii: "d"): return .double
            case UInt8(ascii: "s"): return .string
            case UInt8(ascii: "o"): return .objectPath
            case UInt8(ascii: "g"): return .signature
            default: return .unixFD
            }
        }
        var out: [DBusType] = []
        while i < b.count { out.append(one()) }
        return out
    }

    /// Whether the layer's `Signature` must accept this text: libdbus accepts it and every
    /// complete type in it is strict.
    static func isStrictSignature(_ text: String) -> Bool {
        guard isLibdbusSignature(text) else { return false }
        return types(ofValidSignature: text).allSatisfy { t in
            let n = strictNesting(t)
            return n.arrays <= 32 && n.structs <= 32
        }
    }

    static func isBasicCode(_ type: DBusType) -> Bool {
        switch type {
        case .variant, .array, .dictionary, .structure: false
        default: true
        }
    }

    static func isFixed(_ type: DBusType) -> Bool {
        switch type {
        case .string, .objectPath, .signature, .variant, .array, .dictionary, .structure: false
        default: true
        }
    }

    /// The type a value really has, recomputed here rather than trusted from the layer.
    static func typeOf(_ value: DBusValue) -> DBusType {
        switch value {
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
        case .array(let e, _): .array(e)
        case .dictionary(let k, let v, _): .dictionary(key: k, value: v)
        case .structure(let f): .structure(f.map(typeOf))
        }
    }

    // MARK: Values

    /// What the oracle thinks of a message or value.
    enum Verdict: Equatable, CustomStringConvertible {
        /// Valid for the specification and strict: encoding must succeed and round-trip.
        case valid
        /// Valid for the specification but outside the layer's stricter rules: either outcome.
        case either(String)
        /// Breaks the specification or libdbus's checks: encoding must throw.
        case invalid(String)

        var description: String {
            switch self {
            case .valid: "valid"
            case .either(let why): "either (\(why))"
            case .invalid(let why): "invalid (\(why))"
            }
        }

        /// The worse of two verdicts.
        func and(_ other: Verdict) -> Verdict {
            switch (self, other) {
            case (.invalid, _): self
            case (_, .invalid): other
            case (.either, _): self
            case (_, .either): other
            default: .valid
            }
        }
    }

    /// Everything the writer must check about one value, at the given container depth.
    /// `fds` counts descriptors; `badFD` is set when one cannot be duplicated.
    struct ValueScan {
        var verdict = Verdict.valid
        var fds = 0
        var badFD = false
    }

    static func scan(_ value: DBusValue, depth: Int, into s: inout ValueScan) {
        // The strict depth rule: every value within 64 containers.
        if depth > maximumDepth { s.verdict = s.verdict.and(.either("a value at depth \(depth)")) }
        switch value {
        case .string(let text):
            if text.utf8.contains(0) { s.verdict = s.verdict.and(.invalid("a string holds NUL")) }
        case .objectPath(let p):
            if !isValidPath(p.rawValue) { s.verdict = s.verdict.and(.invalid("object path \"\(p)\"")) }
        case .signature(let g):
            if !isLibdbusSignature(g.rawValue) { s.verdict = s.verdict.and(.invalid("signature value \"\(g)\"")) }
        case .unixFD(let fd):
            s.fds += 1
            if fd.rawValue < 0 || fcntl(fd.rawValue, F_GETFD) < 0 {
                s.badFD = true
                s.verdict = s.verdict.and(.invalid("file descriptor \(fd.rawValue) cannot be duplicated"))
            }
        case .variant(let inner):
            let t = typeOf(inner)
            let sig = t.signature
            if !isLibdbusSignature(sig) {
                s.verdict = s.verdict.and(.invalid("variant signature \"\(sig.prefix(40))…\" (\(sig.utf8.count) bytes) is invalid"))
            } else if !isStrictType(t) {
                s.verdict = s.verdict.and(.either("variant type not strict"))
            }
            if depth + 1 > maximumDepth { s.verdict = s.verdict.and(.invalid("variant at depth \(depth) holds a value too deep")) }
            scan(inner, depth: depth + 1, into: &s)
        case .array(let element, let items):
            let sig = element.signature
            if case .dictionary = element {
                // libdbus skips the check for "{..}" element signatures; the enclosing one catches it.
            } else if !isLibdbusSignature(sig) {
                s.verdict = s.verdict.and(.invalid("array element signature (\(sig.utf8.count) bytes) is invalid"))
            }
            if !isStrictType(.array(element)) { s.verdict = s.verdict.and(.either("array type not strict")) }
            if !items.isEmpty && !isFixed(element) && depth + 1 > maximumDepth {
                s.verdict = s.verdict.and(.invalid("array elements deeper than 64"))
            }
            for item in items {
                if typeOf(item) != element { s.verdict = s.verdict.and(.invalid("array element of the wrong type")) }
                scan(item, depth: depth + 1, into: &s)
            }
        case .dictionary(let k, let v, let entries):
            if !isBasicCode(k) { s.verdict = s.verdict.and(.invalid("dictionary key type \(k.signature) is not basic")) }
            if !isStrictType(.dictionary(key: k, value: v)) { s.verdict = s.verdict.and(.either("dictionary type not strict")) }
            if !entries.isEmpty && depth + 2 > maximumDepth { s.verdict = s.verdict.and(.invalid("dictionary entries deeper than 64")) }
            for e in entries {
                if typeOf(e.key) != k || typeOf(e.value) != v {
                    s.verdict = s.verdict.and(.invalid("dictionary entry of the wrong type"))
                }
                scan(e.key, depth: depth + 2, into: &s)
                scan(e.value, depth: depth + 2, into: &s)
            }
        case .structure(let fields):
            if fields.isEmpty { s.verdict = s.verdict.and(.invalid("empty struct")) }
            if depth + 1 > maximumDepth { s.verdict = s.verdict.and(.invalid("struct fields deeper than 64")) }
            for f in fields { scan(f, depth: depth + 1, into: &s) }
        default:
            break
        }
    }

    /// The verdict for a whole body, plus descriptor facts.
    static func scanBody(_ body: [DBusValue]) -> ValueScan {
        var s = ValueScan()
        var sig = ""
        for v in body {
            let t = typeOf(v)
            sig += t.signature
            if !isStrictType(t) { s.verdict = s.verdict.and(.either("body type not strict")) }
            scan(v, depth: 0, into: &s)
        }
        if !isLibdbusSignature(sig) {
            s.verdict = s.verdict.and(.invalid("body signature (\(sig.utf8.count) bytes) is invalid"))
        }
        return s
    }

    /// The verdict for a message's headers, as the specification requires them.
    static func headerVerdict(_ m: Message) -> Verdict {
        var v = Verdict.valid
        func bad(_ why: String) { v = v.and(.invalid(why)) }
        if let p = m.path, !isValidPath(p.rawValue) { bad("path \"\(p)\"") }
        if let i = m.interface, !isValidInterface(i) { bad("interface \"\(i)\"") }
        if let x = m.member, !isValidMember(x) { bad("member \"\(x)\"") }
        if let e = m.errorName, !isValidErrorName(e) { bad("error name \"\(e)\"") }
        if let d = m.destination, !isValidBusName(d) { bad("destination \"\(d)\"") }
        if let s = m.sender, !isValidBusName(s) { bad("sender \"\(s)\"") }
        if m.path?.rawValue == localPath { bad("local path") }
        if m.interface == localInterface { bad("local interface") }
        switch m.kind {
        case .methodCall:
            if m.path == nil || m.member == nil { bad("method call without path or member") }
        case .signal:
            if m.path == nil || m.interface == nil || m.member == nil { bad("signal without path, interface or member") }
        case .error:
            if m.errorName == nil || m.replySerial == 0 { bad("error without name or reply serial") }
        case .methodReturn:
            if m.replySerial == 0 { bad("method return without reply serial") }
        }
        return v
    }

    struct MessageScan {
        var verdict: Verdict
        var fds: Int
    }

    static func scanMessage(_ m: Message) -> MessageScan {
        let body = scanBody(m.body)
        return MessageScan(verdict: headerVerdict(m).and(body.verdict), fds: body.fds)
    }

    /// How many containers below a value its deepest contained value sits (0 for a basic
    /// value or an empty array): a value placed at depth d is strict when d + this <= 64.
    static func depth(of value: DBusValue) -> Int {
        switch value {
        case .variant(let inner): 1 + depth(of: inner)
        case .array(_, let items): items.isEmpty ? 0 : 1 + items.map(depth(of:)).max()!
        case .dictionary(_, _, let entries):
            entries.isEmpty ? 0 : 2 + entries.map { max(depth(of: $0.key), depth(of: $0.value)) }.max()!
        case .structure(let fields): fields.isEmpty ? 0 : 1 + fields.map(depth(of:)).max()!
        default: 0
        }
    }
}

import Glibc
