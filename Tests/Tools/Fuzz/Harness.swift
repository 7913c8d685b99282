import BGPolicyDBus
import Glibc
import Synchronization

/// Counters for the summary.
struct Stats {
    var byStrategy = [Int](repeating: 0, count: Harness.Strategy.allCases.count)
    var demarshalled = 0
    var decoded = 0
    var rejected = 0
    var encoded = 0
    var encodeRefused = 0
    var eitherUnreadable = 0
    var reencodeRefused = 0
    var dispatched = 0
    var replies = 0
    var errorReplies = 0
    var handlerReplies = 0
    var getAllTooDeep = 0
    var textChecks = 0
}

struct Failure {
    let iteration: UInt64
    let kind: String
    let detail: String
    let bytes: [UInt8]?
}

/// Runs iterations and checks every invariant. One instance, one task: not shared.
final class Harness {
    enum Strategy: Int, CaseIterable {
        case validRoundTrip, mutated, randomBytes, swiftLevel, dispatch, text

        var name: String {
            switch self {
            case .validRoundTrip: "valid"
            case .mutated: "mutated"
            case .randomBytes: "random"
            case .swiftLevel: "edge/invalid"
            case .dispatch: "dispatch"
            case .text: "names/signatures"
            }
        }
    }
    static let weights = [18, 36, 7, 16, 18, 5]

    let seed: UInt64
    let server: ObjectServer
    let stores: [FuzzObjects.Store]
    let fdSource: Int32
    let corpus: Corpus?
    let verbose: Bool
    var stats = Stats()
    var failures: [Failure] = []
    var failureKinds: [String: Int] = [:]
    /// Allowed outcomes worth knowing about (the specification allows them, the layer refuses
    /// them, or the model expects a known limitation), with one example each.
    var notes: [String: (count: Int, example: String)] = [:]

    func note(_ kind: String, _ example: @autoclosure () -> String) {
        if let n = notes[kind] {
            notes[kind] = (n.count + 1, n.example)
        } else {
            notes[kind] = (1, "iteration \(iteration): " + example())
        }
    }
    var iteration: UInt64 = 0
    static let maximumPrintedFailures = 20

    init(seed: UInt64, corpus: Corpus?, verbose: Bool) throws {
        self.seed = seed
        (server, stores) = try FuzzObjects.makeServer()
        fdSource = open("/dev/null", O_RDONLY | O_CLOEXEC)
        self.corpus = corpus
        self.verbose = verbose
    }

    func log(_ text: @autoclosure () -> String) {
        if verbose {
            print("  " + text())
            fflush(nil)  // a crash must not swallow what led to it
        }
    }

    func fail(_ kind: String, _ detail: String, bytes: [UInt8]? = nil) {
        failureKinds[kind, default: 0] += 1
        failures.append(Failure(iteration: iteration, kind: kind, detail: detail, bytes: bytes))
        if failures.count <= Self.maximumPrintedFailures {
            print("FAIL iteration \(iteration): \(kind): \(detail)")
            print("  reproduce: bgpolicy-fuzz --seed \(seed) --start \(iteration) --iterations 1 --verbose")
            if let bytes { print("  bytes (--replay): \(hex(bytes))") }
            fflush(nil)
        }
        if let bytes { corpus?.save(bytes, name: "failure-\(seed)-\(iteration)") }
    }

    // MARK: One iteration

    func run(iteration i: UInt64) async {
        iteration = i
        CrashContext.iteration.store(i, ordering: .relaxed)
        CrashContext.clearInput()
        for s in stores { s.reset() }
        var g = Generator(Rand(seed: seed, stream: i), fdSource: fdSource)
        let strategy = Strategy(rawValue: g.r.weighted(Self.weights))!
        stats.byStrategy[strategy.rawValue] += 1
        log("iteration \(i): \(strategy.name)")
        switch strategy {
        case .validRoundTrip: await validRoundTrip(&g)
        case .mutated: await mutated(&g)
        case .randomBytes: await decode(Mutator.randomBytes(r: &g.r), origin: "random")
        case .swiftLevel: await swiftLevel(&g)
        case .dispatch: await dispatchSession(&g)
        case .text: textChecks(&g)
        }
        CrashContext.progress.add(1, ordering: .relaxed)
    }

    /// A valid message (a call to the exported objects half the time), marshalled: it must
    /// encode, decode to itself and be dispatched.
    private func validRoundTrip(_ g: inout Generator) async {
        let m = validMessage(&g)
        guard let bytes = await encode(m, origin: "valid") else { return }
        await decode(bytes, origin: "valid")
    }

    private func validMessage(_ g: inout Generator) -> Message {
        let kind = g.kind()
        if kind == .methodCall && g.r.bool() { return structuredCall(&g, wild: false) }
        return g.message(kind: kind, body: g.body(g.r.chance(1, 6) ? .empty : .normal), noisy: false)
    }

    /// Mutations of a valid message's bytes.
    private func mutated(_ g: inout Generator) async {
        let base = validMessage(&g)
        let other = validMessage(&g)
        CrashContext.phase = "marshal (mutation seed)"
        guard let a = try? base.marshal(), let b = try? other.marshal() else { return }
        let (bytes, names) = Mutator.mutate(a, other: b, r: &g.r)
        log("mutating \(base) body \(base.body.description.prefix(200))")
        log("mutations: \(names.joined(separator: ", "))")
        if let decoded = await decode(bytes, origin: "mutated"), decoded.kind == .methodCall || g.r.chance(1, 20) {
            corpus?.sample(bytes, name: "mutated-\(seed)-\(iteration)")
        }
    }

    /// Edge, wild and noisy Swift-level messages: the oracle decides what marshal must do.
    private func swiftLevel(_ g: inout Generator) async {
        if g.r.chance(1, 4) { g.allowFDs = true }
        let mode: Generator.BodyMode = g.r.pick([.edge, .edge, .wild, .normal])
        let kind = g.kind()
        let m: Message
        if kind == .methodCall && g.r.chance(1, 3) {
            m = structuredCall(&g, wild: true)
        } else {
            m = g.message(kind: kind, body: g.body(mode), noisy: g.r.chance(1, 3))
        }
        if let bytes = await encode(m, origin: "edge") {
            await decode(bytes, origin: "edge")
        } else if m.kind == .methodCall {
            // Unencodable calls still reach the dispatcher when built in Swift.
            await dispatch(m)
        } else if let reply = await server.handle(m) {
            fail("handle answered a \(m.kind)", "\(reply)")
        }
    }

    // MARK: Encoding

    /// Marshals a Swift-level message and checks the result against the oracle. Returns the
    /// bytes when they should be decoded further.
    @discardableResult
    func encode(_ m: Message, origin: String) async -> [UInt8]? {
        let scan = Oracle.scanMessage(m)
        log("encode \(m) verdict \(scan.verdict)")
        CrashContext.phase = "marshal"
        let bytes: [UInt8]
        do {
            bytes = try m.marshal()
        } catch {
            stats.encodeRefused += 1
            if case .valid = scan.verdict {
                fail("marshal refused a valid message", "\(m): \(error)")
            }
            if case .remote = error { fail("marshal threw a remote error", "\(error)") }
            return nil
        }
        stats.encoded += 1
        if case .invalid(let why) = scan.verdict {
            fail("marshal accepted an invalid message", "\(why); \(m)", bytes: bytes)
            return nil
        }
        CrashContext.phase = "marshal (again)"
        if let again = try? m.marshal(), again != bytes {
            fail("marshal is not deterministic", "\(m)", bytes: bytes)
        }
        CrashContext.setInput(bytes)
        if scan.fds > 0 {
            // A byte buffer cannot carry descriptors: libdbus must refuse it, not invent fds.
            CrashContext.phase = "demarshal (descriptors)"
            if let d = try? Message.demarshal(bytes) {
                fail("a message with descriptors demarshalled from bytes", "\(d)", bytes: bytes)
            }
            return nil
        }
        checkCompleteLength(bytes)
        CrashContext.phase = "demarshal (round trip)"
        do {
            let d = try Message.demarshal(bytes)
            var expected = m
            expected.serial = max(m.serial, 1)
            if let diff = Same.difference(expected, d) {
                fail("round trip changed the message", diff, bytes: bytes)
            }
            return bytes
        } catch {
            if error.message.contains("org.freedesktop.DBus.Error.") {
                fail("libdbus cannot load what marshal produced", "\(error); verdict \(scan.verdict); \(m)", bytes: bytes)
            } else if case .valid = scan.verdict {
                fail("the decoder refused a valid message", "\(error); \(m)", bytes: bytes)
            } else {
                stats.eitherUnreadable += 1
                note("encoded but our decoder refuses it (libdbus accepts)", "\(error); verdict \(scan.verdict)")
            }
            return nil
        }
    }

    /// For a complete marshalled message: the length libdbus reports for it, for a prefix
    /// of it, and for it followed by more bytes.
    private func checkCompleteLength(_ bytes: [UInt8]) {
        CrashContext.phase = "completeLength"
        let n = bytes.count
        if Message.completeLength(of: bytes) != n {
            fail("completeLength of a whole message", "\(String(describing: Message.completeLength(of: bytes))) != \(n)", bytes: bytes)
        }
        let cut = 16 + Int(UInt(bitPattern: n &* 7919) % UInt(max(1, n - 16)))
        if cut < n, Message.completeLength(of: Array(bytes[..<cut])) != n {
            fail("completeLength of a prefix", "prefix \(cut) of \(n)", bytes: bytes)
        }
        if Message.completeLength(of: Array(bytes[..<min(n, 15)])) != 0 {
            fail("completeLength of a short prefix", "not 0", bytes: bytes)
        }
    }

    // MARK: Decoding

    /// Parses bytes. Anything may be refused; what is accepted must be sane, re-encodable
    /// (when the specification allows it), stable, and is dispatched if it is a call.
    @discardableResult
    func decode(_ bytes: [UInt8], origin: String) async -> Message? {
        CrashContext.setInput(bytes)
        CrashContext.phase = "demarshal"
        stats.demarshalled += 1
        let decoded: Message
        do {
            decoded = try Message.demarshal(bytes)
        } catch {
            stats.rejected += 1
            if case .malformedMessage = error {} else { fail("demarshal threw something other than malformedMessage", "\(error)", bytes: bytes) }
            if !error.message.contains("org.freedesktop.DBus.Error.") {
                // libdbus loaded it and our reader refused it. On a connection the caller gets
                // an error reply built from this error: it must be sendable.
                let reason = error.message.prefix { !"\"(0123456789".contains($0) }
                note("libdbus accepts, the layer's reader refuses: \(reason)", "\(error)")
                CrashContext.phase = "marshal (error for undecodable input)"
                var reply = Message(kind: .error, body: [.string(error.message)])
                reply.errorName = error.name
                reply.replySerial = 1
                reply.destination = ":1.1"
                if (try? reply.marshal()) == nil { fail("the error reply for undecodable input cannot be sent", "\(error)", bytes: bytes) }
            }
            CrashContext.phase = "completeLength (rejected)"
            _ = Message.completeLength(of: bytes)
            log("rejected: \(error)")
            return nil
        }
        stats.decoded += 1
        log("decoded: \(decoded) body \(decoded.body.description.prefix(300))")

        CrashContext.phase = "completeLength (decoded)"
        let n = Message.completeLength(of: bytes)
        if let n, n >= 16, n <= bytes.count {
            if n < bytes.count {
                CrashContext.phase = "demarshal (exact prefix)"
                if let alone = try? Message.demarshal(Array(bytes[..<n])) {
                    if let diff = Same.difference(decoded, alone) { fail("trailing bytes changed the message", diff, bytes: bytes) }
                } else {
                    fail("the message alone does not decode", "length \(n) of \(bytes.count)", bytes: bytes)
                }
            }
        } else {
            fail("completeLength disagrees with demarshal", "\(String(describing: n)) for \(bytes.count) bytes", bytes: bytes)
        }

        // What libdbus guarantees for every loaded message, and our decoder must keep.
        var sane = decoded.serial != 0
        switch decoded.kind {
        case .methodCall: sane = sane && decoded.path != nil && decoded.member != nil
        case .signal: sane = sane && decoded.path != nil && decoded.interface != nil && decoded.member != nil
        case .error: sane = sane && decoded.errorName != nil && decoded.replySerial != 0
        case .methodReturn: sane = sane && decoded.replySerial != 0
        }
        if !sane { fail("a decoded message lacks required headers", "\(decoded)", bytes: bytes) }

        let header = Oracle.headerVerdict(decoded)
        let body = Oracle.scanBody(decoded.body)
        if case .invalid(let why) = body.verdict {
            fail("the decoder produced a value the specification forbids", why, bytes: bytes)
        }
        if body.fds > 0 { fail("the decoder produced descriptors from a byte buffer", "\(body.fds)", bytes: bytes) }

        CrashContext.phase = "re-marshal"
        do {
            let again = try decoded.marshal()
            if case .invalid(let why) = header {
                fail("re-marshal accepted headers the specification forbids", why, bytes: bytes)
            }
            CrashContext.phase = "re-demarshal"
            let d2 = try Message.demarshal(again)
            if let diff = Same.difference(decoded, d2) { fail("re-marshal round trip changed the message", diff, bytes: bytes) }
            CrashContext.phase = "re-re-marshal"
            if try d2.marshal() != again { fail("marshal is not stable after a round trip", "\(decoded)", bytes: bytes) }
        } catch {
            stats.reencodeRefused += 1
            if case .valid = header.and(body.verdict) {
                fail("re-marshal of a decoded message failed", "\(error); \(decoded)", bytes: bytes)
            } else {
                if case .invalid = header {
                    note("decoded, but headers libdbus accepts and the specification forbids: re-marshal refused", "\(error) for \(decoded)")
                } else {
                    note("decoded, but outside the layer's strict rules: re-marshal refused", "\(error) for \(decoded)")
                }
            }
        }

        if decoded.kind == .methodCall {
            await dispatch(decoded)
        } else {
            CrashContext.phase = "handle (not a call)"
            if let reply = await server.handle(decoded) {
                fail("handle answered a \(decoded.kind)", "\(reply)", bytes: bytes)
            }
        }
        return decoded
    }

    // MARK: Dispatching

    /// 1–5 calls against the exported objects, so writes are followed by reads.
    private func dispatchSession(_ g: inout Generator) async {
        if g.r.chance(1, 4) {
            // Scripted: write a property (often nested near the limit), then read it back.
            let path = g.r.pick([FuzzObjects.mainPath, FuzzObjects.childOne])
            let spec = g.r.pick(FuzzObjects.propertySpecs.filter { $0.access != .read })
            var set = Message.methodCall(
                destination: nil, path: path, interface: "org.freedesktop.DBus.Properties", member: "Set",
                body: [
                    .string(FuzzObjects.props), .string(spec.name),
                    .variant(g.r.bool() ? deepValue(&g, for: spec.type) : g.value(of: spec.type, depthLeft: 63)),
                ])
            set.serial = UInt32(g.r.int(1...1000))
            set.sender = ":1.7"
            set.noReplyExpected = g.r.chance(1, 4)
            log("set \(set) body \(set.body.description.prefix(200))")
            await dispatch(set)
            var get = Message.methodCall(
                destination: nil, path: path, interface: "org.freedesktop.DBus.Properties", member: g.r.bool() ? "GetAll" : "Get",
                body: [.string(FuzzObjects.props)])
            if get.member == "Get" { get.body.append(.string(spec.name)) }
            get.serial = set.serial + 1
            get.sender = ":1.8"
            log("get \(get)")
            await dispatch(get)
            return
        }
        for _ in 0..<g.r.int(1...5) {
            let wild = g.r.chance(1, 5)
            let call = structuredCall(&g, wild: wild)
            log("call \(call) body \(call.body.description.prefix(200))")
            if g.r.chance(1, 4) {
                // Through the wire and back first, as a real call arrives.
                CrashContext.phase = "marshal (dispatch)"
                if let bytes = try? call.marshal() {
                    await decode(bytes, origin: "dispatch")
                    continue
                }
            }
            await dispatch(call)
        }
    }

    /// Hands one call to the dispatcher and compares the reply with the model.
    func dispatch(_ call: Message) async {
        let wellFormed = Oracle.scanMessage(call).verdict == .valid && call.serial != 0
        let prediction = Model.predict(call, stores: stores)
        CrashContext.phase = "handle"
        let reply = await server.handle(call)
        stats.dispatched += 1

        // Property writes and resets happen whether or not a reply is wanted.
        if let w = prediction.write {
            let now = stores[w.store].get(w.name)
            if !Same.values(now, w.value) { fail("Set did not store the value", "\(call)") }
        }
        if let index = prediction.reset {
            for spec in FuzzObjects.propertySpecs where !Same.values(stores[index].get(spec.name), spec.initial) {
                fail("Reset did not restore \(spec.name)", "\(call)")
            }
        }

        if call.noReplyExpected {
            if let reply { fail("handle replied to a call that expects no reply", "\(reply)") }
            return
        }
        guard let reply else {
            fail("handle returned no reply to a call that expects one", "\(call)")
            return
        }
        stats.replies += 1
        if reply.kind != .methodReturn && reply.kind != .error { fail("the reply is a \(reply.kind)", "\(call)") }
        if reply.replySerial != call.serial { fail("wrong reply serial", "\(reply.replySerial) for \(call.serial)") }
        if !Same.optionalStrings(reply.destination, call.sender) { fail("the reply goes elsewhere", "\(reply) for \(call)") }
        if reply.path != nil || reply.interface != nil || reply.member != nil { fail("the reply carries call headers", "\(reply)") }
        if reply.kind == .error {
            stats.errorReplies += 1
            if !Oracle.isValidErrorName(reply.errorName ?? "") {
                fail("an error reply with an invalid error name", "\(reply.errorName ?? "nil") for \(call)")
            }
            if reply.body.count != 1 || Oracle.typeOf(reply.body[0]) != .string {
                fail("an error reply without one string argument", "\(reply.body.signatureText)")
            }
        } else if reply.errorName != nil {
            fail("a method return with an error name", "\(reply)")
        }

        var tooDeep = false
        switch prediction.outcome {
        case .reply(let body):
            stats.handlerReplies += 1
            if reply.kind != .methodReturn || !Same.bodies(reply.body, body) {
                fail(
                    "the reply is not what the model predicts",
                    "\(call) body \(call.body.description.prefix(200)): got \(reply) \(reply.body.description.prefix(200)) "
                        + (reply.asError.map { "(\($0))" } ?? "") + ", expected \(body.description.prefix(200))")
            }
        case .replyTooDeep(let body):
            tooDeep = true
            stats.getAllTooDeep += 1
            note("Properties reply too deep to encode (a Set value nested near the limit)", "\(call)")
            if reply.kind != .methodReturn || !Same.bodies(reply.body, body) {
                fail("the reply is not what the model predicts (deep)", "\(call): got \(reply)")
            }
        case .introspection(let interfaces, let children):
            guard reply.kind == .methodReturn, reply.body.count == 1, case .string(let xml) = reply.body[0] else {
                fail("Introspect did not return one string", "\(reply) \(reply.asError.map { "\($0)" } ?? "")")
                break
            }
            checkIntrospection(xml, interfaces: interfaces, children: children, call: call)
        case .error(let name):
            if reply.kind != .error || reply.errorName != name {
                fail(
                    "the reply is not the error the model predicts",
                    "\(call) body \(call.body.description.prefix(200)): got \(reply) \(reply.asError.map { "\($0)" } ?? ""), expected \(name)")
            }
        }

        // A reply to a well-formed call must be sendable as it is.
        CrashContext.phase = "marshal (reply)"
        do {
            let bytes = try reply.marshal()
            if tooDeep { fail("a too-deep reply encoded", "\(reply)") }
            if wellFormed && Oracle.scanBody(reply.body).fds == 0 {  // bytes cannot carry descriptors
                CrashContext.setInput(bytes)
                CrashContext.phase = "demarshal (reply)"
                let back = try Message.demarshal(bytes)
                if let diff = Same.difference(reply, back, compareSerial: false) { fail("the reply does not round-trip", diff, bytes: bytes) }
            }
        } catch {
            if wellFormed && !tooDeep { fail("the reply to a well-formed call cannot be encoded", "\(error); \(reply) for \(call)") }
        }
    }

    private func checkIntrospection(_ xml: String, interfaces: [String], children: [String], call: Message) {
        guard xml.hasPrefix("<!DOCTYPE node"), xml.contains("<node>"), xml.hasSuffix("</node>\n") else {
            fail("Introspect XML is not a node document", String(xml.prefix(200)))
            return
        }
        let found = xml.split(separator: "<interface name=\"").dropFirst().map { $0.prefix { $0 != "\"" } }.map(String.init)
        if found.sorted() != interfaces.sorted() {
            fail("Introspect lists the wrong interfaces", "\(found) != \(interfaces) at \(call.path?.rawValue ?? "/")")
        }
        let nodes = xml.split(separator: "<node name=\"").dropFirst().map { $0.prefix { $0 != "\"" } }.map(String.init)
        if nodes != children {
            fail("Introspect lists the wrong children", "\(nodes) != \(children) at \(call.path?.rawValue ?? "/")")
        }
    }

    /// A method call aimed at the exported objects: real paths, interfaces, members and
    /// argument types most of the time, near misses the rest.
    func structuredCall(_ g: inout Generator, wild: Bool) -> Message {
        var m = Message(kind: .methodCall)
        m.serial = g.r.chance(1, 30) ? 0 : UInt32(g.r.int(1...1_000_000))
        let pathText: String
        switch g.r.below(10) {
        case 0...5: pathText = g.r.pick([FuzzObjects.mainPath, FuzzObjects.mainPath, FuzzObjects.childOne, FuzzObjects.deepPath, FuzzObjects.otherPath]).rawValue
        case 6...8: pathText = g.r.pick(FuzzObjects.interestingPaths)
        default: pathText = g.pathText()
        }
        let path = (try? ObjectPath(pathText)) ?? .root
        m.path = path
        let exported = FuzzObjects.table[path] ?? [FuzzObjects.calls, FuzzObjects.props]
        let interface: String?
        switch g.r.weighted([50, 20, 5, 15, 3, 7]) {
        case 0: interface = g.r.pick(exported)
        case 1: interface = "org.freedesktop.DBus.Properties"
        case 2: interface = "org.freedesktop.DBus.Introspectable"
        case 3: interface = nil
        case 4: interface = "org.freedesktop.DBus.Peer"
        default: interface = g.r.bool() ? g.interfaceName() : g.r.pick([FuzzObjects.calls, FuzzObjects.props, FuzzObjects.empty])
        }
        m.interface = interface
        g.nodes = 80

        if interface == "org.freedesktop.DBus.Properties" {
            m.member = g.r.chance(9, 10) ? g.r.pick(["Get", "GetAll", "Set", "Get", "Set"]) : g.member()
            let ifaceArg = g.r.chance(4, 5) ? g.r.pick(exported + [FuzzObjects.props, ""]) : g.interfaceName()
            let spec = g.r.pick(FuzzObjects.propertySpecs)
            let propArg = g.r.chance(9, 10) ? spec.name : g.member()
            switch m.member {
            case "Get": m.body = [.string(ifaceArg), .string(propArg)]
            case "GetAll": m.body = [.string(ifaceArg)]
            case "Set":
                let value: DBusValue
                switch g.r.below(6) {
                case 0: value = g.value(of: g.r.pick(FuzzObjects.propertySpecs).type, depthLeft: 63)
                case 1 where spec.name == "Anything" || spec.name == "Options": value = deepValue(&g, for: spec.type)
                case 2 where spec.name == "Name": value = .string("")
                default: value = g.value(of: spec.type, depthLeft: 63)
                }
                m.body = [.string(ifaceArg), .string(propArg), .variant(value)]
            default: m.body = g.body(.normal)
            }
            if g.r.chance(1, 10) { m.body = g.body(.normal) }
        } else if interface == "org.freedesktop.DBus.Introspectable" || (interface == nil && g.r.chance(1, 6)) {
            m.member = g.r.chance(9, 10) ? "Introspect" : g.member()
            if g.r.chance(1, 10) { m.body = g.body(.normal) }
        } else {
            let d = interface.flatMap(FuzzObjects.description(of:)) ?? (g.r.bool() ? FuzzObjects.callsDescription : FuzzObjects.propsDescription)
            if let method = d.methods.isEmpty || g.r.chance(1, 10) ? nil : g.r.pick(d.methods) {
                m.member = method.name
                if g.r.chance(9, 10) {
                    m.body = method.inputs.map { arg in
                        arg.type == .variant && g.r.chance(1, 4) ? deepValue(&g, for: .variant) : g.value(of: arg.type, depthLeft: 64)
                    }
                } else {
                    m.body = g.body(.normal)
                }
            } else {
                m.member = g.member()
                m.body = g.body(.normal)
            }
        }
        if g.r.chance(3, 4) { m.sender = ":1." + String(g.r.int(1...500)) }
        if g.r.chance(1, 3) { m.destination = "org.bgpolicy.Fuzz" }
        m.noReplyExpected = g.r.chance(1, 10)
        m.noAutoStart = g.r.chance(1, 10)
        if wild {
            switch g.r.below(3) {
            case 0: g.addHeaderNoise(&m)
            case 1: m.body = g.body(.wild)
            default: m.sender = g.r.bool() ? ":1" : g.noise(m.sender ?? ":1.1")
            }
        }
        return m
    }

    /// A value of the given type nested close to the 64-container limit.
    private func deepValue(_ g: inout Generator, for type: DBusType) -> DBusValue {
        let levels = g.r.int(55...63)
        var v: DBusValue = g.r.bool() ? .int32(1) : .array(element: .int32, [.int32(2)])
        for _ in 0..<levels { v = g.r.chance(4, 5) ? .variant(v) : .structure([v]) }
        switch type {
        case .variant:
            return .variant(v)
        case .dictionary(key: .string, value: .variant):
            return .dictionary(key: .string, value: .variant, [DBusDictEntry(key: .string("deep"), value: .variant(v))])
        default:
            return g.value(of: type, depthLeft: 63)
        }
    }

    // MARK: Names and signatures

    /// The layer's parsers and validators against the oracle, on near-miss text.
    private func textChecks(_ g: inout Generator) {
        CrashContext.phase = "names and signatures"
        for _ in 0..<8 {
            stats.textChecks += 1
            let text = signatureText(&g)
            let oracle = Oracle.isStrictSignature(text)
            let parsed = try? Signature(text)
            if (parsed != nil) != oracle {
                fail(
                    "Signature(\"\(text)\") disagrees with the oracle",
                    "layer \(parsed != nil), oracle \(oracle), libdbus \(Oracle.isLibdbusSignature(text))")
            }
            if let parsed {
                if !Same.strings(parsed.rawValue, text) { fail("Signature changed its text", text) }
                let rebuilt = try? Signature(types: parsed.types)
                if rebuilt.map({ Same.strings($0.rawValue, text) }) != true { fail("Signature(types:) does not rebuild", text) }
                let single = try? DBusType(signature: text)
                if (single != nil) != (parsed.types.count == 1) { fail("DBusType(signature:) and Signature disagree", text) }
            }
        }
        for _ in 0..<8 {
            stats.textChecks += 1
            var name: String
            switch g.r.below(5) {
            case 0: name = g.member()
            case 1: name = g.interfaceName()
            case 2: name = g.busName()
            case 3: name = g.r.bool() ? g.pathNoise(g.pathText()) : g.pathText()
            default: name = g.string(allowNUL: true, maxLength: 12)
            }
            if g.r.chance(1, 2) { name = g.noise(name) }
            check(DBusNames.isValidMember(name), Oracle.isValidMember(name), "isValidMember", name)
            check(DBusNames.isValidInterface(name), Oracle.isValidInterface(name), "isValidInterface", name)
            check(DBusNames.isValidErrorName(name), Oracle.isValidErrorName(name), "isValidErrorName", name)
            check(DBusNames.isValidBusName(name), Oracle.isValidBusName(name), "isValidBusName", name)
            check((try? ObjectPath(name)) != nil, Oracle.isValidPath(name), "ObjectPath", name)
        }
        interfaceDescriptionCheck(&g)
        // Swift decoding of random values never traps.
        g.nodes = 40
        var sig = 40
        let t = g.type(depthLeft: 8, arrays: 0, structs: 0, sig: &sig, level: 3)
        let v = g.value(of: t, depthLeft: 8)
        _ = try? v.decode([String: Variant].self)
        _ = try? v.decode([String].self)
        _ = try? v.decode([[Int32]].self)
        _ = try? v.decode(Variant.self)
        _ = try? v.decode(ObjectPath.self)
        _ = try? [v].decode(Int32.self, at: g.r.int(-1...2))
        if let d = try? v.decode([String: Variant].self), !Same.values(d.dbusValue, v), case .dictionary(_, _, let e) = v,
            Set(e.map(\.key)).count == e.count, d.count != e.count
        {
            fail("a{sv} decoding lost entries", "\(v)")
        }
    }

    /// Interface descriptions with near-miss names and hostile documentation: validation
    /// agrees with the oracle, and the generated XML keeps every comment well-formed.
    private func interfaceDescriptionCheck(_ g: inout Generator) {
        func doc(_ g: inout Generator) -> String {
            var parts: [String] = []
            for _ in 0..<g.r.int(0...6) {
                parts.append(g.r.chance(1, 2) ? g.r.pick(["-", "--", "---", "-->", "<!--", "\n", "\n\n", "<", "&", "\"", "x-", "-x"]) : g.string(allowNUL: false, maxLength: 6))
            }
            return parts.joined()
        }
        let name = g.r.chance(3, 4) ? g.interfaceName() : g.noise(g.interfaceName())
        var members: [String] = []
        for _ in 0..<g.r.int(0...4) { members.append(g.r.chance(4, 5) ? g.member() : g.noise(g.member())) }
        let methods = members.prefix(2).map { InterfaceDescription.Method($0, inputs: [.init(doc(&g), .string, doc(&g))], documentation: doc(&g)) }
        let properties = members.dropFirst(2).prefix(1).map { InterfaceDescription.Property($0, .int32, documentation: doc(&g)) }
        let signals = members.dropFirst(3).map { InterfaceDescription.Signal($0, documentation: doc(&g)) }
        let description = InterfaceDescription(name: name, documentation: doc(&g), methods: methods, properties: properties, signals: signals)
        let expected = Oracle.isValidInterface(name) && members.allSatisfy(Oracle.isValidMember) && Set(members).count == members.count
        let valid = (try? description.validate()) != nil
        if valid != expected { fail("InterfaceDescription.validate disagrees with the oracle", "\(name) \(members): layer \(valid)") }
        guard valid else { return }
        let xml = description.documentXML()
        var rest = Substring(xml)
        while let open = rest.firstRange(of: "<!--") {
            let after = rest[open.upperBound...]
            guard let close = after.firstRange(of: "-->") else {
                fail("introspection XML has an unclosed comment", String(xml.prefix(300)))
                return
            }
            let body = after[..<close.lowerBound]
            if body.contains("--") || body.hasSuffix("-") {
                fail("introspection XML comment contains \"--\"", String(body.prefix(200)))
            }
            rest = after[close.upperBound...]
        }
    }

    private func check(_ layer: Bool, _ oracle: Bool, _ what: String, _ name: String) {
        if layer != oracle { fail("\(what) disagrees with the oracle", "\"\(name)\" (\(Array(name.utf8))): layer \(layer), oracle \(oracle)") }
    }

    private func signatureText(_ g: inout Generator) -> String {
        let n = g.r.int(28...34)
        switch g.r.below(9) {
        case 0, 1:
            return String(decoding: (0..<g.r.smallSize(max: 40)).map { _ in g.r.pick(Mutator.signatureCodes) }, as: UTF8.self)
        case 2:
            var s = g.signature().rawValue
            var b = Array(s.utf8)
            if !b.isEmpty && g.r.bool() { b[g.r.below(b.count)] = g.r.pick(Mutator.signatureCodes) } else { b.insert(g.r.pick(Mutator.signatureCodes), at: g.r.below(b.count + 1)) }
            s = String(decoding: b, as: UTF8.self)
            return s
        case 3: return String(repeating: "a", count: n) + "y"
        case 4: return String(repeating: "(", count: n) + "y" + String(repeating: ")", count: n)
        case 5: return String(repeating: "a{s", count: n) + "y" + String(repeating: "}", count: n)
        case 6: return String(repeating: "a(", count: n / 2 + g.r.int(0...3)) + "y" + String(repeating: ")", count: n / 2 + g.r.int(0...3))
        case 7: return String(repeating: g.r.pick(["y", "s", "v", "ai"]), count: g.r.int(120...260))
        default: return g.signature().rawValue
        }
    }
}

func hex(_ bytes: [UInt8]) -> String {
    let digits = Array("0123456789abcdef".utf8)
    var out = [UInt8]()
    out.reserveCapacity(bytes.count * 2)
    for b in bytes {
        out.append(digits[Int(b >> 4)])
        out.append(digits[Int(b & 15)])
    }
    return String(decoding: out, as: UTF8.self)
}

func unhex(_ text: String) -> [UInt8]? {
    let chars = Array(text.utf8.filter { !($0 == 0x20 || $0 == 0x0a || $0 == 0x3a) })
    guard chars.count % 2 == 0 else { return nil }
    func nibble(_ c: UInt8) -> UInt8? {
        switch c {
        case 0x30...0x39: c - 0x30
        case 0x61...0x66: c - 0x61 + 10
        case 0x41...0x46: c - 0x41 + 10
        default: nil
        }
    }
    var out: [UInt8] = []
    var i = 0
    while i < chars.count {
        guard let h = nibble(chars[i]), let l = nibble(chars[i + 1]) else { return nil }
        out.append(h << 4 | l)
        i += 2
    }
    return out
}

/// `--corpus-out DIR`: inputs worth keeping, for seeding other fuzzers and for replays.
final class Corpus {
    let directory: String
    var sampled = 0
    static let maximumSamples = 2000

    init(directory: String) {
        self.directory = directory
        mkdir(directory, 0o755)
    }

    func sample(_ bytes: [UInt8], name: String) {
        guard sampled < Self.maximumSamples else { return }
        sampled += 1
        save(bytes, name: name)
    }

    func save(_ bytes: [UInt8], name: String) {
        let fd = open(directory + "/" + name + ".bin", O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
        guard fd >= 0 else { return }
        defer { close(fd) }
        _ = bytes.withUnsafeBytes { Glibc.write(fd, $0.baseAddress, $0.count) }
    }
}
