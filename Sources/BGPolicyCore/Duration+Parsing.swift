extension Duration {
    /// Why `Duration(parsing:in:example:)` refused a text: what would be valid, in the words of
    /// the configuration file's messages.
    public struct ParseError: Error, Equatable, Sendable, CustomStringConvertible {
        public let description: String
    }

    /// A duration typed on the command line (`bgpolicy history --since`), in the configuration
    /// file's syntax (`90s`, `30sec`, `1.5h`, `2days`, `1 h`, `1h30min`, `90m`; Docs/Configuration.md),
    /// with weeks besides (`1w`), within `range`. One parser for both, so that what the file
    /// takes the command line takes too.
    public init(parsing text: String, in range: ClosedRange<Duration>, example: String) throws(ParseError) {
        do {
            self = try ConfigurationSyntax.duration(text, in: range, example: example, weeks: true)
        } catch {
            throw ParseError(description: error.message)
        }
    }
}
