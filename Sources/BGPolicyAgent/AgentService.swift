import BGPolicyCore
public import BGPolicyDBus
public import Logging
public import ServiceLifecycle

/// The agent on the session bus: owns `org.bgpolicy.Agent1`, exports its interfaces, and
/// serves calls until graceful shutdown, the loss of its name, or the loss of the bus.
public struct AgentService: Service {
    let environment: AgentEnvironment
    let bus: DBusConnection.Bus
    let logger: Logger

    public init(environment: AgentEnvironment, bus: DBusConnection.Bus = .session, logger: Logger) {
        self.environment = environment
        self.bus = bus
        self.logger = logger
    }

    /// The error names the object server uses for routing failures: all in our domain.
    static let errorNames: ObjectServer.ErrorNames = {
        var names = ObjectServer.ErrorNames()
        names.unknownObject = BGPolicyErrorName.unknownObject.dbusName
        names.unknownInterface = BGPolicyErrorName.unknownInterface.dbusName
        names.unknownMethod = BGPolicyErrorName.unknownMethod.dbusName
        names.unknownProperty = BGPolicyErrorName.unknownProperty.dbusName
        names.propertyReadOnly = BGPolicyErrorName.propertyReadOnly.dbusName
        names.invalidArgs = BGPolicyErrorName.invalidArgument.dbusName
        names.failed = BGPolicyErrorName.failed.dbusName
        names.limitsExceeded = BGPolicyErrorName.limitsExceeded.dbusName
        return names
    }()

    public func run() async throws {
        let connection: DBusConnection
        do {
            connection = try await DBusConnection.connect(to: bus, logger: logger)
        } catch let error as DBusError {
            throw AgentError.noSessionBus(error.message)
        }
        defer { connection.close() }

        connection.objects.errorNames = Self.errorNames
        let admin = AdminInterface(environment: environment)
        try connection.objects.export([admin.exported()], at: ObjectPath(BGPolicyNames.objectPath))

        // Subscribe before asking for the name, so a NameLost cannot slip past.
        let nameLost = try await connection.nameLostSignals()
        switch try await connection.requestName(BGPolicyNames.busName, flags: [.doNotQueue]) {
        case .primaryOwner, .alreadyOwner:
            break
        case .exists, .inQueue:
            let owner = try await connection.nameOwner(of: BGPolicyNames.busName) ?? "another connection"
            let pid = try? await connection.credentials(of: owner).pid
            throw AgentError.nameTaken(name: BGPolicyNames.busName, owner: owner, pid: pid)
        }
        logger.info(
            "Agent ready",
            metadata: [
                "bus.name": "\(BGPolicyNames.busName)", "bus.unique": "\(connection.uniqueName)",
                "state.dir": "\(environment.stateDirectory)", "config": "\(environment.configSource ?? "defaults")",
            ])

        try await cancelWhenGracefulShutdown {
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask { await connection.objects.serve() }
                group.addTask {
                    await connection.waitUntilDisconnected()
                    try Task.checkCancellation()
                    throw AgentError.busLost
                }
                group.addTask {
                    for try await signal in nameLost {
                        if case .string(BGPolicyNames.busName)? = signal.body.first {
                            throw AgentError.nameLost(name: BGPolicyNames.busName)
                        }
                    }
                }
                // The first task to end ends the agent; on graceful shutdown all end together.
                defer { group.cancelAll() }
                do {
                    try await group.next()
                } catch DBusError.disconnected {
                    throw AgentError.busLost
                }
            }
        }
        logger.info("Agent stopped")
    }
}
