import Glibc
public import Logging
import SystemPackage

/// Log lines for the systemd journal, when the agent's standard error is the journal's stream.
///
/// journald reads a `<N>` prefix on each line as the line's syslog priority (`sd-daemon(3)`).
/// Without it every line, errors included, is stored at the stream's default, "info", and
/// `journalctl --user -u bgpolicyd -p err` shows nothing. The journal stamps each entry itself,
/// so the line carries no timestamp of its own: `<3>org.bgpolicy.agent: message key=value`.
///
/// Everywhere else (a terminal, a test's pipe, a file) the agent writes swift-log's
/// `StreamLogHandler` lines, with their timestamps; `bootstrapFactory` chooses.
public struct JournalLogHandler: LogHandler {
    public var logLevel: Logger.Level = .info
    public var metadata: Logger.Metadata = [:]
    public var metadataProvider: Logger.MetadataProvider?
    private let label: String
    private let write: @Sendable (String) -> Void

    public init(label: String, metadataProvider: Logger.MetadataProvider? = nil,
                write: @escaping @Sendable (String) -> Void = JournalLogHandler.writeToStandardError) {
        self.label = label
        self.metadataProvider = metadataProvider
        self.write = write
    }

    public subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    public func log(event: LogEvent) {
        var merged = metadata
        if let provided = metadataProvider?.get() { merged.merge(provided) { $1 } }
        if let explicit = event.metadata { merged.merge(explicit) { $1 } }
        if let error = event.error { merged["error"] = "\(error)" }
        write(Self.line(level: event.level, label: label, message: event.message.description, metadata: merged))
    }

    /// The syslog priority journald reads from a line's `<N>` prefix.
    public static func priority(of level: Logger.Level) -> Int {
        switch level {
        case .critical: 2  // LOG_CRIT
        case .error: 3  // LOG_ERR
        case .warning: 4  // LOG_WARNING
        case .notice: 5  // LOG_NOTICE
        case .info: 6  // LOG_INFO
        case .debug, .trace: 7  // LOG_DEBUG
        }
    }

    /// One entry, ending in a newline. journald takes each line as an entry of its own, so a
    /// message or a value with newlines in it gets the prefix on every line, not only the first.
    public static func line(level: Logger.Level, label: String, message: String, metadata: Logger.Metadata) -> String {
        var text = label.isEmpty ? message : "\(label): \(message)"
        if !metadata.isEmpty {
            text += " " + metadata.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: " ")
        }
        let prefix = "<\(priority(of: level))>"
        return text.split(separator: "\n", omittingEmptySubsequences: false).map { prefix + $0 }.joined(separator: "\n") + "\n"
    }

    /// Whether the file descriptor is the journal's stream: systemd sets `JOURNAL_STREAM` to
    /// its `device:inode` for a service whose output goes to the journal. Compared with the
    /// descriptor itself, as `systemd.exec(5)` asks, because the variable is inherited by
    /// processes whose output went elsewhere (a test run from a service, a shell's redirect).
    public static func isJournalStream(fd: Int32) -> Bool {
        isJournalStream(fd: fd, journalStream: getenv("JOURNAL_STREAM").map { String(cString: $0) })
    }

    static func isJournalStream(fd: Int32, journalStream: String?) -> Bool {
        guard let value = journalStream else { return false }
        let parts = value.split(separator: ":")
        guard parts.count == 2, let device = UInt64(parts[0]), let inode = UInt64(parts[1]) else { return false }
        var info = stat()
        guard fstat(fd, &info) == 0 else { return false }
        return UInt64(info.st_dev) == device && UInt64(info.st_ino) == inode
    }

    /// What `LoggingSystem.bootstrap` takes: journal lines when standard error is the journal,
    /// else `StreamLogHandler` lines; either at `level`.
    public static func bootstrapFactory(level: Logger.Level) -> @Sendable (String) -> any LogHandler {
        let journal = isJournalStream(fd: STDERR_FILENO)
        return { label in
            if journal {
                var handler = JournalLogHandler(label: label, metadataProvider: LoggingSystem.metadataProvider)
                handler.logLevel = level
                return handler
            }
            var handler = StreamLogHandler.standardError(label: label)
            handler.logLevel = level
            return handler
        }
    }

    /// One `write(2)` per entry, so that lines of different threads never interleave.
    @Sendable public static func writeToStandardError(_ text: String) {
        _ = try? FileDescriptor.standardError.writeAll(text.utf8)
    }
}
