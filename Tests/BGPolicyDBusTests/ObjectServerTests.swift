import Foundation
import FoundationXML
import Synchronization
import BGPolicyTestSupport
import Testing

@testable import BGPolicyDBus

/// An error a handler throws to choose its own D-Bus error.
struct AppError: DBusErrorConvertible {
    var dbusErrorName: String { "org.bgpolicy.Error.App" }
    var dbusErrorMessage: String { "the app said no" }
}

struct PlainError: Error {}

/// The state behind the test interface's properties.
final class TestModel: Sendable {
    let count = Mutex<UInt32>(7)
    let secret = Mutex<String>("")
    let calls = Recorder<String>()
}

/// A test interface with methods, properties of every access, and a signal.
enum TestObject {
    static let name = "org.bgpolicy.Test1"
    static let otherName = "org.bgpolicy.Test2"
    static let path = ObjectPath(checked: "/org/bgpolicy/Test")

    static let description = InterfaceDescription(
        name: name, documentation: "A test interface: <not> markup & -- no comment end.",
        methods: [
            .init(
                "Add", inputs: [.init("a", .int32, "the first"), .init("b", .int32, "the second")], outputs: [.init("sum", .int64, "a + b")],
                documentation: "Adds two numbers."),
            .init("Fail", inputs: [.init("how", .string)], documentation: "Throws the error named by how."),
            .init("Nothing", documentation: "Takes and returns nothing."),
            .init("Unsendable", outputs: [.init("text", .string)], documentation: "Returns a string with a NUL."),
        ],
        properties: [
            .init("Count", .uint32, access: .readwrite, documentation: "A counter."),
            .init("Name", .string, access: .read, emitsChanged: .const, documentation: "A constant."),
            .init("Secret", .string, access: .write, emitsChanged: .invalidates, documentation: "Write-only."),
            .init("Options", .dictionary(key: .string, value: .variant), documentation: "An a{sv} property."),
        ],
        signals: [
            .init("Changed", arguments: [.init("what", .string, "what changed"), .init("count", .uint32)], documentation: "Something changed."),
            .init("Poked", documentation: "No arguments."),
        ])

    static let otherDescription = InterfaceDescription(
        name: otherName, documentation: "A second interface.",
        methods: [.init("Other", outputs: [.init("answer", .string)], documentation: "Answers.")])

    static func interfaces(_ model: TestModel) -> [ExportedInterface] {
        let main = ExportedInterface(description)
            .method("Add") { call in
                model.calls.append("Add")
                let a = try call.arguments.decode(Int32.self, at: 0)
                let b = try call.arguments.decode(Int32.self, at: 1)
                return [.int64(Int64(a) + Int64(b))]
            }
            .method("Fail") { call in
                model.calls.append("Fail")
                switch try call.arguments.decode(String.self, at: 0) {
                case "remote": throw DBusError.remote(name: "org.bgpolicy.Error.Custom", message: "custom text ✓")
                case "convertible": throw AppError()
                case "mismatch": throw DBusError.typeMismatch(expected: "s", got: "i")
                case "usage": throw DBusError.usage("misused")
                default: throw PlainError()
                }
            }
            .method("Nothing") { _ in
                model.calls.append("Nothing")
                return []
            }
            .method("Unsendable") { _ in [.string("a\u{0}b")] }
            .property("Count", get: { .uint32(model.count.withLock { $0 }) }, set: { value, _ in
                let v = try value.decode(UInt32.self)
                if v == 666 { throw DBusError.remote(name: "org.bgpolicy.Error.Evil", message: "not that one") }
                model.count.withLock { $0 = v }
            })
            .property("Name", get: { .string("constant") })
            .property("Secret", get: { .string("unused") }, set: { value, _ in model.secret.withLock { $0 = (try? value.decode(String.self)) ?? "" } })
            .property("Options", get: { ["a": Variant(Int32(1))].dbusValue })
        let other = ExportedInterface(otherDescription).method("Other") { _ in [.string("other")] }
        return [main, other]
    }

    /// A detached server with the test object exported at `path` and a child at `path/Child/Leaf`.
    static func server(_ model: TestModel = TestModel()) throws -> ObjectServer {
        let server = ObjectServer.detached()
        try server.export(interfaces(model), at: path)
        try server.export([ExportedInterface(otherDescription).method("Other") { _ in [.string("leaf")] }], at: ObjectPath(checked: "/org/bgpolicy/Test/Child/Leaf"))
        try server.export([ExportedInterface(otherDescription).method("Other") { _ in [.string("sibling")] }], at: ObjectPath(checked: "/org/bgpolicy/Test/Sibling"))
        return server
    }

    static func call(
        _ interface: String?, _ member: String, _ body: [DBusValue] = [], path: String = "/org/bgpolicy/Test", noReply: Bool = false
    ) -> Message {
        var m = Message.methodCall(destination: ":1.1", path: ObjectPath(checked: path), interface: interface, member: member, body: body)
        m.sender = ":1.99"
        m.serial = 5
        m.noReplyExpected = noReply
        return m
    }
}

extension Message {
    /// The reply's error name, or nil for a successful reply.
    var errorNameIfError: String? { kind == .error ? errorName : nil }
    var errorText: String { (asError?.message) ?? "" }
}

@Suite("The object server dispatches calls (detached, no bus)")
struct ObjectServerTests {
    static let properties = ObjectServer.propertiesInterface

    func reply(_ server: ObjectServer, _ message: Message) async throws -> Message {
        try #require(await server.handle(message))
    }

    @Test("a call reaches its handler and the reply answers it")
    func success() async throws {
        let server = try TestObject.server()
        let r = try await reply(server, TestObject.call(TestObject.name, "Add", [.int32(.max), .int32(1)]))
        #expect(r.kind == .methodReturn)
        #expect(r.body == [.int64(Int64(Int32.max) + 1)])
        #expect(r.replySerial == 5)
        #expect(r.destination == ":1.99")
    }

    @Test("routing failures use the default freedesktop error names")
    func defaultErrorNames() async throws {
        let server = try TestObject.server()
        let noObject = try await reply(server, TestObject.call(TestObject.name, "Add", [.int32(1), .int32(2)], path: "/nowhere"))
        #expect(noObject.errorNameIfError == "org.freedesktop.DBus.Error.UnknownObject")
        #expect(noObject.errorText.contains("/nowhere"))
        let noInterface = try await reply(server, TestObject.call("org.bgpolicy.Missing", "Add", [.int32(1), .int32(2)]))
        #expect(noInterface.errorNameIfError == "org.freedesktop.DBus.Error.UnknownInterface")
        #expect(noInterface.errorText.contains("org.bgpolicy.Missing"))
        let noMethod = try await reply(server, TestObject.call(TestObject.name, "Subtract"))
        #expect(noMethod.errorNameIfError == "org.freedesktop.DBus.Error.UnknownMethod")
        #expect(noMethod.errorText.contains("Subtract"))
        let noMethodAnywhere = try await reply(server, TestObject.call(nil, "Subtract"))
        #expect(noMethodAnywhere.errorNameIfError == "org.freedesktop.DBus.Error.UnknownMethod")
    }

    @Test("routing failures use the configured errorNames")
    func customErrorNames() async throws {
        let server = try TestObject.server()
        var names = ObjectServer.ErrorNames()
        names.unknownObject = "org.bgpolicy.Error.NoObject"
        names.unknownInterface = "org.bgpolicy.Error.NoInterface"
        names.unknownMethod = "org.bgpolicy.Error.NoMethod"
        names.unknownProperty = "org.bgpolicy.Error.NoProperty"
        names.propertyReadOnly = "org.bgpolicy.Error.ReadOnly"
        names.invalidArgs = "org.bgpolicy.Error.BadArgs"
        names.failed = "org.bgpolicy.Error.Failed"
        server.errorNames = names
        #expect(server.errorNames.unknownObject == "org.bgpolicy.Error.NoObject")

        let cases: [(Message, String)] = [
            (TestObject.call(TestObject.name, "Add", path: "/nowhere"), names.unknownObject),
            (TestObject.call("org.bgpolicy.Missing", "Add"), names.unknownInterface),
            (TestObject.call(TestObject.name, "Subtract"), names.unknownMethod),
            (TestObject.call(nil, "Subtract"), names.unknownMethod),
            (TestObject.call(TestObject.name, "Add", [.string("x")]), names.invalidArgs),
            (TestObject.call(Self.properties, "Get", [.string(TestObject.name), .string("Nope")]), names.unknownProperty),
            (TestObject.call(Self.properties, "Get", [.string("org.bgpolicy.Missing"), .string("Count")]), names.unknownInterface),
            (TestObject.call(Self.properties, "Set", [.string(TestObject.name), .string("Name"), .variant(.string("x"))]), names.propertyReadOnly),
            (TestObject.call(Self.properties, "Set", [.string(TestObject.name), .string("Count"), .variant(.string("x"))]), names.invalidArgs),
            (TestObject.call(Self.properties, "Frobnicate"), names.unknownMethod),
            (TestObject.call(TestObject.name, "Fail", [.string("plain")]), names.failed),
            (TestObject.call(TestObject.name, "Fail", [.string("mismatch")]), names.invalidArgs),
        ]
        for (message, expected) in cases {
            let r = try await reply(server, message)
            #expect(r.errorNameIfError == expected, "\(message.interface ?? "-").\(message.member ?? "") → \(r.errorName ?? "success")")
        }
    }

    @Test("a wrong signature gives InvalidArgs naming both signatures", arguments: [
        [DBusValue.string("x")], [], [.int32(1)], [.int32(1), .int32(2), .int32(3)], [.uint32(1), .uint32(2)],
    ])
    func wrongSignature(_ body: [DBusValue]) async throws {
        let server = try TestObject.server()
        let model = TestModel()
        try server.export(TestObject.interfaces(model), at: ObjectPath(checked: "/counted"))
        let r = try await reply(server, TestObject.call(TestObject.name, "Add", body, path: "/counted"))
        #expect(r.errorNameIfError == "org.freedesktop.DBus.Error.InvalidArgs")
        #expect(r.errorText.contains("\"ii\""), "\(r.errorText)")
        #expect(r.errorText.contains("\"\(body.signatureText)\""), "\(r.errorText)")
        #expect(model.calls.count == 0, "the handler must not run")
    }

    @Test("with the interface omitted, the method is found in whichever interface has it")
    func interfaceOmitted() async throws {
        let server = try TestObject.server()
        let add = try await reply(server, TestObject.call(nil, "Add", [.int32(2), .int32(3)]))
        #expect(add.body == [.int64(5)])
        let other = try await reply(server, TestObject.call(nil, "Other"))
        #expect(other.body == [.string("other")])
        let leaf = try await reply(server, TestObject.call(nil, "Other", path: "/org/bgpolicy/Test/Child/Leaf"))
        #expect(leaf.body == [.string("leaf")])
    }

    /// Admin1 and Scheduler1 both have Explain, with different arguments: a call that names no
    /// interface goes to the one whose method takes its arguments, not to whichever a
    /// dictionary lists first (which changes from one run of the agent to the next).
    @Test("with the interface omitted and the method in two interfaces, the arguments choose")
    func interfaceOmittedTwoHaveIt() async throws {
        func twin(_ name: String, _ inputs: [InterfaceDescription.Argument]) -> ExportedInterface {
            ExportedInterface(InterfaceDescription(
                name: name, documentation: "A twin.",
                methods: [.init("Say", inputs: inputs, outputs: [.init("who", .string)], documentation: "Says who.")]))
                .method("Say") { _ in [.string(name)] }
        }
        let server = ObjectServer.detached()
        try server.export([twin("org.bgpolicy.TwinB", [.init("a", .string), .init("b", .string)]),
                           twin("org.bgpolicy.TwinA", [.init("a", .string)])], at: ObjectPath(checked: "/twins"))
        let one = try await reply(server, TestObject.call(nil, "Say", [.string("x")], path: "/twins"))
        #expect(one.body == [.string("org.bgpolicy.TwinA")])
        let two = try await reply(server, TestObject.call(nil, "Say", [.string("x"), .string("y")], path: "/twins"))
        #expect(two.body == [.string("org.bgpolicy.TwinB")])
        let neither = try await reply(server, TestObject.call(nil, "Say", [.int32(1)], path: "/twins"))
        #expect(neither.errorNameIfError == "org.freedesktop.DBus.Error.InvalidArgs")
        #expect(neither.errorText.contains("org.bgpolicy.TwinA.Say"), "\(neither.errorText)")
    }

    @Test("Properties.Get, GetAll and Set")
    func properties() async throws {
        let model = TestModel()
        let server = ObjectServer.detached()
        try server.export(TestObject.interfaces(model), at: TestObject.path)
        let p = Self.properties, i = TestObject.name

        let get = try await reply(server, TestObject.call(p, "Get", [.string(i), .string("Count")]))
        #expect(get.body == [.variant(.uint32(7))])

        let set = try await reply(server, TestObject.call(p, "Set", [.string(i), .string("Count"), .variant(.uint32(12))]))
        #expect(set.kind == .methodReturn)
        #expect(set.body.isEmpty)
        #expect(model.count.withLock { $0 } == 12)
        #expect(try await reply(server, TestObject.call(p, "Get", [.string(i), .string("Count")])).body == [.variant(.uint32(12))])

        let all = try await reply(server, TestObject.call(p, "GetAll", [.string(i)]))
        #expect(all.signature == "a{sv}")
        let dict = try all.body.decode(VariantDictionary.self, at: 0)
        #expect(Set(dict.keys) == ["Count", "Name", "Options"], "write-only properties are left out")
        #expect(dict["Count"] == Variant(UInt32(12)))
        #expect(dict["Name"] == Variant("constant"))
        #expect(try dict["Options"]?.decode(VariantDictionary.self) == ["a": Variant(Int32(1))])

        let otherAll = try await reply(server, TestObject.call(p, "GetAll", [.string(TestObject.otherName)]))
        #expect(otherAll.body == [.dictionary(key: .string, value: .variant, [])])

        // With no interface named (the D-Bus specification allows it for Get and Set), the
        // property is found on whichever interface has it.
        let anyGet = try await reply(server, TestObject.call(p, "Get", [.string(""), .string("Count")]))
        #expect(anyGet.body == [.variant(.uint32(12))])
        let anySet = try await reply(server, TestObject.call(p, "Set", [.string(""), .string("Count"), .variant(.uint32(13))]))
        #expect(anySet.kind == .methodReturn)
        #expect(model.count.withLock { $0 } == 13)
        let anyReadOnly = try await reply(server, TestObject.call(p, "Set", [.string(""), .string("Name"), .variant(.string("x"))]))
        #expect(anyReadOnly.errorNameIfError == "org.freedesktop.DBus.Error.PropertyReadOnly")
        #expect(anyReadOnly.errorText.contains("\(i).Name"), "\(anyReadOnly.errorText)")
        let anyUnknown = try await reply(server, TestObject.call(p, "Get", [.string(""), .string("Nope")]))
        #expect(anyUnknown.errorNameIfError == "org.freedesktop.DBus.Error.UnknownProperty")
        #expect(anyUnknown.errorText.contains("Nope"))
        let anyAll = try await reply(server, TestObject.call(p, "GetAll", [.string("")]))
        #expect(anyAll.errorNameIfError == "org.freedesktop.DBus.Error.UnknownInterface", "GetAll names its interface")
        #expect(anyAll.errorText.contains("GetAll needs an interface name"), "\(anyAll.errorText)")

        // The write-only property can be set but not read.
        let secret = try await reply(server, TestObject.call(p, "Set", [.string(i), .string("Secret"), .variant(.string("s3"))]))
        #expect(secret.kind == .methodReturn)
        #expect(model.secret.withLock { $0 } == "s3")
        let readSecret = try await reply(server, TestObject.call(p, "Get", [.string(i), .string("Secret")]))
        #expect(readSecret.kind == .error)
    }

    @Test("Properties errors: read-only, wrong type, unknown property or interface, bad arguments")
    func propertyErrors() async throws {
        let model = TestModel()
        let server = ObjectServer.detached()
        try server.export(TestObject.interfaces(model), at: TestObject.path)
        let p = Self.properties, i = TestObject.name

        let readOnly = try await reply(server, TestObject.call(p, "Set", [.string(i), .string("Name"), .variant(.string("x"))]))
        #expect(readOnly.errorNameIfError == "org.freedesktop.DBus.Error.PropertyReadOnly")
        #expect(readOnly.errorText.contains("Name"))

        let wrongType = try await reply(server, TestObject.call(p, "Set", [.string(i), .string("Count"), .variant(.int32(1))]))
        #expect(wrongType.errorNameIfError == "org.freedesktop.DBus.Error.InvalidArgs")
        #expect(wrongType.errorText.contains("\"u\"") && wrongType.errorText.contains("\"i\""), "\(wrongType.errorText)")
        #expect(model.count.withLock { $0 } == 7, "a refused Set changes nothing")

        let unknown = try await reply(server, TestObject.call(p, "Get", [.string(i), .string("Nope")]))
        #expect(unknown.errorNameIfError == "org.freedesktop.DBus.Error.UnknownProperty")
        #expect(unknown.errorText.contains("Nope"))
        let unknownSet = try await reply(server, TestObject.call(p, "Set", [.string(i), .string("Nope"), .variant(.int32(1))]))
        #expect(unknownSet.errorNameIfError == "org.freedesktop.DBus.Error.UnknownProperty")

        for member in ["Get", "GetAll", "Set"] {
            let body: [DBusValue] =
                member == "GetAll" ? [.string("org.bgpolicy.Missing")]
                : member == "Get" ? [.string("org.bgpolicy.Missing"), .string("Count")]
                : [.string("org.bgpolicy.Missing"), .string("Count"), .variant(.uint32(1))]
            let r = try await reply(server, TestObject.call(p, member, body))
            #expect(r.errorNameIfError == "org.freedesktop.DBus.Error.UnknownInterface", "\(member)")
        }

        let badArgs: [(String, [DBusValue], String)] = [
            ("Get", [.string(i)], "\"ss\""),
            ("Get", [.string(i), .int32(1)], "\"ss\""),
            ("GetAll", [], "\"s\""),
            ("Set", [.string(i), .string("Count"), .uint32(1)], "\"ssv\""),
        ]
        for (member, body, expected) in badArgs {
            let r = try await reply(server, TestObject.call(p, member, body))
            #expect(r.errorNameIfError == "org.freedesktop.DBus.Error.InvalidArgs", "\(member)(\(body.signatureText))")
            #expect(r.errorText.contains(expected), "\(r.errorText)")
        }

        // A setter's own error passes through unchanged.
        let evil = try await reply(server, TestObject.call(p, "Set", [.string(i), .string("Count"), .variant(.uint32(666))]))
        #expect(evil.asError == .remote(name: "org.bgpolicy.Error.Evil", message: "not that one"))

        // Properties on a path with nothing there.
        let nowhere = try await reply(server, TestObject.call(p, "Get", [.string(i), .string("Count")], path: "/nowhere"))
        #expect(nowhere.errorNameIfError == "org.freedesktop.DBus.Error.UnknownObject")
    }

    @Test("a getter that produces the wrong type fails Get and GetAll rather than sending it")
    func getterOfWrongType() async throws {
        let description = InterfaceDescription(
            name: "org.bgpolicy.Broken1", documentation: "",
            properties: [.init("Level", .int32, documentation: "declared int32")])
        let server = ObjectServer.detached()
        try server.export([ExportedInterface(description).property("Level", get: { .string("not an int") })], at: TestObject.path)
        let get = try await reply(server, TestObject.call(Self.properties, "Get", [.string("org.bgpolicy.Broken1"), .string("Level")]))
        #expect(get.errorNameIfError == "org.freedesktop.DBus.Error.Failed")
        let all = try await reply(server, TestObject.call(Self.properties, "GetAll", [.string("org.bgpolicy.Broken1")]))
        #expect(all.errorNameIfError == "org.freedesktop.DBus.Error.Failed", "GetAll sent \(all.body)")
    }

    @Test("Introspect describes the interfaces, members, argument types, children and standard interfaces")
    func introspect() async throws {
        let server = try TestObject.server()
        let r = try await reply(server, TestObject.call(ObjectServer.introspectableInterface, "Introspect"))
        let xml = try #require(r.body.first.map { try $0.decode(String.self) })
        #expect(xml.hasPrefix("<!DOCTYPE node PUBLIC \"-//freedesktop//DTD D-BUS Object Introspection 1.0//EN\""))
        for fragment in [
            "<interface name=\"org.bgpolicy.Test1\">",
            "<interface name=\"org.bgpolicy.Test2\">",
            "<interface name=\"org.freedesktop.DBus.Properties\">",
            "<interface name=\"org.freedesktop.DBus.Introspectable\">",
            "<interface name=\"org.freedesktop.DBus.Peer\">",
            "<method name=\"Add\">",
            "<arg name=\"a\" type=\"i\" direction=\"in\"/>",
            "<arg name=\"b\" type=\"i\" direction=\"in\"/>",
            "<arg name=\"sum\" type=\"x\" direction=\"out\"/>",
            "<method name=\"Nothing\"/>",
            "<signal name=\"Changed\">",
            "<arg name=\"what\" type=\"s\"/>",
            "<arg name=\"count\" type=\"u\"/>",
            "<signal name=\"Poked\"/>",
            "<property name=\"Count\" type=\"u\" access=\"readwrite\"/>",
            "<property name=\"Name\" type=\"s\" access=\"read\">",
            "<annotation name=\"org.freedesktop.DBus.Property.EmitsChangedSignal\" value=\"const\"/>",
            "<property name=\"Secret\" type=\"s\" access=\"write\">",
            "<property name=\"Options\" type=\"a{sv}\" access=\"read\"/>",
            "<arg name=\"props\" type=\"a{sv}\" direction=\"out\"/>",
            "<node name=\"Child\"/>",
            "<node name=\"Sibling\"/>",
            "Adds two numbers.",
            "@a: the first",
        ] {
            #expect(xml.contains(fragment), "missing \(fragment)")
        }
        #expect(!xml.contains("<node name=\"Leaf\"/>"), "only direct children are listed")
        try Self.expectWellFormed(xml)

        // Interface omitted, as busctl and gdbus sometimes send it.
        let bare = try await reply(server, TestObject.call(nil, "Introspect"))
        #expect(bare.body == r.body)
    }

    @Test("Introspect on a path between objects lists the children and no interfaces")
    func introspectIntermediate() async throws {
        let server = try TestObject.server()
        for (path, child) in [("/", "org"), ("/org", "bgpolicy"), ("/org/bgpolicy", "Test"), ("/org/bgpolicy/Test/Child", "Leaf")] {
            let r = try await reply(server, TestObject.call(ObjectServer.introspectableInterface, "Introspect", path: path))
            let xml = try r.body.decode(String.self, at: 0)
            #expect(xml.contains("<node name=\"\(child)\"/>"), "\(path): \(xml)")
            #expect(!xml.contains("<interface"), "\(path) has no object of its own")
            try Self.expectWellFormed(xml)
        }
        let leaf = try await reply(server, TestObject.call(nil, "Introspect", path: "/org/bgpolicy/Test/Child/Leaf"))
        let leafXML = try leaf.body.decode(String.self, at: 0)
        #expect(leafXML.contains("<interface name=\"org.bgpolicy.Test2\">"))
        #expect(!leafXML.contains("<node name="))
        let withArgs = try await reply(server, TestObject.call(ObjectServer.introspectableInterface, "Introspect", [.string("x")]))
        #expect(withArgs.errorNameIfError == "org.freedesktop.DBus.Error.InvalidArgs")
    }

    static func expectWellFormed(_ xml: String, sourceLocation: SourceLocation = #_sourceLocation) throws {
        let parser = XMLParser(data: Data(xml.utf8))
        let ok = parser.parse()
        #expect(ok, "not well-formed XML: \(String(describing: parser.parserError))\n\(xml)", sourceLocation: sourceLocation)
    }

    @Test("a call that expects no reply gets none, but its handler still runs")
    func noReplyExpected() async throws {
        let model = TestModel()
        let server = ObjectServer.detached()
        try server.export(TestObject.interfaces(model), at: TestObject.path)
        #expect(await server.handle(TestObject.call(TestObject.name, "Nothing", noReply: true)) == nil)
        #expect(model.calls.all == ["Nothing"])
        #expect(await server.handle(TestObject.call(TestObject.name, "Fail", [.string("plain")], noReply: true)) == nil)
        #expect(await server.handle(TestObject.call(TestObject.name, "Missing", noReply: true)) == nil)
        #expect(await server.handle(TestObject.call(TestObject.name, "Add", path: "/nowhere", noReply: true)) == nil)
        // Only method calls are answered.
        #expect(await server.handle(Message.signal(path: TestObject.path, interface: TestObject.name, member: "Changed")) == nil)
    }

    @Test("handler errors: remote and DBusErrorConvertible pass through; others become Failed or InvalidArgs", arguments: [
        ("remote", "org.bgpolicy.Error.Custom", "custom text ✓"),
        ("convertible", "org.bgpolicy.Error.App", "the app said no"),
        ("mismatch", "org.freedesktop.DBus.Error.InvalidArgs", "expected arguments of type \"s\", got \"i\""),
        ("usage", "org.freedesktop.DBus.Error.Failed", "misused"),
        ("plain", "org.freedesktop.DBus.Error.Failed", "PlainError"),
    ])
    func handlerErrors(_ how: String, _ name: String, _ text: String) async throws {
        let server = try TestObject.server()
        let r = try await reply(server, TestObject.call(TestObject.name, "Fail", [.string(how)]))
        #expect(r.kind == .error)
        #expect(r.errorName == name)
        #expect(r.errorText.contains(text), "\(r.errorText)")
        #expect(r.replySerial == 5)
    }

    @Test("export refuses incomplete or conflicting interfaces")
    func exportValidation() throws {
        let server = ObjectServer.detached()
        let path = TestObject.path
        let add = InterfaceDescription.Method("Add", inputs: [.init("a", .int32)], documentation: "")
        func iface(_ name: String = "org.bgpolicy.V1", methods: [InterfaceDescription.Method] = [], properties: [InterfaceDescription.Property] = [])
            -> ExportedInterface
        {
            ExportedInterface(InterfaceDescription(name: name, documentation: "", methods: methods, properties: properties))
        }
        let failures: [(String, [ExportedInterface])] = [
            ("a described method without a handler", [iface(methods: [add])]),
            ("a handler for a method not described", [iface().method("Add") { _ in [] }]),
            ("a readable property without a getter", [iface(properties: [.init("P", .int32, documentation: "")])]),
            (
                "a writable property without a setter",
                [iface(properties: [.init("P", .int32, access: .readwrite, documentation: "")]).property("P", get: { .int32(1) })]
            ),
            ("a getter for a property not described", [iface().property("P", get: { .int32(1) })]),
            ("an invalid interface name", [ExportedInterface(InterfaceDescription(name: "nodots", documentation: ""))]),
            (
                "an invalid member name",
                [ExportedInterface(InterfaceDescription(name: "a.b", documentation: "", methods: [.init("1st", documentation: "")])).method("1st") { _ in [] }]
            ),
            (
                "a member declared twice",
                [
                    ExportedInterface(
                        InterfaceDescription(
                            name: "a.b", documentation: "", methods: [.init("M", documentation: "")], signals: [.init("M", documentation: "")])
                    ).method("M") { _ in [] }
                ]
            ),
            ("the same interface twice", [iface(), iface()]),
            ("a standard interface", [iface(ObjectServer.propertiesInterface)]),
            ("the Introspectable interface", [iface(ObjectServer.introspectableInterface)]),
        ]
        for (what, interfaces) in failures {
            #expect(throws: DBusError.self, "\(what)") { try server.export(interfaces, at: path) }
        }
        // None of the refused exports took the path.
        try server.export([iface()], at: path)
        #expect(throws: DBusError.self, "the same path twice") { try server.export([iface("org.bgpolicy.V2")], at: path) }
        server.unexport(path)
        try server.export([iface("org.bgpolicy.V2")], at: path)
    }

    @Test("unexport removes the object")
    func unexport() async throws {
        let server = try TestObject.server()
        #expect(try await reply(server, TestObject.call(nil, "Add", [.int32(1), .int32(1)])).kind == .methodReturn)
        server.unexport(TestObject.path)
        let gone = try await reply(server, TestObject.call(nil, "Add", [.int32(1), .int32(1)]))
        #expect(gone.errorNameIfError == "org.freedesktop.DBus.Error.UnknownObject")
        // Its children are still there, and it is now an intermediate node.
        let xml = try await reply(server, TestObject.call(nil, "Introspect")).body.decode(String.self, at: 0)
        #expect(xml.contains("<node name=\"Child\"/>"))
        #expect(!xml.contains("org.bgpolicy.Test1"))
    }

    @Test("InterfaceDescription.documentXML is a well-formed document with comments")
    func documentXML() throws {
        let xml = TestObject.description.documentXML()
        try Self.expectWellFormed(xml)
        #expect(xml.contains("<!--"))
        #expect(xml.contains("&lt;not&gt; markup &amp;") || xml.contains("<not> markup &"), "documentation is kept")
        #expect(!xml.contains("-- no comment end"), "\"--\" cannot appear inside an XML comment")
        #expect(TestObject.description.method(named: "Add")?.inputSignature == "ii")
        #expect(TestObject.description.method(named: "Add")?.outputSignature == "x")
        #expect(TestObject.description.property(named: "Secret")?.isReadable == false)
        #expect(TestObject.description.property(named: "Secret")?.isWritable == true)
    }
}

@Suite("The object server on a real bus")
struct ObjectServerBusTests {
    @Test("calls, routing errors, properties and introspection through a private bus")
    func throughBus() async throws {
        let bus = try PrivateBus()
        let connections = try await connect(2, to: bus)
        let (server, client) = (connections[0], connections[1])
        let model = TestModel()
        try server.objects.export(TestObject.interfaces(model), at: TestObject.path)
        var names = ObjectServer.ErrorNames()
        names.unknownMethod = "org.bgpolicy.Error.NoSuchMethod"
        names.unknownObject = "org.bgpolicy.Error.NoSuchObject"
        server.objects.errorNames = names
        let serving = startServing(server)
        defer { serving.cancel() }
        let dest = server.uniqueName
        let p = ObjectServer.propertiesInterface

        try await withTimeout(.seconds(15), "the calls") {
            let sum = try await client.call(destination: dest, path: TestObject.path, interface: nil, member: "Add", [.int32(20), .int32(22)])
            #expect(sum == [.int64(42)])

            await expectRemoteError("org.bgpolicy.Error.NoSuchMethod") {
                _ = try await client.call(destination: dest, path: TestObject.path, interface: TestObject.name, member: "Nope")
            }
            await expectRemoteError("org.bgpolicy.Error.NoSuchObject") {
                _ = try await client.call(destination: dest, path: ObjectPath(checked: "/nope"), interface: TestObject.name, member: "Add")
            }
            let text = await expectRemoteError("org.freedesktop.DBus.Error.InvalidArgs") {
                _ = try await client.call(destination: dest, path: TestObject.path, interface: TestObject.name, member: "Add", [.string("x")])
            }
            #expect(text?.contains("\"ii\"") == true && text?.contains("\"s\"") == true, "\(text ?? "")")
            let custom = await expectRemoteError("org.bgpolicy.Error.Custom") {
                _ = try await client.call(destination: dest, path: TestObject.path, interface: TestObject.name, member: "Fail", [.string("remote")])
            }
            #expect(custom == "custom text ✓")
            await expectRemoteError("org.freedesktop.DBus.Error.Failed") {
                _ = try await client.call(destination: dest, path: TestObject.path, interface: TestObject.name, member: "Fail", [.string("plain")])
            }
            // A reply the handler built but that cannot be encoded still answers the caller.
            let unsendable = await expectRemoteError("org.freedesktop.DBus.Error.Failed") {
                _ = try await client.call(destination: dest, path: TestObject.path, interface: TestObject.name, member: "Unsendable")
            }
            #expect(unsendable?.contains("could not be encoded") == true, "\(unsendable ?? "")")

            _ = try await client.call(
                destination: dest, path: TestObject.path, interface: p, member: "Set", [.string(TestObject.name), .string("Count"), .variant(.uint32(99))])
            let count = try await client.call(destination: dest, path: TestObject.path, interface: p, member: "Get", [.string(TestObject.name), .string("Count")])
            #expect(count == [.variant(.uint32(99))])
            await expectRemoteError("org.freedesktop.DBus.Error.PropertyReadOnly") {
                _ = try await client.call(
                    destination: dest, path: TestObject.path, interface: p, member: "Set", [.string(TestObject.name), .string("Name"), .variant(.string("x"))])
            }
            let all = try await client.call(destination: dest, path: TestObject.path, interface: p, member: "GetAll", [.string(TestObject.name)])
            #expect(try all.decode(VariantDictionary.self, at: 0)["Count"] == Variant(UInt32(99)))

            let xml = try await client.call(
                destination: dest, path: ObjectPath(checked: "/org/bgpolicy"), interface: ObjectServer.introspectableInterface, member: "Introspect")
            #expect(try xml.decode(String.self, at: 0).contains("<node name=\"Test\"/>"))
            let own = try await client.call(destination: dest, path: TestObject.path, interface: ObjectServer.introspectableInterface, member: "Introspect")
            #expect(try own.decode(String.self, at: 0).contains("<method name=\"Add\">"))

            // Peer is answered by libdbus itself, even with nothing exported at the path.
            _ = try await client.call(destination: dest, path: ObjectPath(checked: "/anything"), interface: ObjectServer.peerInterface, member: "Ping")
            let machine = try await client.call(destination: dest, path: .root, interface: ObjectServer.peerInterface, member: "GetMachineId")
            #expect(try machine.decode(String.self, at: 0).count == 32)

            // A call without a reply still runs its handler.
            var noReply = Message.methodCall(destination: dest, path: TestObject.path, interface: TestObject.name, member: "Nothing")
            noReply.noReplyExpected = true
            try client.send(noReply)
            #expect(await eventually { model.calls.all.contains("Nothing") })
        }
        server.close()
        client.close()
    }

    @Test("serve() returns when the connection closes")
    func serveReturnsOnClose() async throws {
        let bus = try PrivateBus()
        let server = try await DBusConnection.connect(to: .address(bus.address))
        let serving = startServing(server)
        server.close()
        try await withTimeout(.seconds(5), "serve() to return") { await serving.value }
    }

    @Test("serve() returns when its task is cancelled")
    func serveReturnsOnCancel() async throws {
        let bus = try PrivateBus()
        let server = try await DBusConnection.connect(to: .address(bus.address))
        let serving = startServing(server)
        try await Task.sleep(for: .milliseconds(50))
        serving.cancel()
        try await withTimeout(.seconds(5), "serve() to return") { await serving.value }
        server.close()
    }
}

@Suite("ObjectServer.serve lifecycle")
struct ServeLifecycleTests {
    @Test("serve() can run again after it returns, and answers calls that arrived meanwhile")
    func restart() async throws {
        let bus = try PrivateBus()
        let server = try await DBusConnection.connect(to: .address(bus.address))
        let client = try await DBusConnection.connect(to: .address(bus.address))
        defer { server.close(); client.close() }
        let description = InterfaceDescription(
            name: "org.bgpolicy.Restart1", documentation: "d",
            methods: [.init("Ping", outputs: [.init("n", .int32)], documentation: "d")])
        try server.objects.export([ExportedInterface(description).method("Ping") { _ in [.int32(7)] }], at: ObjectPath("/r"))
        func ping() async throws -> [DBusValue] {
            try await client.call(destination: server.uniqueName, path: ObjectPath("/r"), interface: "org.bgpolicy.Restart1", member: "Ping", timeout: .seconds(5))
        }
        let first = Task { await server.objects.serve() }
        #expect(try await ping() == [.int32(7)])
        first.cancel()
        await first.value
        // A call while nobody serves waits, and the next serve() answers it.
        let waiting = Task { try await ping() }
        try await Task.sleep(for: .milliseconds(100))
        let second = Task { await server.objects.serve() }
        #expect(try await waiting.value == [.int32(7)])
        // `second` is the only serve() that exists, and it is running (it just answered):
        // another one must return at once instead of stealing its calls. (One that stole them
        // would never return: the bound is wide because in a loaded full run the test threads
        // have been held over 5 s.)
        let returned = try await withTimeout(.seconds(30), "a second serve()") { await server.objects.serve(); return true }
        #expect(returned == true)
        #expect(try await ping() == [.int32(7)])
        second.cancel()
        await second.value
    }
}

@Suite("Replies sent again from the last one (ReplyTemplates)")
struct ReplyTemplateTests {
    static let status: DBusValue = .dictionary(key: .string, value: .variant, [
        .init(key: .string("pid"), value: .variant(.uint32(42))),
        .init(key: .string("summary"), value: .variant(.string("On AC"))),
        .init(key: .string("sources"), value: .variant(.array(element: .string, [.string("udev"), .string("upower")]))),
    ])

    /// A reply equal to the last is a copy of it with its own reply serial and destination:
    /// written again in full, it is the same message to the byte; with another body it is built
    /// afresh. A reply that is not a plain method return is never a copy.
    @Test func aCopyIsTheReplyItStandsFor() throws {
        let templates = ReplyTemplates()
        let get = ReplyTemplates.Method(interface: "org.ex.I", member: "Get")
        func reply(_ body: [DBusValue], serial: UInt32, to destination: String?) -> Message {
            var call = Message.methodCall(destination: ":1.1", path: try! ObjectPath("/o"), interface: "org.ex.I", member: "Get")
            call.serial = serial
            call.sender = destination
            return call.makeReply(body)
        }
        func wire(_ raw: RawMessage) throws -> [UInt8] { try raw.marshalled(serial: 77) }
        let first = reply([Self.status], serial: 5, to: ":1.9")
        #expect(try templates.copy(for: first, method: get) == nil)
        _ = try first.encodeReply(method: get, templates: templates)
        for (serial, destination) in [(UInt32(6), Optional(":1.9")), (7, ":1.10"), (8, nil)] {
            let again = reply([Self.status], serial: serial, to: destination)
            let copy = try #require(try templates.copy(for: again, method: get))
            #expect(try wire(copy) == wire(try again.encode()), "serial \(serial), destination \(destination ?? "none")")
            let read = try Message.demarshal(try wire(copy))
            #expect(read.replySerial == serial && read.destination == destination && read.body == [Self.status])
        }
        // Another body, or another method: no copy.
        #expect(try templates.copy(for: reply([.uint32(1)], serial: 9, to: ":1.9"), method: get) == nil)
        #expect(try templates.copy(for: reply([Self.status], serial: 9, to: ":1.9"), method: .init(interface: "org.ex.I", member: "Other")) == nil)
        // An error reply is not a method return.
        var call = Message.methodCall(destination: ":1.1", path: try ObjectPath("/o"), interface: "org.ex.I", member: "Get")
        call.serial = 10
        #expect(try templates.copy(for: call.makeError(name: "org.ex.Error.No", message: "no"), method: get) == nil)
    }

    /// A reply carrying a descriptor is not kept: a kept one held the descriptor open (the
    /// body's `UnixFD` and libdbus's duplicate) until the method's next, different reply, so
    /// the write end of a pipe handed out never reached end-of-file at its reader.
    @Test func aReplyWithADescriptorIsNotKept() throws {
        var ends: [Int32] = [-1, -1]
        try #require(pipe(&ends) == 0)
        defer { close(ends[0]) }
        let templates = ReplyTemplates()
        let open = ReplyTemplates.Method(interface: "org.ex.I", member: "Open")
        do {
            var call = Message.methodCall(destination: ":1.1", path: try ObjectPath("/o"), interface: "org.ex.I", member: "Open")
            call.serial = 5
            call.sender = ":1.9"
            let reply = call.makeReply([.unixFD(UnixFD(taking: ends[1]))])
            _ = try reply.encodeReply(method: open, templates: templates)
            #expect(try templates.copy(for: reply, method: open) == nil)
        }
        // The reply and its message are gone: so is every copy of the write end.
        var reader = pollfd(fd: ends[0], events: Int16(POLLIN), revents: 0)
        #expect(poll(&reader, 1, 0) == 1 && reader.revents & Int16(POLLHUP) != 0, "the write end is still open somewhere")
    }

    /// Through a bus: two callers take turns calling an immediate method, each gets its own
    /// answer (a reply with the wrong serial or destination would never arrive, and the call
    /// would time out), and a changed snapshot is answered at once.
    @Test func callersTakingTurnsGetTheirOwnRepliesAndChangesAtOnce() async throws {
        let bus = try PrivateBus()
        let connections = try await connect(3, to: bus)
        let (server, a, b) = (connections[0], connections[1], connections[2])
        let snapshot = Mutex<DBusValue>(Self.status)
        let description = InterfaceDescription(
            name: "org.bgpolicy.Snapshot1", documentation: "d",
            methods: [.init("Get", outputs: [.init("status", .dictionary(key: .string, value: .variant))], documentation: "d")])
        try server.objects.export(
            [ExportedInterface(description).method("Get", immediate: { _ in [snapshot.withLock { $0 }] })], at: ObjectPath("/s"))
        let serving = startServing(server)
        defer { serving.cancel() }
        func get(_ client: DBusConnection) async throws -> [DBusValue] {
            try await client.call(destination: server.uniqueName, path: ObjectPath("/s"), interface: "org.bgpolicy.Snapshot1",
                                  member: "Get", timeout: .seconds(5))
        }
        for client in [a, a, b, a, b, b] { #expect(try await get(client) == [Self.status]) }
        let changed: DBusValue = .dictionary(key: .string, value: .variant, [.init(key: .string("pid"), value: .variant(.uint32(43)))])
        snapshot.withLock { $0 = changed }
        for client in [b, a, a] { #expect(try await get(client) == [changed]) }
        // Many in flight from both at once.
        try await withThrowingTaskGroup(of: [DBusValue].self) { group in
            for k in 0..<64 { group.addTask { try await get(k % 2 == 0 ? a : b) } }
            for try await answer in group { #expect(answer == [changed]) }
        }
    }

    /// An immediate handler that cannot answer without awaiting hands the call to the queued
    /// one, once per caller here: the first call of each caller is queued, its next ones are
    /// answered on the connection's thread, and every caller gets its own answer in order.
    @Test func anImmediateMethodHandsACallItCannotAnswerToTheQueue() async throws {
        let bus = try PrivateBus()
        let connections = try await connect(3, to: bus)
        let (server, a, b) = (connections[0], connections[1], connections[2])
        let known = Mutex<Set<String>>([])
        let queuedCalls = Mutex(0)
        let description = InterfaceDescription(
            name: "org.bgpolicy.Snapshot1", documentation: "d",
            methods: [.init("Get", outputs: [.init("how", .string)], documentation: "d")])
        try server.objects.export(
            [ExportedInterface(description).method(
                "Get",
                immediate: { call in
                    guard known.withLock({ $0.contains(call.sender) }) else { throw ObjectServer.NotImmediate() }
                    return [.string("immediate")]
                },
                queued: { call in
                    try await Task.sleep(for: .milliseconds(20))
                    known.withLock { _ = $0.insert(call.sender) }
                    queuedCalls.withLock { $0 += 1 }
                    return [.string("queued")]
                })], at: ObjectPath("/s"))
        let serving = startServing(server)
        defer { serving.cancel() }
        func get(_ client: DBusConnection) async throws -> [DBusValue] {
            try await client.call(destination: server.uniqueName, path: ObjectPath("/s"), interface: "org.bgpolicy.Snapshot1",
                                  member: "Get", timeout: .seconds(5))
        }
        #expect(try await get(a) == [.string("queued")])
        #expect(try await get(a) == [.string("immediate")])
        #expect(try await get(b) == [.string("queued")])
        #expect(try await get(b) == [.string("immediate")])
        #expect(try await get(a) == [.string("immediate")])
        #expect(queuedCalls.withLock { $0 } == 2)
        // Without a bus, handle(_:) does the same.
        let detached = ObjectServer.detached()
        try detached.export(
            [ExportedInterface(description).method(
                "Get", immediate: { _ in throw ObjectServer.NotImmediate() }, queued: { _ in [.string("queued")] })],
            at: try ObjectPath("/s"))
        var call = Message.methodCall(destination: ":1.1", path: try ObjectPath("/s"), interface: "org.bgpolicy.Snapshot1", member: "Get")
        call.serial = 1
        call.sender = ":1.9"
        #expect(await detached.handle(call)?.body == [.string("queued")])
    }
}
