/// What the CPU monitor does to a slice that keeps using more CPU than allowed after its warning
/// (SPEC §2 "CPU monitor"). The raw values are the configuration file's words.
public enum CPUAction: String, Sendable, CaseIterable, CustomStringConvertible {
    /// Limit the app's cgroup to `cpu.throttle_quota` of one core.
    case throttle
    /// Freeze the app's cgroup until the slice ends.
    case freeze
    /// Only record the violation.
    case observe

    public var description: String { rawValue }
}
