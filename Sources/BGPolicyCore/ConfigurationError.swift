/// A configuration file that cannot be used, located as precisely as the problem allows.
///
/// `description` is the message for people, compiler style:
/// `bgpolicy.conf:12: [cpu] limit: expected a whole percentage from 1% to 100%, like "80%", got "abc"`.
public struct ConfigurationError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The file name given to the parser, if any.
    public var source: String?
    /// The 1-based line the problem is on; `nil` for configurations built in code.
    public var line: Int?
    /// The section involved, without brackets.
    public var section: String?
    /// The key involved.
    public var key: String?
    /// What is wrong and what would be valid.
    public var message: String

    public init(source: String? = nil, line: Int? = nil, section: String? = nil, key: String? = nil, message: String) {
        self.source = source
        self.line = line
        self.section = section
        self.key = key
        self.message = message
    }

    public var description: String {
        var parts: [String] = []
        switch (source, line) {
        case let (source?, line?): parts.append("\(source):\(line)")
        case let (source?, nil): parts.append(source)
        case let (nil, line?): parts.append("line \(line)")
        case (nil, nil): break
        }
        switch (section, key) {
        case let (section?, key?): parts.append("[\(section)] \(key)")
        case let (section?, nil): parts.append("[\(section)]")
        case let (nil, key?): parts.append(key)
        case (nil, nil): break
        }
        parts.append(message)
        return parts.joined(separator: ": ")
    }
}
