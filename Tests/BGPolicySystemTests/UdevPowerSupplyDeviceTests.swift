@testable import BGPolicySystem
import Testing

@Suite("PowerSupplyDevice from sysfs text")
struct UdevPowerSupplyDeviceTests {
    @Test func parsesTheKernelsText() {
        let device = PowerSupplyDevice(
            sysname: "BAT0",
            attributes: [
                "type": "Battery", "present": "1", "status": "Discharging", "capacity": "42",
                "energy_now": "48000000", "energy_full": "60000000", "charge_now": "4000000", "charge_full": "5000000",
                "scope": "System", "online": "0",
            ])
        #expect(
            device
                == PowerSupplyDevice(
                    sysname: "BAT0", type: .battery, online: false, present: true, status: "Discharging", capacity: 42,
                    energyNow: 48_000_000, energyFull: 60_000_000, chargeNow: 4_000_000, chargeFull: 5_000_000, scope: .system))
        #expect(device.isBattery && device.isSystem && !device.isAdapter)
    }

    @Test func missingAttributesStayUnknown() {
        let device = PowerSupplyDevice(sysname: "BAT0", attributes: [:])
        #expect(device == PowerSupplyDevice(sysname: "BAT0"))
        #expect(device.percentage == nil)
        #expect(device.isSystem, "no scope attribute: the machine's own supply")
    }

    @Test(arguments: [
        ("42", 42 as Int64?), ("  42\n", 42), ("\t7 ", 7), ("-3", -3), ("", nil), ("   ", nil), ("abc", nil), ("4.5", nil),
        ("12abc", nil), ("99999999999999999999999", nil), ("0x10", nil), ("\u{FFFD}", nil),
    ])
    func oddNumbersNeverTrap(text: String, expected: Int64?) {
        let device = PowerSupplyDevice(sysname: "X", attributes: ["capacity": text, "energy_now": text])
        #expect(device.capacity == expected)
        #expect(device.energyNow == expected)
    }

    @Test(arguments: [("0", false as Bool?), ("1", true), ("2", true), ("yes", nil), ("", nil)])
    func onlineAndPresentFlags(text: String, expected: Bool?) {
        let device = PowerSupplyDevice(sysname: "X", attributes: ["online": text, "present": text])
        #expect(device.online == expected)
        #expect(device.present == expected)
    }

    @Test(arguments: [
        ("Mains", PowerSupplyType.mains), ("mains", .mains), ("Battery", .battery), ("USB", .usb), ("USB_PD", .usb),
        ("USB_C", .usb), ("UPS", .ups), ("Wireless", .wireless), ("BrickID", .other("BrickID")),
    ])
    func types(text: String, expected: PowerSupplyType) {
        #expect(PowerSupplyType(sysfs: text) == expected)
    }

    @Test func scopes() {
        #expect(PowerSupplyDevice(sysname: "m", attributes: ["scope": "Device"]).isSystem == false)
        #expect(PowerSupplyDevice(sysname: "b", attributes: ["scope": "System"]).isSystem)
        #expect(PowerSupplyDevice(sysname: "b", attributes: ["scope": "Unknown"]).isSystem)
        #expect(PowerSupplyDevice(sysname: "b", attributes: ["scope": "sideways"]).scope == .unknown)
    }

    @Test func adapters() {
        #expect(PowerSupplyDevice(sysname: "AC", type: .mains).isAdapter)
        #expect(PowerSupplyDevice(sysname: "ucsi-source-psy-USBC000:001", type: .usb).isAdapter)
        #expect(!PowerSupplyDevice(sysname: "UPS0", type: .ups).isAdapter)
        #expect(!PowerSupplyDevice(sysname: "BAT0", type: .battery).isAdapter)
        // No type at all: only the ACPI adapter names count.
        #expect(PowerSupplyDevice(sysname: "ACAD").isAdapter)
        #expect(PowerSupplyDevice(sysname: "ADP1").isAdapter)
        #expect(!PowerSupplyDevice(sysname: "BAT0").isAdapter)
    }

    @Test func percentagePrefersCapacityThenEnergyThenCharge() {
        #expect(PowerSupplyDevice(sysname: "B", capacity: 42, energyNow: 1, energyFull: 2).percentage == 42)
        #expect(PowerSupplyDevice(sysname: "B", energyNow: 48_000_000, energyFull: 60_000_000).percentage == 80)
        #expect(PowerSupplyDevice(sysname: "B", chargeNow: 2_500_000, chargeFull: 5_000_000).percentage == 50)
        // A zero "full" cannot divide; the next source is tried.
        #expect(PowerSupplyDevice(sysname: "B", energyNow: 5, energyFull: 0, chargeNow: 1, chargeFull: 4).percentage == 25)
        #expect(PowerSupplyDevice(sysname: "B", energyNow: 5, energyFull: 0).percentage == nil)
        #expect(PowerSupplyDevice(sysname: "B", energyNow: 5).percentage == nil)
    }

    @Test func percentageIsClamped() {
        #expect(PowerSupplyDevice(sysname: "B", capacity: 150).percentage == 100)
        #expect(PowerSupplyDevice(sysname: "B", capacity: -5).percentage == 0)
        #expect(PowerSupplyDevice(sysname: "B", energyNow: 70, energyFull: 60).percentage == 100)
        #expect(PowerSupplyDevice(sysname: "B", energyNow: -10, energyFull: 60).percentage == 0)
        #expect(PowerSupplyDevice(sysname: "B", capacity: .max).percentage == 100)
    }
}
