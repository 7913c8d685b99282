/// The inputs the agent reads the machine's state from.
public enum ConditionSourceName: String, Sendable, CaseIterable, Comparable {
    case upower
    case udev
    case powerProfiles = "power-profiles"
    case networkManager = "networkmanager"
    case logind
    /// GNOME's idle monitor (`org.gnome.Mutter.IdleMonitor`, session bus): no input for
    /// `[idle] no_input_after`.
    case mutter

    public static func < (lhs: Self, rhs: Self) -> Bool {
        allCases.firstIndex(of: lhs)! < allCases.firstIndex(of: rhs)!
    }
}

/// What a source tells the core. A source that goes away reports `.lost`, and its facts
/// become unknown again.
public enum ConditionReport: Sendable, Equatable {
    case power(PowerSample)
    case profile(PowerProfile)
    case network(NetworkSample)
    case session(SessionSample)
    case input(InputSample)
    case lost
}

/// Everything the agent knows about the machine: one value, rebuilt from the latest report
/// of every live source. Facts are nil (unknown) until a source reports them.
public struct Conditions: Sendable, Equatable {
    public var onBattery: Bool?
    public var percentage: Double?
    public var batteryState: BatteryState = .unknown
    public var powerProfile: PowerProfile = .unknown
    public var connectivity: Connectivity = .unknown
    public var metered: Bool?
    public var networkType: NetworkType = .unknown
    /// The user is idle: logind's `IdleHint`, or no input for `[idle] no_input_after`. nil when
    /// neither source is live.
    public var idle: Bool?
    public var locked: Bool?
    /// No input for at least `[idle] no_input_after`, from the desktop's idle monitor; nil
    /// when it is not live.
    public var noInput: Bool?
    /// The sources that are live.
    public var sources: Set<ConditionSourceName> = []

    public init() {}

    /// The conditions when no source is live: everything unknown.
    public static let unknown = Conditions()

    /// Whether the machine counts as idle for processing work: a locked session, logind's idle
    /// hint, or no input for `[idle] no_input_after`. Any one known to hold is enough; nil when
    /// none is known (neither logind nor the idle monitor is live).
    public var isIdleForProcessing: Bool? {
        // Asked for every pending processing request in every decision: no array is built.
        if locked == true || idle == true || noInput == true { return true }
        return locked == nil && idle == nil && noInput == nil ? nil : false
    }

    /// A line that reads the way a person thinks:
    /// "On battery, 42 %, discharging — power saver — Wi-Fi, metered — locked".
    public var summary: String {
        var parts: [String] = []
        switch onBattery {
        case true?:
            var power = "On battery"
            if let percentage { power += ", \(Self.percent(percentage))" }
            if batteryState != .unknown { power += ", " + Self.words(batteryState) }
            parts.append(power)
        case false?:
            var power = "On AC"
            if let percentage { power += ", \(Self.percent(percentage))" }
            if batteryState != .unknown && batteryState != .discharging { power += ", " + Self.words(batteryState) }
            parts.append(power)
        case nil:
            parts.append("Power unknown")
        }
        switch powerProfile {
        case .powerSaver: parts.append("power saver")
        case .performance: parts.append("performance")
        case .balanced: parts.append("balanced")
        case .unknown: break
        }
        var network: String
        switch (connectivity, networkType) {
        case (.unknown, .unknown): network = "network unknown"
        case (.none, _), (_, .none): network = "offline"
        default:
            network = Self.words(networkType)
            switch connectivity {
            case .portal: network += ", behind a captive portal"
            case .limited: network += ", limited connectivity"
            case .none, .full, .unknown: break
            }
        }
        if metered == true { network += ", metered" }
        parts.append(network)
        if locked == true {
            parts.append("locked")
        } else if idle == true {
            parts.append("idle")
        } else if locked == false || idle == false {
            parts.append("in use")
        }
        return parts.joined(separator: " — ")
    }

    static func percent(_ value: Double) -> String {
        let rounded = value.rounded()
        return "\(Int(rounded)) %"
    }

    static func words(_ state: BatteryState) -> String {
        switch state {
        case .unknown: "state unknown"
        case .charging: "charging"
        case .discharging: "discharging"
        case .empty: "empty"
        case .fullyCharged: "fully charged"
        case .pendingCharge: "not charging"
        case .pendingDischarge: "about to discharge"
        }
    }

    static func words(_ type: NetworkType) -> String {
        switch type {
        case .unknown: "online"
        case .none: "offline"
        case .ethernet: "Ethernet"
        case .wifi: "Wi-Fi"
        case .mobile: "mobile broadband"
        case .bluetooth: "Bluetooth"
        case .vpn: "VPN"
        case .other: "online"
        }
    }
}

/// Folds source reports into `Conditions`. Pure: the agent feeds it, tests table-drive it.
///
/// Power comes from UPower when it is live, else from udev/sysfs (the fallback that is also the
/// default on machines without UPower). Each source's latest report is kept, so a source that
/// disappears takes exactly its own facts with it.
public struct ConditionsModel: Sendable, Equatable {
    private var power: [ConditionSourceName: PowerSample] = [:]
    private var profile: PowerProfile?
    private var network: NetworkSample?
    private var session: SessionSample?
    private var input: InputSample?
    private var live: Set<ConditionSourceName> = []
    /// Power sources asked to read their input again (the machine resumed) that have not
    /// answered yet: what they said may be from before the sleep (`rereadRequested`).
    private var rereading: Set<ConditionSourceName> = []
    /// Those of the last `rereadRequested` that have answered since.
    private var reread: Set<ConditionSourceName> = []

    public init() {}

    /// The machine resumed, and `sources` are asked to read their input again: until each
    /// reports, what it said before may be hours old (suspended on AC at 100 %, a laptop can
    /// wake on battery at 8 %). While UPower has not answered and udev has (it reads the
    /// kernel's files itself, at once), power comes from udev. Returns true if the conditions
    /// changed.
    @discardableResult
    public mutating func rereadRequested(_ sources: Set<ConditionSourceName>) -> Bool {
        let before = conditions
        rereading = sources.intersection([.upower, .udev])
        reread = []
        return conditions != before
    }

    /// Applies one report; returns true if the resulting conditions changed.
    @discardableResult
    public mutating func apply(_ report: ConditionReport, from source: ConditionSourceName) -> Bool {
        let before = conditions
        if rereading.remove(source) != nil { reread.insert(source) }
        switch report {
        case .power(let sample):
            power[source] = sample
            live.insert(source)
        case .profile(let value):
            profile = value
            live.insert(source)
        case .network(let sample):
            network = sample
            live.insert(source)
        case .session(let sample):
            session = sample
            live.insert(source)
        case .input(let sample):
            input = sample
            live.insert(source)
        case .lost:
            live.remove(source)
            switch source {
            case .upower, .udev: power[source] = nil
            case .powerProfiles: profile = nil
            case .networkManager: network = nil
            case .logind: session = nil
            case .mutter: input = nil
            }
        }
        return conditions != before
    }

    /// The power source in use: UPower when live, else udev; and udev while UPower has not
    /// answered a re-read that udev has (`rereadRequested`).
    public var powerSource: ConditionSourceName? {
        let udevFresher = rereading.contains(.upower) && reread.contains(.udev) && power[.udev] != nil
        if power[.upower] != nil, !udevFresher { return .upower }
        if power[.udev] != nil { return .udev }
        return nil
    }

    /// Whether udev must read the kernel's battery files again on a timer: udev is the battery's
    /// source (UPower is not live) and says the machine runs on its battery. Many ACPI batteries
    /// send no uevent as the charge drops (UPower polls for it, about every 2 minutes on
    /// battery), so without re-reads udev's percentage stays where it was at the unplug, hours
    /// after the battery fell below the low and critical levels. On AC, without a battery, or
    /// while UPower is live, the charge either does not drop or is followed by UPower: no timer.
    public var udevNeedsRereads: Bool {
        guard powerSource == .udev, let sample = power[.udev] else { return false }
        return sample.batteryPresent && sample.onBattery == true
    }

    public var conditions: Conditions {
        var c = Conditions()
        c.sources = live
        if let source = powerSource, let sample = power[source] {
            c.onBattery = sample.onBattery
            c.percentage = sample.batteryPresent ? sample.percentage : nil
            c.batteryState = sample.batteryPresent ? sample.state : .unknown
        }
        if let profile { c.powerProfile = profile }
        if let network {
            c.connectivity = network.connectivity
            c.metered = network.metered
            c.networkType = network.isOffline ? .none : network.type
        }
        if let session { c.locked = session.locked }
        c.noInput = input?.noInput
        // Either input that says idle is enough; one that says active is not overruled by the
        // other's silence.
        switch (session?.idleHint, input?.noInput) {
        case (nil, nil): c.idle = nil
        case (let hint, let noInput): c.idle = hint == true || noInput == true
        }
        return c
    }
}
