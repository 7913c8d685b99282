import BGPolicyCore
import Testing

@testable import BGPolicySystem

/// What `PowerProfilesSource` tells the core from its two names (`ProfileState`).
@Suite("The power profile of two bus names")
struct ProfileStateTests {
    /// A change is reported once; the same profile read again on a signal is not.
    @Test func changesAreReportedOnce() {
        let state = ProfileState()
        #expect(state.update(isLegacy: false, profile: .balanced, fresh: true) == .profile(.balanced))
        #expect(state.update(isLegacy: false, profile: .balanced) == nil)
        #expect(state.update(isLegacy: false, profile: .powerSaver) == .profile(.powerSaver))
        // The legacy name says the same as the current one, which wins anyway.
        #expect(state.update(isLegacy: true, profile: .performance) == nil)
        #expect(state.update(isLegacy: false, profile: nil) == .profile(.performance))
        #expect(state.update(isLegacy: true, profile: nil) == .lost)
        #expect(state.update(isLegacy: true, profile: nil) == nil)
    }

    /// The first read of a session (a re-read after a resume) is reported though the profile did
    /// not change: the agent waits for it before it starts work. Without it, every resume with
    /// the profile unchanged held all work for the whole 3 s, and logged that it gave up.
    @Test func aFreshReadIsReportedThoughUnchanged() {
        let state = ProfileState()
        #expect(state.update(isLegacy: false, profile: .balanced, fresh: true) == .profile(.balanced))
        #expect(state.update(isLegacy: false, profile: .balanced, fresh: true) == .profile(.balanced))
        #expect(state.update(isLegacy: true, profile: .balanced, fresh: true) == .profile(.balanced))
    }
}
