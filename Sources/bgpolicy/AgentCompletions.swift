import ArgumentParser
import BGPolicyCore
import BGPolicyDBus

/// What the shell completes (TAB) for the arguments that name the agent's apps and requests.
///
/// The candidates come from a running bgpolicyd (`ListApps`, `ListPending`), asked with the
/// no-auto-start flag, so that pressing TAB never starts the agent through D-Bus activation,
/// and given a second to answer. When the agent cannot say (no session bus, not running, too
/// slow, refusing), there are simply no candidates: completion must never print an error into
/// the person's command line.
enum AgentCompletions {
    static let answerTimeout: Duration = .seconds(1)

    /// The app ids the agent knows, for `explain APP`, `enable APP`, `pending APP` and the rest.
    static let apps = CompletionKind.custom { (_: [String], _: Int, prefix: String) async -> [String] in
        await matching(prefix, in: list("ListApps").compactMap { $0.string("app_id") })
    }

    /// The identifiers of the pending requests of the app named just before, for
    /// `explain APP ID` and `simulate launch APP ID`.
    static let pendingIdentifiers = CompletionKind.custom { (words: [String], index: Int, prefix: String) async -> [String] in
        guard let app = appBefore(index, in: words) else { return [] }
        let pending = await list("ListPending").filter { $0.string("app_id") == app }
        return matching(prefix, in: pending.compactMap { $0.string("identifier") })
    }

    /// The identifiers of the running tasks of the app named just before, for
    /// `simulate expire APP ID` (`GetStatus`'s `running`).
    static let runningIdentifiers = CompletionKind.custom { (words: [String], index: Int, prefix: String) async -> [String] in
        guard let app = appBefore(index, in: words),
              let slices = try? await status()?["running"]?.decode([VariantDictionary].self)
        else { return [] }
        let mine = slices.filter { $0.string("app_id") == app }
        return matching(prefix, in: mine.flatMap { $0.strings("identifiers") ?? [] })
    }

    /// The policies `replay --policy` takes, with the baselines issue 5 names.
    static let replayPolicies = CompletionKind.list(["bgpolicy", "periodic:15m", "periodic:30m", "periodic:60m", "oracle:10m"])

    // MARK: Asking the agent

    /// The word before `index` that is not an option: the APP of `explain APP ID`.
    static func appBefore(_ index: Int, in words: [String]) -> String? {
        guard index <= words.count else { return nil }
        return words[..<index].last { !$0.hasPrefix("-") && !$0.isEmpty }
    }

    /// The distinct candidates that start with `prefix`, sorted.
    static func matching(_ prefix: String, in candidates: [String]) -> [String] {
        Array(Set(candidates.filter { $0.hasPrefix(prefix) })).sorted()
    }

    private static func list(_ member: String) async -> [VariantDictionary] {
        guard let reply = await call(member), reply.count == 1,
              let records = try? reply.decode([VariantDictionary].self, at: 0)
        else { return [] }
        return records
    }

    private static func status() async -> VariantDictionary? {
        guard let reply = await call("GetStatus"), reply.count == 1 else { return nil }
        return try? reply.decode(VariantDictionary.self, at: 0)
    }

    /// One Admin1 call without a body, or nil for any failure.
    private static func call(_ member: String) async -> [DBusValue]? {
        guard let connection = try? await DBusConnection.connect(to: .session) else { return nil }
        defer { connection.close() }
        guard let path = try? ObjectPath(BGPolicyNames.objectPath) else { return nil }
        var message = Message.methodCall(
            destination: BGPolicyNames.busName, path: path, interface: BGPolicyNames.adminInterface, member: member)
        message.noAutoStart = true
        return try? await connection.call(message, timeout: answerTimeout).body
    }
}
