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
        let apps = await ask { try await $0.listApps() } ?? []
        return matching(prefix, in: apps.compactMap { $0.string("app_id") })
    }

    /// The identifiers of the pending requests of the app named just before, for
    /// `explain APP ID` and `simulate launch APP ID`.
    static let pendingIdentifiers = CompletionKind.custom { (words: [String], index: Int, prefix: String) async -> [String] in
        guard let app = appBefore(index, in: words) else { return [] }
        let pending = (await ask { try await $0.listPending() } ?? []).filter { $0.string("app_id") == app }
        // A content-available wake is listed with an empty identifier: nothing to complete.
        return matching(prefix, in: pending.compactMap { $0.string("identifier") }.filter { !$0.isEmpty })
    }

    /// The identifiers of the running tasks of the app named just before, for
    /// `simulate expire APP ID` (`GetStatus`'s `running`).
    static let runningIdentifiers = CompletionKind.custom { (words: [String], index: Int, prefix: String) async -> [String] in
        guard let app = appBefore(index, in: words),
              let slices = try? await ask({ try await $0.status() })?["running"]?.decode([VariantDictionary].self)
        else { return [] }
        let mine = slices.filter { $0.string("app_id") == app }
        return matching(prefix, in: mine.flatMap { $0.strings("identifiers") ?? [] })
    }

    /// The policies `replay --policy` takes, with the baselines issue 5 names.
    static let replayPolicies = CompletionKind.list(["bgpolicy", "periodic:15m", "periodic:30m", "periodic:60m", "oracle:10m"])

    /// The word before `index` that is not an option: the APP of `explain APP ID`.
    static func appBefore(_ index: Int, in words: [String]) -> String? {
        guard index <= words.count else { return nil }
        return words[..<index].last { !$0.hasPrefix("-") && !$0.isEmpty }
    }

    /// The distinct candidates that start with `prefix`, sorted.
    static func matching(_ prefix: String, in candidates: [String]) -> [String] {
        Array(Set(candidates.filter { $0.hasPrefix(prefix) })).sorted()
    }

    /// What `question` gets from the agent, asked without starting it and given
    /// `answerTimeout` for the bus and again for the agent; nil for any failure.
    private static func ask<T>(_ question: (AgentClient) async throws -> T) async -> T? {
        guard let connection = try? await AgentClient.sessionBus(within: answerTimeout) else { return nil }
        defer { connection.close() }
        return try? await question(AgentClient(connection: connection, startsAgent: false, answerTimeout: answerTimeout))
    }
}
