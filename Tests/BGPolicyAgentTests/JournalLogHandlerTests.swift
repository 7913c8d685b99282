@testable import BGPolicyAgent
import Foundation
import Glibc
import Logging
import Synchronization
import Testing

@Suite("Journal log lines: a syslog priority on every line, no timestamp")
struct JournalLogHandlerTests {
    @Test("each level gets the syslog priority journald reads", arguments: [
        (Logger.Level.critical, 2), (.error, 3), (.warning, 4), (.notice, 5), (.info, 6), (.debug, 7), (.trace, 7),
    ])
    func priorities(level: Logger.Level, priority: Int) {
        #expect(JournalLogHandler.priority(of: level) == priority)
        #expect(JournalLogHandler.line(level: level, label: "l", message: "m", metadata: [:]) == "<\(priority)>l: m\n")
    }

    @Test("metadata follows the message, sorted by key")
    func metadata() {
        let line = JournalLogHandler.line(
            level: .warning, label: "org.bgpolicy.agent", message: "Lost the system bus",
            metadata: ["source": "upower", "error": "gone"])
        #expect(line == "<4>org.bgpolicy.agent: Lost the system bus error=gone source=upower\n")
    }

    @Test("every line of a message with newlines carries the prefix, or journald stores the rest as info")
    func newlines() {
        let line = JournalLogHandler.line(level: .error, label: "", message: "first\nsecond", metadata: [:])
        #expect(line == "<3>first\n<3>second\n")
    }

    @Test("a Logger through the handler writes one entry, with the logger's and the call's metadata")
    func throughLogger() {
        let written = Mutex<[String]>([])
        var logger = Logger(label: "test") { label in
            JournalLogHandler(label: label) { text in written.withLock { $0.append(text) } }
        }
        logger[metadataKey: "app.id"] = "org.example.App"
        logger.error("The database failed", metadata: ["error": "full"])
        logger.debug("not at info level")
        #expect(written.withLock { $0 } == ["<3>test: The database failed app.id=org.example.App error=full\n"])
    }

    @Test("standard error is the journal only when JOURNAL_STREAM names that very file")
    func detection() throws {
        let path = NSTemporaryDirectory() + "bgpolicy-journal-\(UUID().uuidString)"
        let fd = open(path, O_CREAT | O_RDWR, 0o600)
        #expect(fd >= 0)
        defer { close(fd); unlink(path) }
        var info = stat()
        #expect(fstat(fd, &info) == 0)
        #expect(JournalLogHandler.isJournalStream(fd: fd, journalStream: "\(info.st_dev):\(info.st_ino)"))
        #expect(!JournalLogHandler.isJournalStream(fd: fd, journalStream: "\(info.st_dev):\(info.st_ino + 1)"))
        #expect(!JournalLogHandler.isJournalStream(fd: fd, journalStream: nil))
        #expect(!JournalLogHandler.isJournalStream(fd: fd, journalStream: "garbage"))
        #expect(!JournalLogHandler.isJournalStream(fd: -1, journalStream: "\(info.st_dev):\(info.st_ino)"))
    }
}
