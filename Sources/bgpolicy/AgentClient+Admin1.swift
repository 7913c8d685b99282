import BGPolicyCore
import BGPolicyDBus

/// The `org.bgpolicy.Admin1` methods, with their argument types written once
/// (documented in dbus/org.bgpolicy.Admin1.xml and Docs/DBusAPI.md).
extension AgentClient {
    func listApps() async throws -> [VariantDictionary] {
        try await list("ListApps")
    }

    func listPending() async throws -> [VariantDictionary] {
        try await list("ListPending")
    }

    /// Entries at or after `since` (Unix seconds), the newest `limit` of them, oldest first.
    func history(since: Int64, limit: UInt32) async throws -> [VariantDictionary] {
        try await list("GetHistory", [.int64(since), .uint32(limit)])
    }

    /// One app's history (`GetAppHistory`): `NotRegistered`, in explain's words, for an app
    /// the agent does not know.
    func history(of app: String, since: Int64, limit: UInt32) async throws -> [VariantDictionary] {
        try await list("GetAppHistory", [.string(app), .int64(since), .uint32(limit)])
    }

    /// `GetStatus`'s dictionary (`StatusCommand` reads it itself, to print any reply it can).
    func status() async throws -> VariantDictionary {
        try await dictionary("GetStatus", [])
    }

    func explain(app: String, identifier: String) async throws -> VariantDictionary {
        try await dictionary("Explain", [.string(app), .string(identifier)])
    }

    /// Refuses an app the agent does not know with `NotRegistered`, in explain's words, for a
    /// command that would otherwise print "nothing" for a mistyped app id (`pending APP`,
    /// `history APP`): Explain with no identifier, which a known app answers with "not pending".
    func requireRegistered(_ app: String) async throws {
        _ = try await explain(app: app, identifier: "")
    }

    /// The next 24 hours of one app, or of every app when `app` is "": a{sv} (see TimelineCommand).
    func timeline(app: String) async throws -> VariantDictionary {
        try await dictionary("GetTimeline", [.string(app)])
    }

    func setAppEnabled(_ app: String, _ enabled: Bool) async throws {
        try await perform("SetAppEnabled", [.string(app), .boolean(enabled)])
    }

    func setGlobalEnabled(_ enabled: Bool) async throws {
        try await perform("SetGlobalEnabled", [.boolean(enabled)])
    }

    /// Reads the configuration file again; answers once it is in effect, or refuses an
    /// invalid file with `InvalidArgument` in the parser's words.
    func reload() async throws {
        try await perform("Reload", [])
    }

    /// What the agent forgot of the app: a{sv} (see ForgetCommand).
    func forgetApp(_ app: String) async throws -> VariantDictionary {
        try await dictionary("ForgetApp", [.string(app)])
    }

    /// The agent answers once the app has accepted the task or cannot be reached: up to 25 s
    /// for an app it starts by D-Bus activation, after its turn among apps starting.
    static let launchTimeout: Duration = .seconds(120)

    func simulateLaunch(app: String, identifier: String) async throws {
        _ = try await call(BGPolicyNames.adminInterface, "SimulateLaunch", [.string(app), .string(identifier)],
                           timeout: Self.launchTimeout)
    }

    func simulateExpiration(app: String, identifier: String) async throws {
        try await perform("SimulateExpiration", [.string(app), .string(identifier)])
    }

    // MARK: Replies

    private func list(_ member: String, _ arguments: [DBusValue] = []) async throws -> [VariantDictionary] {
        let reply = try await call(BGPolicyNames.adminInterface, member, arguments)
        do {
            try reply.expect("aa{sv}")
            return try reply.decode([VariantDictionary].self, at: 0)
        } catch {
            throw Self.unexpected(member, reply, "aa{sv}")
        }
    }

    private func dictionary(_ member: String, _ arguments: [DBusValue]) async throws -> VariantDictionary {
        let reply = try await call(BGPolicyNames.adminInterface, member, arguments)
        do {
            try reply.expect("a{sv}")
            return try reply.decode(VariantDictionary.self, at: 0)
        } catch {
            throw Self.unexpected(member, reply, "a{sv}")
        }
    }

    /// A method that answers nothing: an unexpected answer is ignored, since the change was made.
    private func perform(_ member: String, _ arguments: [DBusValue]) async throws {
        _ = try await call(BGPolicyNames.adminInterface, member, arguments)
    }

    private static func unexpected(_ member: String, _ reply: [DBusValue], _ expected: String) -> CLIError {
        CLIError(
            "bgpolicyd answered \(member) with \"\(reply.signatureText)\", not \(expected); is it a different version?",
            hint: "Compare 'bgpolicy --version' with the version 'bgpolicy status' shows.")
    }
}
