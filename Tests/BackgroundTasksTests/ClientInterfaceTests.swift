@testable import BackgroundTasks
import BGPolicyDBus
import Foundation
import Testing

/// The library describes org.bgpolicy.Client1 itself (it cannot import the agent). Its members
/// must be the ones the shipped contract, dbus/org.bgpolicy.Client1.xml, names.
@Suite("The library's Client1 matches dbus/")
struct ClientInterfaceTests {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent()

    /// `method(arg:type,…)` lines, from the shipped XML and from the library's description.
    static func shape(ofXML text: String) -> [String] {
        var out: [String] = []
        var current: String?
        var args: [String] = []
        for line in text.split(separator: "\n").map({ $0.trimmingCharacters(in: .whitespaces) }) {
            if line.hasPrefix("<method name=\"") {
                current = String(line.dropFirst("<method name=\"".count).prefix { $0 != "\"" })
                args = []
            } else if line.hasPrefix("<arg "), current != nil {
                func attribute(_ name: String) -> String {
                    guard let range = line.range(of: name + "=\"") else { return "" }
                    return String(line[range.upperBound...].prefix { $0 != "\"" })
                }
                args.append("\(attribute("direction")) \(attribute("name")):\(attribute("type"))")
            } else if line.hasPrefix("</method>"), let name = current {
                out.append("\(name)(\(args.joined(separator: ", ")))")
                current = nil
            }
        }
        return out
    }

    @Test func sameMethodsAndArguments() throws {
        let shipped = try String(contentsOf: Self.root.appendingPathComponent("dbus/org.bgpolicy.Client1.xml"), encoding: .utf8)
        let library = ClientInterface.description.documentXML()
        #expect(!Self.shape(ofXML: shipped).isEmpty)
        #expect(Self.shape(ofXML: library) == Self.shape(ofXML: shipped))
    }
}
