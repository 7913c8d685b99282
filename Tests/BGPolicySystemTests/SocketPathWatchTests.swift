@testable import BGPolicySystem
import Glibc
import Testing

@Suite("SocketPathWatch: waiting for a bus's socket to appear, with no timer", .timeLimit(.minutes(1)))
struct SocketPathWatchTests {
    static let addresses: [(String, String?)] = [
        ("unix:path=/run/dbus/system_bus_socket", "/run/dbus/system_bus_socket"),
        ("unix:path=/tmp/bus,guid=0123456789abcdef0123456789abcdef", "/tmp/bus"),
        ("unix:guid=ab,path=/tmp/a%20b%2Cc", "/tmp/a b,c"),
        ("unix:path=/tmp/bus;", "/tmp/bus"),
        ("unix:abstract=/tmp/dbus-x", nil),
        ("unix:tmpdir=/tmp", nil),
        ("tcp:host=localhost,port=4", nil),
        ("unix:path=/a;unix:path=/b", nil),
        ("unix:path=relative", nil),
        ("unix:path=", nil),
        ("unix:path=/a%2", nil),
        ("unix:path=/a%zz", nil),
        ("unix:path=/a,path=/b", nil),
        ("unix:path", nil),
        ("", nil),
    ]

    @Test(arguments: addresses)
    func theSocketPathOfAnAddress(_ address: String, _ expected: String?) {
        #expect(SocketPathWatch.socketPath(ofAddress: address) == expected)
    }

    /// A new empty directory under /tmp.
    static func temporaryDirectory() -> String {
        var template = Array("/tmp/bgpolicy-socket-watch-XXXXXX".utf8CString)
        let made = template.withUnsafeMutableBufferPointer { mkdtemp($0.baseAddress!) }
        precondition(made != nil, "mkdtemp failed")
        return String(decoding: template.dropLast().map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    static func remove(_ directory: String) {
        _ = system("rm -rf '\(directory)'")
    }

    /// Binds a Unix socket at `path`, as a bus daemon does; returns its descriptor.
    static func bindSocket(at path: String) -> Int32 {
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            for (i, byte) in path.utf8.enumerated() { raw[i] = byte }
        }
        let rc = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        precondition(rc == 0, "bind failed: \(errno)")
        return fd
    }

    /// A wait for `path` under way; its value is whether the path existed when the wait ended.
    static func waitForSocket(at path: String) -> Task<Bool, any Error> {
        Task {
            try await SocketPathWatch.waitForPath(path)
            return access(path, F_OK) == 0
        }
    }

    @Test func theNearestExistingDirectoryOnTheWay() {
        let directory = Self.temporaryDirectory()
        defer { Self.remove(directory) }
        #expect(SocketPathWatch.nearestExistingDirectory(of: directory + "/socket") == directory)
        #expect(SocketPathWatch.nearestExistingDirectory(of: directory + "/a/b/socket") == directory)
        #expect(SocketPathWatch.nearestExistingDirectory(of: "/nonexistent-bgpolicy/socket") == "/")
        // A regular file is not a directory to watch.
        let file = directory + "/file"
        close(creat(file, 0o600))
        #expect(SocketPathWatch.nearestExistingDirectory(of: file + "/socket") == directory)
    }

    @Test func aPathThatExistsEndsTheWaitAtOnce() async throws {
        let directory = Self.temporaryDirectory()
        defer { Self.remove(directory) }
        let fd = Self.bindSocket(at: directory + "/bus")
        defer { close(fd) }
        // At once, not after some event or poll: a bound generous for a loaded unit run.
        let elapsed = try await ContinuousClock().measure { try await SocketPathWatch.waitForPath(directory + "/bus") }
        #expect(elapsed < .seconds(5), "the wait for a path already there took \(elapsed)")
    }

    @Test func theWaitEndsWhenTheSocketIsBoundAndNotBefore() async throws {
        let directory = Self.temporaryDirectory()
        defer { Self.remove(directory) }
        let path = directory + "/bus"
        let waiting = Self.waitForSocket(at: path)
        try await Task.sleep(for: .milliseconds(300))
        let fd = Self.bindSocket(at: path)
        defer { close(fd) }
        // Had it ended before the bind (at once, say), the socket would not have been there.
        #expect(try await waiting.value)
    }

    @Test func aDirectoryCreatedOnTheWayEndsTheWaitAndTheNextOneWatchesIt() async throws {
        let directory = Self.temporaryDirectory()
        defer { Self.remove(directory) }
        let path = directory + "/dbus/system_bus_socket"
        let first = Task { try await SocketPathWatch.waitForPath(path) }
        try await Task.sleep(for: .milliseconds(200))
        #expect(mkdir(directory + "/dbus", 0o755) == 0)
        try await first.value
        #expect(access(path, F_OK) != 0)
        // The next wait watches the new directory, not its parent.
        #expect(SocketPathWatch.nearestExistingDirectory(of: path) == directory + "/dbus")
        let second = Self.waitForSocket(at: path)
        try await Task.sleep(for: .milliseconds(200))
        // Something else created beside the watched directory does not end the wait.
        close(creat(directory + "/unrelated", 0o600))
        try await Task.sleep(for: .milliseconds(200))
        let fd = Self.bindSocket(at: path)
        defer { close(fd) }
        #expect(try await second.value)
    }

    @Test func cancellingEndsTheWait() async throws {
        let directory = Self.temporaryDirectory()
        defer { Self.remove(directory) }
        let waiting = Task { try await SocketPathWatch.waitForPath(directory + "/bus") }
        try await Task.sleep(for: .milliseconds(200))
        waiting.cancel()
        await #expect(throws: CancellationError.self) { try await waiting.value }
        // Cancelled before it began: it does not wait at all.
        let early = Task {
            withUnsafeCurrentTask { $0?.cancel() }
            try await SocketPathWatch.waitForPath(directory + "/bus")
        }
        await #expect(throws: CancellationError.self) { try await early.value }
    }
}
