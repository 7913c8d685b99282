public import BGPolicyCore
public import Logging

/// One input of the machine's state (STYLE.md example 2): a small type that reads a daemon or
/// the kernel and reports plain facts. The core decides what they mean.
public protocol ConditionSource: Sendable {
    var name: ConditionSourceName { get }
    /// Runs until the task is cancelled. Reports facts when they change, `.lost` whenever its
    /// input goes away (and its facts become unknown), and reads everything again when the
    /// input comes back or when `context.rereads` says so (after resume from sleep).
    func run(_ context: SourceContext) async
}

/// What a source may use while it runs.
public struct SourceContext: Sendable {
    public let logger: Logger
    /// Hands a report to the core.
    public let report: @Sendable (ConditionReport) async -> Void
    /// Ticks when everything should be read again (after resume from sleep).
    public let rereads: AsyncStream<Void>

    public init(logger: Logger, rereads: AsyncStream<Void>, report: @escaping @Sendable (ConditionReport) async -> Void) {
        self.logger = logger
        self.rereads = rereads
        self.report = report
    }
}

/// Sleep and resume, as logind announces them.
public enum SleepEvent: Sendable, Equatable {
    /// `PrepareForSleep(true)`: the machine is about to sleep. The delay inhibitor is released
    /// after the handler returns.
    case preparing
    /// `PrepareForSleep(false)`: the machine woke up.
    case resumed
}
