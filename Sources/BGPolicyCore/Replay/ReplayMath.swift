/// `exp` and `log` in plain Swift: Core imports no C library, and the predictor needs only these
/// two, to double precision within a few ulps, which no policy decision depends on.
enum ReplayMath {
    static let ln2 = 0.693_147_180_559_945_309_417_232_121_458

    /// 1/n for the series, so that each term costs a multiplication, not a division.
    private static let reciprocals: [Double] = (0...20).map { $0 == 0 ? 0 : 1 / Double($0) }

    static func exp(_ x: Double) -> Double {
        if x.isNaN { return x }
        if x > 709 { return .infinity }
        if x < -745 { return 0 }
        // x = k·ln2 + r with |r| ≤ ln2/2; exp(r) by its series, then scaled by 2^k.
        let k = (x / ln2).rounded()
        let r = x - k * ln2
        var term = 1.0, sum = 1.0
        for n in 1...20 {
            term *= r * reciprocals[n]
            sum += term
            if abs(term) < 1e-17 * sum { break }
        }
        return sum * pow2(Int(k))
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
        // Two steps so that subnormal results and 2^1024 × small are exact enough.
        let half = k / 2
        return Double(sign: .plus, exponent: half, significand: 1) * Double(sign: .plus, exponent: k - half, significand: 1)
    }
}
