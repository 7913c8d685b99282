import BGPolicyCore
import BGPolicyDBus
import Logging
import Testing

@testable import BGPolicySystem

/// UPower's properties, read defensively (`UPowerSource.sample`): what a missing or mistyped
/// property means.
@Suite("UPower's properties as a power sample")
struct UPowerSampleTests {
    let logger = Logger(label: "test")

    /// A display device with a known state but no readable `IsPresent` has a battery: read as
    /// absent, a draining battery was "on AC", and work waiting for the charger ran on it.
    @Test("without a readable IsPresent, a battery with a known state is present", arguments: [
        nil, Variant(.string("yes")),
    ])
    func presentWithoutIsPresent(_ isPresent: Variant?) {
        var display: [String: Variant] = ["State": Variant(.uint32(2)), "Percentage": Variant(.double(40))]
        display["IsPresent"] = isPresent
        let sample = UPowerSource.sample(manager: ["OnBattery": Variant(.boolean(false))], display: display, logger: logger)
        #expect(sample.batteryPresent)
        #expect(sample.onBattery == true, "a discharging battery")
        #expect(sample.percentage == 40)
    }

    @Test("IsPresent decides when it is there, and nothing known is no battery")
    func isPresentDecides() {
        let absent = UPowerSource.sample(
            manager: [:], display: ["IsPresent": Variant(.boolean(false)), "State": Variant(.uint32(2))], logger: logger)
        #expect(!absent.batteryPresent && absent.onBattery == false)
        let nothing = UPowerSource.sample(manager: [:], display: [:], logger: logger)
        #expect(!nothing.batteryPresent)
    }
}
