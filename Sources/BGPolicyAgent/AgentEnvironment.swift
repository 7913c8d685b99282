public import BGPolicyCore
import BGPolicySystem
import Glibc

/// Where the agent keeps its state and reads its configuration, resolved once at start-up
/// from the XDG base-directory variables and the command line.
public struct AgentEnvironment: Sendable {
    public var stateDirectory: String
    /// The SQLite database in the state directory: registrations, pending requests, history.
    public var databasePath: String { stateDirectory + "/bgpolicy.sqlite" }
    public var configPath: String
    /// The configuration file the agent actually read; nil when it runs on built-in defaults.
    public var configSource: String?
    public var configuration: PolicyConfiguration
    /// Whether the path came from `--config`: then the file must exist, at start and at every
    /// reload; the default path may be absent, and then the SPEC defaults apply.
    public var configGiven: Bool

    public static let configFileName = "bgpolicy.conf"

    /// Reads the environment variable, or nil when unset or empty.
    static func variable(_ name: String) -> String? {
        guard let raw = getenv(name) else { return nil }
        let value = String(cString: raw)
        return value.isEmpty ? nil : value
    }

    /// An XDG base directory variable: set, not empty, and absolute. The XDG Base Directory
    /// Specification has a relative path taken as invalid and ignored, so it falls back to the
    /// default rather than naming a directory under whatever the working directory is.
    static func xdgDirectory(_ name: String) -> String? {
        xdgDirectory(value: variable(name))
    }

    static func xdgDirectory(value: String?) -> String? {
        guard let value, value.hasPrefix("/") else { return nil }
        return value
    }

    static func home() -> String {
        if let home = variable("HOME") { return home }
        if let entry = getpwuid(getuid()), let dir = entry.pointee.pw_dir { return String(cString: dir) }
        return "/"
    }

    /// `$XDG_STATE_HOME/bgpolicy`, default (unset, empty or relative) `~/.local/state/bgpolicy`.
    public static func defaultStateDirectory() -> String {
        (xdgDirectory("XDG_STATE_HOME") ?? home() + "/.local/state") + "/bgpolicy"
    }

    /// `$XDG_CONFIG_HOME/bgpolicy/bgpolicy.conf`, default (unset, empty or relative)
    /// `~/.config/bgpolicy/bgpolicy.conf`.
    public static func defaultConfigPath() -> String {
        (xdgDirectory("XDG_CONFIG_HOME") ?? home() + "/.config") + "/bgpolicy/" + configFileName
    }

    /// Resolves paths and loads the configuration. An explicit `--config` file must exist;
    /// the default one may be absent, and then the SPEC defaults apply. Both paths are made
    /// absolute here, once: `GetStatus` and the log name the file whatever the directory of
    /// whoever reads them, and a reload reads the same file (`--config h.conf`).
    public static func resolve(configPath explicitConfig: String?, stateDirectory explicitState: String?) throws -> AgentEnvironment {
        let configPath = absolute(explicitConfig ?? defaultConfigPath())
        let (configuration, source) = try readConfiguration(at: configPath, given: explicitConfig != nil)
        return AgentEnvironment(
            stateDirectory: absolute(explicitState ?? defaultStateDirectory()),
            configPath: configPath,
            configSource: source,
            configuration: configuration,
            configGiven: explicitConfig != nil)
    }

    /// The same environment with its configuration file read again (`SIGHUP`); throws
    /// `AgentError.configuration` when it cannot be read or is not valid, as at start.
    public func reloaded() throws -> AgentEnvironment {
        var copy = self
        (copy.configuration, copy.configSource) = try Self.readConfiguration(at: configPath, given: configGiven)
        return copy
    }

    /// `path` from the working directory when it is relative; `.` and empty components dropped.
    /// Left as given when the working directory cannot be read (removed, say): "." as its base
    /// made `state` into `/state`.
    static func absolute(_ path: String, workingDirectory: String? = nil) -> String {
        guard !path.hasPrefix("/") else { return path }
        guard let base = workingDirectory ?? currentDirectory() else { return path }
        let parts = (base + "/" + path).split(separator: "/").filter { $0 != "." }
        return "/" + parts.joined(separator: "/")
    }

    static func currentDirectory() -> String? {
        var buffer = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
        guard getcwd(&buffer, buffer.count) != nil else { return nil }
        return String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    /// A configuration file is a few hundred bytes; a bigger one is a mistake (the wrong path).
    static let maximumConfigurationSize = 1 << 20

    /// The configuration in the file at `path`, and the path when there was a file (nil: the
    /// defaults, because the default path has no file).
    static func readConfiguration(at path: String, given: Bool) throws -> (PolicyConfiguration, String?) {
        let text: String
        switch SmallFile.read(path, limit: Self.maximumConfigurationSize, followingSymlinks: true) {
        case .success(let bytes):
            text = SmallFile.text(bytes)
        case .failure(let error) where error.code == ENOENT && !given:
            return (.defaults, nil)
        case .failure(let error) where error.code == EFBIG:
            throw AgentError.configuration(
                "\(path): larger than 1 MiB, the most a configuration file may be (a few hundred bytes is usual): is it the right file?")
        case .failure(let error):
            throw AgentError.configuration("\(path): \(error.description)")
        }
        do {
            return (try ConfigurationParser.parse(text, source: path), path)
        } catch {
            throw AgentError.configuration(error.description)
        }
    }

    /// Creates the state directory (and missing parents) with mode 0700, and tightens an
    /// existing one to 0700: it will hold usage history, which is private.
    public func prepareStateDirectory() throws {
        var path = ""
        for component in stateDirectory.split(separator: "/") {
            path += "/" + component
            if mkdir(path, 0o700) != 0 && errno != EEXIST {
                throw AgentError.stateDirectory(path: stateDirectory, reason: "mkdir \(path): \(String(cString: strerror(errno)))")
            }
        }
        var info = stat()
        guard stat(stateDirectory, &info) == 0 else {
            throw AgentError.stateDirectory(path: stateDirectory, reason: String(cString: strerror(errno)))
        }
        guard info.st_mode & S_IFMT == S_IFDIR else {
            throw AgentError.stateDirectory(path: stateDirectory, reason: "it exists and is not a directory")
        }
        guard info.st_uid == getuid() else {
            throw AgentError.stateDirectory(path: stateDirectory, reason: "it is owned by uid \(info.st_uid), not by this user (uid \(getuid()))")
        }
        if info.st_mode & 0o777 != 0o700 && chmod(stateDirectory, 0o700) != 0 {
            throw AgentError.stateDirectory(path: stateDirectory, reason: "chmod 0700: \(String(cString: strerror(errno)))")
        }
    }
}
