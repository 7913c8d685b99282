import BGPolicyAgent
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

    @Test("no interface file exists without a description")
    func noOrphanFiles() throws {
        let files = try FileManager.default.contentsOfDirectory(atPath: Self.root.appendingPathComponent("dbus").path)
            .filter { $0.hasSuffix(".xml") }
        #expect(Set(files) == Set(AgentInterfaces.names.map { "\($0).xml" }))
    }
}
