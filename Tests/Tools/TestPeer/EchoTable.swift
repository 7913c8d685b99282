import BGPolicyDBus

/// The echo methods both peers export (`org.bgpolicy.TestPeer1` here, `org.bgpolicy.PyPeer1` in
/// Tests/integration/pyservice.py): one per D-Bus type, each returning its argument unchanged.
///
/// These are computed, not stored: a global constant holding an indirect enum case keeps its box
/// through a pointer with tag bits set, which valgrind cannot see and reports as definitely lost.
enum EchoMethods {
    static var structType: DBusType {
        .structure([
            .byte, .boolean, .int16, .uint16, .int32, .uint32, .int64, .uint64, .double, .string, .objectPath, .signature,
        ])
    }
    static var nestedType: DBusType { .dictionary(key: .string, value: .array(.structure([.int32, .variant]))) }

    /// Method name and the one type it takes and returns, in the order the interface lists them.
    static var all: [(name: String, type: DBusType)] {
        [
            ("EchoByte", .byte),
            ("EchoBoolean", .boolean),
            ("EchoInt16", .int16),
            ("EchoUInt16", .uint16),
            ("EchoInt32", .int32),
            ("EchoUInt32", .uint32),
            ("EchoInt64", .int64),
            ("EchoUInt64", .uint64),
            ("EchoDouble", .double),
            ("EchoString", .string),
            ("EchoObjectPath", .objectPath),
            ("EchoSignature", .signature),
            ("EchoVariant", .variant),
            ("EchoStrings", .array(.string)),
            ("EchoDict", .dictionary(key: .string, value: .variant)),
            ("EchoStruct", structType),
            ("EchoNested", nestedType),
            ("EchoBytes", .array(.byte)),
        ]
    }
}

/// One method and the values a client sends it.
struct EchoCase: Sendable {
    let method: String
    let values: [DBusValue]
}

/// The values every client round-trips: limits, empty containers, unicode, nested variants.
enum EchoTable {
    static func cases() throws -> [EchoCase] {
        let path = try ObjectPath("/org/bgpolicy/TestPeer")
        let deepPath = try ObjectPath("/a/b_c/D9/_")
        let unicode = "ünïcødé ✓ 日本語 🎉 \u{1F468}\u{200D}\u{1F469}\u{200D}\u{1F467}"
        let awkward = "tab\tnewline\n quote' dquote\" backslash\\ <xml>&amp;"
        func sv(_ entries: [(String, DBusValue)]) -> DBusValue {
            .dictionary(key: .string, value: .variant, entries.map { DBusDictEntry(key: .string($0.0), value: .variant($0.1)) })
        }
        func strings(_ items: [String]) -> DBusValue { .array(element: .string, items.map { .string($0) }) }
        func bytes(_ items: [UInt8]) -> DBusValue { .array(element: .byte, items.map { .byte($0) }) }
        let iv: DBusType = .structure([.int32, .variant])
        func nested(_ entries: [(String, [(Int32, DBusValue)])]) -> DBusValue {
            .dictionary(
                key: .string, value: .array(iv),
                entries.map { key, items in
                    DBusDictEntry(
                        key: .string(key),
                        value: .array(element: iv, items.map { .structure([.int32($0.0), .variant($0.1)]) }))
                })
        }
        let fullStruct: DBusValue = .structure([
            .byte(255), .boolean(true), .int16(.min), .uint16(.max), .int32(.min), .uint32(.max), .int64(.min), .uint64(.max),
            .double(-1.5e-300), .string(unicode), .objectPath(path), .signature(try Signature("a{sa(iv)}")),
        ])
        let emptyStruct: DBusValue = .structure([
            .byte(0), .boolean(false), .int16(0), .uint16(0), .int32(0), .uint32(0), .int64(0), .uint64(0),
            .double(0), .string(""), .objectPath(.root), .signature(.empty),
        ])
        let deepVariant: DBusValue = .variant(.variant(.variant(.variant(.uint64(.max)))))

        return [
            EchoCase(method: "EchoByte", values: [.byte(0), .byte(1), .byte(127), .byte(128), .byte(255)]),
            EchoCase(method: "EchoBoolean", values: [.boolean(true), .boolean(false)]),
            EchoCase(method: "EchoInt16", values: [.int16(.min), .int16(-1), .int16(0), .int16(.max)]),
            EchoCase(method: "EchoUInt16", values: [.uint16(0), .uint16(1), .uint16(.max)]),
            EchoCase(method: "EchoInt32", values: [.int32(.min), .int32(-1), .int32(0), .int32(42), .int32(.max)]),
            EchoCase(method: "EchoUInt32", values: [.uint32(0), .uint32(1), .uint32(.max)]),
            EchoCase(method: "EchoInt64", values: [.int64(.min), .int64(-1), .int64(0), .int64(1 << 53 + 1), .int64(.max)]),
            EchoCase(method: "EchoUInt64", values: [.uint64(0), .uint64(1 << 53 + 1), .uint64(.max)]),
            EchoCase(
                method: "EchoDouble",
                values: [
                    .double(0), .double(-0.0), .double(1.5), .double(.pi), .double(-1e-300), .double(.greatestFiniteMagnitude),
                    .double(.leastNonzeroMagnitude), .double(.infinity), .double(-.infinity), .double(.nan),
                ]),
            EchoCase(
                method: "EchoString",
                values: [.string(""), .string("hello"), .string(unicode), .string(awkward), .string(String(repeating: "x", count: 10_000))]),
            EchoCase(method: "EchoObjectPath", values: [.objectPath(.root), .objectPath(path), .objectPath(deepPath)]),
            EchoCase(
                method: "EchoSignature",
                values: [
                    .signature(.empty), .signature(try Signature("a{sv}")), .signature(try Signature("(ybnqiuxtdsog)")),
                    .signature(try Signature("aa{sa(iv)}hv")),
                ]),
            EchoCase(
                method: "EchoVariant",
                values: [
                    .variant(.int32(7)), .variant(.string(unicode)), .variant(.byte(0)), .variant(.double(-0.0)),
                    .variant(.objectPath(path)), .variant(.signature(try Signature("a{sv}"))),
                    deepVariant,
                    .variant(.array(element: .string, [])),
                    .variant(.array(element: .variant, [.variant(.int64(.min)), .variant(.variant(.boolean(true)))])),
                    .variant(sv([("a", .uint16(1)), ("nested", .variant(sv([("k", .boolean(false))])))])),
                    .variant(fullStruct),
                    .variant(nested([("x", [(1, .string("s"))])])),
                ]),
            EchoCase(
                method: "EchoStrings",
                values: [strings([]), strings([""]), strings(["a", "", unicode, awkward]), strings((0..<100).map { "item \($0)" })]),
            EchoCase(
                method: "EchoDict",
                values: [
                    sv([]),
                    sv([("a", .int32(1)), ("b", .string("x")), ("c", bytes([1, 2])), ("d", .variant(.boolean(true)))]),
                    sv([
                        ("min", .int64(.min)), ("max", .uint64(.max)), ("empty", .array(element: .string, [])),
                        ("dict", sv([("inner", .variant(.variant(.string(unicode))))])), ("struct", fullStruct), (unicode, .double(.pi)),
                    ]),
                ]),
            EchoCase(method: "EchoStruct", values: [fullStruct, emptyStruct]),
            EchoCase(
                method: "EchoNested",
                values: [
                    nested([]),
                    nested([("empty", [])]),
                    nested([
                        ("x", [(1, .string("s")), (-2, .array(element: .variant, [.variant(.int32(1)), .variant(.string("two"))]))]),
                        ("y", [(.min, deepVariant), (.max, sv([("k", .objectPath(deepPath))]))]),
                        (unicode, [(0, .array(element: .string, []))]),
                    ]),
                ]),
            EchoCase(
                method: "EchoBytes",
                values: [bytes([]), bytes([0]), bytes([0, 1, 127, 128, 255]), bytes((0..<256).map { UInt8($0) }), bytes(Array("text\0".utf8))]),
        ]
    }
}

/// Structural equality that also tells -0.0 from 0.0 and accepts NaN, so a peer that
/// rounds or normalises a double is caught.
func identical(_ a: DBusValue, _ b: DBusValue) -> Bool {
    switch (a, b) {
    case (.double(let x), .double(let y)):
        return x.bitPattern == y.bitPattern
    case (.variant(let x), .variant(let y)):
        return identical(x, y)
    case (.array(let t1, let xs), .array(let t2, let ys)):
        return t1 == t2 && xs.count == ys.count && zip(xs, ys).allSatisfy { identical($0, $1) }
    case (.dictionary(let k1, let v1, let xs), .dictionary(let k2, let v2, let ys)):
        return k1 == k2 && v1 == v2 && xs.count == ys.count
            && zip(xs, ys).allSatisfy { identical($0.key, $1.key) && identical($0.value, $1.value) }
    case (.structure(let xs), .structure(let ys)):
        return xs.count == ys.count && zip(xs, ys).allSatisfy { identical($0, $1) }
    default:
        return a == b
    }
}

/// A short text form of a value for check output: at most `limit` characters.
func brief(_ value: DBusValue, limit: Int = 80) -> String {
    let text = value.description
    guard text.count > limit else { return text }
    return String(text.prefix(limit)) + "…"
}
