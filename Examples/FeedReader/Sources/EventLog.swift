#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// One line per event on standard output, written straight to the descriptor so that nothing
/// waits in a buffer: tests and people follow the output live.
enum EventLog {
    /// Prints `event key=value …`; `message`, which may hold spaces, goes last.
    static func emit(_ event: String, _ fields: KeyValuePairs<String, String> = [:]) {
        var line = event
        var message: String?
        for (key, value) in fields {
            if key == "message" {
                message = value
                continue
            }
            line += " \(key)=\(value.isEmpty ? "-" : value)"
        }
        if let message { line += " message=\(message.replacing("\n", with: " "))" }
        line += "\n"
        var bytes = Array(line.utf8)[...]
        while !bytes.isEmpty {
            let written = bytes.withUnsafeBytes { write(1, $0.baseAddress, $0.count) }
            if written < 0 {
                if errno == EINTR { continue }
                return
            }
            bytes = bytes.dropFirst(written)
        }
    }
}
