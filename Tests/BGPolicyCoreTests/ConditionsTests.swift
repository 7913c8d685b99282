import BGPolicyCore
import Testing

@Suite("Device facts and conditions")
struct ConditionsTests {
    // MARK: Enums that cross the bus

    @Test("string-backed enums round-trip", arguments: BatteryState.allCases.map(\.rawValue))
    func batteryStateRoundTrip(raw: String) { #expect(BatteryState(rawValue: raw)?.rawValue == raw) }

    @Test("every enum's raw values are distinct and lowercase")
    func rawValues() {
        for raws in [BatteryState.allCases.map(\.rawValue), PowerProfile.allCases.map(\.rawValue),
                     Connectivity.allCases.map(\.rawValue), NetworkType.allCases.map(\.rawValue),
                     ConditionSourceName.allCases.map(\.rawValue), BatteryWarningLevel.allCases.map(\.rawValue)] {
            #expect(Set(raws).count == raws.count)
            #expect(raws.allSatisfy { $0 == $0.lowercased() })
        }
    }

    @Test("UPower state numbers", arguments: [
        (UInt32(0), BatteryState.unknown), (1, .charging), (2, .discharging), (3, .empty), (4, .fullyCharged),
        (5, .pendingCharge), (6, .pendingDischarge), (7, .unknown), (UInt32.max, .unknown),
    ])
    func upowerState(value: UInt32, state: BatteryState) { #expect(BatteryState(upower: value) == state) }

    @Test("NetworkManager connectivity and types")
    func networkManagerMapping() {
        #expect(Connectivity(networkManager: 1) == .none)
        #expect(Connectivity(networkManager: 2) == .portal)
        #expect(Connectivity(networkManager: 4) == .full)
        #expect(Connectivity(networkManager: 99) == .unknown)
        #expect(NetworkType(networkManager: "802-11-wireless") == .wifi)
        #expect(NetworkType(networkManager: "802-3-ethernet") == .ethernet)
        #expect(NetworkType(networkManager: "gsm") == .mobile)
        #expect(NetworkType(networkManager: "") == .none)
        #expect(NetworkType(networkManager: "infiniband") == .other)
        #expect(PowerProfile(reported: "power-saver") == .powerSaver)
        #expect(PowerProfile(reported: "turbo") == .unknown)
    }

    // MARK: The rules

    @Test("on battery combines OnBattery with the battery state", arguments: [
        // A low-power charger: OnBattery=false, yet the battery drains.
        (Bool?.some(false), true, BatteryState.discharging, Bool?.some(true)),
        // An adapter that never sent a uevent: OnBattery=true, yet the battery charges.
        (true, true, .charging, false),
        (true, true, .fullyCharged, false),
        (true, true, .unknown, true),
        (false, true, .unknown, false),
        (nil, true, .unknown, nil),
        // No battery at all: on AC.
        (true, false, .unknown, false),
    ])
    func onBattery(reported: Bool?, present: Bool, state: BatteryState, expected: Bool?) {
        #expect(PowerSample(onBatteryReported: reported, batteryPresent: present, state: state).onBattery == expected)
    }

    @Test("metered follows GLib: yes or guess-yes, trusted only at State 70", arguments: [
        (UInt32(70), UInt32(1), true), (70, 3, true), (70, 2, false), (70, 4, false), (70, 0, false),
        (60, 1, false), (50, 3, false), (20, 1, false),
    ])
    func metered(state: UInt32, metered: UInt32, expected: Bool) {
        #expect(NetworkSample(state: state, connectivity: .full, meteredReported: metered, type: .wifi).metered == expected)
    }

    // MARK: The model

    static let battery42 = PowerSample(onBatteryReported: true, batteryPresent: true, percentage: 42, state: .discharging)

    @Test("nothing live means everything unknown")
    func unknownAtStart() {
        let model = ConditionsModel()
        #expect(model.conditions == .unknown)
        #expect(model.conditions.onBattery == nil)
        #expect(model.conditions.summary == "Power unknown — network unknown")
    }

    @Test("UPower wins over udev; udev takes over when UPower is lost, and gives way when it returns")
    func powerFallback() {
        var model = ConditionsModel()
        let udev = PowerSample(onBatteryReported: true, batteryPresent: true, percentage: 41, state: .discharging)
        let changed1 = model.apply(.power(udev), from: .udev)
        #expect(changed1)
        #expect(model.conditions.percentage == 41)
        let changed2 = model.apply(.power(Self.battery42), from: .upower)
        #expect(changed2)
        #expect(model.conditions.percentage == 42)
        #expect(model.powerSource == .upower)
        let changed3 = model.apply(.lost, from: .upower)
        #expect(changed3)
        #expect(model.powerSource == .udev)
        #expect(model.conditions.percentage == 41)
        #expect(model.conditions.sources == [.udev])
        let changed4 = model.apply(.power(Self.battery42), from: .upower)
        #expect(changed4)
        #expect(model.conditions.sources == [.udev, .upower])
    }

    @Test("after a resume, udev read again stands in for UPower until UPower answers")
    func rereadAfterResume() {
        var model = ConditionsModel()
        let onAC = PowerSample(onBatteryReported: false, batteryPresent: true, percentage: 100, state: .fullyCharged)
        let low = PowerSample(onBatteryReported: true, batteryPresent: true, percentage: 8, state: .discharging)
        model.apply(.power(onAC), from: .udev)
        model.apply(.power(onAC), from: .upower)
        model.apply(.profile(.balanced), from: .powerProfiles)
        // Asked to read again: until one answers, nothing better is known.
        let asked = model.rereadRequested([.upower, .udev, .powerProfiles])
        #expect(!asked)
        #expect(model.powerSource == .upower)
        // udev read the kernel's files again; UPower has not answered.
        let udevRead = model.apply(.power(low), from: .udev)
        #expect(udevRead)
        #expect(model.powerSource == .udev)
        #expect(model.conditions.onBattery == true && model.conditions.percentage == 8)
        #expect(model.conditions.sources == [.udev, .upower, .powerProfiles])
        // UPower answers (whatever it says), and is the power source again.
        let upowerAnswered = model.apply(.power(low), from: .upower)
        #expect(!upowerAnswered)
        #expect(model.powerSource == .upower)
        // A re-read UPower alone was asked for: udev, not read again, does not stand in.
        model.rereadRequested([.upower])
        #expect(model.powerSource == .upower)
        // Asked of udev and UPower, and UPower lost before it answered: udev, once it reads.
        model.rereadRequested([.upower, .udev])
        model.apply(.lost, from: .upower)
        #expect(model.powerSource == .udev)
        let upowerBack = model.apply(.power(onAC), from: .upower)
        #expect(upowerBack)
        #expect(model.powerSource == .upower)
    }

    /// After a resume the sources answer their re-read even when nothing changed (the agent
    /// waits for the answers): the same facts again are no change, logged or signalled.
    @Test("after a resume, answers that say what was known are no change")
    func unchangedAnswersAfterResume() {
        var model = ConditionsModel()
        let onAC = PowerSample(onBatteryReported: false, batteryPresent: true, percentage: 100, state: .fullyCharged)
        model.apply(.power(onAC), from: .udev)
        model.apply(.power(onAC), from: .upower)
        model.apply(.profile(.balanced), from: .powerProfiles)
        let before = model.conditions
        model.rereadRequested([.upower, .udev, .powerProfiles])
        let udevAnswered = model.apply(.power(onAC), from: .udev)
        let profileAnswered = model.apply(.profile(.balanced), from: .powerProfiles)
        let upowerAnswered = model.apply(.power(onAC), from: .upower)
        #expect(!udevAnswered && !profileAnswered && !upowerAnswered)
        #expect(model.conditions == before)
        #expect(model.powerSource == .upower)
    }

    @Test("udev reads the battery on a timer only while it alone says the machine runs on battery")
    func udevRereadsOnlyOnBatteryWithoutUPower() {
        let draining = PowerSample(onBatteryReported: true, batteryPresent: true, percentage: 90, state: .discharging)
        let charging = PowerSample(onBatteryReported: false, batteryPresent: true, percentage: 90, state: .charging)
        let noBattery = PowerSample(onBatteryReported: nil, batteryPresent: false)
        // A low-power charger: the adapter online, the battery draining all the same.
        let drainingOnCharger = PowerSample(onBatteryReported: false, batteryPresent: true, percentage: 90, state: .discharging)
        var model = ConditionsModel()
        #expect(!model.udevNeedsRereads)
        model.apply(.power(draining), from: .udev)
        #expect(model.udevNeedsRereads)
        model.apply(.power(charging), from: .udev)
        #expect(!model.udevNeedsRereads)
        model.apply(.power(noBattery), from: .udev)
        #expect(!model.udevNeedsRereads)
        model.apply(.power(drainingOnCharger), from: .udev)
        #expect(model.udevNeedsRereads)
        // UPower live: it polls the charge itself.
        model.apply(.power(draining), from: .udev)
        model.apply(.power(draining), from: .upower)
        #expect(!model.udevNeedsRereads)
        // UPower gone: udev again.
        model.apply(.lost, from: .upower)
        #expect(model.udevNeedsRereads)
        // udev's watch broke: nothing to read again until it is back.
        model.apply(.lost, from: .udev)
        #expect(!model.udevNeedsRereads)
    }

    @Test("a report that changes nothing says so")
    func noChange() {
        var model = ConditionsModel()
        let changed5 = model.apply(.profile(.balanced), from: .powerProfiles)
        #expect(changed5)
        let changed6 = model.apply(.profile(.balanced), from: .powerProfiles)
        #expect(!changed6)
    }

    @Test("a lost source takes exactly its own facts with it")
    func lostSourceFacts() {
        var model = ConditionsModel()
        model.apply(.network(NetworkSample(state: 70, connectivity: .full, meteredReported: 1, type: .wifi)), from: .networkManager)
        model.apply(.session(SessionSample(locked: true, idleHint: false)), from: .logind)
        model.apply(.lost, from: .networkManager)
        #expect(model.conditions.connectivity == .unknown)
        #expect(model.conditions.metered == nil)
        #expect(model.conditions.locked == true)
        #expect(model.conditions.sources == [.logind])
    }

    @Test("a locked session counts as idle for processing, since IdleHint is unreliable")
    func idleForProcessing() {
        var model = ConditionsModel()
        #expect(model.conditions.isIdleForProcessing == nil)
        model.apply(.session(SessionSample(locked: true, idleHint: false)), from: .logind)
        #expect(model.conditions.isIdleForProcessing == true)
        model.apply(.session(SessionSample(locked: false, idleHint: false)), from: .logind)
        #expect(model.conditions.isIdleForProcessing == false)
        model.apply(.session(SessionSample(locked: false, idleHint: true)), from: .logind)
        #expect(model.conditions.isIdleForProcessing == true)
    }

    @Test("offline when NetworkManager is asleep or disconnected")
    func offline() {
        var model = ConditionsModel()
        model.apply(.network(NetworkSample(state: 20, connectivity: .none, meteredReported: 1, type: .wifi)), from: .networkManager)
        #expect(model.conditions.networkType == .none)
        #expect(model.conditions.metered == false)
    }

    // MARK: The words

    @Test("the summary reads the way a person thinks")
    func summary() {
        var model = ConditionsModel()
        model.apply(.power(Self.battery42), from: .upower)
        model.apply(.profile(.powerSaver), from: .powerProfiles)
        model.apply(.network(NetworkSample(state: 70, connectivity: .full, meteredReported: 1, type: .wifi)), from: .networkManager)
        model.apply(.session(SessionSample(locked: true, idleHint: false)), from: .logind)
        #expect(model.conditions.summary == "On battery, 42 %, discharging — power saver — Wi-Fi, metered — locked")

        model.apply(.power(PowerSample(onBatteryReported: false, batteryPresent: true, percentage: 80, state: .charging)), from: .upower)
        model.apply(.network(NetworkSample(state: 70, connectivity: .portal, meteredReported: 2, type: .ethernet)), from: .networkManager)
        model.apply(.session(SessionSample(locked: false, idleHint: false)), from: .logind)
        #expect(model.conditions.summary == "On AC, 80 %, charging — power saver — Ethernet, behind a captive portal — in use")

        model.apply(.power(PowerSample(onBatteryReported: false, batteryPresent: false)), from: .upower)
        #expect(model.conditions.summary.hasPrefix("On AC — "))
    }
}
