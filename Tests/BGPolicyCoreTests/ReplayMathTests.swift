@testable import BGPolicyCore
import Glibc
import Testing

@Suite("ReplayMath")
struct ReplayMathTests {
    @Test(arguments: [-30.0, -1, -1e-6, 0, 1e-6, 0.5, 1, 2.5, 30, 700])
    func expMatchesItsDefinition(_ x: Double) {
        // exp(x)·exp(−x) = 1 and log(exp(x)) = x.
        #expect(abs(ReplayMath.exp(x) * ReplayMath.exp(-x) - 1) < 1e-12)
        #expect(abs(ReplayMath.log(ReplayMath.exp(x)) - x) < 1e-9 * max(1, abs(x)))
    }

    /// Against the C library over the whole range the predictor can use, in steps that land on
    /// every entry of the 2^(j/32) table and both signs of the remainder: within 4 ulps.
    @Test func expAgreesWithTheCLibrary() {
        var x = -744.0
        var worst = 0.0
        while x <= 709 {
            let ours = ReplayMath.exp(x), theirs = Glibc.exp(x)
            if theirs.isNormal { worst = max(worst, abs(ours - theirs) / theirs.ulp) }
            x += 0.013_7
        }
        #expect(worst <= 4, "worst error \(worst) ulps")
        #expect(ReplayMath.exp(0) == 1)
        #expect(ReplayMath.exp(-745.5) == 0)
        #expect(ReplayMath.exp(710) == .infinity)
        #expect(ReplayMath.exp(.nan).isNaN)
        // Results below the normal range (2^k for k under −1022 is built in two steps).
        for x in [-709.0, -720, -740] {
            #expect(abs(ReplayMath.exp(x) - Glibc.exp(x)) <= 4 * Double.leastNonzeroMagnitude + 4 * Glibc.exp(x).ulp)
        }
    }

    @Test func mathKnownValues() {
        #expect(abs(ReplayMath.exp(1) - 2.718_281_828_459_045) < 1e-15)
        #expect(abs(ReplayMath.log(10) - 2.302_585_092_994_046) < 1e-15)
        #expect(ReplayMath.log(0) == -.infinity)
        #expect(ReplayMath.log(-1).isNaN)
        #expect(ReplayMath.exp(-1000) == 0)
    }
}
