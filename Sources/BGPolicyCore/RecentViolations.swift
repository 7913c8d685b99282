/// An app's violations (overruns, CPU enforcement) that still count against it: those of the
/// last 7 days, counted at the time they are asked about. Counted once at start and only ever
/// raised after it, an app that overran on the 1st, the 15th and the 30th day of one run of the
/// agent stood at three on the 30th, and only a restart forgave the old ones.
///
/// Each time is that of one slice's violation of one kind: the tasks of a slice that overran
/// share one (`Slice.violationsCounted`), and the store counts distinct times and events.
///
/// The times are the wall clock's, as the history's rows are. A step of the clock that the
/// agent hears moves them with it (`wallClockStepped`), so each stays as long ago as it was,
/// like the other times the agent measures from. A time later than now can only come from a
/// clock set back unheard: by rows the store kept from before a step made while the agent was
/// stopped, or by a step `WallClockWatch` could not hear. Such a time is taken as now the moment
/// it is seen (`advance(to:)`), so it counts for 7 days from then at most; left as it was, it
/// would count until the clock caught up with it, which after a clock set back a year is a year
/// and 7 days. Pure, with the time passed in.
public struct RecentViolations: Sendable, Equatable {
    /// How long a violation counts.
    public static let memory: UnixTime = 7 * 86_400

    /// The times of the violations that count, oldest first.
    public private(set) var times: [UnixTime] = []
    /// The kind of each of `times`, in the same order.
    public private(set) var kinds: [ViolationKind] = []
    /// How many of `kinds` are `.cpu`: kept as they change, since every decision asks, and an
    /// app may have thousands.
    private var cpuCount = 0

    public init() {}

    /// The violations at `times` (in any order), all of one `kind`, that count at `now`.
    public init(_ times: some Sequence<UnixTime>, kind: ViolationKind = .overrun, now: UnixTime) {
        self.init(times.map { (time: $0, kind: kind) }, now: now)
    }

    /// The `violations` (in any order) that count at `now`.
    public init(_ violations: some Sequence<(time: UnixTime, kind: ViolationKind)>, now: UnixTime) {
        let sorted = violations.sorted { $0.time < $1.time }
        times = sorted.map(\.time)
        kinds = sorted.map(\.kind)
        cpuCount = kinds.count { $0 == .cpu }
        advance(to: now)
    }

    /// How many count, as of the last `advance(to:)` or `record(at:)`.
    public var count: Int { times.count }

    /// How many of `kind` count, as of the last `advance(to:)` or `record(at:)`.
    public func count(of kind: ViolationKind) -> Int { kind == .cpu ? cpuCount : times.count - cpuCount }

    /// The latest that counts, as of the last `advance(to:)` or `record(at:)`.
    public var last: UnixTime? { times.last }

    /// A violation at `time`, the wall clock now; of those that count, the newest `limit` are
    /// kept. The agent passes the number of an app's violation rows the store keeps, the newest
    /// (`TaskStore.historyPerAppLimit`), so that a restarted agent reads back the same newest
    /// ones (fewer where several rows are one violation, as the tasks of one slice are). An app
    /// can make violations at will (16 background tasks left to expire every 30 s, some 46,000
    /// a day): uncapped, they grew to hundreds of thousands over the 7 days, each read by
    /// `penaltyEnd` at every evaluation of the app, and many more than a restart read back.
    public mutating func record(at time: UnixTime, kind: ViolationKind = .overrun, keepingAtMost limit: Int = .max) {
        advance(to: time)
        times.append(time)
        kinds.append(kind)
        if kind == .cpu { cpuCount += 1 }
        if times.count > limit { dropOldest(times.count - max(limit, 0)) }
    }

    /// Forgets the violations older than `memory` at `now` (the wall clock), and takes those
    /// later than `now` as `now`. Returns whether anything changed. A violation exactly `memory`
    /// old still counts, as the store's `time >= since` counts it at start.
    @discardableResult
    public mutating func advance(to now: UnixTime) -> Bool {
        let oldest = now - Self.memory
        guard let first = times.first, let latest = times.last, first < oldest || latest > now else { return false }
        dropOldest(times.prefix { $0 < oldest }.count)
        times = times.map { min($0, now) }
        return true
    }

    private mutating func dropOldest(_ n: Int) {
        cpuCount -= kinds.prefix(n).count { $0 == .cpu }
        times.removeFirst(n)
        kinds.removeFirst(n)
    }

    /// When a hold that lasts `penalty(n)` after the latest violation, n being how many count,
    /// ends: the first time t at which t ≥ latest + penalty(those still counting at t). The
    /// older violations stop counting as they reach `memory`, and the penalty shrinks with
    /// them: taken with today's count alone, the hold of an app whose oldest overrun ages out
    /// during it lasted the longer penalty, up to the cap (8 hours), after it had ended. Nil
    /// with none. `penalty` must not grow as the count falls.
    public func penaltyEnd(_ penalty: (Int) -> UnixTime) -> UnixTime? {
        guard let latest = times.last else { return nil }
        var end = latest + penalty(times.count)
        // After the `aged` oldest have stopped counting: a violation exactly `memory` old still
        // counts (`advance(to:)`), so it stops the moment after.
        for aged in 1..<times.count {
            let from = (times[aged - 1] + Self.memory).nextUp
            if from >= end { break }
            end = min(end, max(from, latest + penalty(times.count - aged)))
        }
        return end
    }

    /// The wall clock was set `step` seconds forward (or back): each violation stays as long ago
    /// as it was.
    public mutating func wallClockStepped(by step: Double) {
        for index in times.indices { times[index] += step }
    }
}
