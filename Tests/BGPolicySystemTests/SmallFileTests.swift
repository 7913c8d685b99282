import BGPolicySystem
import Foundation
import Testing

@Suite("SmallFile: bounded reads of small regular files")
struct SmallFileTests {
    let directory: String

    init() throws {
        directory = NSTemporaryDirectory() + "/smallfile-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
    }

    @Test("a regular file is read whole, up to the limit, and no further")
    func limit() throws {
        let path = directory + "/f"
        try Data(repeating: 0x61, count: 5000).write(to: URL(fileURLWithPath: path))
        #expect(SmallFile.read(path, limit: 5000)?.count == 5000)
        #expect(SmallFile.read(path, limit: 4999) == nil)
        #expect(SmallFile.read(path, limit: 4999, followingSymlinks: true) == .failure(SmallFile.Failure(code: EFBIG)))
        try FileManager.default.removeItem(atPath: directory)
    }

    @Test("procfs files, which report size 0, are read to their end")
    func procfs() {
        let bytes = SmallFile.read("/proc/self/stat", limit: 4096)
        #expect(bytes.map(SmallFile.text)?.hasPrefix("\(getpid()) (") == true)
    }

    @Test("a FIFO is refused at once rather than waited on, and a directory too, saying why")
    func notRegular() throws {
        let fifo = directory + "/fifo"
        #expect(mkfifo(fifo, 0o600) == 0)
        #expect(SmallFile.read(fifo, limit: 100, followingSymlinks: true) == .failure(SmallFile.Failure(code: EINVAL)))
        let failure = SmallFile.read(directory, limit: 100, followingSymlinks: true)
        #expect(failure == .failure(SmallFile.Failure(code: EINVAL)))
        #expect(SmallFile.Failure(code: EINVAL).description == "not a regular file")
        try FileManager.default.removeItem(atPath: directory)
    }

    @Test("a symlink is followed unless told not to; a missing file says so in errno's words")
    func symlinksAndMissing() throws {
        let target = directory + "/target", link = directory + "/link"
        try "x".write(toFile: target, atomically: false, encoding: .utf8)
        try FileManager.default.createSymbolicLink(atPath: link, withDestinationPath: target)
        #expect(SmallFile.read(link, limit: 10) == Array("x".utf8))
        #expect(SmallFile.read(link, limit: 10, followingSymlinks: false) == .failure(SmallFile.Failure(code: ELOOP)))
        let missing = SmallFile.read(directory + "/missing", limit: 10, followingSymlinks: true)
        #expect(missing == .failure(SmallFile.Failure(code: ENOENT)))
        #expect(SmallFile.Failure(code: ENOENT).description == "No such file or directory")
        try FileManager.default.removeItem(atPath: directory)
    }
}
