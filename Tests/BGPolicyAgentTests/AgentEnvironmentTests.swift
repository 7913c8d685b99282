@testable import BGPolicyAgent
import BGPolicyCore
import Foundation
import Testing

@Suite("Agent environment: state directory and configuration")
struct AgentEnvironmentTests {
    func temporaryDirectory() throws -> String {
        let path = NSTemporaryDirectory() + "bgpolicy-env-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        return path
    }

    func mode(_ path: String) throws -> Int {
        (try FileManager.default.attributesOfItem(atPath: path)[.posixPermissions] as! NSNumber).intValue
    }

    @Test("an XDG base directory variable counts only when absolute; a relative one is ignored, as the specification says")
    func xdgVariables() {
        #expect(AgentEnvironment.xdgDirectory(value: "/home/u/.state") == "/home/u/.state")
        #expect(AgentEnvironment.xdgDirectory(value: "rel") == nil)
        #expect(AgentEnvironment.xdgDirectory(value: "./state") == nil)
        #expect(AgentEnvironment.xdgDirectory(value: "~/state") == nil)
        #expect(AgentEnvironment.xdgDirectory(value: nil) == nil)
    }

    @Test("creates the state directory and its parents with mode 0700")
    func createsStateDirectory() throws {
        let base = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: base) }
        let env = try AgentEnvironment.resolve(configPath: nil, stateDirectory: base + "/a/b/bgpolicy")
        try env.prepareStateDirectory()
        #expect(try mode(base + "/a/b/bgpolicy") == 0o700)
    }

    @Test("tightens an existing state directory to 0700")
    func tightensMode() throws {
        let base = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: base) }
        let dir = base + "/state"
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: false, attributes: [.posixPermissions: 0o755])
        try AgentEnvironment.resolve(configPath: nil, stateDirectory: dir).prepareStateDirectory()
        #expect(try mode(dir) == 0o700)
    }

    @Test("a file where the state directory should be is a clear error")
    func fileInTheWay() throws {
        let base = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: base) }
        let path = base + "/state"
        #expect(FileManager.default.createFile(atPath: path, contents: Data("x".utf8)))
        let env = try AgentEnvironment.resolve(configPath: nil, stateDirectory: path)
        #expect {
            try env.prepareStateDirectory()
        } throws: { error in
            "\(error)".contains("is not a directory") && "\(error)".contains(path)
        }
    }

    @Test("an explicit configuration file that does not exist is an error naming it")
    func explicitConfigMissing() throws {
        #expect {
            _ = try AgentEnvironment.resolve(configPath: "/nonexistent/bgpolicy.conf", stateDirectory: "/tmp/x")
        } throws: { error in
            "\(error)".contains("/nonexistent/bgpolicy.conf") && "\(error)".contains("No such file")
        }
    }

    @Test("an invalid configuration names the file, the line and the key")
    func invalidConfig() throws {
        let base = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: base) }
        let path = base + "/bgpolicy.conf"
        try "# comment\n[slices]\nrefresh = 30s\nprocessing = soon\n".write(toFile: path, atomically: true, encoding: .utf8)
        #expect {
            _ = try AgentEnvironment.resolve(configPath: path, stateDirectory: base)
        } throws: { error in
            let text = "\(error)"
            return text.contains("\(path):4") && text.contains("processing")
        }
    }

    @Test("a valid configuration is read and reported as the source")
    func validConfig() throws {
        let base = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: base) }
        let path = base + "/bgpolicy.conf"
        try "[cpu]\nlimit = 50%\n".write(toFile: path, atomically: true, encoding: .utf8)
        let env = try AgentEnvironment.resolve(configPath: path, stateDirectory: base)
        #expect(env.configSource == path)
        #expect(env.configuration.cpu.limit == 50)
        #expect(env.configuration.slices == PolicyConfiguration.defaults.slices)
    }

    @Test("a relative path is taken from the working directory, so that GetStatus and the log name the file")
    func relativePathsAreMadeAbsolute() {
        #expect(AgentEnvironment.absolute("h.conf", workingDirectory: "/home/u") == "/home/u/h.conf")
        #expect(AgentEnvironment.absolute("./conf/h.conf", workingDirectory: "/home/u/") == "/home/u/conf/h.conf")
        #expect(AgentEnvironment.absolute("../h.conf", workingDirectory: "/home/u") == "/home/u/../h.conf")
        #expect(AgentEnvironment.absolute("/etc/h.conf", workingDirectory: "/home/u") == "/etc/h.conf")
    }

    @Test("a configuration file over 1 MiB is refused naming the limit, not as \"File too large\"")
    func oversizedConfig() throws {
        let base = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: base) }
        let path = base + "/bgpolicy.conf"
        try String(repeating: "#\n", count: 600_000).write(toFile: path, atomically: true, encoding: .utf8)
        #expect {
            _ = try AgentEnvironment.resolve(configPath: path, stateDirectory: base)
        } throws: { error in
            "\(error)" == "invalid configuration: \(path): larger than 1 MiB, the most a configuration file may be "
                + "(a few hundred bytes is usual): is it the right file?"
        }
    }
}
