public import BGPolicyCore
public import BGPolicyDBus
import Logging
import Synchronization

/// The active power profile from power-profiles-daemon: `org.freedesktop.UPower.PowerProfiles`,
/// falling back to the legacy `net.hadess.PowerProfiles` name when only that one is owned.
public struct PowerProfilesSource: ConditionSource {
    struct Endpoint: Sendable {
        let busName: String
        let path: ObjectPath
        let interface: String
    }

    static let current = Endpoint(
        busName: "org.freedesktop.UPower.PowerProfiles", path: try! ObjectPath("/org/freedesktop/UPower/PowerProfiles"),
        interface: "org.freedesktop.UPower.PowerProfiles")
    static let legacy = Endpoint(
        busName: "net.hadess.PowerProfiles", path: try! ObjectPath("/net/hadess/PowerProfiles"), interface: "net.hadess.PowerProfiles")

    public let name = ConditionSourceName.powerProfiles
    let connection: DBusConnection

    public init(systemBus: DBusConnection) {
        connection = systemBus
    }

    public func run(_ context: SourceContext) async {
        // The profile each name reports; the current name wins when both are owned.
        let state = ProfileState()
        let publish: @Sendable (Bool, PowerProfile?, Bool) async -> Void = { isLegacy, profile, fresh in
            if let report = state.update(isLegacy: isLegacy, profile: profile, fresh: fresh) { await context.report(report) }
        }
        let (rereadsCurrent, feedCurrent) = AsyncStream.makeStream(of: Void.self)
        let (rereadsLegacy, feedLegacy) = AsyncStream.makeStream(of: Void.self)
        await withTaskGroup(of: Void.self) { group in
            group.addTask {
                for await _ in context.rereads {
                    feedCurrent.yield()
                    feedLegacy.yield()
                }
                feedCurrent.finish()
                feedLegacy.finish()
            }
            group.addTask {
                await follow(Self.current, rereads: rereadsCurrent, context: context) { await publish(false, $0, $1) }
            }
            group.addTask {
                await follow(Self.legacy, rereads: rereadsLegacy, context: context) { await publish(true, $0, $1) }
            }
        }
    }

    private func follow(
        _ endpoint: Endpoint, rereads: AsyncStream<Void>, context: SourceContext,
        update: @escaping @Sendable (_ profile: PowerProfile?, _ fresh: Bool) async -> Void
    ) async {
        let follower = DaemonFollower(
            connection: connection, name: endpoint.busName, logger: context.logger, sleep: context.sleep)
        await follower.run(rereads: rereads, lost: { await update(nil, false) }) { owner, succeeded in
            let object = RemoteObject(connection: connection, owner: owner, path: endpoint.path, interface: endpoint.interface)
            let changes = try await object.propertiesChanged()
            func read(fresh: Bool) async throws {
                let properties = try await object.getAll()
                let reported = properties.property("ActiveProfile", as: String.self, logger: context.logger, from: endpoint.busName)
                await update(reported.map(PowerProfile.init(reported:)) ?? .unknown, fresh)
            }
            // A session's first read may answer a re-read (a resume; `DaemonFollower` starts a
            // session for each), which the agent waits for, changed or not.
            try await read(fresh: true)
            succeeded()
            for try await signal in changes {
                guard case .string(endpoint.interface)? = signal.body.first else { continue }
                try await read(fresh: false)
            }
        }
    }
}

/// What each of the two names reports, and what was last told to the core.
final class ProfileState: Sendable {
    private let state = Mutex<(current: PowerProfile?, legacy: PowerProfile?, reported: PowerProfile??)>((nil, nil, nil))

    /// Records one name's profile; returns the report to send, if the effective profile changed
    /// or the profile was `fresh`ly read (a session's first read): that may answer a re-read
    /// after a resume, which the agent waits for (`ConditionsHub.resettle`) even when nothing
    /// changed.
    func update(isLegacy: Bool, profile: PowerProfile?, fresh: Bool = false) -> ConditionReport? {
        state.withLock { s in
            if isLegacy { s.legacy = profile } else { s.current = profile }
            let effective = s.current ?? s.legacy
            if !fresh, case .some(let reported) = s.reported, reported == effective { return nil }
            s.reported = .some(effective)
            return effective.map(ConditionReport.profile) ?? .lost
        }
    }
}
