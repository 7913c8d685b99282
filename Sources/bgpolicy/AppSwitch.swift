import ArgumentParser
import BGPolicyDBus

/// What `enable` and `disable` share: one app or all background work, and the change itself.
struct AppSwitch: ParsableArguments {
    @Argument(help: "The app's ID, as 'bgpolicy apps' shows it.", completion: AgentCompletions.apps)
    var app: String?

    @Flag(name: .long, help: "Every app: the switch for all background work.")
    var all = false

    @Flag(name: .long, help: "Print the new setting as a JSON object, for scripts.")
    var json = false

    func validate() throws {
        switch (app, all) {
        case (nil, false): throw ValidationError("Name an app, or pass --all for all background work.")
        case (_?, true): throw ValidationError("Name an app or pass --all, not both.")
        default: break
        }
    }

    /// Turns the switch and says what it did.
    func set(_ enabled: Bool) async throws {
        try await ExitStatus.reporting {
            let client = try await AgentClient.connect(startingAgent: true)
            defer { client.close() }
            if let app {
                try await client.setAppEnabled(app, enabled)
                // The app's switch acts under the switch for all work: with that one off, the
                // app's on runs nothing, and saying only "on" would send the user looking.
                // Not known (an agent too old to say), the line is left as it was.
                let globalEnabled = try? await client.status().bool("global_enabled")
                var fields = ["app_id": Variant(app), "enabled": Variant(enabled)]
                if let globalEnabled = globalEnabled ?? nil { fields["global_enabled"] = Variant(globalEnabled) }
                print(json ? JSONText.object(fields) : Self.said(app: app, enabled, globalEnabled: globalEnabled ?? nil))
            } else {
                try await client.setGlobalEnabled(enabled)
                // The same the other way: switched on for all, the apps switched off one by
                // one stay off, and are named (ListApps; left out when it does not answer).
                let stillOff = enabled
                    ? (try? await client.listApps()).map { apps in apps.filter { $0.bool("enabled") == false }.compactMap { $0.string("app_id") }.sorted() }
                    : nil
                var fields = ["global_enabled": Variant(enabled)]
                if let stillOff { fields["apps_switched_off"] = Variant(stillOff) }
                print(json ? JSONText.object(fields) : Self.said(app: nil, enabled, appsSwitchedOff: stillOff ?? []))
            }
        }
    }

    static func said(app: String?, _ enabled: Bool, globalEnabled: Bool? = nil, appsSwitchedOff: [String] = []) -> String {
        switch (app.map(TableText.cell), enabled) {
        case (let app?, true) where globalEnabled == false:
            "Background work is on for \(app), but off for every app until 'bgpolicy enable --all'."
        case (let app?, true): "Background work is on for \(app)."
        case (let app?, false): "Background work is off for \(app): it cannot submit tasks until 'bgpolicy enable \(app)'."
        case (nil, true) where appsSwitchedOff.count == 1:
            "Background work is on, except for \(TableText.cell(appsSwitchedOff[0])), switched off by itself ('bgpolicy enable \(TableText.cell(appsSwitchedOff[0]))')."
        case (nil, true) where !appsSwitchedOff.isEmpty:
            "Background work is on, except for \(appsSwitchedOff.count) apps switched off one by one: "
                + appsSwitchedOff.map(TableText.cell).joined(separator: ", ") + " ('bgpolicy enable APP')."
        case (nil, true): "Background work is on."
        case (nil, false): "Background work is off for every app, until 'bgpolicy enable --all'."
        }
    }
}
