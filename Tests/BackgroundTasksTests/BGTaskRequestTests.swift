@testable import BackgroundTasks
import BGPolicyCore
import BGPolicyDBus
import Foundation
import Testing

@Suite("Requests become Submit arguments")
struct BGTaskRequestTests {
    @Test("a refresh request carries only its earliest begin")
    func refresh() throws {
        let plain = try SubmitArguments(BGAppRefreshTaskRequest(identifier: "org.example.App.refresh"))
        #expect(plain.identifier == "org.example.App.refresh")
        #expect(plain.kind == .refresh)
        #expect(plain.options.isEmpty)

        let later = try SubmitArguments(
            BGAppRefreshTaskRequest(identifier: "org.example.App.refresh", earliestBeginDate: Date(timeIntervalSince1970: 1_700_000_000)))
        #expect(later.options == ["earliest_begin": Variant(.int64(1_700_000_000))])
    }

    @Test("the body has Submit's signature, ssa{sv}")
    func body() throws {
        let arguments = try SubmitArguments(BGProcessingTaskRequest(identifier: "org.example.App.clean"))
        #expect(arguments.body.signatureText == "ssa{sv}")
        #expect(arguments.body[0] == .string("org.example.App.clean"))
        #expect(arguments.body[1] == .string("processing"))
    }

    @Test("a processing request carries its requirements and duration")
    func processing() throws {
        let request = BGProcessingTaskRequest(
            identifier: "org.example.App.clean", earliestBeginDate: Date(timeIntervalSince1970: 1_700_000_000.25),
            requiresNetworkConnectivity: true, requiresExternalPower: true, expectedDuration: 90.5)
        let arguments = try SubmitArguments(request)
        #expect(arguments.kind == .processing)
        #expect(arguments.options == [
            // Rounded up: never earlier, never shorter than asked.
            "earliest_begin": Variant(.int64(1_700_000_001)),
            "requires_network": Variant(.boolean(true)),
            "requires_external_power": Variant(.boolean(true)),
            "expected_duration": Variant(.uint32(91)),
        ])

        let defaults = try SubmitArguments(BGProcessingTaskRequest(identifier: "org.example.App.clean"))
        #expect(defaults.options == [
            "requires_network": Variant(.boolean(false)), "requires_external_power": Variant(.boolean(false)),
        ])
    }

    @Test("bad values fail before anything is sent", arguments: [
        BGProcessingTaskRequest(identifier: "org.example.App.clean", expectedDuration: -1),
        BGProcessingTaskRequest(identifier: "org.example.App.clean", expectedDuration: .infinity),
        BGProcessingTaskRequest(identifier: "org.example.App.clean", expectedDuration: 5e9),
        BGProcessingTaskRequest(identifier: "not an identifier"),
        BGProcessingTaskRequest(identifier: ""),
    ])
    func invalid(request: BGProcessingTaskRequest) {
        #expect(throws: BGTaskSchedulerError.self) { try SubmitArguments(request) }
        do {
            _ = try SubmitArguments(request)
        } catch {
            #expect(error.code == .invalidArgument)
        }
    }

    // Not test arguments: printing such a Date traps in FoundationEssentials.
    @Test("dates beyond Unix seconds fail before anything is sent")
    func unusableDates() {
        for seconds in [1e300, -1e300, .nan, .infinity] {
            let request = BGAppRefreshTaskRequest(identifier: "org.example.App.refresh", earliestBeginDate: Date(timeIntervalSince1970: seconds))
            do {
                _ = try SubmitArguments(request)
                Issue.record("\(seconds) was accepted")
            } catch {
                #expect(error.code == .invalidArgument)
            }
        }
    }

    struct ForeignRequest: BGTaskRequest {
        var identifier = "org.example.App.refresh"
        var earliestBeginDate: Date?
    }

    @Test("only the library's request types are submitted")
    func foreignType() {
        #expect(throws: BGTaskSchedulerError.self) { try SubmitArguments(ForeignRequest()) }
    }

    @Test("GetPending entries come back as requests")
    func pending() throws {
        let refresh = try #require(
            try PendingRequest.request(from: [
                "identifier": Variant(.string("org.example.App.refresh")), "kind": Variant(.string("refresh")),
                "earliest_begin": Variant(.int64(1_700_000_000)), "submitted_at": Variant(.int64(1_699_999_000)),
                "delivery_attempts": Variant(.uint32(0)),
            ]) as? BGAppRefreshTaskRequest)
        #expect(refresh == BGAppRefreshTaskRequest(identifier: "org.example.App.refresh", earliestBeginDate: Date(timeIntervalSince1970: 1_700_000_000)))

        let processing = try #require(
            try PendingRequest.request(from: [
                "identifier": Variant(.string("org.example.App.clean")), "kind": Variant(.string("processing")),
                "requires_network": Variant(.boolean(true)), "requires_external_power": Variant(.boolean(false)),
                "expected_duration": Variant(.uint32(120)),
            ]) as? BGProcessingTaskRequest)
        #expect(processing == BGProcessingTaskRequest(
            identifier: "org.example.App.clean", requiresNetworkConnectivity: true, expectedDuration: 120))

        // A newer agent's kind is skipped, not an error.
        #expect(try PendingRequest.request(from: [
            "identifier": Variant(.string("org.example.App.x")), "kind": Variant(.string("transfers")),
        ]) == nil)
        #expect(throws: DBusError.self) {
            try PendingRequest.request(from: [
                "identifier": Variant(.string("org.example.App.x")), "kind": Variant(.string("refresh")),
                "earliest_begin": Variant(.string("soon")),
            ])
        }
    }

    @Test("a request round-trips through Submit's options and GetPending's keys")
    func roundTrip() throws {
        let request = BGProcessingTaskRequest(
            identifier: "org.example.App.clean", earliestBeginDate: Date(timeIntervalSince1970: 1_700_000_000),
            requiresNetworkConnectivity: false, requiresExternalPower: true, expectedDuration: 600)
        let arguments = try SubmitArguments(request)
        var entry = arguments.options
        entry["identifier"] = Variant(.string(arguments.identifier))
        entry["kind"] = Variant(.string(arguments.kind.rawValue))
        #expect(try PendingRequest.request(from: entry) as? BGProcessingTaskRequest == request)
    }
}
