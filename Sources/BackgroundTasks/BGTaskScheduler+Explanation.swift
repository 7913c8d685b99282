import BGPolicyCore
public import BGPolicyDBus
#if canImport(FoundationEssentials)
public import FoundationEssentials
#else
public import Foundation
#endif

extension BGTaskScheduler {
    /// Why a request has not run yet, and the earliest it can: the agent's answer to `Explain`
    /// (`explain(taskRequestWithIdentifier:)`), the same that `bgpolicy explain APP ID` prints.
    ///
    /// ```swift
    /// let why = try await scheduler.explain(taskRequestWithIdentifier: "org.example.News.refresh")
    /// if why.state == .pending, !why.isRunnable {
    ///     print(why.summary)              // one sentence, for people
    ///     print(why.blocking)             // ["earliest-begin", "no-network"], to branch on
    /// }
    /// ```
    public struct Explanation: Sendable, Hashable {
        /// Where the request is.
        public enum State: String, Sendable, Hashable, CaseIterable {
            /// Submitted and waiting; `blocking` says for what.
            case pending
            /// Launched: a task of it is running now.
            case running
            /// Nothing is pending under that identifier: never submitted, or it ran or was
            /// cancelled (`bgpolicy history APP` shows which).
            case notPending = "not-pending"
        }

        /// The app the agent answered for.
        public var appID: String
        /// The identifier asked about.
        public var identifier: String
        /// Where the request is; `nil` for a state this library does not know yet (the agent's
        /// word for it is `dictionary["state"]`).
        public var state: State?
        /// The kind of the pending or running request (`.refresh` or `.processing`); `nil`
        /// when nothing is pending.
        public var kind: BGTaskKind?
        /// Nothing holds the pending request back: it runs in the next wake window.
        public var isRunnable: Bool
        /// What holds it back, as the agent's rule keys, to branch on: `global-disabled`,
        /// `app-disabled`, `earliest-begin`, `critical-battery`, `low-battery`, `power-saver`,
        /// `not-idle`, `no-network`, `no-external-power`, `app-inactive`, `overrun-penalty`,
        /// `unreachable`, `app-busy`, `sleeping`, and the planner's `next-window`,
        /// `predicted-use` and `refresh-interval`. Later agents may add keys.
        public var blocking: [String]
        /// The same, in words, one sentence per key of `blocking`, for people.
        public var reasons: [String]
        /// One sentence saying where the request is and what it waits for, for people.
        public var summary: String
        /// The earliest wake window the request can run in, when the agent knows it.
        public var earliestWindow: Date?
        /// How many times the agent has seen the user open the app (its usage log, from which
        /// it predicts the app's next opens); `nil` when the agent could not read its log. An
        /// app opened often but counted 0 here is one whose opens the agent cannot see.
        public var opens: Int?
        /// How many of `opens` came in the last 24 hours.
        public var opensInLast24Hours: Int?
        /// When the user last opened the app, as far as the agent has seen.
        public var lastOpen: Date?
        /// The agent's whole answer, keys this library does not read included (Docs/DBusAPI.md,
        /// `org.bgpolicy.Admin1.Explain`).
        public var dictionary: [String: Variant]

        /// Reads the agent's answer; throws `DBusError` for a key of the wrong type.
        init(_ dictionary: [String: Variant]) throws(DBusError) {
            self.dictionary = dictionary
            appID = try dictionary.optional("app_id", as: String.self) ?? ""
            identifier = try dictionary.optional("identifier", as: String.self) ?? ""
            state = try dictionary.optional("state", as: String.self).flatMap(State.init(rawValue:))
            kind = try dictionary.optional("kind", as: String.self).flatMap(BGTaskKind.init(rawValue:))
            isRunnable = try dictionary.optional("runnable", as: Bool.self) ?? false
            blocking = try dictionary.optional("blocking", as: [String].self) ?? []
            reasons = try dictionary.optional("reasons", as: [String].self) ?? []
            summary = try dictionary.optional("summary", as: String.self) ?? ""
            earliestWindow = try dictionary.optional("earliest_window", as: Int64.self).map {
                Date(timeIntervalSince1970: TimeInterval($0))
            }
            opens = try dictionary.optional("opens", as: UInt32.self).map(Int.init)
            opensInLast24Hours = try dictionary.optional("opens_last_24h", as: UInt32.self).map(Int.init)
            lastOpen = try dictionary.optional("last_open", as: Int64.self).map { Date(timeIntervalSince1970: TimeInterval($0)) }
        }
    }
}
