@testable import BGPolicyCore
import Testing

@Suite("RefreshPlanner.locate")
struct CandidateLocationTests {
    /// Apps first opened out of id order, so that their models' positions are not their id order.
    static func planner() -> RefreshPlanner {
        var planner = RefreshPlanner(registeredAppCount: 4)
        for (offset, app) in ["org.c", "org.a", "org.e", "org.b"].enumerated() {
            planner.recordOpen(of: app, at: 1_704_067_200 + Double(offset))
        }
        return planner
    }

    /// Whatever the candidates' order and whichever are unknown, each is found where its id
    /// says (`UsagePredictor.position(of:)`): the walk in id order must not skip one that
    /// comes after a larger id.
    @Test(arguments: [
        ["org.a", "org.b", "org.c", "org.e"],
        ["org.0", "org.a", "org.d", "org.e", "org.f"],
        ["org.e", "org.c", "org.a", "org.d", "org.b"],
        ["org.b", "org.e", "org.a", "org.c"],
        ["org.b", "org.b", "org.a", "org.e", "org.c", "org.x", "org.a"],
        [],
    ])
    func findsEachCandidateInAnyOrder(_ ids: [String]) {
        let planner = Self.planner()
        let candidates = ids.map { RefreshPlanner.Candidate(appID: $0, weight: 1) }
        #expect(planner.locate(candidates).map { $0?.position } == ids.map { planner.predictor.position(of: $0) })
        #expect(planner.predictor.position(of: "org.a") == 1)
    }
}
