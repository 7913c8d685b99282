/// Plain facts that the system sources report (STYLE.md example 1: sources read, the core
/// decides). Every enum that crosses the bus is string-backed and round-trip tested.

/// A battery's charge state, as UPower's `State` numbers it.
public enum BatteryState: String, Sendable, CaseIterable {
    case unknown
    case charging
    case discharging
    case empty
    case fullyCharged = "fully-charged"
    case pendingCharge = "pending-charge"
    case pendingDischarge = "pending-discharge"

    /// UPower's `UpDeviceState` (0 unknown … 6 pending discharge).
    public init(upower value: UInt32) {
        switch value {
        case 1: self = .charging
        case 2: self = .discharging
        case 3: self = .empty
        case 4: self = .fullyCharged
        case 5: self = .pendingCharge
        case 6: self = .pendingDischarge
        default: self = .unknown
        }
    }

    /// The kernel's `power_supply` `status` attribute.
    public init(sysfs status: String) {
        switch status.lowercased() {
        case "charging": self = .charging
        case "discharging": self = .discharging
        case "full": self = .fullyCharged
        case "not charging": self = .pendingCharge
        default: self = .unknown
        }
    }

    /// Whether the battery drains in this state.
    var drains: Bool { self == .discharging || self == .empty || self == .pendingDischarge }
    var isOnExternalPower: Bool { self == .charging || self == .fullyCharged || self == .pendingCharge }
}

/// UPower's `WarningLevel`.
public enum BatteryWarningLevel: String, Sendable, CaseIterable {
    case unknown, none, discharging, low, critical, action

    public init(upower value: UInt32) {
        switch value {
        case 1: self = .none
        case 2: self = .discharging
        case 3: self = .low
        case 4: self = .critical
        case 5: self = .action
        default: self = .unknown
        }
    }
}

/// One reading of the machine's power supply, from UPower or from udev/sysfs.
public struct PowerSample: Sendable, Equatable {
    /// UPower's `OnBattery`, or for sysfs "no mains adapter online"; nil when not reported.
    public var onBatteryReported: Bool?
    /// Whether a system battery is present at all.
    public var batteryPresent: Bool
    public var percentage: Double?
    public var state: BatteryState
    public var warningLevel: BatteryWarningLevel
    /// Seconds until empty, when the source estimates it.
    public var timeToEmpty: Int64?

    public init(
        onBatteryReported: Bool?, batteryPresent: Bool, percentage: Double? = nil, state: BatteryState = .unknown,
        warningLevel: BatteryWarningLevel = .unknown, timeToEmpty: Int64? = nil
    ) {
        self.onBatteryReported = onBatteryReported
        self.batteryPresent = batteryPresent
        self.percentage = percentage
        self.state = state
        self.warningLevel = warningLevel
        self.timeToEmpty = timeToEmpty
    }

    /// Whether the machine runs on its battery, combining two fields because neither alone is
    /// reliable: a low-power charger reports `OnBattery=false` while the battery still drains,
    /// and some adapters never send a uevent when plugged in, while the battery's state does
    /// change. A draining battery means on battery; a charging or full one means on AC;
    /// otherwise the reported flag decides. No battery means on AC.
    public var onBattery: Bool? {
        guard batteryPresent else { return false }
        if state.drains { return true }
        if state.isOnExternalPower { return false }
        return onBatteryReported
    }
}

/// The active power profile (power-profiles-daemon).
public enum PowerProfile: String, Sendable, CaseIterable {
    case unknown
    case powerSaver = "power-saver"
    case balanced
    case performance

    public init(reported: String) {
        self = PowerProfile(rawValue: reported) ?? .unknown
    }
}

/// Network connectivity, as NetworkManager's `Connectivity` numbers it.
public enum Connectivity: String, Sendable, CaseIterable {
    case unknown, none, portal, limited, full

    public init(networkManager value: UInt32) {
        switch value {
        case 1: self = .none
        case 2: self = .portal
        case 3: self = .limited
        case 4: self = .full
        default: self = .unknown
        }
    }
}

/// The kind of the primary connection.
public enum NetworkType: String, Sendable, CaseIterable {
    case unknown, none, ethernet, wifi, mobile, bluetooth, vpn, other

    /// From NetworkManager's `PrimaryConnectionType` (a connection setting name).
    public init(networkManager type: String) {
        switch type {
        case "": self = .none
        case "802-3-ethernet", "ethernet", "pppoe": self = .ethernet
        case "802-11-wireless", "wifi", "802-11-olpc-mesh", "wifi-p2p": self = .wifi
        case "gsm", "cdma", "wimax": self = .mobile
        case "bluetooth": self = .bluetooth
        case "vpn", "wireguard", "tun": self = .vpn
        default: self = .other
        }
    }
}

/// One reading of NetworkManager. A field the daemon did not report (or reported with the
/// wrong type) is nil, and whatever depends on it stays unknown.
public struct NetworkSample: Sendable, Equatable {
    /// NetworkManager's global `State`; 70 is `NM_STATE_CONNECTED_GLOBAL`.
    public var state: UInt32?
    public var connectivity: Connectivity
    /// NetworkManager's `Metered` (`NMMetered`: 0 unknown, 1 yes, 2 no, 3 guess-yes, 4 guess-no).
    public var meteredReported: UInt32?
    public var type: NetworkType

    public static let connectedGlobal: UInt32 = 70

    public init(state: UInt32?, connectivity: Connectivity, meteredReported: UInt32?, type: NetworkType) {
        self.state = state
        self.connectivity = connectivity
        self.meteredReported = meteredReported
        self.type = type
    }

    /// GLib's rule (`GNetworkMonitorNM`): metered when `Metered` is yes or guess-yes, and
    /// trusted only while NetworkManager is globally connected. nil when either is unknown.
    public var metered: Bool? {
        guard let state else { return nil }
        guard state == Self.connectedGlobal else { return false }
        guard let meteredReported else { return nil }
        return meteredReported == 1 || meteredReported == 3
    }

    /// Offline: NetworkManager asleep (10) or disconnected (20).
    public var isOffline: Bool {
        guard let state else { return false }
        return state != 0 && state <= 20
    }
}

/// The user's graphical session, from logind.
public struct SessionSample: Sendable, Equatable {
    public var locked: Bool
    /// logind's `IdleHint`. GNOME and KDE do not keep it current (see Docs/Conditions.md), so
    /// the core also counts a locked session, and no input for `[idle] no_input_after`, as idle.
    public var idleHint: Bool

    public init(locked: Bool, idleHint: Bool) {
        self.locked = locked
        self.idleHint = idleHint
    }
}

/// The user's input, from the desktop's idle monitor (GNOME's `org.gnome.Mutter.IdleMonitor`).
public struct InputSample: Sendable, Equatable {
    /// No keyboard, pointer or touch input for at least `[idle] no_input_after`.
    public var noInput: Bool

    public init(noInput: Bool) {
        self.noInput = noInput
    }
}
