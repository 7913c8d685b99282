import Glibc
import Testing

@testable import BGPolicyDBus

@Suite("UnixFD values")
struct UnixFDTests {
    @Test("decoding a UnixFD makes its own copy, close-on-exec, so a child process never inherits it")
    func decodedCopyIsCloseOnExec() throws {
        let opened = open("/dev/null", O_RDONLY)  // without O_CLOEXEC: the copy must not depend on it
        try #require(opened >= 0)
        let original = UnixFD(taking: opened)
        #expect(fcntl(original.rawValue, F_GETFD) & FD_CLOEXEC == 0)
        let copy = try UnixFD(dbusValue: .unixFD(original))
        #expect(copy.rawValue != original.rawValue)
        let flags = fcntl(copy.rawValue, F_GETFD)
        #expect(flags >= 0)
        #expect(flags & FD_CLOEXEC != 0, "a decoded descriptor would leak into children")
    }
}
