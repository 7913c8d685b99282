import BGPolicyCore
import BGPolicySystem
import Testing

/// The probe's lines are read by the integration tests; their exact form is the contract.
@Suite("UdevProbe output")
struct UdevProbeTests {
    @Test func powerLine() {
        let sample = PowerSample(onBatteryReported: false, batteryPresent: true, percentage: 87.5, state: .pendingCharge)
        #expect(
            UdevProbe.jsonLine(.power(sample))
                == #"{"source":"udev","report":"power","onBatteryReported":false,"batteryPresent":true,"percentage":87.5,"state":"pending-charge","warningLevel":"unknown","timeToEmpty":null}"#
        )
    }

    @Test func unknownsAreNull() {
        #expect(
            UdevProbe.jsonLine(.power(PowerSample(onBatteryReported: nil, batteryPresent: false)))
                == #"{"source":"udev","report":"power","onBatteryReported":null,"batteryPresent":false,"percentage":null,"state":"unknown","warningLevel":"unknown","timeToEmpty":null}"#
        )
    }

    @Test func lostLine() {
        #expect(UdevProbe.jsonLine(.lost) == #"{"source":"udev","report":"lost"}"#)
    }
}
