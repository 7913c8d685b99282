import ArgumentParser
import BGPolicyCore
import BGPolicyDBus
// @preconcurrency: for `stdout`, a C global that Swift 6 takes for shared mutable state. It is
// flushed only before a write to standard error and by the exit handler; stdio locks the stream.
@preconcurrency import Glibc
import SystemPackage

/// How bgpolicy ends, so that scripts can tell the cases apart (Docs/CLI.md, "Exit status").
/// Usage errors are ArgumentParser's: 64 (EX_USAGE), with the usage text.
enum ExitStatus {
    /// bgpolicyd refused the request (an `org.bgpolicy.Error`): no such app, no such task…
    static let refused = ExitCode(1)
    /// bgpolicyd could not be asked, or its answer could not be read: no session bus, not
    /// running, no answer in time, an answer of another version (EX_UNAVAILABLE).
    static let unavailable = ExitCode(69)
    /// Standard output could not be written: a full disk, a closed descriptor (EX_IOERR).
    static let outputFailed: Int32 = 74

    /// Opens /dev/null, read-only, as each standard descriptor bgpolicy was started without
    /// (`bgpolicy status >&-`), before anything else opens a descriptor. Else the first one
    /// opened (libdispatch's eventfd, the bus's socket) takes its number, what bgpolicy prints
    /// goes there, and a closed standard output is reported with that descriptor's error
    /// ("Invalid argument") instead of its own: a write to this one fails with "Bad file
    /// descriptor", as it would to the closed one.
    static func holdClosedStandardDescriptors() {
        for fd in [STDIN_FILENO, STDOUT_FILENO, STDERR_FILENO] where fcntl(fd, F_GETFD) == -1 {
            _ = open("/dev/null", O_RDONLY)  // the lowest number free: `fd`
        }
    }

    /// Makes a failed write to standard output end the program with `outputFailed`, whatever
    /// path leads to its exit (a command's output, ArgumentParser's help). Without it, stdio
    /// drops the error when it flushes at exit, and `bgpolicy status --json > /dev/full`
    /// exits 0 with nothing written.
    static func checkStandardOutputAtExit() {
        atexit {
            let flushFailed = fflush(stdout) != 0
            let code = flushFailed ? errno : ExitStatus.standardOutputError
            guard flushFailed || ferror(stdout) != 0 else { return }
            let reason = code.map { String(cString: strerror($0)) } ?? "a write failed"
            ExitStatus.printError("cannot write to standard output: \(reason)", hint: nil)
            _exit(ExitStatus.outputFailed)
        }
    }

    /// Runs a command's work. A failure is printed to standard error as
    /// "bgpolicy: <message>" and a line saying what to do, and ends the program with its
    /// exit status; ArgumentParser's own errors (usage, help) pass through untouched.
    static func reporting(hints: [BGPolicyErrorName: String] = [:], _ body: () async throws -> Void) async throws {
        do {
            try await body()
        } catch let refusal as AgentRefusal {
            printError(refusal.description, hint: refusal.hint(hints))
            throw refused
        } catch let error as CLIError {
            printError(error.message, hint: error.hint)
            throw unavailable
        } catch let error as DBusError {
            printError("cannot talk to bgpolicyd: \(error.message)", hint: nil)
            throw unavailable
        }
    }

    /// Prints "bgpolicy: <message>" and the hint, each on one line. Both may quote text from
    /// the bus (an app's error, as the agent passes it on; the bus's own words), so each is made
    /// safe as a table's cell is (`TableText.cell`): an escape sequence cannot reach the
    /// terminal, and a newline in it cannot start a line that reads as bgpolicy's own.
    static func printError(_ message: String, hint: String?) {
        var text = "bgpolicy: " + TableText.cell(message) + "\n"
        if let hint { text += TableText.cell(hint) + "\n" }
        writeStandardError(text)
    }

    /// Writes `text` to standard error as it is, unbuffered, after what the command has printed
    /// so far. To a pipe, standard output is block-buffered: without the flush, a note written
    /// after a table (`bgpolicy history 2>&1 | less`) came before it, or in the middle of one
    /// longer than the buffer. A write that fails (a closed descriptor) is dropped: there is
    /// nowhere left to say so.
    static func writeStandardError(_ text: String) {
        if fflush(stdout) != 0, standardOutputError == nil { standardOutputError = errno }
        _ = try? FileDescriptor.standardError.writeAll(text.utf8)
    }

    /// Why a flush of standard output before a write to standard error failed, for the exit
    /// handler: stdio keeps only that a write failed, and the exit handler says why.
    nonisolated(unsafe) private static var standardOutputError: Int32?
}
