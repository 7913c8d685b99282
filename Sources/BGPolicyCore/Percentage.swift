/// A whole percentage from 0 % to 100 %, such as a battery level or a share of one CPU core.
///
/// Whole numbers only: the policy never needs finer steps, and integers render and compare
/// exactly, so a configuration always round-trips through its text form.
public struct Percentage: Sendable, Hashable, Comparable, CustomStringConvertible {
    /// The percentage, 0...100.
    public let value: Int

    /// The valid values.
    public static let range: ClosedRange<Int> = 0...100

    /// `nil` unless `value` is in 0...100. Labelled so that it is not mistaken for the literal
    /// form: `Percentage(101)` is the integer literal 101 and traps, `Percentage(percent: 101)` is `nil`.
    public init?(percent value: Int) {
        guard Self.range.contains(value) else { return nil }
        self.value = value
    }

    /// The percentage as a fraction, 0.0...1.0.
    public var fraction: Double { Double(value) / 100 }

    /// `"80%"`: the form the configuration file uses.
    public var description: String { "\(value)%" }

    public static func < (lhs: Percentage, rhs: Percentage) -> Bool { lhs.value < rhs.value }
}

extension Percentage: ExpressibleByIntegerLiteral {
    /// For literals in code (`let low: Percentage = 20`); an out-of-range literal is a programming error.
    public init(integerLiteral value: Int) {
        precondition(Self.range.contains(value), "Percentage literal \(value) is outside 0...100")
        self.value = value
    }
}
