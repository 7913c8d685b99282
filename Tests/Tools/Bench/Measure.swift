import BGPolicyDBus
import Glibc
import Synchronization

/// One method call, made again and again through `DBusConnection.call`.
struct Caller: Sendable {
    let name: String
    let connection: DBusConnection
    let message: Message

    func call() async throws {
        _ = try await connection.call(message)
    }

    static func getStatus(on connection: DBusConnection) throws -> Caller {
        Caller(
            name: "GetStatus", connection: connection,
            message: .methodCall(
                destination: "org.bgpolicy.Agent1", path: try ObjectPath("/org/bgpolicy/Agent1"),
                interface: "org.bgpolicy.Admin1", member: "GetStatus"))
    }

    static func getID(on connection: DBusConnection) -> Caller {
        Caller(
            name: "GetId", connection: connection,
            message: .methodCall(
                destination: DBusConnection.busName, path: DBusConnection.busPath,
                interface: DBusConnection.busName, member: "GetId"))
    }
}

/// Round-trip times in nanoseconds.
struct Samples: Sendable {
    var values: [UInt64] = []

    var count: Int { values.count }

    /// Nearest-rank percentile (p in 0...100).
    func percentile(_ p: Double) -> Double {
        guard !values.isEmpty else { return .nan }
        let sorted = values.sorted()
        let rank = max(1, Int((p / 100 * Double(sorted.count)).rounded(.up)))
        return Double(sorted[min(rank, sorted.count) - 1])
    }

    var median: Double { percentile(50) }

    var mean: Double {
        guard !values.isEmpty else { return .nan }
        return Double(values.reduce(0, +)) / Double(values.count)
    }
}

enum Measure {
    /// Sequential calls; any failure ends the bench (a latency figure with holes means nothing).
    static func sequential(_ caller: Caller, count: Int, into samples: inout Samples) async throws {
        samples.values.reserveCapacity(samples.values.count + count)
        for _ in 0..<count {
            let start = Clock.nanoseconds()
            do {
                try await caller.call()
            } catch {
                throw BenchFailure("\(caller.name) failed during the latency run: \(error)")
            }
            samples.values.append(Clock.nanoseconds() - start)
        }
    }

    /// CPU time of the three processes involved, in nanoseconds.
    struct CPU: Sendable {
        var agent: UInt64 = 0
        var daemon: UInt64 = 0
        var bench: UInt64 = 0

        struct Snapshot {
            let agent: [Int: UInt64]
            let daemon: [Int: UInt64]
            let bench: [Int: UInt64]

            static func read(agent: pid_t, daemon: pid_t) -> Snapshot {
                Snapshot(agent: ProcFS.threadCPU(of: agent), daemon: ProcFS.threadCPU(of: daemon), bench: ProcFS.threadCPU(of: getpid()))
            }
        }

        mutating func add(from start: Snapshot, to end: Snapshot) {
            agent += ProcFS.cpuBetween(start.agent, end.agent)
            daemon += ProcFS.cpuBetween(start.daemon, end.daemon)
            bench += ProcFS.cpuBetween(start.bench, end.bench)
        }

        var total: UInt64 { agent + daemon + bench }
    }

    /// Latency of two callers, in interleaved blocks so drift affects both alike, with the CPU
    /// time each block cost every process.
    static func latency(
        _ a: Caller, _ b: Caller, count: Int, block: Int = 1_000, agent: pid_t, daemon: pid_t
    ) async throws -> (Samples, Samples, CPU, CPU) {
        var sa = Samples()
        var sb = Samples()
        var ca = CPU()
        var cb = CPU()
        var done = 0
        while done < count {
            let n = min(block, count - done)
            let t0 = CPU.Snapshot.read(agent: agent, daemon: daemon)
            try await sequential(a, count: n, into: &sa)
            let t1 = CPU.Snapshot.read(agent: agent, daemon: daemon)
            try await sequential(b, count: n, into: &sb)
            let t2 = CPU.Snapshot.read(agent: agent, daemon: daemon)
            ca.add(from: t0, to: t1)
            cb.add(from: t1, to: t2)
            done += n
        }
        return (sa, sb, ca, cb)
    }

    struct Throughput: Sendable {
        var calls = 0
        var errors = 0
        var nanoseconds: UInt64 = 0
        var firstError: String?

        var callsPerSecond: Double { nanoseconds == 0 ? .nan : Double(calls) / (Double(nanoseconds) / 1e9) }

        mutating func add(_ other: Throughput) {
            calls += other.calls
            errors += other.errors
            nanoseconds += other.nanoseconds
            firstError = firstError ?? other.firstError
        }
    }

    /// `concurrency` tasks, each calling back to back until `seconds` have passed. The time
    /// runs until the last call in flight has come back.
    static func throughput(_ caller: Caller, concurrency: Int, seconds: Double) async -> Throughput {
        let start = Clock.nanoseconds()
        let deadline = start + UInt64(seconds * 1e9)
        return await calls(caller, tasks: concurrency, since: start) { Clock.nanoseconds() < deadline }
    }

    /// Exactly `count` calls, `concurrency` in flight.
    static func counted(_ caller: Caller, count: Int, concurrency: Int) async -> Throughput {
        let issued = Counter()
        let start = Clock.nanoseconds()
        return await calls(caller, tasks: min(concurrency, count), since: start) { issued.next() <= count }
    }

    /// `tasks` tasks, each calling back to back for as long as `more` says, counting the calls
    /// and the errors; the time is from `start` until the last call in flight has come back.
    private static func calls(
        _ caller: Caller, tasks: Int, since start: UInt64, while more: @escaping @Sendable () -> Bool
    ) async -> Throughput {
        var total = await withTaskGroup(of: Throughput.self) { group in
            for _ in 0..<tasks {
                group.addTask {
                    var mine = Throughput()
                    while more() {
                        do {
                            try await caller.call()
                            mine.calls += 1
                        } catch {
                            mine.errors += 1
                            if mine.firstError == nil { mine.firstError = "\(error)" }
                        }
                    }
                    return mine
                }
            }
            var sum = Throughput()
            for await part in group { sum.add(part) }
            return sum
        }
        total.nanoseconds = Clock.nanoseconds() - start
        return total
    }
}

final class Counter: Sendable {
    private let value = Atomic<Int>(0)

    /// 1, 2, 3, … across all callers.
    func next() -> Int {
        value.wrappingAdd(1, ordering: .relaxed).newValue
    }
}
