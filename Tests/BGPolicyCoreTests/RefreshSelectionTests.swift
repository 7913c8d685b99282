@testable import BGPolicyCore
import Testing

/// `RefreshPlanner.best`: a window's choice picks its apps out with a bounded heap instead of
/// sorting every candidate; it must give exactly the sorted prefix.
@Suite("Refresh selection")
struct RefreshSelectionTests {
    @Test(arguments: [0, 1, 2, 7, 50, 99, 100, 101, 1_000])
    func bestIsTheSortedPrefix(count: Int) {
        var seed: UInt64 = 42
        func random() -> UInt64 {
            seed = seed &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
            return seed >> 33
        }
        // Scores with many ties, broken by a unique name, as the planner breaks them by app id.
        let n = 300
        let scores = (0..<n).map { _ in Double(random() % 17) / 16 }
        let names = (0..<n).map { "org.example.App\(random() % 1_000_000)-\($0)" }
        let precedes = { (a: Int, b: Int) -> Bool in
            scores[a] != scores[b] ? scores[a] > scores[b] : names[a] < names[b]
        }
        let expected = Array((0..<n).sorted(by: precedes).prefix(count))
        #expect(RefreshPlanner.best(count, of: n, by: precedes) == expected)
    }

    @Test func bestOfNothing() {
        #expect(RefreshPlanner.best(5, of: 0) { $0 < $1 } == [])
        #expect(RefreshPlanner.best(0, of: 5) { $0 < $1 } == [])
        #expect(RefreshPlanner.best(3, of: 3) { $0 > $1 } == [2, 1, 0])
    }
}
