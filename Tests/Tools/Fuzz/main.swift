// bgpolicy-fuzz: a seeded fuzzer for the D-Bus layer (BGPolicyDBus).
//
//   bgpolicy-fuzz [--iterations N] [--seed S] [--start I] [--corpus-out DIR] [--quiet]
//                 [--verbose] [--hang-seconds S]
//   bgpolicy-fuzz --replay HEX
//
// Every iteration draws from its own xoshiro256** generator, derived from the seed and the
// iteration's index, so `--seed S --start I --iterations 1 --verbose` replays iteration I of
// any run exactly. It exits 0 when every invariant held, 1 when one failed, 2 on bad usage;
// a crash (libdbus's abort on a failed check, a Swift trap, a segfault) prints the
// reproduction line and the input's bytes from a signal handler and dies with the signal; a
// hang (no iteration finished for --hang-seconds) prints the same and exits 3.
//
// Each iteration runs one strategy (Harness.swift):
// - valid: a valid message (half the calls aimed at the exported objects) is marshalled,
//   must demarshal to itself, and is dispatched;
// - mutated: a valid message's bytes, mutated blindly and by layout (Mutator.swift), are
//   demarshalled and, when they decode, re-marshalled and dispatched;
// - random: random bytes, some behind a plausible fixed header;
// - edge/invalid: values at the specification's limits and values or headers that break it
//   (Generators.swift); the oracle (Oracle.swift, written from the specification and from
//   libdbus's validators) says whether marshal must succeed, must throw, or may do either;
// - dispatch: sessions of calls to the exported objects (Dispatcher.swift) through
//   `ObjectServer.handle`, each reply compared with a model of the dispatcher;
// - names/signatures: the layer's name, path and signature validators against the oracle.

import BGPolicyDBus
import Glibc
import Synchronization

struct Options {
    var iterations: UInt64 = 1_000_000
    var seed: UInt64 = 20_261_122
    var start: UInt64 = 0
    var corpusOut: String?
    var quiet = false
    var verbose = false
    var replay: [UInt8]?
    var hangSeconds: UInt32 = 60

    static let usage = """
        usage: bgpolicy-fuzz [--iterations N] [--seed S] [--start I] [--corpus-out DIR] [--quiet]
                             [--verbose] [--hang-seconds S]
               bgpolicy-fuzz --replay HEX

          --iterations N    iterations to run (default 1000000)
          --seed S          the run's seed, decimal or 0x-hex (default 20261122)
          --start I         the first iteration's index (default 0): with --iterations 1,
                            replays one iteration of an earlier run
          --corpus-out DIR  keep sample inputs that decode, and every failing input, in DIR
          --quiet           only the summary line (and failures)
          --verbose         describe every step (for replays)
          --hang-seconds S  give up if no iteration finishes for S seconds (default 60)
          --replay HEX      decode these bytes, dispatch them, and check every invariant
        """

    static func parse(_ arguments: [String]) -> Options? {
        var o = Options()
        var i = 1
        func value() -> String? {
            i += 1
            return i < arguments.count ? arguments[i] : nil
        }
        func number(_ text: String?) -> UInt64? {
            guard let text else { return nil }
            if text.hasPrefix("0x") { return UInt64(text.dropFirst(2), radix: 16) }
            return UInt64(text)
        }
        while i < arguments.count {
            switch arguments[i] {
            case "--iterations": guard let n = number(value()) else { return nil }; o.iterations = n
            case "--seed": guard let n = number(value()) else { return nil }; o.seed = n
            case "--start": guard let n = number(value()) else { return nil }; o.start = n
            case "--corpus-out": guard let d = value() else { return nil }; o.corpusOut = d
            case "--hang-seconds": guard let n = number(value()), n > 0 else { return nil }; o.hangSeconds = UInt32(clamping: n)
            case "--quiet": o.quiet = true
            case "--verbose": o.verbose = true
            case "--replay": guard let h = value(), let bytes = unhex(h) else { return nil }; o.replay = bytes
            case "--help", "-h":
                print(usage)
                exit(0)
            default: return nil
            }
            i += 1
        }
        return o
    }
}

enum Fuzz {
    nonisolated static func main(_ arguments: [String]) async -> Int32 {
        guard let options = Options.parse(arguments) else {
            FileHandleStderr.write(Options.usage + "\n")
            return 2
        }
        // libdbus aborts on a failed argument check unless told otherwise; those aborts are
        // exactly what this fuzzer looks for, so an inherited DBUS_FATAL_WARNINGS=0 is undone
        // (before the first libdbus call, which reads it once).
        if let value = getenv("DBUS_FATAL_WARNINGS"), String(cString: value) == "0" {
            FileHandleStderr.write("bgpolicy-fuzz: ignoring DBUS_FATAL_WARNINGS=0: libdbus check failures must abort\n")
            unsetenv("DBUS_FATAL_WARNINGS")
        }
        CrashContext.seed = options.seed
        CrashContext.install(hangSeconds: options.hangSeconds)
        let corpus = options.corpusOut.map(Corpus.init(directory:))
        let harness: Harness
        do {
            harness = try Harness(seed: options.seed, corpus: corpus, verbose: options.verbose)
        } catch {
            FileHandleStderr.write("bgpolicy-fuzz: cannot export the test objects: \(error)\n")
            return 2
        }
        defer { CrashContext.finished.store(true, ordering: .relaxed) }

        if let bytes = options.replay {
            print("bgpolicy-fuzz: replaying \(bytes.count) bytes")
            let decoded = await harness.decode(bytes, origin: "replay")
            if let decoded {
                print("decoded: \(decoded)")
                print("body: \(decoded.body.description)")
                if decoded.kind == .methodCall, let reply = await harness.server.handle(decoded) {
                    print("reply: \(reply) \(reply.asError.map { "\($0)" } ?? reply.body.description)")
                }
            } else {
                print("rejected")
            }
            print("bgpolicy-fuzz: replay \(harness.failures.isEmpty ? "OK" : "FAILED") (\(harness.failures.count) failures)")
            return harness.failures.isEmpty ? 0 : 1
        }

        let fdsStart = ProcessStats.openDescriptors()
        let rssStart = ProcessStats.residentBytes()
        let end = options.start &+ options.iterations
        if !options.quiet {
            print(
                "bgpolicy-fuzz: seed \(options.seed), iterations \(options.start)..<\(end); "
                    + "reproduce one with --seed \(options.seed) --start I --iterations 1 --verbose")
            fflush(nil)
        }
        let clockStart = now()
        let cpuStart = cpuSeconds()
        var rssWarm = rssStart
        let warmAt = options.start + min(20_000, options.iterations / 10)
        let progressEvery: UInt64 = 100_000
        var i = options.start
        while i < end {
            await harness.run(iteration: i)
            i += 1
            if i == warmAt { rssWarm = ProcessStats.residentBytes() }
            if !options.quiet && (i - options.start) % progressEvery == 0 {
                let elapsed = now() - clockStart
                print(
                    "bgpolicy-fuzz: \(i - options.start) iterations, \(Int(Double(i - options.start) / elapsed))/s, "
                        + "rss \(ProcessStats.mebibytes(ProcessStats.residentBytes())), failures \(harness.failures.count)")
                fflush(nil)
            }
        }
        let elapsed = now() - clockStart
        let cpu = cpuSeconds() - cpuStart
        let rssEnd = ProcessStats.residentBytes()
        let fdsEnd = ProcessStats.openDescriptors()

        // Memory must stay flat after warm-up (caches, the first large buffers), and no
        // descriptor may leak.
        let growth = rssEnd - rssWarm
        if options.iterations >= 100_000 && growth > 48 << 20 {
            harness.fail("resident memory grew", "\(ProcessStats.mebibytes(rssWarm)) after warm-up, \(ProcessStats.mebibytes(rssEnd)) at the end")
        }
        if fdsEnd != fdsStart { harness.fail("descriptors leaked", "\(fdsStart) open at the start, \(fdsEnd) at the end") }

        let s = harness.stats
        if !options.quiet {
            let strategies = Harness.Strategy.allCases.map { "\($0.name) \(s.byStrategy[$0.rawValue])" }.joined(separator: ", ")
            print("bgpolicy-fuzz: strategies: \(strategies)")
            print(
                "bgpolicy-fuzz: demarshal \(s.demarshalled) (decoded \(s.decoded), rejected \(s.rejected)); "
                    + "marshal \(s.encoded + s.encodeRefused) (encoded \(s.encoded), refused \(s.encodeRefused), "
                    + "unreadable-but-allowed \(s.eitherUnreadable)); re-marshal refused \(s.reencodeRefused)")
            print(
                "bgpolicy-fuzz: dispatched \(s.dispatched) (replies \(s.replies), errors \(s.errorReplies), "
                    + "handler results \(s.handlerReplies), GetAll replies too deep to send \(s.getAllTooDeep)); "
                    + "name/signature checks \(s.textChecks)")
            for (kind, n) in harness.notes.sorted(by: { $0.value.count > $1.value.count }) {
                print("bgpolicy-fuzz: note: \(n.count)x \(kind); first at \(n.example.prefix(300))")
            }
            if !harness.failureKinds.isEmpty {
                for (kind, n) in harness.failureKinds.sorted(by: { $0.value > $1.value }) { print("bgpolicy-fuzz: \(n)x \(kind)") }
            }
        }
        let rate = elapsed > 0 ? Int(Double(options.iterations) / elapsed) : 0
        let cpuRate = cpu > 0 ? Int(Double(options.iterations) / cpu) : 0
        let verdict = harness.failures.isEmpty ? "PASS" : "FAIL"
        print(
            "bgpolicy-fuzz: \(verdict) seed=\(options.seed) iterations=\(options.iterations) failures=\(harness.failures.count) "
                + "crashes=0 time=\(tenths(elapsed))s rate=\(rate)/s cpu=\(tenths(cpu))s cpu_rate=\(cpuRate)/s "
                + "decoded=\(s.decoded) rejected=\(s.rejected) encoded=\(s.encoded) refused=\(s.encodeRefused) "
                + "dispatched=\(s.dispatched) rss_start=\(ProcessStats.mebibytes(rssStart)) rss_warm=\(ProcessStats.mebibytes(rssWarm)) "
                + "rss_end=\(ProcessStats.mebibytes(rssEnd)) fds=\(fdsStart)->\(fdsEnd)")
        return harness.failures.isEmpty ? 0 : 1
    }

    static func tenths(_ seconds: Double) -> String { String(Double(Int(seconds * 10)) / 10) }

    /// User and system CPU time: the rate per CPU second does not depend on machine load.
    static func cpuSeconds() -> Double {
        var usage = rusage()
        getrusage(RUSAGE_SELF.rawValue, &usage)
        return Double(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) + Double(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6
    }

    static func now() -> Double {
        var ts = timespec()
        clock_gettime(CLOCK_MONOTONIC, &ts)
        return Double(ts.tv_sec) + Double(ts.tv_nsec) / 1e9
    }
}

enum FileHandleStderr {
    static func write(_ text: String) {
        var t = text
        t.withUTF8 { _ = Glibc.write(2, $0.baseAddress, $0.count) }
    }
}

exit(await Fuzz.main(CommandLine.arguments))
