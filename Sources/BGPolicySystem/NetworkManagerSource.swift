public import BGPolicyCore
public import BGPolicyDBus
import Logging

/// Network state from NetworkManager (system bus): `State`, `Connectivity`, `Metered` and
/// `PrimaryConnectionType`. Whether the network is metered is decided in the core
/// (`NetworkSample.metered`, GLib's rule).
public struct NetworkManagerSource: ConditionSource {
    public static let busName = "org.freedesktop.NetworkManager"
    static let path = try! ObjectPath("/org/freedesktop/NetworkManager")

    public let name = ConditionSourceName.networkManager
    let connection: DBusConnection

    public init(systemBus: DBusConnection) {
        connection = systemBus
    }

    public func run(_ context: SourceContext) async {
        let follower = DaemonFollower(connection: connection, name: Self.busName, logger: context.logger, sleep: context.sleep)
        await follower.run(rereads: context.rereads, lost: { await context.report(.lost) }) { owner, succeeded in
            let object = RemoteObject(connection: connection, owner: owner, path: Self.path, interface: Self.busName)
            // NetworkManager emits the standard PropertiesChanged (and, before 1.x, its own on
            // its interface); follow both.
            let changes = try await object.propertiesChanged()
            let legacyChanges = try await connection.subscribe(
                MatchRule(sender: owner, interface: Self.busName, member: "PropertiesChanged", path: Self.path))
            var last: NetworkSample?
            func read() async throws {
                let sample = Self.sample(try await object.getAll(), logger: context.logger)
                if sample != last {
                    last = sample
                    await context.report(.network(sample))
                }
            }
            try await read()
            succeeded()
            try await rereadOnSignals([changes, legacyChanges], read: read)
        }
    }

    static func sample(_ properties: [String: Variant], logger: Logger) -> NetworkSample {
        let daemon = busName
        return NetworkSample(
            state: properties.property("State", as: UInt32.self, logger: logger, from: daemon),
            connectivity: properties.property("Connectivity", as: UInt32.self, logger: logger, from: daemon)
                .map(Connectivity.init(networkManager:)) ?? .unknown,
            meteredReported: properties.property("Metered", as: UInt32.self, logger: logger, from: daemon),
            type: properties.property("PrimaryConnectionType", as: String.self, logger: logger, from: daemon)
                .map(NetworkType.init(networkManager:)) ?? .unknown)
    }
}
