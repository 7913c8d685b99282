public import BGPolicyDBus
import BGPolicyCore

/// The agent's D-Bus interfaces, documented member by member. `dbus/*.xml` and the runtime
/// introspection are both generated from these values (`bgpolicyd --print-interface`), and a
/// test fails if the committed files differ.
public enum AgentInterfaces {
    public static let admin = InterfaceDescription(
        name: BGPolicyNames.adminInterface,
        documentation: """
            org.bgpolicy.Admin1:
            @short_description: Status and control of bgpolicyd, for the bgpolicy command and settings panels.

            Served by bgpolicyd at /org/bgpolicy/Agent1 on the session bus, under the name
            org.bgpolicy.Agent1. Errors are org.bgpolicy.Error.* with a message a person can act on.
            """,
        methods: [
            .init(
                "GetStatus",
                outputs: [
                    .init(
                        "status", .dictionary(key: .string, value: .variant),
                        """
                        A dictionary of facts about the running agent. Keys present in this version:
                        "version" (s) the agent's version; "pid" (u) its process id;
                        "started_at" (x) when it started, in Unix seconds; "uptime_seconds" (d) how long
                        it has been running, from a monotonic clock; "state_dir" (s) the directory holding
                        its state; "config_source" (s) the configuration file in use, or "defaults" when
                        none exists; "config_path" (s) where the configuration is read from;
                        "conditions" (a{sv}) the same dictionary as the Conditions property.
                        Later versions add keys; clients must ignore keys they do not know.
                        """)
                ],
                documentation: """
                    GetStatus:
                    Returns what the agent knows about itself. Cheap: it reads no files and calls no
                    other daemon, so settings panels may call it as often as they redraw.
                    Docs/DBusAPI.md shows it called from gdbus, busctl and Python.
                    """)
        ],
        properties: [
            .init(
                "Conditions", .dictionary(key: .string, value: .variant), access: .read, emitsChanged: .true,
                documentation: """
                    Conditions:
                    The machine's state as the agent sees it, read from UPower (or udev when UPower
                    is missing), power-profiles-daemon, NetworkManager and logind. Emits
                    PropertiesChanged whenever any fact changes. Keys:
                    "on_battery" (b) running on battery (a draining battery counts, even when
                    UPower's OnBattery says otherwise); "percentage" (d) battery charge, 0 to 100;
                    "battery_state" (s) unknown, charging, discharging, empty, fully-charged,
                    pending-charge or pending-discharge; "power_profile" (s) unknown, power-saver,
                    balanced or performance; "connectivity" (s) unknown, none, portal, limited or
                    full; "metered" (b) NetworkManager's Metered is yes or guess-yes while it is
                    globally connected; "network_type" (s) unknown, none, ethernet, wifi, mobile,
                    bluetooth, vpn or other; "idle" (b) logind's IdleHint; "locked" (b) the
                    session is locked; "sources" (as) the inputs that are live (upower, udev,
                    power-profiles, networkmanager, logind); "summary" (s) the same in words.
                    A boolean or number whose source is not live is left out: unknown.
                    """)
        ])

    /// Every interface the agent exports, in the order `dbus/` lists them.
    public static let all = [admin]

    public static func named(_ name: String) -> InterfaceDescription? {
        all.first { $0.name == name }
    }

    public static var names: [String] { all.map(\.name) }

    /// What `dbus/NAME.xml` holds for the named interface.
    public static func documentXML(named name: String) -> String? {
        named(name)?.documentXML()
    }
}
