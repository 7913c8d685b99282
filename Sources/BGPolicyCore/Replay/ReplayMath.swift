/// `exp` and `log` in plain Swift: Core imports no C library, and the predictor needs only these
/// two, to double precision within a few ulps, which no policy decision depends on.
enum ReplayMath {
    static let ln2 = 0.693_147_180_559_945_309_417_232_121_458


    static func exp(_ x: Double) -> Double {
        if x.isNaN { return x }
        if x > 709 { return .infinity }
        if x < -745 { return 0 }
        // x = (32k + j)·ln2/32 + r with |r| ≤ ln2/64; exp(x) = 2^k · 2^(j/32) · exp(r), with
        // 2^(j/32) from a table and exp(r) from seven terms of its series (the eighth is under
        // 1e-17 of it). ln2/32 is split in two so that r stays exact for large n. Fixed
        // Horner steps, no loop: the predictor takes a sigmoid per app per slot it looks at.
        let n = (x * (32 / ln2)).rounded()
        let r = (x - n * ln2Over32High) - n * ln2Over32Low
        var p = inverseFactorial7
        p = p * r + inverseFactorial6
        p = p * r + inverseFactorial5
        p = p * r + inverseFactorial4
        p = p * r + inverseFactorial3
        p = p * r + 0.5
        p = p * r + 1
        p = p * r + 1
        let whole = Int(n)
        // j = whole mod 32, and whole − j is a multiple of 32 (two's complement, so for
        // negative `whole` too).
        let j = whole & 31
        return p * powersOf2Over32[j] * pow2((whole - j) >> 5)
    }

    /// ln2/32 split as fdlibm splits ln2: a high part whose last 21 bits are zero (so that n
    /// times it is exact for any n this `exp` sees) and the rest.
    private static let ln2Over32High = 6.931_471_803_691_238_164_90e-01 / 32
    private static let ln2Over32Low = 1.908_214_929_270_587_700_02e-10 / 32
    /// 1/n! for n in 3...7, each the one before divided by n in double precision (the
    /// literals are those values exactly; constants, not a table, so the series reads no
    /// memory for them).
    private static let inverseFactorial3 = 0.16666666666666666
    private static let inverseFactorial4 = 0.041666666666666664
    private static let inverseFactorial5 = 0.008333333333333333
    private static let inverseFactorial6 = 0.001388888888888889
    private static let inverseFactorial7 = 0.0001984126984126984
    /// 2^(j/32) for j in 0..<32, worked out once by the plain series (exact to the last ulp or so).
    private static let powersOf2Over32: [Double] = (0..<32).map { seriesExp(Double($0) * ln2 / 32) }

    /// exp(r) by its series, for |r| ≤ ln2: for the table.
    private static func seriesExp(_ r: Double) -> Double {
        var term = 1.0, sum = 1.0
        for n in 1...30 {
            term *= r / Double(n)
            sum += term
            if abs(term) < 1e-18 * sum { break }
        }
        return sum
    }

    static func log(_ x: Double) -> Double {
        if x.isNaN || x < 0 { return .nan }
        if x == 0 { return -.infinity }
        if x.isInfinite { return x }
        // x = m·2^e with m in [√½, √2); log m = 2·atanh((m−1)/(m+1)) by its series.
        var e = Int(x.exponent)
        var m = x.significand
        if m > 1.414_213_562_373_095 {
            m /= 2
            e += 1
        }
        let z = (m - 1) / (m + 1)
        let z2 = z * z
        var term = z, sum = 0.0
        var n = 1.0
        while true {
            let add = term / n
            sum += add
            if abs(add) < 1e-18 { break }
            term *= z2
            n += 2
        }
        return 2 * sum + Double(e) * ln2
    }

    private static func pow2(_ k: Int) -> Double {
        // A normal power of two is its exponent's bits.
        if k >= -1022 && k <= 1023 { return Double(bitPattern: UInt64(k + 1023) << 52) }
        // Two steps so that subnormal results and 2^1024 × small are exact enough.
        let half = k / 2
        return Double(sign: .plus, exponent: half, significand: 1) * Double(sign: .plus, exponent: k - half, significand: 1)
    }
}
