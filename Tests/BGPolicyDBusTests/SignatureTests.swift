import Testing

@testable import BGPolicyDBus

@Suite("Signatures and names are validated as the specification says")
struct SignatureTests {
    static let validSignatures: [String] = [
        "", "y", "b", "n", "q", "i", "u", "x", "t", "d", "s", "o", "g", "h", "v",
        "ai", "aai", "as", "av", "a{sv}", "a{ya(iv)}", "a{oa{sa{sv}}}", "(i)", "(ii)", "((i))", "(a{sv}as)", "a(sv)",
        "ysa{sv}", "sa{sv}as", "a{yv}", "a{bv}", "a{nv}", "a{qv}", "a{iv}", "a{uv}", "a{xv}", "a{tv}", "a{dv}", "a{ov}",
        "a{gv}", "a{hv}", "aa{sv}", "vvv",
        String(repeating: "a", count: 32) + "i",
        String(repeating: "(", count: 32) + "i" + String(repeating: ")", count: 32),
        String(repeating: "a", count: 32) + "{sv}",  // the dictionary's own array is the 32nd
        String(repeating: "y", count: 255),
        "(" + String(repeating: "y", count: 253) + ")",
    ]

    @Test("valid signatures parse, and print back as the same text", arguments: validSignatures)
    func valid(_ text: String) throws {
        let signature = try Signature(text)
        #expect(signature.rawValue == text)
        #expect(signature.types.map(\.signature).joined() == text)
        #expect(try Signature(types: signature.types) == signature)
    }

    static let invalidSignatures: [(String, String)] = [
        ("empty struct", "()"),
        ("empty struct in an array", "a()"),
        ("variant as a dictionary key", "a{vs}"),
        ("struct as a dictionary key", "a{(i)s}"),
        ("array as a dictionary key", "a{ais}"),
        ("dictionary entry outside an array", "{sv}"),
        ("dictionary entry in a struct", "({sv})"),
        ("dictionary entry with one type", "a{s}"),
        ("dictionary entry with three types", "a{svs}"),
        ("empty dictionary entry", "a{}"),
        ("unclosed dictionary entry", "a{sv"),
        ("unclosed struct", "(i"),
        ("unclosed nested struct", "((i)"),
        ("unopened struct", "i)"),
        ("unopened dictionary entry", "sv}"),
        ("lone array", "a"),
        ("array at the end", "ia"),
        ("array of nothing in a struct", "(a)"),
        ("256 bytes", String(repeating: "y", count: 256)),
        ("33 nested arrays", String(repeating: "a", count: 33) + "i"),
        ("33 nested structs", String(repeating: "(", count: 33) + "i" + String(repeating: ")", count: 33)),
        ("33 arrays counting the dictionary's", String(repeating: "a", count: 33) + "{sv}"),
        ("32 structs around a dictionary", "a" + String(repeating: "(", count: 32) + "a{sv}" + String(repeating: ")", count: 32)),
        ("unknown code z", "z"),
        ("unknown code after valid types", "iiz"),
        ("struct code r", "r"),
        ("dict entry code e", "e"),
        ("space", "a s"),
        ("NUL byte", "i\u{0}i"),
        ("non-ASCII", "é"),
    ]

    @Test("invalid signatures are rejected with invalidSignature", arguments: invalidSignatures.map { $0.1 })
    func invalid(_ text: String) {
        do {
            let parsed = try Signature(text)
            Issue.record("\"\(text)\" parsed as \(parsed.types)")
        } catch {
            guard case .invalidSignature(let got, let reason) = error else {
                Issue.record("expected invalidSignature, got \(error)")
                return
            }
            #expect(got == text)
            #expect(!reason.isEmpty)
        }
    }

    @Test("the limits are the specification's")
    func limits() {
        #expect(Signature.maximumLength == 255)
        #expect(Signature.maximumArrayNesting == 32)
        #expect(Signature.maximumStructNesting == 32)
        #expect(Signature.empty.types.isEmpty)
    }

    static let singleTypes: [String] = [
        "y", "b", "n", "q", "i", "u", "x", "t", "d", "s", "o", "g", "h", "v", "ay", "aav", "a{sv}", "a{ya(iv)}", "(iso)",
        "((y)(a{tb}))", "a(ia{s(vv)})",
    ]

    @Test("DBusType(signature:) parses one complete type and .signature prints it back", arguments: singleTypes)
    func singleTypeRoundTrip(_ text: String) throws {
        let type = try DBusType(signature: text)
        #expect(type.signature == text)
        #expect(type.description == text)
        #expect(try Signature(text).singleType == type)
    }

    @Test("DBusType(signature:) builds the expected structure")
    func typeStructure() throws {
        #expect(try DBusType(signature: "a{sv}") == .dictionary(key: .string, value: .variant))
        #expect(try DBusType(signature: "a{ya(iv)}") == .dictionary(key: .byte, value: .array(.structure([.int32, .variant]))))
        #expect(try DBusType(signature: "aai") == .array(.array(.int32)))
        #expect(try DBusType(signature: "(sa(ob))") == .structure([.string, .array(.structure([.objectPath, .boolean]))]))
        #expect(try Signature("sa{sv}as").types == [.string, .dictionary(key: .string, value: .variant), .array(.string)])
    }

    @Test("DBusType(signature:) rejects anything but exactly one complete type", arguments: ["", "ii", "a{sv}s", "()", "a", "z"])
    func notOneType(_ text: String) {
        #expect(throws: DBusError.self) { try DBusType(signature: text) }
    }

    @Test("Signature(types:) rejects types that break the limits, rather than trapping")
    func typesBreakingLimits() {
        var deep = DBusType.int32
        for _ in 0..<33 { deep = .array(deep) }
        #expect(throws: DBusError.self) { try Signature(types: [deep]) }
        #expect(throws: DBusError.self) { try Signature(types: [.structure([])]) }
        #expect(throws: DBusError.self) { try Signature(types: [.dictionary(key: .variant, value: .string)]) }
        #expect(throws: DBusError.self) { try Signature(types: Array(repeating: .byte, count: 256)) }
        #expect((try? Signature(types: Array(repeating: .byte, count: 255)))?.types.count == 255)
    }

    @Test("basic and fixed types are classified as the specification says")
    func classification() {
        let basic: [DBusType] = [.byte, .boolean, .int16, .uint16, .int32, .uint32, .int64, .uint64, .double, .string, .objectPath, .signature, .unixFD]
        for type in basic { #expect(type.isBasic, "\(type)") }
        for type: DBusType in [.variant, .array(.byte), .dictionary(key: .string, value: .variant), .structure([.byte])] {
            #expect(!type.isBasic, "\(type)")
            #expect(!type.isFixed, "\(type)")
        }
        for type: DBusType in [.string, .objectPath, .signature] { #expect(!type.isFixed, "\(type)") }
        for type: DBusType in [.byte, .boolean, .int16, .uint16, .int32, .uint32, .int64, .uint64, .double, .unixFD] {
            #expect(type.isFixed, "\(type)")
        }
    }
}

extension SignatureTests {
    /// Every type of up to three levels built from a few of each kind, with empty structs and
    /// container keys among them.
    static func types(depth: Int) -> [DBusType] {
        let leaves: [DBusType] = [.byte, .string, .unixFD, .variant]
        guard depth > 0 else { return leaves }
        let inner = types(depth: depth - 1)
        let some = Array(inner.prefix(6)) + [.structure([]), .array(.structure([]))]
        var out = leaves
        for t in some {
            out.append(.array(t))
            out.append(.structure([t]))
            out.append(.structure([.int32, t]))
            for key in [DBusType.string, .int32, .variant, .array(.byte), .structure([.byte])] {
                out.append(.dictionary(key: key, value: t))
            }
        }
        out.append(.structure([]))
        return out
    }

    /// `validate` tests types on themselves (`isWellFormed`) and asks the parser only for the
    /// words of a refusal: the two must agree on every type within the limits.
    @Test("isWellFormed agrees with the signature parser")
    func wellFormedAgreesWithTheParser() {
        var accepted = 0
        var refused = 0
        for type in Self.types(depth: 3) {
            let parsed = (try? Signature(types: [type])) != nil
            #expect(type.isWellFormed == parsed, "\(type.signature)")
            if parsed { accepted += 1 } else { refused += 1 }
        }
        // 69 types: 34 accepted, 35 refused.
        #expect(accepted >= 30 && refused >= 30, "\(accepted) accepted, \(refused) refused")
    }
}

@Suite("Bus, interface, member and error names, and object paths")
struct NameValidationTests {
    static let element255 = "a" + String(repeating: "b", count: 252) + ".c"  // 255 bytes
    static let element256 = "a" + String(repeating: "b", count: 253) + ".c"  // 256 bytes

    static let busNames: [(String, Bool)] = [
        ("org.bgpolicy.Agent1", true),
        ("org.freedesktop.DBus", true),
        ("a.b", true),
        ("_a._b", true),
        ("org.bg-policy.Agent", true),
        ("-a.b", true),
        (":1.42", true),
        (":1.0.3", true),
        (":a-b.c_d", true),
        (":1a.2b", true),
        (element255, true),
        ("", false),
        ("org", false),
        ("org.", false),
        (".org.bgpolicy", false),
        ("org..bgpolicy", false),
        ("org.1bgpolicy", false),
        ("1org.bgpolicy", false),
        ("org.bgpolicy!", false),
        ("org.bg policy", false),
        ("org.bgpölicy", false),
        (":", false),
        (":1", false),
        (":.1", false),
        (":1.", false),
        ("::1.2", false),
        (element256, false),
    ]

    @Test("bus names", arguments: busNames)
    func busName(_ name: String, _ valid: Bool) {
        #expect(DBusNames.isValidBusName(name) == valid, "\"\(name)\"")
    }

    @Test("unique names start with a colon")
    func uniqueNames() {
        #expect(DBusNames.isUniqueName(":1.42"))
        #expect(!DBusNames.isUniqueName("org.bgpolicy.Agent1"))
        #expect(!DBusNames.isUniqueName(":1"))
    }

    static let interfaceNames: [(String, Bool)] = [
        ("org.bgpolicy.Agent1", true),
        ("a.b", true),
        ("_._", true),
        ("org.freedesktop.DBus.Properties", true),
        ("A9.B8.C_7", true),
        (element255, true),
        ("", false),
        ("org", false),
        ("org.", false),
        (".org", false),
        ("org..a", false),
        ("org.1a", false),
        ("1org.a", false),
        ("org.bg-policy", false),  // hyphens are for bus names only
        (":1.2", false),
        ("org.a/b", false),
        ("org.ä", false),
        (element256, false),
    ]

    @Test("interface names", arguments: interfaceNames)
    func interfaceName(_ name: String, _ valid: Bool) {
        #expect(DBusNames.isValidInterface(name) == valid, "\"\(name)\"")
    }

    @Test("error names follow the interface rules", arguments: interfaceNames)
    func errorName(_ name: String, _ valid: Bool) {
        #expect(DBusNames.isValidErrorName(name) == valid, "\"\(name)\"")
    }

    static let memberNames: [(String, Bool)] = [
        ("Get", true),
        ("_private", true),
        ("a1", true),
        ("PropertiesChanged", true),
        ("A", true),
        (String(repeating: "m", count: 255), true),
        ("", false),
        ("1a", false),
        ("9", false),
        ("Get.All", false),
        ("Get-All", false),
        ("Get All", false),
        ("Gét", false),
        (String(repeating: "m", count: 256), false),
    ]

    @Test("member names", arguments: memberNames)
    func memberName(_ name: String, _ valid: Bool) {
        #expect(DBusNames.isValidMember(name) == valid, "\"\(name)\"")
    }

    static let objectPaths: [(String, Bool)] = [
        ("/", true),
        ("/org", true),
        ("/org/bgpolicy/Agent1", true),
        ("/_/a_b/C9", true),
        ("/1", true),  // elements may start with a digit
        ("/0/1/2", true),
        ("/" + String(repeating: "p", count: 300), true),  // no length limit for paths
        ("", false),
        ("org", false),
        ("org/bgpolicy", false),
        ("/org/", false),  // trailing slash
        ("//", false),
        ("//org", false),  // double slash at the start
        ("/org//bgpolicy", false),  // double slash
        ("/org/bg-policy", false),
        ("/org/bg.policy", false),
        ("/org/bg policy", false),
        ("/org/bgpölicy", false),
        ("/org/*", false),
    ]

    @Test("object paths", arguments: objectPaths)
    func objectPath(_ text: String, _ valid: Bool) {
        #expect(ObjectPath.isValid(text) == valid, "\"\(text)\"")
        #expect(((try? ObjectPath(text)) != nil) == valid, "\"\(text)\"")
        if !valid {
            #expect(throws: DBusError.invalidName(text, kind: "object path")) { try ObjectPath(text) }
        }
    }

    @Test("object path descendants")
    func descendants() throws {
        let agent = try ObjectPath("/org/bgpolicy/Agent1")
        #expect(agent.isDescendant(of: .root))
        #expect(agent.isDescendant(of: try ObjectPath("/org/bgpolicy")))
        #expect(agent.isDescendant(of: agent))
        #expect(!agent.isDescendant(of: try ObjectPath("/org/bgpol")), "a prefix that is not a whole element")
        #expect(!(try ObjectPath("/org")).isDescendant(of: agent))
    }

    @Test("match rules validate their names and quote their values")
    func matchRules() throws {
        let rule = MatchRule(
            sender: "org.bgpolicy.Agent1", interface: "org.bgpolicy.Agent1", member: "Changed", path: try ObjectPath("/a"),
            arguments: [1: "it's", 0: "x"])
        try rule.validate()
        #expect(
            rule.text
                == "type='signal',sender='org.bgpolicy.Agent1',interface='org.bgpolicy.Agent1',member='Changed',path='/a',arg0='x',arg1='it'\\''s'")
        #expect(throws: DBusError.self) { try MatchRule(sender: "not a name").validate() }
        #expect(throws: DBusError.self) { try MatchRule(interface: "nodots").validate() }
        #expect(throws: DBusError.self) { try MatchRule(member: "a.b").validate() }
        #expect(throws: DBusError.self) { try MatchRule(path: .root, pathNamespace: .root).validate() }
        #expect(throws: DBusError.self) { try MatchRule(arguments: [64: "x"]).validate() }
        #expect(throws: DBusError.self) { try MatchRule(arguments: [0: "a\u{0}b"]).validate() }
        #expect(MatchRule().text == "type='signal'")
    }
}
