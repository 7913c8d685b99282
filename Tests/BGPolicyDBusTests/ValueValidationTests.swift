import Glibc
import BGPolicyTestSupport
import Testing

@testable import BGPolicyDBus

/// A value the writer must refuse, named for the test report.
struct InvalidValueCase: Sendable, CustomTestStringConvertible {
    let name: String
    let value: DBusValue
    var testDescription: String { name }
}

enum InvalidValues {
    static func nestedStructs(_ depth: Int) -> DBusValue {
        var value = DBusValue.int32(1)
        for _ in 0..<depth { value = .structure([value]) }
        return value
    }

    static let cases: [InvalidValueCase] = {
        var c: [InvalidValueCase] = []
        func add(_ name: String, _ value: DBusValue) { c.append(InvalidValueCase(name: name, value: value)) }
        add("array of int32 holding a string", .array(element: .int32, [.int32(1), .string("two")]))
        add("array of int32 holding an int64", .array(element: .int32, [.int64(1)]))
        add("array of variants holding a bare int32", .array(element: .variant, [.int32(1)]))
        add("array of ai holding an au", .array(element: .array(.int32), [.array(element: .uint32, [])]))
        add(
            "a{sv} with an int32 key",
            .dictionary(key: .string, value: .variant, [DBusDictEntry(key: .int32(1), value: .variant(.int32(1)))]))
        add(
            "a{sv} with a bare value",
            .dictionary(key: .string, value: .variant, [DBusDictEntry(key: .string("k"), value: .int32(1))]))
        add("ai holding a variant", .array(element: .int32, [.variant(.int32(1))]))
        add("a{sv} whose value is a bare dictionary", .dictionary(key: .string, value: .variant, [
            DBusDictEntry(key: .string("k"), value: .dictionary(key: .string, value: .variant, []))]))
        add("a{vs}: a non-basic key type", .dictionary(key: .variant, value: .string, []))
        add("a{(i)s}: a struct key type", .dictionary(key: .structure([.int32]), value: .string, []))
        add("empty struct", .structure([]))
        add("empty struct in a variant", .variant(.structure([])))
        add("empty struct in a struct", .structure([.int32(1), .structure([])]))
        add("array whose element type is an empty struct", .array(element: .structure([]), []))
        add("variant of an array of empty structs", .variant(.array(element: .structure([]), [])))
        add("dictionary whose value type is an empty struct", .dictionary(key: .string, value: .structure([]), []))
        add("array of a{vs}", .array(element: .dictionary(key: .variant, value: .string), []))
        add("string with NUL", .string("a\u{0}b"))
        add("string with only NUL", .string("\u{0}"))
        add("NUL in an array element", .array(element: .string, [.string("ok"), .string("no\u{0}")]))
        add(
            "NUL in a dictionary key",
            .dictionary(key: .string, value: .int32, [DBusDictEntry(key: .string("k\u{0}"), value: .int32(1))]))
        add("NUL in a struct field", .structure([.string("\u{0}")]))
        add("NUL in a variant", .variant(.variant(.string("x\u{0}"))))
        add("65 nested variants", RoundTripTable.nestedVariants(65, innermost: .int32(1)))
        add("65 containers: 32 arrays, a variant, 32 arrays", RoundTripTable.nestedArrays(32, innermost: .variant(RoundTripTable.nestedArrays(32, innermost: .int32(1)))))
        add("33 nested arrays", RoundTripTable.nestedArrays(33, innermost: .int32(1)))
        add("33 nested structs", nestedStructs(33))
        add("33 nested structs in a variant", .variant(nestedStructs(33)))
        add("an empty array of 33-deep arrays", .array(element: RoundTripTable.nestedArrays(32, innermost: .int32(1)).type, []))
        add("a struct with a 256-byte signature", .structure(Array(repeating: .byte(0), count: 254)))
        add("a variant holding a 302-byte signature", .variant(.structure(Array(repeating: .byte(0), count: 300))))
        add("an array of 255-byte elements", .array(element: .structure(Array(repeating: .byte, count: 253)), []))
        return c
    }()
}

@Suite("Values are validated before they reach libdbus")
struct ValueValidationTests {
    static func call(_ body: [DBusValue]) -> Message {
        Message.methodCall(
            destination: "org.bgpolicy.Test", path: ObjectPath(checked: "/t"), interface: "org.bgpolicy.Test1", member: "M", body: body)
    }

    @Test("validate() rejects the value, and marshal() throws instead of reaching libdbus", arguments: InvalidValues.cases)
    func rejected(_ testCase: InvalidValueCase) throws {
        // libdbus aborts the process (or writes a message the bus rejects) on such values, so
        // marshal() is only tried once validate() has said no.
        let error = try #require(throws: DBusError.self) { try testCase.value.validate() }
        guard case .invalidValue(let reason) = error else {
            Issue.record("expected invalidValue, got \(error)")
            return
        }
        #expect(!reason.isEmpty)
        #expect(throws: DBusError.self) { try Self.call([testCase.value]).marshal() }
        // The same value inside a container is rejected too.
        #expect(throws: DBusError.self) { try DBusValue.array(element: .variant, [.variant(testCase.value)]).validate() }
    }

    @Test("the values at the limits are accepted, and libdbus agrees")
    func limitsAccepted() throws {
        let atLimits: [DBusValue] = [
            RoundTripTable.nestedVariants(64, innermost: .int32(1)),
            RoundTripTable.nestedArrays(32, innermost: .variant(RoundTripTable.nestedArrays(31, innermost: .int32(1)))),
            RoundTripTable.nestedArrays(32, innermost: .int32(1)),
            InvalidValues.nestedStructs(32),
            .structure(Array(repeating: .byte(0), count: 253)),
            .string(""),
        ]
        for value in atLimits {
            try value.validate()
            let decoded = try Message.demarshal(Self.call([value]).marshal())
            #expect(decoded.body == [value])
        }
    }

    @Test("a body whose signature is longer than 255 bytes is refused, though each value is fine")
    func bodySignatureTooLong() throws {
        let body = Array(repeating: DBusValue.int32(1), count: 256)
        for value in body { try value.validate() }
        #expect(throws: DBusError.self) { try Self.call(body).marshal() }
        let longest = Array(repeating: DBusValue.byte(1), count: 255)
        #expect(try Message.demarshal(Self.call(longest).marshal()).body == longest)
    }

    @Test("a file descriptor that is not open is refused without trapping", arguments: [Int32(-1), .max])
    func closedDescriptor(_ fd: Int32) throws {
        // Numbers no test can have open (a closed one could be reused by a parallel test at
        // once, and this UnixFD would then close it).
        #expect(throws: DBusError.self) { try Self.call([.unixFD(UnixFD(taking: fd))]).marshal() }
    }

    static func message(_ kind: Message.Kind, _ configure: (inout Message) -> Void) -> Message {
        var m = Message(kind: kind)
        configure(&m)
        return m
    }

    static let path = ObjectPath(checked: "/org/bgpolicy/Test")
    static let localPath = ObjectPath(checked: "/org/freedesktop/DBus/Local")

    static let badHeaders: [(String, Message)] = [
        ("method call with no member", message(.methodCall) { $0.path = path }),
        ("method call with no path", message(.methodCall) { $0.member = "M" }),
        ("signal with no interface", message(.signal) { $0.path = path; $0.member = "S" }),
        ("signal with no member", message(.signal) { $0.path = path; $0.interface = "org.bgpolicy.Test1" }),
        ("signal with no path", message(.signal) { $0.interface = "org.bgpolicy.Test1"; $0.member = "S" }),
        ("error with no name", message(.error) { $0.replySerial = 1 }),
        ("error with no reply serial", message(.error) { $0.errorName = "org.bgpolicy.Error.X" }),
        ("method return with no reply serial", message(.methodReturn) { _ in }),
        (
            "signal on the reserved interface org.freedesktop.DBus.Local",
            Message.signal(path: path, interface: "org.freedesktop.DBus.Local", member: "Disconnected")
        ),
        (
            "signal on the reserved path /org/freedesktop/DBus/Local",
            Message.signal(path: localPath, interface: "org.bgpolicy.Test1", member: "S")
        ),
        (
            "method call to the reserved interface",
            Message.methodCall(destination: nil, path: path, interface: "org.freedesktop.DBus.Local", member: "M")
        ),
        ("invalid member name", Message.methodCall(destination: nil, path: path, interface: nil, member: "1st")),
        ("invalid interface name", Message.methodCall(destination: nil, path: path, interface: "nodots", member: "M")),
        ("invalid destination", Message.methodCall(destination: "not a bus name", path: path, interface: nil, member: "M")),
        ("invalid sender", message(.signal) { $0.path = path; $0.interface = "a.b"; $0.member = "S"; $0.sender = "1.2" }),
        ("invalid error name", message(.error) { $0.replySerial = 1; $0.errorName = "Failed" }),
    ]

    @Test("encode() and marshal() refuse invalid headers instead of handing them to libdbus", arguments: 0..<badHeaders.count)
    func invalidHeaders(_ index: Int) {
        let (name, message) = Self.badHeaders[index]
        #expect(throws: DBusError.self, "\(name)") { try message.marshal() }
        #expect(throws: DBusError.self, "\(name)") { _ = try message.encode() }
    }

    @Test("a connection refuses invalid messages and values, and stays usable")
    func connectionRefuses() async throws {
        let bus = try PrivateBus()
        let connection = try await DBusConnection.connect(to: .address(bus.address))
        for (name, message) in Self.badHeaders where message.kind != .methodCall {
            #expect(throws: DBusError.self, "\(name)") { try connection.send(message) }
        }
        for (name, message) in Self.badHeaders where message.kind == .methodCall {
            await #expect(throws: DBusError.self, "\(name)") { _ = try await connection.call(message) }
        }
        #expect(throws: DBusError.self) {
            try connection.emitSignal(path: Self.path, interface: "org.bgpolicy.Test1", member: "S", body: [.string("a\u{0}")])
        }
        #expect(throws: DBusError.self) { try connection.emitSignal(path: Self.path, interface: "bad", member: "S") }
        #expect(throws: DBusError.self) {
            try connection.emitPropertiesChanged(path: Self.path, interface: "bad interface", changed: [:])
        }
        for testCase in InvalidValues.cases {
            // Only values that validate() refuses may be tried: the others would reach libdbus.
            guard (try? testCase.value.validate()) == nil else { continue }
            await #expect(throws: DBusError.self, "\(testCase.name)") {
                _ = try await connection.call(
                    destination: DBusConnection.busName, path: DBusConnection.busPath, interface: "org.freedesktop.DBus.Peer",
                    member: "Ping", [testCase.value])
            }
        }
        // Still connected and working.
        #expect(connection.isConnected)
        #expect(try await connection.busID().count == 32)
        connection.close()
    }
}

// MARK: Swift mapping

@Suite("Swift types map to D-Bus values and back")
struct SwiftMappingTests {
    static func roundTrip(_ value: DBusValue) throws -> DBusValue {
        let message = Message.methodCall(
            destination: nil, path: .root, interface: "org.bgpolicy.Test1", member: "M", body: [value])
        let body = try Message.demarshal(message.marshal()).body
        guard body.count == 1 else { throw DBusError.malformedMessage("body has \(body.count) values") }
        return body[0]
    }

    @Test("[String: Variant] round-trips and reads options by type")
    func variantDictionary() throws {
        let options: VariantDictionary = [
            "count": Variant(UInt32(3)), "name": Variant("bg"), "ratio": Variant(0.25), "tags": Variant(["a", "b"]),
            "nested": Variant(["inner": Variant(true)] as VariantDictionary),
        ]
        #expect(options.dbusValue.type.signature == "a{sv}")
        let back = try Self.roundTrip(options.dbusValue).decode(VariantDictionary.self)
        #expect(back == options)
        #expect(try back.optional("count", as: UInt32.self) == 3)
        #expect(try back.optional("tags", as: [String].self) == ["a", "b"])
        #expect(try back.optional("missing", as: String.self) == nil)
        #expect(try back["nested"]?.decode(VariantDictionary.self)["inner"]?.decode(Bool.self) == true)
        #expect(throws: DBusError.self) { try back.optional("count", as: String.self) }
    }

    @Test("[Int32] round-trips, including empty and extreme values")
    func int32Array() throws {
        for values: [Int32] in [[], [0], [.min, -1, 0, 1, .max]] {
            #expect(values.dbusValue == .array(element: .int32, values.map { .int32($0) }))
            #expect(try Self.roundTrip(values.dbusValue).decode([Int32].self) == values)
        }
    }

    @Test("[String: [UInt8]] round-trips")
    func bytesDictionary() throws {
        let value: [String: [UInt8]] = ["empty": [], "all": Array(0...255), "ünï": [0, 0, 7]]
        #expect(value.dbusValue.type.signature == "a{say}")
        #expect(try Self.roundTrip(value.dbusValue).decode([String: [UInt8]].self) == value)
    }

    @Test("every basic Swift type round-trips")
    func basicSwiftTypes() throws {
        #expect(try Self.roundTrip(UInt8.max.dbusValue).decode(UInt8.self) == .max)
        #expect(try Self.roundTrip(true.dbusValue).decode(Bool.self) == true)
        #expect(try Self.roundTrip(Int16.min.dbusValue).decode(Int16.self) == .min)
        #expect(try Self.roundTrip(UInt16.max.dbusValue).decode(UInt16.self) == .max)
        #expect(try Self.roundTrip(Int32.min.dbusValue).decode(Int32.self) == .min)
        #expect(try Self.roundTrip(UInt32.max.dbusValue).decode(UInt32.self) == .max)
        #expect(try Self.roundTrip(Int64.min.dbusValue).decode(Int64.self) == .min)
        #expect(try Self.roundTrip(UInt64.max.dbusValue).decode(UInt64.self) == .max)
        #expect(try Self.roundTrip((-0.0).dbusValue).decode(Double.self).bitPattern == (-0.0).bitPattern)
        #expect(try Self.roundTrip("ß".dbusValue).decode(String.self) == "ß")
        #expect(try Self.roundTrip(ObjectPath.root.dbusValue).decode(ObjectPath.self) == .root)
        #expect(try Self.roundTrip(Signature.empty.dbusValue).decode(Signature.self) == .empty)
        #expect(try Self.roundTrip(Variant(Int64(5)).dbusValue).decode(Variant.self).decode(Int64.self) == 5)
        #expect(try Self.roundTrip([[Int32(1)], []].dbusValue).decode([[Int32]].self) == [[1], []])
        #expect(try Self.roundTrip([UInt64(1): "one"].dbusValue).decode([UInt64: String].self) == [1: "one"])
    }

    @Test("decoding a UnixFD duplicates the descriptor, so both can be closed independently")
    func unixFDDecodeDuplicates() throws {
        let original = UnixFD(taking: dup(2))
        let decoded = try DBusValue.unixFD(original).decode(UnixFD.self)
        #expect(decoded.rawValue != original.rawValue)
        #expect(fcntl(decoded.rawValue, F_GETFD) >= 0)
    }

    static let mismatches: [(String, DBusValue, String, String)] = [
        ("Int32 from a string", .string("1"), "i", "s"),
        ("String from an int32", .int32(1), "s", "i"),
        ("UInt32 from an int32", .int32(1), "u", "i"),
        ("Bool from a byte", .byte(1), "b", "y"),
        ("[Int32] from [UInt32]", .array(element: .uint32, []), "ai", "au"),
        ("[Int32] from an int32", .int32(1), "ai", "i"),
        ("[String: Variant] from a{ss}", .dictionary(key: .string, value: .string, []), "a{sv}", "a{ss}"),
        ("[String: Variant] from as", .array(element: .string, []), "a{sv}", "as"),
        ("[String: [UInt8]] from a{sv}", .dictionary(key: .string, value: .variant, []), "a{say}", "a{sv}"),
        ("Variant from a string", .string("x"), "v", "s"),
    ]

    @Test("decoding the wrong type throws typeMismatch naming both types", arguments: 0..<mismatches.count)
    func wrongTypeThrows(_ index: Int) {
        let (_, value, expected, got) = Self.mismatches[index]
        let error: DBusError?
        switch expected {
        case "i": error = Self.decodeError(value, Int32.self)
        case "s": error = Self.decodeError(value, String.self)
        case "u": error = Self.decodeError(value, UInt32.self)
        case "b": error = Self.decodeError(value, Bool.self)
        case "ai": error = Self.decodeError(value, [Int32].self)
        case "a{sv}": error = Self.decodeError(value, VariantDictionary.self)
        case "a{say}": error = Self.decodeError(value, [String: [UInt8]].self)
        case "v": error = Self.decodeError(value, Variant.self)
        default: error = nil
        }
        #expect(error == .typeMismatch(expected: expected, got: got))
    }

    static func decodeError<T: DBusRepresentable>(_ value: DBusValue, _: T.Type) -> DBusError? {
        do {
            _ = try value.decode(T.self)
            return nil
        } catch {
            return error
        }
    }

    @Test("a container whose element does not decode throws typeMismatch for the element")
    func badElement() {
        // Declared as ai but holding a string: decode must throw, not trap.
        let value = DBusValue.array(element: .int32, [.int32(1), .string("two")])
        #expect(Self.decodeError(value, [Int32].self) == .typeMismatch(expected: "i", got: "s"))
    }

    @Test("argument lists decode by index, and report missing arguments")
    func argumentLists() throws {
        let body: [DBusValue] = [.string("a"), .int32(2)]
        #expect(body.signatureText == "si")
        try body.expect("si")
        #expect(throws: DBusError.typeMismatch(expected: "is", got: "si")) { try body.expect("is") }
        #expect(try body.decode(Int32.self, at: 1) == 2)
        #expect(throws: DBusError.self) { try body.decode(Int32.self, at: 2) }
        #expect(throws: DBusError.typeMismatch(expected: "i", got: "s")) { try body.decode(Int32.self, at: 0) }
    }
}

