import BGPolicyDBus
import Glibc
import Synchronization

/// `org.bgpolicy.TestPeer1`: what `bgpolicy-testpeer serve` exports at `/org/bgpolicy/TestPeer`,
/// so that clients not written with our layer (gdbus, busctl, Python GDBus) can exercise it.
enum TestPeerInterface {
    static let name = "org.bgpolicy.TestPeer1"
    static let busName = "org.bgpolicy.TestPeer"
    static let path = try! ObjectPath("/org/bgpolicy/TestPeer")

    /// Bytes `ReadFD` reads at most, and `MakePipe` writes at most (a pipe's buffer holds it whole).
    static let maximumFDText = 4096

    /// Computed rather than stored, like `EchoMethods.all`, so valgrind sees no global boxes.
    static var description: InterfaceDescription {
        var methods: [InterfaceDescription.Method] = EchoMethods.all.map { name, type in
            .init(
                name, inputs: [.init("value", type, "any value of type '\(type.signature)'")],
                outputs: [.init("echoed", type, "the same value, unchanged")],
                documentation: "Returns its argument unchanged (type '\(type.signature)').")
        }
        methods += [
            .init(
                "ReadFD", inputs: [.init("fd", .unixFD, "a readable descriptor, such as a pipe's read end")],
                outputs: [.init("text", .string, "what was read, as UTF-8 (invalid bytes replaced)")],
                documentation: "Reads up to 4 KiB from the descriptor (until end of file) and returns it as text."),
            .init(
                "MakePipe", inputs: [.init("text", .string, "at most 4 KiB of text")],
                outputs: [.init("fd", .unixFD, "the read end of a pipe holding the text, then end of file")],
                documentation: "Returns a readable descriptor whose content is the given text."),
            .init(
                "Fail",
                inputs: [.init("name", .string, "a valid D-Bus error name"), .init("message", .string, "the error's message")],
                documentation: "Always fails, with the given D-Bus error name and message."),
            .init(
                "Sleep", inputs: [.init("milliseconds", .uint32, "how long to wait before replying")],
                documentation: "Replies after the given time; for timeout and cancellation tests."),
            .init(
                "Emit", inputs: [.init("text", .string, "the signal's argument")],
                documentation: "Emits Pinged(text) from this object, then replies."),
        ]
        return InterfaceDescription(
            name: name,
            documentation: """
                A peer for interoperability tests of bgpolicy's D-Bus layer: one echo method per D-Bus type,
                file descriptors in both directions, errors, delays, a signal and two properties.
                Not part of bgpolicy's API.
                """,
            methods: methods,
            properties: [
                .init("Label", .string, access: .readwrite, documentation: "Free text. Setting it emits PropertiesChanged."),
                .init(
                    "Count", .uint32, access: .read, emitsChanged: .false,
                    documentation: "How many org.bgpolicy.TestPeer1 method calls this peer has served."),
            ],
            signals: [
                .init("Pinged", arguments: [.init("text", .string, "the text given to Emit")], documentation: "Sent by Emit.")
            ])
    }

    /// The peer's mutable state: the Label property and the call counter.
    final class State: Sendable {
        private let values = Mutex<(label: String, count: UInt32)>(("initial", 0))
        var label: String {
            get { values.withLock { $0.label } }
            set { values.withLock { $0.label = newValue } }
        }
        var count: UInt32 { values.withLock { $0.count } }
        func served() { values.withLock { $0.count &+= 1 } }
    }

    /// The interface bound to `connection`, which it holds weakly so that exporting it
    /// creates no reference cycle (connection -> object server -> handler -> connection).
    static func exported(on connection: DBusConnection, state: State) -> ExportedInterface {
        var interface = ExportedInterface(description)
        func method(_ member: String, _ handler: @escaping MethodHandler) {
            interface = interface.method(member) { call in
                state.served()
                return try await handler(call)
            }
        }
        for (name, _) in EchoMethods.all {
            method(name) { call in call.arguments }
        }
        method("ReadFD") { call in
            guard case .unixFD(let fd)? = call.arguments.first else { throw DBusError.typeMismatch(expected: "h", got: call.arguments.signatureText) }
            return [.string(try readText(from: fd.rawValue, limit: maximumFDText))]
        }
        method("MakePipe") { call in
            let text: String = try call.arguments.decode(String.self, at: 0)
            return [.unixFD(try makePipe(holding: text))]
        }
        method("Fail") { call in
            let name: String = try call.arguments.decode(String.self, at: 0)
            let message: String = try call.arguments.decode(String.self, at: 1)
            guard DBusNames.isValidErrorName(name) else {
                throw DBusError.remote(name: "org.freedesktop.DBus.Error.InvalidArgs", message: "\"\(name)\" is not a valid D-Bus error name")
            }
            throw DBusError.remote(name: name, message: message)
        }
        method("Sleep") { call in
            let ms: UInt32 = try call.arguments.decode(UInt32.self, at: 0)
            try await Task.sleep(for: .milliseconds(Int(ms)))
            return []
        }
        method("Emit") { [weak connection] call in
            let text: String = try call.arguments.decode(String.self, at: 0)
            guard let connection else { throw DBusError.disconnected }
            try connection.emitSignal(path: path, interface: name, member: "Pinged", body: [.string(text)])
            return []
        }
        return interface
            .property("Label", get: { .string(state.label) }) { [weak connection] value, _ in
                let label: String = try value.decode(String.self)
                state.label = label
                try connection?.emitPropertiesChanged(path: path, interface: name, changed: ["Label": .string(label)])
            }
            .property("Count", get: { .uint32(state.count) })
    }
}

// MARK: File descriptors

struct FDFailure: Error, CustomStringConvertible {
    let description: String
}

/// Reads until end of file or `limit` bytes, waiting at most 5 s for each chunk.
func readText(from fd: Int32, limit: Int) throws -> String {
    var data: [UInt8] = []
    var buffer = [UInt8](repeating: 0, count: limit)
    while data.count < limit {
        var poller = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
        let ready = poll(&poller, 1, 5000)
        if ready < 0 {
            if errno == EINTR { continue }
            throw FDFailure(description: "poll: \(String(cString: strerror(errno)))")
        }
        guard ready > 0 else { throw FDFailure(description: "nothing to read from fd \(fd) after 5 s") }
        let n = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, limit - data.count) }
        if n < 0 {
            if errno == EINTR || errno == EAGAIN { continue }
            throw FDFailure(description: "read: \(String(cString: strerror(errno)))")
        }
        if n == 0 { break }
        data += buffer[0..<n]
    }
    return String(decoding: data, as: UTF8.self)
}

/// A pipe's read end, holding `text` and then end of file.
func makePipe(holding text: String) throws -> UnixFD {
    let bytes = Array(text.utf8)
    guard bytes.count <= TestPeerInterface.maximumFDText else {
        throw DBusError.remote(
            name: "org.freedesktop.DBus.Error.InvalidArgs", message: "at most \(TestPeerInterface.maximumFDText) bytes fit, not \(bytes.count)")
    }
    var ends: [Int32] = [-1, -1]
    guard pipe(&ends) == 0 else { throw FDFailure(description: "pipe: \(String(cString: strerror(errno)))") }
    for end in ends { _ = fcntl(end, F_SETFD, FD_CLOEXEC) }
    let reader = UnixFD(taking: ends[0])
    defer { close(ends[1]) }
    var written = 0
    while written < bytes.count {
        let n = bytes.withUnsafeBytes { write(ends[1], $0.baseAddress! + written, bytes.count - written) }
        if n < 0 {
            if errno == EINTR { continue }
            throw FDFailure(description: "write: \(String(cString: strerror(errno)))")
        }
        written += n
    }
    return reader
}

/// The descriptors this process has open, each with what it refers to. libdispatch's timerfds
/// are left out: it opens them lazily, per kind of timer, for `Task.sleep`, and keeps them.
func openDescriptors() -> [Int32: String] {
    guard let dir = opendir("/proc/self/fd") else { return [:] }
    let own = dirfd(dir)
    var names: [Int32] = []
    while let entry = readdir(dir) {
        let name = withUnsafeBytes(of: entry.pointee.d_name) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
        if let fd = Int32(name), fd != own { names.append(fd) }
    }
    closedir(dir)
    var out: [Int32: String] = [:]
    for fd in names {
        var buffer = [CChar](repeating: 0, count: 512)
        let n = readlink("/proc/self/fd/\(fd)", &buffer, buffer.count - 1)
        let target = n > 0 ? String(decoding: buffer[0..<n].map { UInt8(bitPattern: $0) }, as: UTF8.self) : "?"
        if target != "anon_inode:[timerfd]" { out[fd] = target }
    }
    return out
}

/// How many descriptors this process has open.
func openDescriptorCount() -> Int { openDescriptors().count }

/// The descriptors open now that were not in `before`, for a failure message.
func newDescriptors(since before: [Int32: String]) -> String {
    openDescriptors().filter { before[$0.key] != $0.value }.sorted { $0.key < $1.key }.map { "\($0.key) -> \($0.value)" }
        .joined(separator: ", ")
}
