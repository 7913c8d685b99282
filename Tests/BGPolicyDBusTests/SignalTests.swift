import Glibc
import BGPolicyTestSupport
import Testing

@testable import BGPolicyDBus

@Suite("Signals, match rules and bus names")
struct SignalTests {
    static let interface = "org.bgpolicy.Test.Signals"
    static let path = ObjectPath(checked: "/org/bgpolicy/Test/Signals")
    static let wellKnown = "org.bgpolicy.Test.Emitter"

    static func emit(_ connection: DBusConnection, _ text: String, member: String = "Changed", path: ObjectPath = path) throws {
        try connection.emitSignal(path: path, interface: interface, member: member, body: [.string(text)])
    }

    /// 8 signals of 256 KiB: more than the sockets hold, so that with the bus paused the rest
    /// waits in libdbus, for a bus that does not read.
    static func emitMoreThanTheSocketsHold(_ connection: DBusConnection) throws {
        let text = String(repeating: "x", count: 1 << 18)
        for _ in 0..<8 { try emit(connection, text) }
    }

    /// The text of each signal, as emitted by `emit`.
    static func texts(_ messages: [Message]) -> [String] {
        messages.map { message in
            if case .string(let s)? = message.body.first { return s }
            return "<\(message.signature)>"
        }
    }

    /// After this returns, the bus has routed every message `connection` sent before it.
    static func flush(_ connection: DBusConnection) async throws {
        _ = try await connection.busID()
    }

    @Test("a subscription by unique sender gets that sender's signals only")
    func byUniqueSender() async throws {
        let bus = try PrivateBus()
        let c = try await connect(3, to: bus)
        let (listener, emitter, other) = (c[0], c[1], c[2])
        let subscription = try await listener.subscribe(MatchRule(sender: emitter.uniqueName, interface: Self.interface, member: "Changed"))
        // A broad subscription on the same connection makes the bus send the listener every
        // sender's signals, so the sender filter is also tested locally.
        let broad = try await listener.subscribe(MatchRule(interface: Self.interface))

        try Self.emit(other, "from other")
        try await Self.flush(other)
        try Self.emit(emitter, "from emitter")

        let message = try await firstSignal(of: subscription)
        #expect(message.kind == .signal)
        #expect(message.sender == emitter.uniqueName)
        #expect(message.path == Self.path)
        #expect(message.interface == Self.interface)
        #expect(message.member == "Changed")
        #expect(message.body == [.string("from emitter")])
        let all = try await signals(of: broad, count: 2)
        #expect(Self.texts(all) == ["from other", "from emitter"])
        #expect(all.map(\.sender) == [other.uniqueName, emitter.uniqueName])
        for connection in c { connection.close() }
    }

    @Test("closeAndWait returns once everything sent before it is on the bus, so a process may exit next")
    func closeAndWaitWritesWhatWasSent() async throws {
        let bus = try PrivateBus()
        let c = try await connect(2, to: bus)
        let (listener, emitter) = (c[0], c[1])
        let subscription = try await listener.subscribe(MatchRule(sender: emitter.uniqueName, interface: Self.interface))
        // Big enough that writing them takes the connection's thread a while.
        let count = 8
        let texts = (0..<count).map { "\($0)" + String(repeating: "x", count: 1 << 18) }
        for text in texts { try Self.emit(emitter, text) }
        await emitter.closeAndWait()
        // Closed, not only asked to close: close() returns before the connection's own thread
        // has written them, and a process that exits then loses them.
        #expect(!emitter.isConnected)
        let all = try await signals(of: subscription, count: count)
        #expect(Self.texts(all) == texts)
        await emitter.closeAndWait()  // again, on a closed connection: returns at once
        listener.close()
    }

    @Test("flush on a bus that does not read leaves the connection serving: a call behind it still times out")
    func flushDoesNotHoldTheConnection() async throws {
        let bus = try PrivateBus()
        let c = try await DBusConnection.connect(to: .address(bus.address))
        bus.pause()
        defer { bus.resume() }
        try Self.emitMoreThanTheSocketsHold(c)
        let flushing = Task { await c.flush() }
        let error = try await withTimeout(.seconds(5), "a call on the flushing connection") { () -> DBusError? in
            do {
                _ = try await c.call(
                    destination: DBusConnection.busName, path: DBusConnection.busPath, interface: DBusConnection.busName, member: "GetId",
                    [], timeout: .seconds(1))
                return nil
            } catch let error as DBusError {
                return error
            }
        }
        guard case .remote(DBusError.noReply, _)? = error else {
            Issue.record("expected NoReply, got \(String(describing: error))")
            return
        }
        // Once the bus reads again, the flush finishes.
        bus.resume()
        _ = try await withTimeout(.seconds(5), "the flush after the bus went on") { await flushing.value }
        c.close()
    }

    @Test("flush gives up at its timeout on a bus that does not read, and says so; it says true once all is written")
    func flushTimesOut() async throws {
        let bus = try PrivateBus()
        let c = try await DBusConnection.connect(to: .address(bus.address))
        #expect(await c.flush(timeout: .milliseconds(300)), "nothing queued: flushed at once")
        bus.pause()
        defer { bus.resume() }
        try Self.emitMoreThanTheSocketsHold(c)
        let clock = ContinuousClock()
        let start = clock.now
        let flushed = try await withTimeout(.seconds(5), "the flush's timeout") { await c.flush(timeout: .milliseconds(300)) }
        #expect(!flushed)
        #expect(clock.now - start >= .milliseconds(250))
        bus.resume()
        #expect(try await withTimeout(.seconds(5), "a flush on a bus that reads") { await c.flush(timeout: .seconds(4)) })
        c.close()
        #expect(try await withTimeout(.seconds(5), "a flush on a closed connection") { await c.flush() } == false)
    }

    /// A task cancelled before it flushes: the cancellation handler runs before the flush is
    /// on the loop, so it found nothing to stop, and the flush waited out its timeout.
    @Test("a flush from a task already cancelled ends at once, false while the bus does not read")
    func flushAlreadyCancelled() async throws {
        let bus = try PrivateBus()
        let c = try await DBusConnection.connect(to: .address(bus.address))
        defer { c.close() }
        bus.pause()
        defer { bus.resume() }
        try Self.emitMoreThanTheSocketsHold(c)
        let clock = ContinuousClock()
        let start = clock.now
        // A timeout far from "at once", so that a machine other suites load cannot blur them
        // (in a full parallel run the task itself took 2 s to run).
        let flush = Task {
            withUnsafeCurrentTask { $0?.cancel() }
            return await c.flush(timeout: .seconds(60))
        }
        let flushed = try await withTimeout(.seconds(70), "the cancelled flush") { await flush.value }
        #expect(!flushed)
        #expect(clock.now - start < .seconds(30), "took \(clock.now - start)")
    }

    @Test("a subscription by well-known sender follows the name's owner, and ignores other senders")
    func byWellKnownSender() async throws {
        let bus = try PrivateBus()
        let c = try await connect(3, to: bus)
        let (listener, emitter, intruder) = (c[0], c[1], c[2])
        #expect(try await emitter.requestName(Self.wellKnown) == .primaryOwner)
        let subscription = try await listener.subscribe(MatchRule(sender: Self.wellKnown, interface: Self.interface, member: "Changed"))
        let broad = try await listener.subscribe(MatchRule(interface: Self.interface, member: "Changed"))

        try Self.emit(intruder, "intruder")
        try await Self.flush(intruder)
        try Self.emit(emitter, "owner")
        let first = try await firstSignal(of: subscription)
        #expect(first.sender == emitter.uniqueName)
        #expect(Self.texts([first]) == ["owner"], "a signal from a connection that does not own the name leaked through")
        #expect(Self.texts(try await signals(of: broad, count: 2)) == ["intruder", "owner"])

        // The name moves to the intruder: now its signals match, and the old owner's do not.
        #expect(try await emitter.releaseName(Self.wellKnown) == .released)
        #expect(try await intruder.requestName(Self.wellKnown) == .primaryOwner)
        try Self.emit(emitter, "old owner")
        try await Self.flush(emitter)
        try Self.emit(intruder, "new owner")
        let second = try await firstSignal(of: subscription)
        #expect(second.sender == intruder.uniqueName)
        #expect(Self.texts([second]) == ["new owner"])
        #expect(Self.texts(try await signals(of: broad, count: 2)) == ["old owner", "new owner"])
        for connection in c { connection.close() }
    }

    @Test("arg0 (and argN) matching, with quotes, commas and backslashes in the value")
    func argumentMatching() async throws {
        let bus = try PrivateBus()
        let c = try await connect(2, to: bus)
        let (listener, emitter) = (c[0], c[1])
        let tricky = "it's, a \\ 'test'="
        let wanted = try await listener.subscribe(MatchRule(interface: Self.interface, member: "Changed", arguments: [0: "wanted"]))
        let quoted = try await listener.subscribe(MatchRule(interface: Self.interface, arguments: [0: tricky]))
        let second = try await listener.subscribe(MatchRule(interface: Self.interface, member: "Pair", arguments: [1: "b"]))
        _ = try await listener.subscribe(MatchRule(interface: Self.interface))  // so the bus sends everything

        try Self.emit(emitter, "unwanted")
        try Self.emit(emitter, "wanted!")
        try Self.emit(emitter, tricky)
        try Self.emit(emitter, "wanted")
        for pair in [("a", "a"), ("x", "b")] {
            try emitter.emitSignal(path: Self.path, interface: Self.interface, member: "Pair", body: [.string(pair.0), .string(pair.1)])
        }
        #expect(Self.texts([try await firstSignal(of: wanted)]) == ["wanted"])
        #expect(Self.texts([try await firstSignal(of: quoted)]) == [tricky])
        #expect(try await firstSignal(of: second).body == [.string("x"), .string("b")])
        for connection in c { connection.close() }
    }

    @Test("path and path_namespace matching")
    func pathMatching() async throws {
        let bus = try PrivateBus()
        let c = try await connect(2, to: bus)
        let (listener, emitter) = (c[0], c[1])
        let exact = try await listener.subscribe(MatchRule(interface: Self.interface, path: ObjectPath(checked: "/a/b")))
        let namespace = try await listener.subscribe(MatchRule(interface: Self.interface, pathNamespace: ObjectPath(checked: "/a/b")))
        for path in ["/a", "/a/bc", "/a/b/c", "/a/b"] {
            try Self.emit(emitter, path, path: ObjectPath(checked: path))
        }
        #expect(Self.texts(try await signals(of: namespace, count: 2)) == ["/a/b/c", "/a/b"])
        #expect(Self.texts([try await firstSignal(of: exact)]) == ["/a/b"])
        for connection in c { connection.close() }
    }

    @Test("several subscriptions on one connection each get a matching signal")
    func fanOut() async throws {
        let bus = try PrivateBus()
        let c = try await connect(2, to: bus)
        let (listener, emitter) = (c[0], c[1])
        var subscriptions: [SignalSubscription] = []
        for _ in 0..<5 { subscriptions.append(try await listener.subscribe(MatchRule(interface: Self.interface, member: "Changed"))) }
        try Self.emit(emitter, "to all")
        for subscription in subscriptions {
            #expect(Self.texts([try await firstSignal(of: subscription)]) == ["to all"])
        }
        for connection in c { connection.close() }
    }

    /// The number of match rules `connection` has on the bus, from the bus's Debug.Stats
    /// interface; nil if this dbus-daemon was built without it (a test that needs it records
    /// an issue then: the bus the tests run on has it).
    static func matchRules(of connection: DBusConnection, asking asker: DBusConnection) async throws -> UInt32? {
        do {
            let body = try await asker.call(
                destination: DBusConnection.busName, path: DBusConnection.busPath, interface: "org.freedesktop.DBus.Debug.Stats",
                member: "GetConnectionStats", [.string(connection.uniqueName)])
            return try body.decode(VariantDictionary.self, at: 0).optional("MatchRules", as: UInt32.self)
        } catch DBusError.remote(let name, _) where name.hasPrefix("org.freedesktop.DBus.Error.Unknown") {
            return nil
        }
    }

    @Test("ending or cancelling the iteration removes the match rule; other subscriptions keep working")
    func endingRemovesMatch() async throws {
        let bus = try PrivateBus()
        let c = try await connect(3, to: bus)
        let (listener, emitter, observer) = (c[0], c[1], c[2])
        let baseline = try await Self.matchRules(of: listener, asking: observer)
        if baseline == nil {
            // The other checks still run; this one is not passed in silence.
            Issue.record("the private bus answers no Debug.Stats.GetConnectionStats, so the match rules cannot be counted")
        }
        func expectRules(_ delta: UInt32, _ what: String, sourceLocation: SourceLocation = #_sourceLocation) async throws {
            guard let baseline else { return }  // recorded above
            let ok = await eventually {
                (try? await Self.matchRules(of: listener, asking: observer)) == baseline + delta
            }
            let now = try await Self.matchRules(of: listener, asking: observer)
            #expect(ok, "\(what): \(String(describing: now)) rules, expected \(baseline + delta)", sourceLocation: sourceLocation)
        }

        let keeper = try await listener.subscribe(MatchRule(interface: Self.interface, member: "Keep"))
        try await expectRules(1, "after one subscription")

        // A consumer that stops after one signal: its subscription goes with it.
        let subscribed = Gate()
        let consumer = Task { () -> [DBusValue] in
            let subscription = try await listener.subscribe(MatchRule(interface: Self.interface, member: "Changed"))
            subscribed.open()
            for try await message in subscription { return message.body }
            return []
        }
        try await withTimeout(.seconds(5), "the subscription") { await subscribed.wait() }
        try await expectRules(2, "with the consumer subscribed")
        try Self.emit(emitter, "once")
        #expect(try await withTimeout(.seconds(5), "the consumer") { try await consumer.value } == [.string("once")])
        try await expectRules(1, "after the consumer stopped iterating")

        // A consumer whose task is cancelled.
        let subscribedAgain = Gate()
        let cancelled = Task {
            let subscription = try await listener.subscribe(MatchRule(interface: Self.interface, member: "Changed"))
            subscribedAgain.open()
            for try await _ in subscription {}
        }
        try await withTimeout(.seconds(5), "the second subscription") { await subscribedAgain.wait() }
        try await expectRules(2, "with the second consumer subscribed")
        cancelled.cancel()
        _ = try await withTimeout(.seconds(5), "the cancelled consumer") { await cancelled.result }
        try await expectRules(1, "after the consumer was cancelled")

        // A subscription by well-known sender also tracks the owner (one more rule); two share it.
        do {
            let first = try await listener.subscribe(MatchRule(sender: Self.wellKnown, interface: Self.interface))
            let second = try await listener.subscribe(MatchRule(sender: Self.wellKnown, member: "Changed"))
            try await expectRules(4, "with two well-known-sender subscriptions and their shared owner tracking")
            withExtendedLifetime(first) {}
            withExtendedLifetime(second) {}
        }
        try await expectRules(1, "after both were dropped")

        // The remaining subscription was never disturbed.
        try listener.emitSignal(path: Self.path, interface: Self.interface, member: "Keep", body: [.int32(1)])
        try emitter.emitSignal(path: Self.path, interface: Self.interface, member: "Keep", body: [.int32(2)])
        let kept = try await signals(of: keeper, count: 2)
        #expect(Set(kept.map(\.body)) == [[.int32(1)], [.int32(2)]])
        for connection in c { connection.close() }
    }

    /// How many calls `connection` is waiting on a reply for (written to the bus, or queued to be).
    static func pendingCalls(of connection: DBusConnection) async -> Int {
        await withCheckedContinuation { (c: CheckedContinuation<Int, Never>) in
            let queued = connection.loop.enqueue { loop in c.resume(returning: loop.pendingCallCount) }
            if !queued { c.resume(returning: -1) }
        }
    }

    @Test("a subscribe cancelled before the bus answered its AddMatch leaves no match rule on the bus")
    func cancelledSubscribeLeavesNoRule() async throws {
        let bus = try PrivateBus()
        let c = try await connect(3, to: bus)
        let (listener, emitter, observer) = (c[0], c[1], c[2])
        defer {
            bus.resume()
            for connection in c { connection.close() }
        }
        #expect(try await emitter.requestName(Self.wellKnown) == .primaryOwner)
        guard let baseline = try await Self.matchRules(of: listener, asking: observer) else {
            Issue.record("the private bus answers no Debug.Stats.GetConnectionStats, so the match rules cannot be counted")
            return
        }
        // A plain rule, and one whose sender is a well-known name (whose owner tracking is set
        // up first, by a task of its own that outlives the cancelled subscribe).
        for rule in [MatchRule(interface: Self.interface, member: "Changed"), MatchRule(sender: Self.wellKnown, interface: Self.interface)] {
            bus.pause()
            let subscribing = Task { try await listener.subscribe(rule) }
            // Cancelled once its first AddMatch is in libdbus's hands: the paused bus reads it later.
            #expect(await eventually(.seconds(10)) { await Self.pendingCalls(of: listener) == 1 }, "\(rule.text)")
            subscribing.cancel()
            let result = try await withTimeout(.seconds(10), "the cancelled subscribe") { await subscribing.result }
            #expect(throws: CancellationError.self, "\(rule.text)") { try result.get() }
            bus.resume()
            try await Self.flush(listener)  // the bus has read the AddMatch, and all sent before GetId
            let back = await eventually(.seconds(10)) { (try? await Self.matchRules(of: listener, asking: observer)) == baseline }
            let now = try await Self.matchRules(of: listener, asking: observer)
            #expect(back, "\(rule.text): \(String(describing: now)) rules, expected \(baseline)")
        }
    }

    @Test("a subscriber cancelled while the owner tracking it shares is set up leaves the other subscriber its signals")
    func cancelledSharerLeavesTheOwnerTracked() async throws {
        let bus = try PrivateBus()
        let c = try await connect(2, to: bus)
        let (listener, emitter) = (c[0], c[1])
        defer {
            bus.resume()
            for connection in c { connection.close() }
        }
        #expect(try await emitter.requestName(Self.wellKnown) == .primaryOwner)
        bus.pause()
        let first = Task { try await listener.subscribe(MatchRule(sender: Self.wellKnown, interface: Self.interface, member: "Changed")) }
        // The owner tracking's AddMatch is out, unanswered; then the second takes its share.
        #expect(await eventually(.seconds(10)) { await Self.pendingCalls(of: listener) == 1 })
        let second = Task { try await listener.subscribe(MatchRule(sender: Self.wellKnown, interface: Self.interface)) }
        #expect(await eventually(.seconds(10)) { listener.subscriptions.ownerTrackers(of: Self.wellKnown) == 2 })
        first.cancel()
        let cancelled = try await withTimeout(.seconds(10), "the cancelled subscribe") { await first.result }
        #expect(throws: CancellationError.self) { try cancelled.get() }
        bus.resume()
        let subscription = try await withTimeout(.seconds(10), "the second subscribe") { try await second.value }
        try Self.emit(emitter, "owner")
        #expect(Self.texts([try await firstSignal(of: subscription, within: .seconds(10))]) == ["owner"])
        #expect(listener.subscriptions.ownerTrackers(of: Self.wellKnown) == 1)
    }

    @Test("emitPropertiesChanged arrives as PropertiesChanged with the right body")
    func propertiesChanged() async throws {
        let bus = try PrivateBus()
        let c = try await connect(2, to: bus)
        let (listener, emitter) = (c[0], c[1])
        let subscription = try await listener.subscribe(
            MatchRule(sender: emitter.uniqueName, interface: ObjectServer.propertiesInterface, member: "PropertiesChanged", path: Self.path))
        try emitter.emitPropertiesChanged(
            path: Self.path, interface: "org.bgpolicy.Test1", changed: ["Count": .uint32(3), "Name": .string("x"), "List": .array(element: .int32, [])],
            invalidated: ["Gone", "AlsoGone"])
        try emitter.emitPropertiesChanged(path: Self.path, interface: "org.bgpolicy.Test1", changed: [:])

        let messages = try await signals(of: subscription, count: 2)
        let first = messages[0]
        #expect(first.path == Self.path)
        #expect(first.signature == "sa{sv}as")
        #expect(first.body.count == 3)
        #expect(try first.body.decode(String.self, at: 0) == "org.bgpolicy.Test1")
        #expect(
            try first.body.decode(VariantDictionary.self, at: 1)
                == ["Count": Variant(UInt32(3)), "Name": Variant("x"), "List": Variant(DBusValue.array(element: .int32, []))])
        #expect(try first.body.decode([String].self, at: 2) == ["Gone", "AlsoGone"])
        #expect(
            messages[1].body == [.string("org.bgpolicy.Test1"), .dictionary(key: .string, value: .variant, []), .array(element: .string, [])])
        for connection in c { connection.close() }
    }

    @Test("requestName and releaseName report what the bus did")
    func requestName() async throws {
        let bus = try PrivateBus()
        let c = try await connect(2, to: bus)
        let (a, b) = (c[0], c[1])
        let name = "org.bgpolicy.Test.Named"
        #expect(try await a.nameOwner(of: name) == nil)
        #expect(try await a.requestName(name) == .primaryOwner)
        #expect(try await a.requestName(name) == .alreadyOwner)
        #expect(try await b.requestName(name, flags: .doNotQueue) == .exists)
        #expect(try await b.requestName(name) == .inQueue)
        #expect(try await b.nameOwner(of: name) == a.uniqueName)
        #expect(try await a.releaseName(name) == .released)
        #expect(try await a.nameOwner(of: name) == b.uniqueName, "the queued connection takes over")
        #expect(try await a.releaseName(name) == .notOwner)
        #expect(try await a.releaseName("org.bgpolicy.Test.NeverOwned") == .nonExistent)
        #expect(try await a.nameOwner(of: a.uniqueName) == a.uniqueName)
        await #expect(throws: DBusError.self) { _ = try await a.requestName(":1.99") }
        await #expect(throws: DBusError.self) { _ = try await a.requestName("not a name") }
        await #expect(throws: DBusError.self) { _ = try await a.nameOwner(of: "not a name") }
        for connection in c { connection.close() }
    }

    @Test("NameLost fires when another connection replaces us, if we allowed it")
    func nameLost() async throws {
        let bus = try PrivateBus()
        let c = try await connect(3, to: bus)
        let (a, b, d) = (c[0], c[1], c[2])
        let name = "org.bgpolicy.Test.Replaceable"
        #expect(try await a.requestName(name, flags: [.allowReplacement, .doNotQueue]) == .primaryOwner)
        let lost = try await a.nameLostSignals()
        #expect(try await b.requestName(name, flags: .replaceExisting) == .primaryOwner)
        let signal = try await firstSignal(of: lost)
        #expect(signal.sender == DBusConnection.busName)
        #expect(signal.member == "NameLost")
        #expect(signal.body == [.string(name)])
        #expect(try await a.nameOwner(of: name) == b.uniqueName)
        // b did not allow replacement: d cannot take the name from it.
        #expect(try await d.requestName(name, flags: [.replaceExisting, .doNotQueue]) == .exists)
        #expect(try await a.nameOwner(of: name) == b.uniqueName)
        for connection in c { connection.close() }
    }

    @Test("watchNameOwner yields the current owner, then each new one, then nil")
    func watchNameOwner() async throws {
        let bus = try PrivateBus()
        let c = try await connect(3, to: bus)
        let (watcher, a, b) = (c[0], c[1], c[2])
        let name = "org.bgpolicy.Test.Watched"
        #expect(try await a.requestName(name, flags: [.allowReplacement, .doNotQueue]) == .primaryOwner)

        let seen = Recorder<String?>()
        let stream = try await watcher.watchNameOwner(name)
        let consumer = Task {
            for try await owner in stream { seen.append(owner) }
        }
        defer { consumer.cancel() }
        #expect(await eventually { seen.count >= 1 })
        #expect(seen.all == [a.uniqueName])

        #expect(try await b.requestName(name, flags: .replaceExisting) == .primaryOwner)
        #expect(await eventually { seen.count >= 2 })
        #expect(seen.all == [a.uniqueName, b.uniqueName])

        b.close()
        #expect(await eventually { seen.count >= 3 })
        #expect(seen.all == [a.uniqueName, b.uniqueName, nil])

        // A name nobody owns yet starts with nil.
        let unowned = Recorder<String?>()
        let second = try await watcher.watchNameOwner("org.bgpolicy.Test.Later")
        let secondConsumer = Task {
            for try await owner in second { unowned.append(owner) }
        }
        defer { secondConsumer.cancel() }
        #expect(await eventually { unowned.count >= 1 })
        #expect(try await a.requestName("org.bgpolicy.Test.Later") == .primaryOwner)
        #expect(await eventually { unowned.count >= 2 })
        #expect(unowned.all == [nil, a.uniqueName])
        watcher.close()
        a.close()
    }

    @Test("credentials(of:) gives our own pid and uid")
    func credentials() async throws {
        let bus = try PrivateBus()
        let c = try await connect(2, to: bus)
        let (a, b) = (c[0], c[1])
        let own = try await a.credentials(of: a.uniqueName)
        #expect(own.pid == UInt32(getpid()))
        #expect(own.uid == getuid())
        #expect(try await a.requestName("org.bgpolicy.Test.Creds") == .primaryOwner)
        let byName = try await b.credentials(of: "org.bgpolicy.Test.Creds")
        #expect(byName.pid == UInt32(getpid()))
        #expect(byName.uid == getuid())
        await expectRemoteError(DBusError.nameHasNoOwner) { _ = try await b.credentials(of: "org.bgpolicy.Test.Nobody") }
        await #expect(throws: DBusError.self) { _ = try await b.credentials(of: "not a name") }
        for connection in c { connection.close() }
    }
}
