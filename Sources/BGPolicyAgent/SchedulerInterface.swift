import BGPolicyCore
import BGPolicyDBus

/// `org.bgpolicy.Scheduler1`: what apps call. Decodes arguments strictly, so that a wrong
/// type or an unknown option gets `InvalidArgument` naming it, and hands over to the engine.
struct SchedulerInterface: Sendable {
    let engine: TaskEngine
    let connection: DBusConnection

    func exported() -> ExportedInterface {
        ExportedInterface(AgentInterfaces.scheduler)
            .method("Register") { call in
                try call.arguments.expect("asa{sv}")
                let identifiers = try call.arguments.decode([String].self, at: 0)
                let options = try Self.options(call.arguments, at: 1, allowed: ["app_id", "bus_name", "background_only"])
                var register = TaskEngine.RegisterOptions()
                register.appID = try options.optional("app_id", as: String.self)
                register.busName = try options.optional("bus_name", as: String.self)
                register.backgroundOnly = try options.optional("background_only", as: Bool.self) ?? false
                // A failed question (the bus slow to answer, the agent stopping) is no answer:
                // taken for "no process", it refused the app as one the agent cannot see.
                let pid: UInt32?
                do {
                    pid = try await connection.credentials(of: call.sender).pid
                } catch {
                    throw SchedulerError(
                        .unavailable, "the agent could not ask the bus which process is calling (\(error)); try again in a moment")
                }
                let appID = try await engine.register(caller: call.sender, pid: pid, identifiers: identifiers, options: register)
                return [.string(appID.rawValue)]
            }
            .method("Submit") { call in
                try call.arguments.expect("ssa{sv}")
                let identifier = try call.arguments.decode(String.self, at: 0)
                let kind = try call.arguments.decode(String.self, at: 1)
                let options = try Self.options(
                    call.arguments, at: 2,
                    allowed: ["earliest_begin", "requires_network", "requires_external_power", "expected_duration"])
                var submit = TaskEngine.SubmitOptions()
                submit.earliestBegin = try options.optional("earliest_begin", as: Int64.self)
                submit.requiresNetwork = try options.optional("requires_network", as: Bool.self) ?? false
                submit.requiresExternalPower = try options.optional("requires_external_power", as: Bool.self) ?? false
                submit.expectedDuration = try options.optional("expected_duration", as: UInt32.self)
                try await engine.submit(caller: call.sender, identifier: identifier, kind: kind, options: submit)
                return []
            }
            .method("Cancel") { call in
                try call.arguments.expect("s")
                try await engine.cancel(caller: call.sender, identifier: call.arguments.decode(String.self, at: 0))
                return []
            }
            .method("CancelAll") { call in
                try call.arguments.expect("")
                try await engine.cancelAll(caller: call.sender)
                return []
            }
            .method("GetPending") { call in
                try call.arguments.expect("")
                let requests = try await engine.pendingRequests(caller: call.sender)
                return [requests.map(TaskEngine.dictionary).dbusValue]
            }
            .method("Explain") { call in
                try call.arguments.expect("s")
                let identifier = try call.arguments.decode(String.self, at: 0)
                let appID = try await engine.app(of: call.sender)
                return [await engine.explain(appID: appID, identifier: identifier).dbusValue]
            }
            .method("SetTaskCompleted") { call in
                try call.arguments.expect("sbs")
                try await engine.complete(
                    caller: call.sender, taskID: call.arguments.decode(String.self, at: 0),
                    success: call.arguments.decode(Bool.self, at: 1), result: call.arguments.decode(String.self, at: 2))
                return []
            }
            .method("BeginBackgroundTask") { call in
                try call.arguments.expect("s")
                let (token, seconds) = try await engine.beginBackgroundTask(
                    caller: call.sender, name: call.arguments.decode(String.self, at: 0))
                return [.string(token), .uint32(seconds)]
            }
            .method("EndBackgroundTask") { call in
                try call.arguments.expect("s")
                try await engine.endBackgroundTask(caller: call.sender, token: call.arguments.decode(String.self, at: 0))
                return []
            }
            .method("ReportUsage") { call in
                try call.arguments.expect("s")
                try await engine.reportUsage(caller: call.sender, state: call.arguments.decode(String.self, at: 0))
                return []
            }
            .method("NotifyContentAvailable") { call in
                try call.arguments.expect("sa{sv}")
                let app = try call.arguments.decode(String.self, at: 0)
                let payload = try call.arguments.decode(VariantDictionary.self, at: 1)
                if let reserved = payload.keys.sorted().first(where: { ["slice_id", "deadline"].contains($0) }) {
                    throw SchedulerError.invalid(
                        "the payload key '\(SchedulerError.shown(reserved))' is reserved: RunTask's info carries the agent's own value for it")
                }
                try await engine.notifyContentAvailable(caller: call.sender, app: app, payload: payload)
                return []
            }
            .method("GetRefreshStatus") { call in
                try call.arguments.expect("")
                return [.string(try await engine.refreshStatus(caller: call.sender).rawValue)]
            }
    }

    /// An `a{sv}` argument whose keys must all be known: a misspelt option is an error the
    /// app's developer sees at once, not a setting silently ignored.
    static func options(_ arguments: [DBusValue], at index: Int, allowed: Set<String>) throws -> VariantDictionary {
        let options = try arguments.decode(VariantDictionary.self, at: index)
        if let unknown = options.keys.sorted().first(where: { !allowed.contains($0) }) {
            throw SchedulerError.invalid(
                "unknown option '\(SchedulerError.shown(unknown))'; the options are: " + allowed.sorted().joined(separator: ", "))
        }
        return options
    }
}
