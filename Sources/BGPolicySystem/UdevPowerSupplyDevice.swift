/// One `power_supply` device as sysfs describes it, read on the udev thread and handed over as
/// a plain value. Every field is optional: drivers leave attributes out, and text that does not
/// parse stays unknown rather than trapping.
public struct PowerSupplyDevice: Sendable, Equatable {
    /// The kernel name: `AC`, `ACAD`, `BAT0`, `hidpp_battery_0`, `ucsi-source-psy-USBC000:001`.
    public var sysname: String
    public var type: PowerSupplyType?
    /// `online` (adapters): 0 offline; 1, 2… online (some chargers number their modes).
    public var online: Bool?
    /// `present` (batteries).
    public var present: Bool?
    /// `status`: `Charging`, `Discharging`, `Full`, `Not charging`, `Unknown`.
    public var status: String?
    /// `capacity`, in percent.
    public var capacity: Int64?
    /// `energy_now` / `energy_full`, µWh.
    public var energyNow: Int64?
    public var energyFull: Int64?
    /// `charge_now` / `charge_full`, µAh.
    public var chargeNow: Int64?
    public var chargeFull: Int64?
    public var scope: PowerSupplyScope?

    public init(
        sysname: String, type: PowerSupplyType? = nil, online: Bool? = nil, present: Bool? = nil, status: String? = nil,
        capacity: Int64? = nil, energyNow: Int64? = nil, energyFull: Int64? = nil, chargeNow: Int64? = nil, chargeFull: Int64? = nil,
        scope: PowerSupplyScope? = nil
    ) {
        self.sysname = sysname
        self.type = type
        self.online = online
        self.present = present
        self.status = status
        self.capacity = capacity
        self.energyNow = energyNow
        self.energyFull = energyFull
        self.chargeNow = chargeNow
        self.chargeFull = chargeFull
        self.scope = scope
    }

    /// The sysattrs read for each device.
    static let attributeNames = [
        "type", "online", "present", "status", "capacity", "energy_now", "energy_full", "charge_now", "charge_full", "scope",
    ]

    /// Parses sysattr text as the kernel writes it; missing keys and odd text become nil.
    public init(sysname: String, attributes: [String: String]) {
        func text(_ key: String) -> String? {
            guard let value = attributes[key]?.trimmingWhitespace, !value.isEmpty else { return nil }
            return value
        }
        func number(_ key: String) -> Int64? { text(key).flatMap { Int64($0) } }
        func flag(_ key: String) -> Bool? { number(key).map { $0 != 0 } }
        self.init(
            sysname: sysname,
            type: text("type").map(PowerSupplyType.init(sysfs:)),
            online: flag("online"),
            present: flag("present"),
            status: text("status"),
            capacity: number("capacity"),
            energyNow: number("energy_now"),
            energyFull: number("energy_full"),
            chargeNow: number("charge_now"),
            chargeFull: number("charge_full"),
            scope: text("scope").map(PowerSupplyScope.init(sysfs:)))
    }

    /// Whether it belongs to the machine. Peripherals (a mouse's battery, a tablet pen's
    /// charger) say `scope=Device`; drivers for the machine's own supplies mostly say nothing.
    public var isSystem: Bool { scope != .device }

    /// Whether it is an external power input of the machine: a mains adapter (ACPI `AC`,
    /// `ACAD`, `ADP1`) or a USB/USB-C port that can charge it.
    public var isAdapter: Bool {
        switch type {
        case .mains?, .usb?: true
        case nil:
            // Every kernel driver sets `type`; a missing one is a fake or broken sysfs, where
            // the ACPI adapter names are the best remaining hint.
            sysname.hasPrefix("AC") || sysname.hasPrefix("ADP")
        default: false
        }
    }

    public var isBattery: Bool { type == .battery }

    /// The charge in percent, from the first of `capacity`, `energy_now/energy_full`,
    /// `charge_now/charge_full` that is usable, clamped to 0...100.
    public var percentage: Double? {
        func clamped(_ value: Double) -> Double? { value.isFinite ? min(max(value, 0), 100) : nil }
        if let capacity { return clamped(Double(capacity)) }
        if let now = energyNow, let full = energyFull, full > 0 { return clamped(Double(now) / Double(full) * 100) }
        if let now = chargeNow, let full = chargeFull, full > 0 { return clamped(Double(now) / Double(full) * 100) }
        return nil
    }
}

/// The kernel's `power_supply` `type`.
public enum PowerSupplyType: Sendable, Equatable {
    case mains
    case battery
    /// `USB` and the older per-port kinds (`USB_C`, `USB_PD`, `USB_DCP`, …).
    case usb
    case ups
    case wireless
    case other(String)

    public init(sysfs text: String) {
        switch text.lowercased() {
        case "mains": self = .mains
        case "battery": self = .battery
        case "ups": self = .ups
        case "wireless": self = .wireless
        case let t where t == "usb" || t.hasPrefix("usb_"): self = .usb
        default: self = .other(text)
        }
    }
}

/// The kernel's `power_supply` `scope`.
public enum PowerSupplyScope: String, Sendable, Equatable {
    case system
    case device
    case unknown

    public init(sysfs text: String) {
        self = PowerSupplyScope(rawValue: text.lowercased()) ?? .unknown
    }
}

extension String {
    fileprivate var trimmingWhitespace: String {
        let scalars = unicodeScalars
        guard let first = scalars.firstIndex(where: { !$0.properties.isWhitespace }),
            let last = scalars.lastIndex(where: { !$0.properties.isWhitespace })
        else { return "" }
        return String(scalars[first...last])
    }
}
