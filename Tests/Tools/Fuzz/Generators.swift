import BGPolicyDBus
import Glibc

/// Random D-Bus types, values, names and messages.
///
/// The ordinary generators stay inside the specification and the layer's strict rules, so
/// what they make must encode and round-trip. The edge generators aim at the limits (32
/// nested arrays, structs or dict entries, 255-byte signatures, 64 containers of depth) from
/// both sides, and the wild generators break one rule on purpose. The oracle, not the
/// generator, decides what the layer must do with each result.
struct Generator {
    var r: Rand
    /// Containers and elements left for the current body, so sizes stay bounded.
    var nodes = 0
    /// An open descriptor to duplicate for `h` values; -1 if there is none.
    let fdSource: Int32
    var allowFDs = false

    init(_ r: Rand, fdSource: Int32) {
        self.r = r
        self.fdSource = fdSource
    }

    // MARK: Types

    static let basicTypes: [DBusType] = [
        .byte, .boolean, .int16, .uint16, .int32, .uint32, .int64, .uint64, .double, .string, .objectPath, .signature,
    ]

    mutating func basicType() -> DBusType {
        if allowFDs && r.chance(1, 12) { return .unixFD }
        return r.pick(Self.basicTypes)
    }

    /// A random complete type. `depthLeft` is how many container levels its values may use,
    /// `arrays` and `structs` the strict nesting already used on this path, and `sig` the
    /// signature bytes left (at least 1 on entry; what this type uses is subtracted).
    mutating func type(depthLeft: Int, arrays: Int, structs: Int, sig: inout Int, level: Int) -> DBusType {
        let roll = level > 0 && sig >= 2 ? r.below(12) : 0
        if (roll == 6 || roll == 7) && depthLeft >= 1 && arrays < 32 {
            sig -= 1
            return .array(type(depthLeft: depthLeft - 1, arrays: arrays + 1, structs: structs, sig: &sig, level: level - 1))
        }
        if roll == 8 && depthLeft >= 2 && arrays < 32 && structs < 32 && sig >= 5 {
            sig -= 4  // "a{", the key and "}"; the value takes at least one more
            let key = basicType()
            let value = type(depthLeft: depthLeft - 2, arrays: arrays + 1, structs: structs + 1, sig: &sig, level: level - 1)
            return .dictionary(key: key, value: value)
        }
        if (roll == 9 || roll == 10) && depthLeft >= 1 && structs < 32 && sig >= 3 {
            sig -= 2
            var fields: [DBusType] = []
            let want = 1 + r.smallSize(max: 5)
            while fields.count < want && sig >= 1 {
                fields.append(type(depthLeft: depthLeft - 1, arrays: arrays, structs: structs + 1, sig: &sig, level: level - 1))
            }
            return .structure(fields)
        }
        sig -= 1
        if depthLeft >= 1 && (roll == 11 || r.chance(1, 8)) { return .variant }
        return basicType()
    }

    /// Types for a whole body within the 255-byte signature.
    mutating func bodyTypes(count: Int, level: Int) -> [DBusType] {
        var sig = r.chance(1, 10) ? r.int(200...255) : r.int(1...255)
        var types: [DBusType] = []
        while types.count < count && sig >= 1 {
            types.append(type(depthLeft: Oracle.maximumDepth, arrays: 0, structs: 0, sig: &sig, level: level))
        }
        return types
    }

    // MARK: Values

    mutating func value(of type: DBusType, depthLeft: Int) -> DBusValue {
        nodes -= 1
        switch type {
        case .byte: return .byte(r.chance(1, 3) ? r.pick([0, 1, 0x7f, 0x80, 0xff]) : r.byte())
        case .boolean: return .boolean(r.bool())
        case .int16: return .int16(Int16(truncatingIfNeeded: interestingInteger()))
        case .uint16: return .uint16(UInt16(truncatingIfNeeded: interestingInteger()))
        case .int32: return .int32(Int32(truncatingIfNeeded: interestingInteger()))
        case .uint32: return .uint32(UInt32(truncatingIfNeeded: interestingInteger()))
        case .int64: return .int64(Int64(bitPattern: interestingInteger()))
        case .uint64: return .uint64(interestingInteger())
        case .double: return .double(double())
        case .string: return .string(string(allowNUL: false))
        case .objectPath: return .objectPath(objectPath())
        case .signature: return .signature(signature())
        case .unixFD: return .unixFD(unixFD())
        case .variant:
            var sig = r.chance(1, 4) ? 255 : r.int(1...40)
            let inner = self.type(
                depthLeft: depthLeft - 1, arrays: 0, structs: 0, sig: &sig, level: nodes > 0 ? r.below(4) : 0)
            return .variant(value(of: inner, depthLeft: depthLeft - 1))
        case .array(let element):
            let count = nodes > 0 ? elementCount(element) : 0
            var items: [DBusValue] = []
            items.reserveCapacity(count)
            for _ in 0..<count { items.append(value(of: element, depthLeft: depthLeft - 1)) }
            return .array(element: element, items)
        case .dictionary(let k, let v):
            let count = nodes > 0 ? r.smallSize(max: 6) : 0
            var entries: [DBusDictEntry] = []
            for _ in 0..<count {
                entries.append(DBusDictEntry(key: value(of: k, depthLeft: depthLeft - 2), value: value(of: v, depthLeft: depthLeft - 2)))
            }
            return .dictionary(key: k, value: v, entries)
        case .structure(let fields):
            return .structure(fields.map { value(of: $0, depthLeft: depthLeft - 1) })
        }
    }

    private mutating func elementCount(_ element: DBusType) -> Int {
        if element == .byte && r.chance(1, 50) { return r.int(0...4096) }
        if Oracle.isFixed(element) && r.chance(1, 40) { return r.int(0...300) }
        return r.smallSize(max: 6)
    }

    mutating func interestingInteger() -> UInt64 {
        switch r.below(6) {
        case 0: return r.pick([0, 1, 2, 0x7f, 0x80, 0xff, 0x100, 0x7fff, 0x8000, 0xffff, 0x7fff_ffff, 0x8000_0000, 0xffff_ffff])
        case 1: return r.pick([UInt64.max, UInt64.max - 1, 0x7fff_ffff_ffff_ffff, 0x8000_0000_0000_0000])
        case 2: return UInt64(bitPattern: Int64(r.int(-300...300)))
        default: return r.u64()
        }
    }

    mutating func double() -> Double {
        switch r.below(4) {
        case 0:
            return r.pick([
                0.0, -0.0, 1.0, -1.0, .infinity, -.infinity, .nan, -.nan, .signalingNaN, .leastNonzeroMagnitude,
                .leastNormalMagnitude, .greatestFiniteMagnitude, -.greatestFiniteMagnitude, .pi,
            ])
        case 1: return Double(bitPattern: r.u64())  // any bits, NaN payloads included
        default: return Double(Int64(bitPattern: r.u64()) >> r.int(0...60)) / 7.0
        }
    }

    /// Text with the characters that trip parsers: controls, non-ASCII, noncharacters
    /// (U+FDD0…, U+FFFE, U+10FFFF), combining marks, astral emoji. NUL only when asked.
    mutating func string(allowNUL: Bool, maxLength: Int = 24) -> String {
        let length = r.chance(1, 200) ? r.int(200...3000) : r.smallSize(max: maxLength)
        var s = String.UnicodeScalarView()
        let style = r.below(4)
        for _ in 0..<length {
            let scalar: Unicode.Scalar
            switch style == 0 ? 0 : r.below(12) {
            case 0...6: scalar = Unicode.Scalar(UInt8(r.int(0x20...0x7e)))
            case 7: scalar = Unicode.Scalar(UInt8(r.int(0x01...0x1f)))
            case 8: scalar = Unicode.Scalar(UInt32(r.int(0x80...0x7ff)))!
            case 9:
                scalar = Unicode.Scalar(UInt32(r.pick([0xFDD0, 0xFDEF, 0xFFFE, 0xFFFF, 0x1FFFE, 0x10FFFF, 0xFEFF, 0x0301, 0x200B, 0x202E])))!
            case 10:
                var v = UInt32(r.int(0x800...0xFFFF))
                if v >= 0xD800 && v <= 0xDFFF { v = 0xE000 }
                scalar = Unicode.Scalar(v)!
            default: scalar = Unicode.Scalar(UInt32(r.int(0x10000...0x10FFFF)))!
            }
            s.append(scalar)
        }
        if allowNUL {
            let at = r.below(s.count + 1)
            s.insert("\0", at: s.index(s.startIndex, offsetBy: at))
        }
        return String(s)
    }

    mutating func unixFD() -> UnixFD {
        if fdSource >= 0 && r.chance(7, 8) { return UnixFD(taking: dup(fdSource)) }
        return UnixFD(taking: -1)  // cannot be duplicated: the writer must throw
    }

    mutating func signature() -> Signature {
        let count = r.smallSize(max: 4)
        var types = bodyTypes(count: count, level: r.below(4))
        while true {
            if let s = try? Signature(types: types) { return s }
            types.removeLast()
        }
    }

    // MARK: Names

    private mutating func element(digitFirst: Bool, dash: Bool) -> String {
        let first = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_" + (dash ? "-" : "") + (digitFirst ? "0123456789" : "")
        let rest = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_0123456789" + (dash ? "-" : "")
        let f = Array(first.utf8), t = Array(rest.utf8)
        var bytes = [f[r.below(f.count)]]
        for _ in 0..<r.smallSize(max: 12) { bytes.append(t[r.below(t.count)]) }
        return String(decoding: bytes, as: UTF8.self)
    }

    mutating func member() -> String {
        if r.chance(1, 100) { return String(repeating: "M", count: r.int(250...256)) }
        return element(digitFirst: false, dash: false)
    }

    mutating func dottedName(dash: Bool, digitFirst: Bool) -> String {
        let n = r.int(2...5)
        var parts: [String] = []
        for _ in 0..<n { parts.append(element(digitFirst: digitFirst, dash: dash)) }
        var s = parts.joined(separator: ".")
        if r.chance(1, 100) {
            // Around the 255-byte limit.
            let target = r.int(250...257)
            while s.utf8.count < target { s += "x" }
            while s.utf8.count > target { s.removeLast() }
            if s.hasSuffix(".") { s += "y" }
        }
        return s
    }

    mutating func interfaceName() -> String { dottedName(dash: false, digitFirst: false) }

    mutating func busName() -> String {
        if r.bool() { return ":" + dottedName(dash: true, digitFirst: true) }
        return dottedName(dash: true, digitFirst: false)
    }

    mutating func pathText() -> String {
        if r.chance(1, 8) { return "/" }
        var s = ""
        for _ in 0..<r.int(1...6) { s += "/" + element(digitFirst: true, dash: false) }
        return s
    }

    /// A path the layer accepts: usually valid, sometimes a near miss that `ObjectPath`
    /// let through (the oracle then says whether it should have).
    mutating func objectPath() -> ObjectPath {
        let text = r.chance(1, 40) ? pathNoise(pathText()) : pathText()
        return (try? ObjectPath(text)) ?? .root
    }

    /// One small edit that usually, not always, breaks a path.
    mutating func pathNoise(_ path: String) -> String {
        switch r.below(6) {
        case 0: return "/" + path
        case 1: return path + "/"
        case 2: return path.replacing("/", with: "//", maxReplacements: 1 + r.below(3))
        case 3: return String(path.dropFirst())
        case 4: return path + r.pick(["/.", "/-", "/é", "/a b", "/\0"])
        default: return noise(path)
        }
    }

    /// One small edit that usually, not always, breaks a name.
    mutating func noise(_ name: String) -> String {
        var b = Array(name.utf8)
        switch r.below(10) {
        case 0: return ""
        case 1: b.insert(r.pick(Array(" .-/:$#~é\0".utf8)), at: r.below(b.count + 1))
        case 2: if !b.isEmpty { b.remove(at: r.below(b.count)) }
        case 3: b.insert(UInt8(ascii: "0") + UInt8(r.below(10)), at: 0)
        case 4: b.append(UInt8(ascii: "."))
        case 5: b.insert(UInt8(ascii: "."), at: 0)
        case 6: if let i = b.firstIndex(of: UInt8(ascii: ".")) { b.insert(UInt8(ascii: "."), at: i) }
        case 7: while b.count < 256 { b.append(UInt8(ascii: "z")) }
        case 8: return String(decoding: b, as: UTF8.self).uppercased() + "\u{301}"
        default: if !b.isEmpty { b[r.below(b.count)] = r.byte() & 0x7f }
        }
        return String(decoding: b, as: UTF8.self)
    }

    // MARK: Bodies

    enum BodyMode: CaseIterable { case empty, normal, edge, wild }

    mutating func body(_ mode: BodyMode) -> [DBusValue] {
        nodes = r.chance(1, 10) ? 400 : 60
        switch mode {
        case .empty:
            return []
        case .normal:
            let types = bodyTypes(count: r.smallSize(max: 6), level: r.below(6))
            return types.map { value(of: $0, depthLeft: Oracle.maximumDepth) }
        case .edge:
            return edgeBody()
        case .wild:
            var body = self.body(r.bool() ? .normal : .edge)
            if body.isEmpty { body = [.string("x")] }
            let i = r.below(body.count)
            body[i] = corrupt(body[i], depth: 0)
            return body
        }
    }

    /// Nests `inner` in `levels` random containers (variant, struct, array, dict value).
    mutating func wrap(_ inner: DBusValue, levels: Int) -> DBusValue {
        var v = inner
        for _ in 0..<levels {
            switch r.below(4) {
            case 0: v = .variant(v)
            case 1: v = .structure(r.bool() ? [v] : [.int32(1), v])
            case 2: v = .array(element: Oracle.typeOf(v), [v])
            default: v = .dictionary(key: .string, value: Oracle.typeOf(v), [DBusDictEntry(key: .string("k"), value: v)])
            }
        }
        return v
    }

    /// Values at the specification's limits, from both sides.
    mutating func edgeBody() -> [DBusValue] {
        let n32 = r.int(29...34)
        let core: DBusValue
        switch r.below(13) {
        case 0:  // consecutive arrays: a^n y
            var t = DBusType.byte
            var v = DBusValue.byte(7)
            for level in 0..<n32 {
                v = .array(element: t, level == 0 && r.chance(1, 3) ? [] : [v])
                t = .array(t)
            }
            core = v
        case 1:  // nested structs
            var v = DBusValue.byte(1)
            for _ in 0..<n32 { v = .structure([v]) }
            core = v
        case 2:  // nested dict entries a{sa{s…}}
            var v = DBusValue.int32(3)
            for _ in 0..<r.int(14...34) {
                v = .dictionary(key: .string, value: Oracle.typeOf(v), r.chance(1, 4) ? [] : [DBusDictEntry(key: .string("k"), value: v)])
            }
            core = v
        case 3:  // arrays through structs: a(a(a(…))) — libdbus counts runs, the layer counts all
            var v = DBusValue.byte(1)
            for _ in 0..<r.int(14...34) {
                let s = DBusValue.structure([v])
                v = .array(element: Oracle.typeOf(s), r.chance(1, 3) ? [] : [s])
            }
            core = v
        case 4:  // a struct with a signature around 255 bytes
            let fields = r.int(118...128) * (r.bool() ? 1 : 2)
            core = .structure((0..<fields).map { _ in r.bool() ? .byte(0) : .int32(1) })
        case 5:  // many arguments: a body signature around 255
            return (0..<r.int(250...260)).map { _ in .byte(r.byte()) }
        case 6:  // variants nested around 64 deep
            var v: DBusValue = r.bool() ? .int32(5) : .structure([.string("deep")])
            for _ in 0..<r.int(58...67) { v = .variant(v) }
            core = v
        case 7:  // a variant holding a deeply nested struct: its signature is checked alone
            var v = DBusValue.byte(1)
            for _ in 0..<n32 { v = .structure([v]) }
            core = .variant(v)
        case 8:  // a variant holding a struct whose signature is around 255 bytes
            let fields = r.int(250...256)
            core = .variant(.structure((0..<fields).map { _ in .byte(0) }))
        case 9:  // an array whose element signature is around 255 bytes
            let fields = r.int(250...256)
            let s = DBusType.structure((0..<fields).map { _ in .byte })
            core = .array(element: s, r.bool() ? [] : [.structure((0..<fields).map { _ in .byte(0) })])
        case 10:  // a variant holding nested dicts
            var v = DBusValue.byte(1)
            for _ in 0..<r.int(28...34) {
                v = .dictionary(key: .byte, value: Oracle.typeOf(v), [DBusDictEntry(key: .byte(0), value: v)])
            }
            core = .variant(v)
        case 11:  // an empty array whose declared element type is deep
            var t = DBusType.int32
            for _ in 0..<n32 { t = r.bool() ? .array(t) : .structure([t]) }
            core = .array(element: t, [])
        default:  // a fixed-size array at the bottom of 63-65 levels
            var v = DBusValue.array(element: .int32, r.bool() ? [] : [.int32(1)])
            for _ in 0..<r.int(61...64) { v = .variant(v) }
            core = v
        }
        let wrapped = r.chance(1, 3) ? wrap(core, levels: r.int(1...4)) : core
        var body = [wrapped]
        if r.chance(1, 4) { body.insert(.string("before"), at: 0) }
        return body
    }

    /// Breaks one rule somewhere inside `value`.
    mutating func corrupt(_ value: DBusValue, depth: Int) -> DBusValue {
        // Descend sometimes, so the broken part can sit deep inside.
        if r.chance(2, 3) {
            switch value {
            case .variant(let inner): return .variant(corrupt(inner, depth: depth + 1))
            case .structure(var fields) where !fields.isEmpty:
                let i = r.below(fields.count)
                fields[i] = corrupt(fields[i], depth: depth + 1)
                return .structure(fields)
            case .array(let e, var items) where !items.isEmpty:
                let i = r.below(items.count)
                items[i] = corrupt(items[i], depth: depth + 1)
                return .array(element: e, items)
            case .dictionary(let k, let v, var entries) where !entries.isEmpty:
                let i = r.below(entries.count)
                if r.bool() {
                    entries[i].value = corrupt(entries[i].value, depth: depth + 2)
                } else {
                    entries[i].key = corrupt(entries[i].key, depth: depth + 2)
                }
                return .dictionary(key: k, value: v, entries)
            default: break
            }
        }
        switch r.below(10) {
        case 9:
            // Declared types no value check reaches: an empty array's element type, an
            // empty dictionary's value type.
            let bad: DBusType = r.pick([
                .structure([]), .dictionary(key: .variant, value: .byte), .dictionary(key: .structure([.byte]), value: .byte),
                .array(.structure([])), .structure([.byte, .structure([])]),
            ])
            switch r.below(3) {
            case 0: return .array(element: bad, [])
            case 1: return .dictionary(key: .string, value: bad, [])
            default: return .variant(.array(element: .array(bad), []))
            }
        case 0: return .string(string(allowNUL: true))
        case 1: return .structure([])
        case 2: return .variant(.structure([]))
        case 3: return .array(element: .int32, [.int32(1), .string("not an int")])
        case 4: return .dictionary(key: .variant, value: .string, [])
        case 5: return .dictionary(key: .string, value: .int32, [DBusDictEntry(key: .string("k"), value: .uint32(1))])
        case 6: return .unixFD(UnixFD(taking: -1))
        case 7:
            var t = DBusType.byte
            for _ in 0..<33 { t = .array(t) }
            return .array(element: t, [])
        default: return .array(element: .string, [value])  // type mismatch unless value is a string
        }
    }

    // MARK: Messages

    /// A message of the given kind, headers valid unless `noisy`.
    mutating func message(kind: Message.Kind, body: [DBusValue], noisy: Bool) -> Message {
        var m = Message(kind: kind, body: body)
        m.serial = r.chance(1, 20) ? 0 : UInt32(truncatingIfNeeded: r.chance(1, 10) ? interestingInteger() | 1 : UInt64(r.int(1...100_000)))
        if m.serial == 0 && r.bool() { m.serial = 1 }
        switch kind {
        case .methodCall:
            m.path = objectPath()
            m.member = member()
            if r.chance(3, 4) { m.interface = interfaceName() }
            if r.bool() { m.destination = busName() }
        case .signal:
            m.path = objectPath()
            m.interface = interfaceName()
            m.member = member()
            if r.chance(1, 4) { m.destination = busName() }
        case .error:
            m.errorName = interfaceName()
            m.replySerial = UInt32(r.int(1...1_000_000))
            if r.bool() { m.destination = busName() }
        case .methodReturn:
            m.replySerial = UInt32(truncatingIfNeeded: interestingInteger() | 1)
            if r.bool() { m.destination = busName() }
        }
        if r.chance(1, 3) { m.sender = busName() }
        m.noReplyExpected = r.chance(1, 5)
        m.noAutoStart = r.chance(1, 5)
        m.allowInteractiveAuthorization = r.chance(1, 8)
        if noisy { addHeaderNoise(&m) }
        return m
    }

    mutating func addHeaderNoise(_ m: inout Message) {
        switch r.below(12) {
        case 0: m.interface = noise(m.interface ?? interfaceName())
        case 1: m.member = noise(m.member ?? member())
        case 2: m.errorName = noise(m.errorName ?? interfaceName())
        case 3: m.destination = noise(m.destination ?? busName())
        case 4: m.sender = noise(m.sender ?? busName())
        case 5: m.path = nil
        case 6: m.member = nil
        case 7: m.interface = nil
        case 8: m.replySerial = 0
        case 9: m.errorName = nil
        case 10: m.path = try? ObjectPath(Oracle.localPath)
        default: m.interface = Oracle.localInterface
        }
    }

    mutating func kind() -> Message.Kind {
        r.pick([.methodCall, .methodCall, .methodReturn, .error, .signal])
    }
}
