import BGPolicyDBus
import Glibc
import Synchronization

/// `serve`: export org.bgpolicy.TestPeer1 until SIGTERM or SIGINT.
enum Serve {
    static func run(bus: DBusConnection.Bus, name: String) async -> Int32 {
        // Handlers first, so a signal that arrives while starting is not fatal.
        let signals = TerminationSignals()
        let connection: DBusConnection
        do {
            connection = try await DBusConnection.connect(to: bus)
        } catch {
            warn("bgpolicy-testpeer: cannot connect: \(error)")
            return 1
        }
        let serving = Task { await connection.objects.serve() }
        // Every path out stops serving, closes, and waits until the connection is gone.
        let shutDown = { @Sendable () async -> Void in
            serving.cancel()
            _ = await serving.result
            connection.close()
            await connection.waitUntilDisconnected()
        }
        do {
            let state = TestPeerInterface.State()
            try connection.objects.export([TestPeerInterface.exported(on: connection, state: state)], at: TestPeerInterface.path)
            let reply = try await connection.requestName(name, flags: .doNotQueue)
            guard reply == .primaryOwner || reply == .alreadyOwner else {
                let owner = try? await connection.nameOwner(of: name)
                warn("bgpolicy-testpeer: the name \(name) is taken (by \((owner ?? nil) ?? "another connection"))")
                await shutDown()
                return 2
            }
        } catch {
            warn("bgpolicy-testpeer: cannot serve: \(error)")
            await shutDown()
            return 1
        }
        say("READY \(connection.uniqueName)")

        enum End: Sendable { case signal(Int32), disconnected }
        let end: End = await withTaskGroup(of: End.self) { group in
            group.addTask {
                for await signal in signals.stream { return .signal(signal) }
                return .disconnected  // cancelled: the connection went first
            }
            group.addTask {
                await connection.waitUntilDisconnected()
                return .disconnected
            }
            let first = await group.next()!
            group.cancelAll()
            connection.close()  // lets the waiter finish if a signal came first
            return first
        }
        await shutDown()
        signals.cancel()
        switch end {
        case .signal:
            return 0
        case .disconnected:
            warn("bgpolicy-testpeer: the bus connection was lost")
            return 1
        }
    }
}

/// The last SIGTERM or SIGINT received, 0 if none. Set by a plain signal handler: an atomic
/// store is async-signal-safe.
private let lastTerminationSignal = Atomic<Int32>(0)

/// SIGTERM and SIGINT as an async stream.
///
/// Not a DispatchSource: on Linux libdispatch reads signals through a signalfd, which only
/// sees them if every thread blocks them, and the main thread of an `async main` waits in
/// `dispatch_main()` with none blocked, so a SIGTERM now and then never reached the source.
/// A handler that records the signal, polled every 50 ms, cannot miss one.
final class TerminationSignals: Sendable {
    let stream: AsyncStream<Int32>
    private let poller: Task<Void, Never>

    init() {
        lastTerminationSignal.store(0, ordering: .relaxed)  // initialise the global before any handler runs
        for number in [SIGTERM, SIGINT] {
            var action = sigaction()
            action.__sigaction_handler.sa_handler = { number in lastTerminationSignal.store(number, ordering: .relaxed) }
            sigemptyset(&action.sa_mask)
            action.sa_flags = SA_RESTART
            sigaction(number, &action, nil)
        }
        let (stream, continuation) = AsyncStream.makeStream(of: Int32.self)
        self.stream = stream
        poller = Task {
            while !Task.isCancelled {
                let number = lastTerminationSignal.exchange(0, ordering: .relaxed)
                if number != 0 { continuation.yield(number) }
                try? await Task.sleep(for: .milliseconds(50))
            }
            continuation.finish()
        }
    }

    func cancel() {
        poller.cancel()
    }
}

/// `client`: check our layer against the Python GDBus service (Tests/integration/pyservice.py).
enum Client {
    static let path = try! ObjectPath("/org/bgpolicy/PyPeer")
    static let interface = "org.bgpolicy.PyPeer1"

    static func run(bus: DBusConnection.Bus, destination: String) async -> Int32 {
        let report = Report()
        do {
            let connection = try await DBusConnection.connect(to: bus)
            var suite = ClientSuite(connection: connection, destination: destination, path: path, interface: interface, report: report)
            // GDBus answers a Set of a read-only property with InvalidArgs.
            suite.readOnlyError = "org.freedesktop.DBus.Error.InvalidArgs"
            let cases = try EchoTable.cases()
            await suite.echoEach(cases)
            await suite.echoConcurrently(cases, rounds: 2, check: "echo.concurrent")
            await suite.fileDescriptors()
            await suite.signals()
            await suite.errors()
            await report.check("error.GError") {
                // Python returns a GLib error of the G_DBUS_ERROR domain; GDBus maps it to its D-Bus name.
                let message = "denied ✓ by GLib"
                let got = try await suite.expectError("org.freedesktop.DBus.Error.AccessDenied") {
                    _ = try await suite.call("FailGError", [.string(message)])
                }
                try expect(got == message, "error message was \"\(got)\", expected \"\(message)\"")
            }
            await suite.properties()
            await suite.introspection()
            await suite.timeoutsAndCancellation()
            connection.close()
            await connection.waitUntilDisconnected()
        } catch {
            report.fail("client", "\(error)")
        }
        warn("client: \(report.passed) checks passed, \(report.failed) failed")
        return report.failed == 0 && report.passed > 0 ? 0 : 1
    }
}
