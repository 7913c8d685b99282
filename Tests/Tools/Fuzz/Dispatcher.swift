import BGPolicyDBus
import Synchronization

/// The exported objects the fuzzer drives through `ObjectServer.handle`, and a model that
/// says what each call must get back.
///
/// Objects (nested paths, several interfaces each):
///   /org/bgpolicy/Fuzz                    Calls, Props (store 0), Empty
///   /org/bgpolicy/Fuzz/child/one          Props (store 1)
///   /org/bgpolicy/Fuzz/child/two/deep/er  Calls
///   /org/bgpolicy/Other_1                 Empty
/// "/" and the intermediate paths are not exported: they answer Introspect with children only.
enum FuzzObjects {
    static let calls = "org.bgpolicy.Fuzz.Calls"
    static let props = "org.bgpolicy.Fuzz.Props"
    static let empty = "org.bgpolicy.Fuzz.Empty"

    static let requestedError = "org.bgpolicy.Fuzz.Error.Requested"
    static let customErrors = ["org.bgpolicy.Fuzz.Error.One", "org.bgpolicy.Fuzz.Error.Two_2", "com.example.E.x"]

    static let mainPath = try! ObjectPath("/org/bgpolicy/Fuzz")
    static let childOne = try! ObjectPath("/org/bgpolicy/Fuzz/child/one")
    static let deepPath = try! ObjectPath("/org/bgpolicy/Fuzz/child/two/deep/er")
    static let otherPath = try! ObjectPath("/org/bgpolicy/Other_1")

    /// Interfaces at each exported path, in export order.
    static let table: [ObjectPath: [String]] = [
        mainPath: [calls, props, empty],
        childOne: [props],
        deepPath: [calls],
        otherPath: [empty],
    ]
    static let storeIndex: [ObjectPath: Int] = [mainPath: 0, childOne: 1]

    /// Paths worth calling: the exported ones, their ancestors, near misses, the root.
    static let interestingPaths: [String] = [
        "/", "/org", "/org/bgpolicy", "/org/bgpolicy/Fuzz", "/org/bgpolicy/Fuzz/child", "/org/bgpolicy/Fuzz/child/one",
        "/org/bgpolicy/Fuzz/child/two", "/org/bgpolicy/Fuzz/child/two/deep", "/org/bgpolicy/Fuzz/child/two/deep/er",
        "/org/bgpolicy/Fuzz/child/one/more", "/org/bgpolicy/Other_1", "/org/bgpolicy/Other", "/org/bgpolicy/Fuzzy",
        "/org/freedesktop/DBus",
    ]

    // MARK: Interface descriptions

    static let tupleType = DBusType.structure([
        .byte, .boolean, .int16, .uint16, .int32, .uint32, .int64, .uint64, .double, .string, .objectPath, .signature,
    ])
    static let describeType = DBusType.structure([.string, .int32, .dictionary(key: .string, value: .variant), .array(.objectPath)])

    static let callsDescription = InterfaceDescription(
        name: calls, documentation: "Methods of many signatures, for the fuzzer.",
        methods: [
            .init("Ping", documentation: "Does nothing."),
            .init("Echo", inputs: [.init("value", .variant)], outputs: [.init("value", .variant)], documentation: "Returns its argument."),
            .init(
                "EchoOptions", inputs: [.init("options", .dictionary(key: .string, value: .variant))],
                outputs: [.init("options", .dictionary(key: .string, value: .variant))], documentation: "Returns its argument."),
            .init("Add", inputs: [.init("a", .int32), .init("b", .int32)], outputs: [.init("sum", .int64)], documentation: "a + b."),
            .init(
                "Describe", inputs: [.init("record", describeType)],
                outputs: [.init("summary", .structure([.string, .objectPath, .uint32]))], documentation: "Summarises a record."),
            .init(
                "CountEntries", inputs: [.init("maps", .array(.dictionary(key: .string, value: .variant)))],
                outputs: [.init("count", .uint32)], documentation: "Counts entries."),
            .init("ReversePaths", inputs: [.init("paths", .array(.objectPath))], outputs: [.init("paths", .array(.objectPath))], documentation: ""),
            .init("Checksum", inputs: [.init("data", .array(.byte))], outputs: [.init("sum", .structure([.uint32, .byte]))], documentation: ""),
            .init(
                "EchoSignature", inputs: [.init("signature", .signature)], outputs: [.init("signature", .signature), .init("text", .string)],
                documentation: ""),
            .init(
                "Flatten", inputs: [.init("nested", .dictionary(key: .string, value: .dictionary(key: .string, value: .variant)))],
                outputs: [.init("flat", .dictionary(key: .string, value: .variant))], documentation: ""),
            .init("Tuple", inputs: [.init("all", tupleType)], outputs: [.init("all", tupleType)], documentation: "Every basic type."),
            .init("Fail", inputs: [.init("message", .string)], documentation: "Always fails with the message."),
            .init("FailWith", inputs: [.init("which", .uint32)], documentation: "Fails in one of several ways."),
            .init("Yield", inputs: [.init("times", .uint32)], outputs: [.init("times", .uint32)], documentation: "Suspends, then answers."),
        ])

    struct PropertySpec {
        let name: String
        let type: DBusType
        let access: InterfaceDescription.Property.Access
        let initial: DBusValue
    }

    static let propertySpecs: [PropertySpec] = [
        .init(name: "Name", type: .string, access: .readwrite, initial: .string("fuzz")),
        .init(name: "Count", type: .uint32, access: .read, initial: .uint32(7)),
        .init(
            name: "Options", type: .dictionary(key: .string, value: .variant), access: .readwrite,
            initial: .dictionary(key: .string, value: .variant, [DBusDictEntry(key: .string("a"), value: .variant(.int32(1)))])),
        .init(name: "Secret", type: .string, access: .write, initial: .string("")),
        .init(name: "Anything", type: .variant, access: .readwrite, initial: .variant(.string("x"))),
        .init(name: "Pair", type: .structure([.int32, .boolean]), access: .read, initial: .structure([.int32(1), .boolean(true)])),
        .init(name: "Matrix", type: .array(.array(.int32)), access: .readwrite, initial: .array(element: .array(.int32), [])),
    ]

    static let propsDescription = InterfaceDescription(
        name: props, documentation: "Properties of every access, for the fuzzer.",
        methods: [
            .init("Ping", documentation: "Same name as Calls.Ping: either may answer an interface-less call."),
            .init("Reset", documentation: "Restores the initial values."),
        ],
        properties: propertySpecs.map { .init($0.name, $0.type, access: $0.access, documentation: "") },
        signals: [.init("Changed", arguments: [.init("name", .string)], documentation: "")])

    static let emptyDescription = InterfaceDescription(name: empty, documentation: "No members at all.")

    // MARK: Implementation

    struct CustomError: DBusErrorConvertible {
        let dbusErrorName: String
        let dbusErrorMessage: String
    }

    /// Property values, one store per exported Props object; reset at every iteration.
    final class Store: Sendable {
        let values = Mutex<[String: DBusValue]>([:])
        init() { reset() }
        func reset() {
            values.withLock { v in
                v.removeAll(keepingCapacity: true)
                for spec in FuzzObjects.propertySpecs { v[spec.name] = spec.initial }
            }
        }
        func get(_ name: String) -> DBusValue { values.withLock { $0[name]! } }
        func set(_ name: String, _ value: DBusValue) { values.withLock { $0[name] = value } }
    }

    static func callsImplementation() -> ExportedInterface {
        ExportedInterface(callsDescription)
            .method("Ping") { _ in [] }
            .method("Echo") { call in [call.arguments[0]] }
            .method("EchoOptions") { call in
                let options = try call.arguments.decode(VariantDictionary.self, at: 0)
                _ = options
                return [call.arguments[0]]
            }
            .method("Add") { call in
                let a = try call.arguments.decode(Int32.self, at: 0)
                let b = try call.arguments.decode(Int32.self, at: 1)
                return [.int64(Int64(a) + Int64(b))]
            }
            .method("Describe") { call in [Model.describe(call.arguments[0])] }
            .method("CountEntries") { call in [Model.countEntries(call.arguments[0])] }
            .method("ReversePaths") { call in
                let paths = try call.arguments.decode([ObjectPath].self, at: 0)
                return [Array(paths.reversed()).dbusValue]
            }
            .method("Checksum") { call in
                let data = try call.arguments.decode([UInt8].self, at: 0)
                return [Model.checksum(data)]
            }
            .method("EchoSignature") { call in
                let g = try call.arguments.decode(Signature.self, at: 0)
                return [.signature(g), .string(g.rawValue)]
            }
            .method("Flatten") { call in [Model.flatten(call.arguments[0])] }
            .method("Tuple") { call in [call.arguments[0]] }
            .method("Fail") { call in
                throw DBusError.remote(name: requestedError, message: try call.arguments.decode(String.self, at: 0))
            }
            .method("FailWith") { call in
                let which = try call.arguments.decode(UInt32.self, at: 0)
                switch which % 6 {
                case 0, 1, 2: throw CustomError(dbusErrorName: customErrors[Int(which % 6)], dbusErrorMessage: "custom \(which)")
                case 3: throw DBusError.invalidValue("refused \(which)")
                case 4: throw DBusError.disconnected
                default: throw DBusError.typeMismatch(expected: "x", got: "u")
                }
            }
            .method("Yield") { call in
                let times = try call.arguments.decode(UInt32.self, at: 0)
                for _ in 0..<(times % 3) { await Task.yield() }
                return [.uint32(times)]
            }
    }

    static func propsImplementation(_ store: Store) -> ExportedInterface {
        var exported = ExportedInterface(propsDescription)
            .method("Ping") { _ in [] }
            .method("Reset") { _ in
                store.reset()
                return []
            }
        for spec in propertySpecs {
            let name = spec.name
            let setter: PropertySetter?
            switch spec.access {
            case .read:
                setter = nil
            case .write, .readwrite:
                setter = { value, _ in
                    if name == "Name", case .string(let s) = value, s.isEmpty {
                        throw DBusError.invalidValue("Name cannot be empty")
                    }
                    store.set(name, value)
                }
            }
            exported = exported.property(name, get: { store.get(name) }, set: setter)
        }
        return exported
    }

    /// A detached server with every object exported, and the stores behind it.
    static func makeServer() throws -> (ObjectServer, [Store]) {
        let server = ObjectServer.detached()
        let stores = [Store(), Store()]
        try server.export([callsImplementation(), propsImplementation(stores[0]), ExportedInterface(emptyDescription)], at: mainPath)
        try server.export([propsImplementation(stores[1])], at: childOne)
        try server.export([callsImplementation()], at: deepPath)
        try server.export([ExportedInterface(emptyDescription)], at: otherPath)
        return (server, stores)
    }

    static func description(of name: String) -> InterfaceDescription? {
        switch name {
        case calls: callsDescription
        case props: propsDescription
        case empty: emptyDescription
        default: nil
        }
    }
}

/// What a call must get back, computed from the export table and the stores as they are
/// before the call, independently of the dispatcher's code.
enum Model {
    enum Outcome {
        case reply([DBusValue])
        /// Introspection XML listing these interfaces and child nodes.
        case introspection(interfaces: [String], children: [String])
        case error(String)
        /// A Get or GetAll reply the layer cannot encode (too deep): any reply, but noted.
        case replyTooDeep([DBusValue])
    }

    struct Prediction {
        var outcome: Outcome
        /// The property write the call makes, if it succeeds: (store, name, value).
        var write: (store: Int, name: String, value: DBusValue)?
        var reset: Int?
    }

    static let unknownObject = "org.freedesktop.DBus.Error.UnknownObject"
    static let unknownInterface = "org.freedesktop.DBus.Error.UnknownInterface"
    static let unknownMethod = "org.freedesktop.DBus.Error.UnknownMethod"
    static let unknownProperty = "org.freedesktop.DBus.Error.UnknownProperty"
    static let propertyReadOnly = "org.freedesktop.DBus.Error.PropertyReadOnly"
    static let invalidArgs = "org.freedesktop.DBus.Error.InvalidArgs"
    static let failed = "org.freedesktop.DBus.Error.Failed"

    static func children(of path: String) -> [String] {
        let prefix = path == "/" ? "/" : path + "/"
        var names = Set<String>()
        for candidate in FuzzObjects.table.keys.map(\.rawValue) where candidate.hasPrefix(prefix) && candidate != path {
            let rest = candidate.dropFirst(prefix.count)
            if let first = rest.split(separator: "/").first { names.insert(String(first)) }
        }
        return names.sorted()
    }

    static func predict(_ m: Message, stores: [FuzzObjects.Store]) -> Prediction {
        let pathText = m.path?.rawValue ?? "/"
        let path = m.path ?? .root
        let member = m.member ?? ""
        let interface = m.interface
        let signature = m.body.signatureText
        let exported = FuzzObjects.table[path]

        if member == "Introspect" && (interface == nil || interface == "org.freedesktop.DBus.Introspectable") {
            guard m.body.isEmpty else { return Prediction(outcome: .error(invalidArgs)) }
            let interfaces =
                exported.map {
                    ["org.freedesktop.DBus.Peer", "org.freedesktop.DBus.Introspectable", "org.freedesktop.DBus.Properties"] + $0
                } ?? []
            return Prediction(outcome: .introspection(interfaces: interfaces, children: children(of: pathText)))
        }
        // Any other member of Introspectable is an unknown method, wherever it is called.
        if interface == "org.freedesktop.DBus.Introspectable" { return Prediction(outcome: .error(unknownMethod)) }
        guard let exported else { return Prediction(outcome: .error(unknownObject)) }
        if interface == "org.freedesktop.DBus.Properties" {
            return properties(m, exported: exported, store: FuzzObjects.storeIndex[path], stores: stores)
        }
        let described: InterfaceDescription
        if let interface {
            guard exported.contains(interface), let d = FuzzObjects.description(of: interface) else {
                return Prediction(outcome: .error(unknownInterface))
            }
            described = d
        } else {
            // Ping is in two interfaces at one path; both answer the same.
            guard let d = exported.compactMap(FuzzObjects.description(of:)).first(where: { $0.method(named: member) != nil }) else {
                return Prediction(outcome: .error(unknownMethod))
            }
            described = d
        }
        guard let method = described.method(named: member) else { return Prediction(outcome: .error(unknownMethod)) }
        guard signature == method.inputSignature else { return Prediction(outcome: .error(invalidArgs)) }
        let a = m.body
        switch (described.name, member) {
        case (_, "Ping"): return Prediction(outcome: .reply([]))
        case (FuzzObjects.props, "Reset"): return Prediction(outcome: .reply([]), reset: FuzzObjects.storeIndex[path])
        case (_, "Echo"), (_, "EchoOptions"), (_, "Tuple"): return Prediction(outcome: .reply([a[0]]))
        case (_, "Add"):
            guard case .int32(let x) = a[0], case .int32(let y) = a[1] else { break }
            return Prediction(outcome: .reply([.int64(Int64(x) + Int64(y))]))
        case (_, "Describe"): return Prediction(outcome: .reply([describe(a[0])]))
        case (_, "CountEntries"): return Prediction(outcome: .reply([countEntries(a[0])]))
        case (_, "ReversePaths"):
            guard case .array(let e, let items) = a[0] else { break }
            return Prediction(outcome: .reply([.array(element: e, items.reversed())]))
        case (_, "Checksum"):
            guard case .array(_, let items) = a[0] else { break }
            return Prediction(outcome: .reply([checksum(items.map { if case .byte(let b) = $0 { b } else { 0 } })]))
        case (_, "EchoSignature"):
            guard case .signature(let g) = a[0] else { break }
            return Prediction(outcome: .reply([.signature(g), .string(g.rawValue)]))
        case (_, "Flatten"): return Prediction(outcome: .reply([flatten(a[0])]))
        case (_, "Fail"): return Prediction(outcome: .error(FuzzObjects.requestedError))
        case (_, "FailWith"):
            guard case .uint32(let w) = a[0] else { break }
            switch w % 6 {
            case 0, 1, 2: return Prediction(outcome: .error(FuzzObjects.customErrors[Int(w % 6)]))
            case 3, 5: return Prediction(outcome: .error(invalidArgs))
            default: return Prediction(outcome: .error(failed))
            }
        case (_, "Yield"):
            return Prediction(outcome: .reply([a[0]]))
        default: break
        }
        return Prediction(outcome: .error("model: no prediction for \(described.name).\(member)"))
    }

    private static func properties(_ m: Message, exported: [String], store: Int?, stores: [FuzzObjects.Store]) -> Prediction {
        let member = m.member ?? ""
        let body = m.body
        func lookup(_ i: String, _ p: String) -> Result<FuzzObjects.PropertySpec, ModelError> {
            // No interface named: the one exported interface with properties, if it has this one.
            if i.isEmpty {
                guard exported.contains(FuzzObjects.props), let spec = FuzzObjects.propertySpecs.first(where: { $0.name == p }) else {
                    return .failure(ModelError(name: unknownProperty))
                }
                return .success(spec)
            }
            guard exported.contains(i), FuzzObjects.description(of: i) != nil else { return .failure(ModelError(name: unknownInterface)) }
            guard i == FuzzObjects.props, let spec = FuzzObjects.propertySpecs.first(where: { $0.name == p }) else {
                return .failure(ModelError(name: unknownProperty))
            }
            return .success(spec)
        }
        switch member {
        case "Get" where body.count == 2:
            guard case .string(let i) = body[0], case .string(let p) = body[1] else { break }
            switch lookup(i, p) {
            case .failure(let e): return Prediction(outcome: .error(e.name))
            case .success(let spec):
                guard spec.access != .write, let store else { return Prediction(outcome: .error(unknownProperty)) }
                let value = stores[store].get(p)
                let reply: [DBusValue] = [.variant(value)]
                return Prediction(outcome: 1 + Oracle.depth(of: value) > Oracle.maximumDepth ? .replyTooDeep(reply) : .reply(reply))
            }
        case "GetAll" where body.count == 1:
            guard case .string(let i) = body[0] else { break }
            guard exported.contains(i), FuzzObjects.description(of: i) != nil else { return Prediction(outcome: .error(unknownInterface)) }
            var entries: [DBusDictEntry] = []
            if i == FuzzObjects.props, let store {
                for spec in FuzzObjects.propertySpecs where spec.access != .write {
                    entries.append(DBusDictEntry(key: .string(spec.name), value: .variant(stores[store].get(spec.name))))
                }
            }
            let reply: [DBusValue] = [.dictionary(key: .string, value: .variant, entries)]
            return Prediction(outcome: Oracle.depth(of: reply[0]) > Oracle.maximumDepth ? .replyTooDeep(reply) : .reply(reply))
        case "Set" where body.count == 3:
            guard case .string(let i) = body[0], case .string(let p) = body[1], case .variant(let value) = body[2] else { break }
            switch lookup(i, p) {
            case .failure(let e): return Prediction(outcome: .error(e.name))
            case .success(let spec):
                guard spec.access != .read, let store else { return Prediction(outcome: .error(propertyReadOnly)) }
                guard Oracle.typeOf(value) == spec.type else { return Prediction(outcome: .error(invalidArgs)) }
                // A value GetAll could not send back (wrapped in a{sv}) is refused at Set.
                let wrapped = DBusValue.dictionary(key: .string, value: .variant, [DBusDictEntry(key: .string(p), value: .variant(value))])
                guard Oracle.depth(of: wrapped) <= Oracle.maximumDepth else { return Prediction(outcome: .error(invalidArgs)) }
                if p == "Name", case .string(let s) = value, s.isEmpty { return Prediction(outcome: .error(invalidArgs)) }
                return Prediction(outcome: .reply([]), write: (store, p, value))
            }
        default:
            guard ["Get", "GetAll", "Set"].contains(member) else { return Prediction(outcome: .error(unknownMethod)) }
        }
        return Prediction(outcome: .error(invalidArgs))
    }

    struct ModelError: Error { let name: String }

    // MARK: Handler results (shared by the handlers and the model: they are the spec)

    static func describe(_ record: DBusValue) -> DBusValue {
        guard case .structure(let f) = record, f.count == 4, case .string(let s) = f[0],
            case .dictionary(_, _, let entries) = f[2], case .array(_, let paths) = f[3]
        else { return .structure([.string(""), .objectPath(.root), .uint32(0)]) }
        var first = ObjectPath.root
        if case .objectPath(let p)? = paths.first { first = p }
        return .structure([.string(s), .objectPath(first), .uint32(UInt32(entries.count))])
    }

    static func countEntries(_ maps: DBusValue) -> DBusValue {
        guard case .array(_, let items) = maps else { return .uint32(0) }
        var n = 0
        for item in items { if case .dictionary(_, _, let e) = item { n += e.count } }
        return .uint32(UInt32(n))
    }

    static func checksum(_ data: [UInt8]) -> DBusValue {
        var x: UInt8 = 0
        for b in data { x ^= b }
        return .structure([.uint32(UInt32(data.count)), .byte(x)])
    }

    static func flatten(_ nested: DBusValue) -> DBusValue {
        var out: [DBusDictEntry] = []
        if case .dictionary(_, _, let outer) = nested {
            for o in outer {
                guard case .string(let ok) = o.key, case .dictionary(_, _, let inner) = o.value else { continue }
                for i in inner {
                    guard case .string(let ik) = i.key else { continue }
                    out.append(DBusDictEntry(key: .string(ok + "." + ik), value: i.value))
                }
            }
        }
        return .dictionary(key: .string, value: .variant, out)
    }
}
