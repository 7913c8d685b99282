@testable import BGPolicyCore
import Testing

@Suite("ReplayMath")
struct ReplayMathTests {
    @Test(arguments: [-30.0, -1, -1e-6, 0, 1e-6, 0.5, 1, 2.5, 30, 700])
    func expMatchesItsDefinition(_ x: Double) {
        // exp(x)·exp(−x) = 1 and log(exp(x)) = x.
        #expect(abs(ReplayMath.exp(x) * ReplayMath.exp(-x) - 1) < 1e-12)
        #expect(abs(ReplayMath.log(ReplayMath.exp(x)) - x) < 1e-9 * max(1, abs(x)))
    }

    @Test func mathKnownValues() {
        #expect(abs(ReplayMath.exp(1) - 2.718_281_828_459_045) < 1e-15)
        #expect(abs(ReplayMath.log(10) - 2.302_585_092_994_046) < 1e-15)
        #expect(ReplayMath.log(0) == -.infinity)
        #expect(ReplayMath.log(-1).isNaN)
        #expect(ReplayMath.exp(-1000) == 0)
    }
}
