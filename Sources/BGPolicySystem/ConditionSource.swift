public import BGPolicyCore
public import Logging

/// One input of the machine's state (STYLE.md example 2): a small type that reads a daemon or
/// the kernel and reports plain facts. The core decides what they mean.
public protocol ConditionSource: Sendable {
    var name: ConditionSourceName { get }
    /// Runs until the task is cancelled. Reports facts when they change, `.lost` whenever its
    /// input goes away (and its facts become unknown), and reads everything again when the
    /// input comes back or when `context.rereads` says so (after resume from sleep). What a
    /// re-read finds is reported even when nothing changed: after a resume the agent waits for
    /// that answer from the battery and power-profile sources (`ConditionsHub.settling`).
    func run(_ context: SourceContext) async
}

/// What a source may use while it runs.
public struct SourceContext: Sendable {
    public let logger: Logger
    /// Hands a report to the core.
    public let report: @Sendable (ConditionReport) async -> Void
    /// Ticks when everything should be read again (after resume from sleep).
    public let rereads: AsyncStream<Void>
    /// How a source waits (before reading a daemon again after a failure).
    public let sleep: Sleep

    public init(
        logger: Logger, rereads: AsyncStream<Void>, sleep: @escaping Sleep = Sleeping.task,
        report: @escaping @Sendable (ConditionReport) async -> Void
    ) {
        self.logger = logger
        self.rereads = rereads
        self.sleep = sleep
        self.report = report
    }
}

/// A wait of a duration, which throws `CancellationError` when its task is cancelled.
///
/// The agent passes its executor's (`AgentExecutor.sleep(for:)`): `Task.sleep` runs on
/// libdispatch, whose workqueue monitor then wakes the process once a second for as long as it
/// lives, and one daemon read retried after a failure left the agent doing that for good.
public typealias Sleep = @Sendable (Duration) async throws -> Void

public enum Sleeping {
    /// `Task.sleep`: for tools and tests, which do not run on the agent's executor.
    public static let task: Sleep = { try await Task.sleep(for: $0) }
}

/// Sleep and resume, as logind announces them.
public enum SleepEvent: Sendable, Equatable {
    /// `PrepareForSleep(true)`: the machine is about to sleep. The delay inhibitor is released
    /// after the handler returns.
    case preparing
    /// `PrepareForSleep(false)`: the machine woke up.
    case resumed
}
