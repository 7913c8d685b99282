import BGPolicyAgent
import BGPolicyCore
import BGPolicyDBus
import Foundation
import Testing

@Suite("dbus/*.xml files")
struct InterfaceFilesTests {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    @Test("each interface file is exactly what the agent introspects", arguments: AgentInterfaces.names)
    func fileMatchesDescription(name: String) throws {
        let url = Self.root.appendingPathComponent("dbus/\(name).xml")
        let onDisk = try String(contentsOf: url, encoding: .utf8)
        // Regenerate with: make dbus-xml
        #expect(onDisk == AgentInterfaces.documentXML(named: name), "dbus/\(name).xml is stale: run 'make dbus-xml'")
    }

    @Test("every member of every interface is documented", arguments: AgentInterfaces.all)
    func everyMemberDocumented(interface: InterfaceDescription) {
        #expect(!interface.documentation.isEmpty)
        for method in interface.methods {
            #expect(!method.documentation.isEmpty, "\(interface.name).\(method.name)")
            for arg in method.inputs + method.outputs {
                #expect(!arg.documentation.isEmpty, "\(interface.name).\(method.name) argument \(arg.name)")
            }
        }
        for property in interface.properties { #expect(!property.documentation.isEmpty, "\(interface.name).\(property.name)") }
        for signal in interface.signals { #expect(!signal.documentation.isEmpty, "\(interface.name).\(signal.name)") }
    }

    /// The lists of keys and events the docs give in full: a rule or event added in code and
    /// left out of them fails here.
    @Test("the interface file, Docs/DBusAPI.md and Docs/CLI.md list every blocking rule key")
    func everyBlockingRuleListed() throws {
        let xml = try String(contentsOf: Self.root.appendingPathComponent("dbus/org.bgpolicy.Admin1.xml"), encoding: .utf8)
        let api = try String(contentsOf: Self.root.appendingPathComponent("Docs/DBusAPI.md"), encoding: .utf8)
        let cli = try String(contentsOf: Self.root.appendingPathComponent("Docs/CLI.md"), encoding: .utf8)
        for rule in BlockingRule.allCases {
            #expect(xml.contains(" \(rule.rawValue),") || xml.contains(" \(rule.rawValue);"), "Admin1.Explain: \(rule.rawValue)")
            #expect(api.contains("`\(rule.rawValue)`"), "Docs/DBusAPI.md: \(rule.rawValue)")
            #expect(cli.contains("`\(rule.rawValue)`"), "Docs/CLI.md: \(rule.rawValue)")
        }
    }

    @Test("the interface file lists every history event the agent writes")
    func everyHistoryEventListed() throws {
        let xml = try String(contentsOf: Self.root.appendingPathComponent("dbus/org.bgpolicy.Admin1.xml"), encoding: .utf8)
        let events = try #require(xml.range(of: "Events: ")).upperBound
        let text = xml[events...].prefix { $0 != "." }
        // Those it writes, then `usage`, a name older stores may hold, which it no longer writes
        // but may read back: listed apart, after "; and".
        let parts = text.split(separator: ";", maxSplits: 1)
        let list = parts[0].split(whereSeparator: { $0 == "," || $0 == " " || $0 == "\n" }).map(String.init)
        #expect(Set(list) == Set(HistoryEvent.allCases.map(\.rawValue)).subtracting(["usage"]))
        #expect(parts.count == 2 && parts[1].split(whereSeparator: \.isWhitespace).prefix(2) == ["and", "usage,"], "\(text)")
    }

    /// Any call may get these from the object server, whatever its method: routing errors,
    /// wrong types, the per-caller bounds, the agent stopping, an internal error.
    @Test("the agent's interfaces name every error the object server answers, and each app id argument InvalidArgument",
          arguments: [AgentInterfaces.admin, AgentInterfaces.scheduler])
    func everyServerErrorNamed(interface: InterfaceDescription) {
        for name in ObjectServer.ErrorNames(domain: BGPolicyNames.errorPrefix).all {
            let short = String(name.dropFirst(BGPolicyNames.errorPrefix.count))
            #expect(interface.documentation.contains(short), "\(interface.name) does not name \(short)")
        }
        for method in interface.methods where method.inputs.contains(where: { $0.name == "app_id" }) {
            #expect(method.documentation.contains("InvalidArgument"), "\(interface.name).\(method.name)")
        }
    }

    @Test("no interface file exists without a description")
    func noOrphanFiles() throws {
        let files = try FileManager.default.contentsOfDirectory(atPath: Self.root.appendingPathComponent("dbus").path)
            .filter { $0.hasSuffix(".xml") }
        #expect(Set(files) == Set(AgentInterfaces.names.map { "\($0).xml" }))
    }
}
