import Synchronization

/// A setting that a configuration reload may change while the source that reads it runs.
/// The source reads `value` when it uses it; whoever sets it tells the source to start again
/// where the old value is built into what it set up (an idle watch's interval).
public final class LiveSetting<Value: Sendable & Equatable>: Sendable {
    private let current: Mutex<Value>

    public init(_ value: Value) {
        current = Mutex(value)
    }

    public var value: Value { current.withLock { $0 } }

    /// Sets the value; true when it differs from the one before.
    @discardableResult
    public func set(_ new: Value) -> Bool {
        current.withLock { value in
            defer { value = new }
            return value != new
        }
    }
}
