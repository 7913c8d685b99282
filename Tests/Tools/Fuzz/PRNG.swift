/// The fuzzer's randomness: xoshiro256** seeded through SplitMix64.
///
/// Every iteration gets its own generator, derived from the run's seed and the iteration's
/// index, so any single iteration can be replayed alone (`--seed S --start N --iterations 1`)
/// and the results never depend on the Swift standard library's random algorithms, which may
/// change between toolchains.

struct SplitMix64 {
    var state: UInt64

    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        return SplitMix64.mix(state)
    }

    static func mix(_ value: UInt64) -> UInt64 {
        var z = value
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

struct Xoshiro256StarStar {
    private var s0: UInt64
    private var s1: UInt64
    private var s2: UInt64
    private var s3: UInt64

    /// The generator for one iteration of one run.
    init(seed: UInt64, stream: UInt64) {
        var sm = SplitMix64(state: SplitMix64.mix(seed) ^ SplitMix64.mix(stream &+ 0x632B_E59B_D9B4_E019))
        s0 = sm.next()
        s1 = sm.next()
        s2 = sm.next()
        s3 = sm.next()
        if s0 | s1 | s2 | s3 == 0 { s0 = 1 }  // the one state xoshiro cannot leave
    }

    @inline(__always)
    private static func rotl(_ x: UInt64, _ k: UInt64) -> UInt64 { (x << k) | (x >> (64 - k)) }

    @inline(__always)
    mutating func next() -> UInt64 {
        let result = Self.rotl(s1 &* 5, 7) &* 9
        let t = s1 << 17
        s2 ^= s0
        s3 ^= s1
        s1 ^= s2
        s0 ^= s3
        s2 ^= t
        s3 = Self.rotl(s3, 45)
        return result
    }
}

/// Convenience draws on top of the generator. All of them are defined here (no
/// `Int.random(in:using:)`), so a seed means the same thing on every toolchain.
struct Rand {
    var core: Xoshiro256StarStar

    init(seed: UInt64, stream: UInt64) {
        core = Xoshiro256StarStar(seed: seed, stream: stream)
    }

    @inline(__always)
    mutating func u64() -> UInt64 { core.next() }

    /// Uniform in 0..<n (n > 0), by multiply-high: a tiny bias, fully deterministic.
    @inline(__always)
    mutating func below(_ n: Int) -> Int {
        Int(truncatingIfNeeded: u64().multipliedFullWidth(by: UInt64(n)).high)
    }

    /// Uniform in the closed range.
    mutating func int(_ range: ClosedRange<Int>) -> Int {
        range.lowerBound + below(range.upperBound - range.lowerBound + 1)
    }

    /// True with probability `numerator` / `denominator`.
    @inline(__always)
    mutating func chance(_ numerator: Int, _ denominator: Int) -> Bool { below(denominator) < numerator }

    mutating func bool() -> Bool { u64() & 1 == 1 }

    mutating func pick<T>(_ items: [T]) -> T { items[below(items.count)] }

    mutating func byte() -> UInt8 { UInt8(truncatingIfNeeded: u64()) }

    /// Mostly small numbers, sometimes large ones: sizes that favour the interesting end.
    mutating func smallSize(max: Int) -> Int {
        switch below(8) {
        case 0...3: return below(min(max, 3) + 1)
        case 4...6: return below(min(max, 8) + 1)
        default: return below(max + 1)
        }
    }

    /// Picks an index according to integer weights.
    mutating func weighted(_ weights: [Int]) -> Int {
        let total = weights.reduce(0, +)
        var r = below(total)
        for (i, w) in weights.enumerated() {
            if r < w { return i }
            r -= w
        }
        return weights.count - 1
    }
}
