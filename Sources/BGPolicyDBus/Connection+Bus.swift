/// Calls on the bus daemon itself: name ownership, owners, credentials.
extension DBusConnection {
    public struct RequestNameFlags: OptionSet, Sendable {
        public let rawValue: UInt32
        public init(rawValue: UInt32) { self.rawValue = rawValue }
        public static let allowReplacement = RequestNameFlags(rawValue: 1)
        public static let replaceExisting = RequestNameFlags(rawValue: 2)
        public static let doNotQueue = RequestNameFlags(rawValue: 4)
    }

    public enum RequestNameReply: UInt32, Sendable {
        case primaryOwner = 1
        case inQueue = 2
        case exists = 3
        case alreadyOwner = 4
    }

    public enum ReleaseNameReply: UInt32, Sendable {
        case released = 1
        case nonExistent = 2
        case notOwner = 3
    }

    /// Asks the bus for a well-known name.
    public func requestName(_ name: String, flags: RequestNameFlags = []) async throws -> RequestNameReply {
        try DBusNames.checkBusName(name)
        guard !DBusNames.isUniqueName(name) else { throw DBusError.invalidName(name, kind: "well-known bus name") }
        let reply = try await callBus("RequestName", [.string(name), .uint32(flags.rawValue)])
        let code: UInt32 = try reply.decode(UInt32.self, at: 0)
        guard let result = RequestNameReply(rawValue: code) else {
            throw DBusError.malformedMessage("RequestName answered \(code)")
        }
        return result
    }

    @discardableResult
    public func releaseName(_ name: String) async throws -> ReleaseNameReply {
        try DBusNames.checkBusName(name)
        let code: UInt32 = try (try await callBus("ReleaseName", [.string(name)])).decode(UInt32.self, at: 0)
        guard let result = ReleaseNameReply(rawValue: code) else { throw DBusError.malformedMessage("ReleaseName answered \(code)") }
        return result
    }

    /// The unique name owning `name`, or nil if nobody does.
    public func nameOwner(of name: String) async throws -> String? {
        try DBusNames.checkBusName(name)
        do {
            return try (try await callBus("GetNameOwner", [.string(name)])).decode(String.self, at: 0)
        } catch DBusError.remote(let errorName, _) where errorName == DBusError.nameHasNoOwner {
            return nil
        }
    }

    /// `NameLost` signals for this connection's names.
    public func nameLostSignals() async throws -> SignalSubscription {
        try await subscribe(MatchRule(sender: Self.busName, interface: Self.busName, member: "NameLost", path: Self.busPath))
    }

    /// A stream of owner changes for `name`: each element is the new owner, nil when it has none.
    /// The first element is the owner at the time of the call.
    public func watchNameOwner(_ name: String) async throws -> AsyncThrowingStream<String?, any Error> {
        let subscription = try await subscribe(.nameOwnerChanged(for: name))
        let current = try await nameOwner(of: name)
        return AsyncThrowingStream { continuation in
            continuation.yield(current)
            let task = Task {
                do {
                    for try await signal in subscription {
                        guard signal.body.count == 3, case .string(let newOwner) = signal.body[2] else { continue }
                        continuation.yield(newOwner.isEmpty ? nil : newOwner)
                    }
                    continuation.finish()
                } catch {
                    continuation.finish(throwing: error)
                }
            }
            continuation.onTermination = { _ in task.cancel() }
        }
    }

    /// What the bus knows about a peer's process.
    public struct PeerCredentials: Sendable, Hashable {
        public var uid: UInt32?
        public var pid: UInt32?
        public var securityLabel: [UInt8]?
    }

    /// The credentials of the connection that owns `name` (`GetConnectionCredentials`).
    public func credentials(of name: String) async throws -> PeerCredentials {
        try DBusNames.checkBusName(name)
        let reply = try await callBus("GetConnectionCredentials", [.string(name)])
        let dict: [String: Variant] = try reply.decode([String: Variant].self, at: 0)
        return PeerCredentials(
            uid: try dict.optional("UnixUserID", as: UInt32.self),
            pid: try dict.optional("ProcessID", as: UInt32.self),
            securityLabel: try dict.optional("LinuxSecurityLabel", as: [UInt8].self))
    }

    /// The bus's globally unique id (`GetId`).
    public func busID() async throws -> String {
        try (try await callBus("GetId")).decode(String.self, at: 0)
    }

    /// Emits `org.freedesktop.DBus.Properties.PropertiesChanged`.
    public func emitPropertiesChanged(
        path: ObjectPath, interface: String, changed: [String: DBusValue], invalidated: [String] = []
    ) throws {
        try DBusNames.checkInterface(interface)
        let changedValue = changed.mapValues { Variant($0) }.dbusValue
        try emitSignal(
            path: path, interface: ObjectServer.propertiesInterface, member: "PropertiesChanged",
            body: [.string(interface), changedValue, invalidated.dbusValue])
    }
}
