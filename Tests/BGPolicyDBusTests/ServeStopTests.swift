import BGPolicyTestSupport
import Testing

@testable import BGPolicyDBus

/// Calls that arrive while `serve()` is being cancelled (an agent stopping), or after, are
/// answered `unavailable` at once rather than queued where nothing will run them.
@Suite("The object server once serve() is cancelled")
struct ServeStopTests {
    static let stopping = "org.bgpolicy.Test.Error.Stopping"

    @Test("calls waiting or arriving while serve() ends get unavailable; the one running finishes")
    func stoppingAnswersUnavailable() async throws {
        let bus = try PrivateBus()
        let fixture = try await SlowFixture(bus: bus)
        defer { fixture.stop() }
        fixture.server.objects.errorNames.unavailable = Self.stopping
        let other = try await DBusConnection.connect(to: .address(bus.address))
        defer { other.close() }
        let destination = fixture.server.uniqueName
        // Append runs in serve(); Double, answered at once on the connection's thread (an
        // immediate method, which reads a snapshot), is still answered while stopping.
        func append(_ connection: DBusConnection, _ n: Int32) async throws -> [DBusValue] {
            try await connection.call(
                .methodCall(destination: destination, path: SlowFixture.path, interface: SlowFixture.name, member: "Append",
                            body: [.int32(n)]),
                timeout: .seconds(5)
            ).body
        }
        let client = fixture.client
        // One call running (it ignores cancellation until the gate opens), one waiting behind it.
        let running = Task {
            try await client.call(destination: destination, path: SlowFixture.path, interface: SlowFixture.name, member: "Block")
        }
        #expect(await eventually { fixture.blocked.count == 1 })
        let waiting = Task { try await append(client, 1) }
        try await Task.sleep(for: .milliseconds(100))  // queued behind Block

        fixture.serving.cancel()
        #expect(await eventually { fixture.server.objects.isStopping })
        // A call from another caller while serve() waits for the running one.
        let message = await expectRemoteError(Self.stopping) { _ = try await append(other, 2) }
        #expect(message?.contains("stopping") == true)

        fixture.gate.open()
        _ = try await withTimeout(.seconds(5), "the running call") { try await running.value }
        await expectRemoteError(Self.stopping) { _ = try await withTimeout(.seconds(6), "the waiting call") { try await waiting.value } }
        try await withTimeout(.seconds(5), "serve() to return") { await fixture.serving.value }
        await expectRemoteError(Self.stopping) { _ = try await append(other, 3) }
        #expect(fixture.appended.count == 0, "no handler ran after the cancellation")
        #expect(try await other.call(
            destination: destination, path: SlowFixture.path, interface: SlowFixture.name, member: "Double", [.int32(1)]) == [.int32(2)])

        // serve() may run again, and then serves.
        let again = startServing(fixture.server)
        defer { again.cancel() }
        #expect(await eventually { !fixture.server.objects.isStopping })
        #expect(try await append(other, 4) == [])
        #expect(fixture.appended.all == [4])
    }
}
