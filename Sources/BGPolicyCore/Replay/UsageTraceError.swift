/// Why a trace could not be read: the 1-based line and what is wrong with it.
public struct UsageTraceError: Error, Equatable, Sendable, CustomStringConvertible {
    public let line: Int
    public let message: String
    public init(line: Int, _ message: String) {
        self.line = line
        self.message = message
    }
    public var description: String { "line \(line): \(message)" }
}
