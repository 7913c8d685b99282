import BGPolicyCore
import Testing

@Suite("AppIdentityParser")
struct AppIdentityParserTests {
    // MARK: Unit names

    /// Units that desktops really create, and what xdg-desktop-portal makes of them.
    static let appUnits: [(unit: String, id: String)] = [
        // GNOME Shell: app-gnome-<escaped desktop id>-<pid>.scope.
        ("app-gnome-org.gnome.Maps-12345.scope", "org.gnome.Maps"),
        (#"app-gnome-firefox\x2desr-9876.scope"#, "firefox-esr"),
        (#"app-gnome-org.gnome.Evolution\x2dalarm\x2dnotify-2437.scope"#, "org.gnome.Evolution-alarm-notify"),
        ("app-gnome-org.gnome.Epiphany-182352.scope", "org.gnome.Epiphany"),
        // GLib's own launcher names itself too.
        (#"app-glib-spice\x2dvdagent-1839.scope"#, "spice-vdagent"),
        // KDE (KIO): no launcher, a UUID, scopes with '-' and services with '@'.
        ("app-org.kde.konsole-a1b2c3d4e5.scope", "org.kde.konsole"),
        ("app-org.kde.dolphin@a1b2.service", "org.kde.dolphin"),
        ("app-org.kde.konsole@0f8c1d7e2b9a4c3e8d6f5a4b3c2d1e0f.service", "org.kde.konsole"),
        ("app-kde-org.kde.kate-1234.scope", "org.kde.kate"),
        ("app-KDE-org.kde.okular@12345.service", "org.kde.okular"),
        ("app-org.kde.amarok.service", "org.kde.amarok"),
        ("app-com.obsproject.Studio-d70acc38b5154a3a8b4a60accc4b15f4.scope", "com.obsproject.Studio"),
        // Flatpak: flatpak run puts each instance in app-flatpak-<id>-<pid>.scope.
        ("app-flatpak-org.gnome.Maps-12345.scope", "org.gnome.Maps"),
        (#"app-flatpak-com.example.Some\x2dApp-42.scope"#, "com.example.Some-App"),
        // systemd's xdg-autostart-generator: @autostart since v248, -autostart before.
        (#"app-gnome-org.gnome.Evolution\x2dalarm\x2dnotify@autostart.service"#, "org.gnome.Evolution-alarm-notify"),
        ("app-gnome-org.gnome.SettingsDaemon.DiskUtilityNotify-autostart.service", "org.gnome.SettingsDaemon.DiskUtilityNotify"),
        // A dotless first segment is the id, not a launcher, when nothing else would be left.
        ("app-firefox-1234.scope", "firefox"),
        ("app-firefox-jcfppqx.scope", "firefox"),
        ("app-firefox.service", "firefox"),
        ("app-firefox@1.service", "firefox"),
        // …and the launcher when an id and a random part follow it (bare '-' in ids is escaped).
        ("app-sway-foot-1234.scope", "foot"),
        ("app-gnome-foot.service", "foot"),
        // The random part may be empty.
        ("app-gnome-org.gnome.Maps-.scope", "org.gnome.Maps"),
        // Whatever lies between launcher and the last '-' is the id, as in the portal.
        ("app-gnome-foo-bar-1234.scope", "foo-bar"),
    ]

    @Test("app unit names give the portal's app id", arguments: appUnits)
    func appUnit(unit: String, id: String) {
        #expect(AppIdentityParser.appID(fromUnitName: unit)?.rawValue == id)
    }

    static let autostartUnits: [(unit: String, autostart: Bool)] = [
        (#"app-gnome-org.gnome.Evolution\x2dalarm\x2dnotify@autostart.service"#, true),
        ("app-gnome-org.gnome.SettingsDaemon.DiskUtilityNotify-autostart.service", true),
        ("app-KDE-org.kde.kdeconnect.daemon@autostart.service", true),
        // Launched by the user: a scope, another instance, an id that merely ends so.
        ("app-gnome-org.gnome.Maps-12345.scope", false),
        ("app-org.kde.dolphin@a1b2.service", false),
        ("app-autostart.service", false),
        ("app-gnome-autostart-1234.scope", false),
        ("autostart.service", false),
        ("user@autostart.service", false),
    ]

    @Test("units of XDG autostart entries are told apart from apps the user launched", arguments: autostartUnits)
    func autostart(unit: String, autostart: Bool) {
        #expect(AppIdentityParser.isAutostartUnit(unit) == autostart)
    }

    static let otherUnits: [String] = [
        "session-2.scope",
        "dbus.service",
        "user@1000.service",
        "init.scope",
        "vte-spawn-228ae109-a869-4533-8988-65ea4c10b492.scope",
        "snap.firefox.firefox-2bcc5f39-2b4a-4fd4-9b2b-3b2b6f1c8d1e.scope",
        // Slices hold no processes; this one is dbus-broker's, around an activated service.
        #"app-dbus\x2d:1.2\x2dorg.gnome.Foo.slice"#,
        "app-gnome-org.gnome.Terminal-92502.slice",
        "app.slice",
        // Not well formed.
        "app-not-a-well-formed-unit-name",
        "app-org.gnome.Maps.scope",
        "app-.scope",
        "app-.service",
        "app--1.scope",
        "app-gnome-org.gnome.Maps-12_34.scope",
        "app-.service.scope",
        "application-org.gnome.Maps-1.scope",
        // Ids that are not app ids once unescaped.
        #"app-gnome-org.gnome.Maps\x2fevil-1.scope"#,
        #"app-gnome-org..gnome-1.scope"#,
        #"app-gnome-with\x20space-1.scope"#,
        #"app-gnome-bad\x00nul-1.scope"#,
        #"app-gnome-bad\xzzhex-1.scope"#,
    ]

    @Test("other units name no app", arguments: otherUnits)
    func otherUnit(unit: String) {
        #expect(AppIdentityParser.appID(fromUnitName: unit) == nil)
    }

    // MARK: Escapes

    @Test("\\xNN escapes decode; anything else stays as written")
    func unescape() {
        #expect(AppIdentityParser.unescape(#"firefox\x2desr"#) == "firefox-esr")
        #expect(AppIdentityParser.unescape(#"\x2D\x2d"#) == "--")
        #expect(AppIdentityParser.unescape(#"caf\xc3\xa9"#) == "café")
        #expect(AppIdentityParser.unescape("plain.id") == "plain.id")
        #expect(AppIdentityParser.unescape(#"a\x2"#) == #"a\x2"#)
        #expect(AppIdentityParser.unescape(#"a\x"#) == #"a\x"#)
        #expect(AppIdentityParser.unescape(#"a\xg1"#) == #"a\xg1"#)
        #expect(AppIdentityParser.unescape(#"a\n\t\\"#) == #"a\n\t\\"#)
        #expect(AppIdentityParser.unescape(#"\x00"#) == #"\x00"#)
        #expect(AppIdentityParser.unescape(#"\\x2d"#) == #"\-"#)
        // Bytes that would not be UTF-8 are not decoded.
        #expect(AppIdentityParser.unescape(#"bad\xff"#) == #"bad\xff"#)
        #expect(AppIdentityParser.unescape("") == "")
    }

    // MARK: /proc/PID/cgroup

    static let gnomeMaps = "/user.slice/user-1000.slice/user@1000.service/app.slice/app-gnome-org.gnome.Maps-12345.scope"

    @Test("cgroup v2: the 0:: line")
    func cgroupV2() {
        #expect(AppIdentityParser.cgroupPath(fromProcCgroup: "0::\(Self.gnomeMaps)\n") == Self.gnomeMaps)
        #expect(AppIdentityParser.cgroupPath(fromProcCgroup: "0::/\n") == "/")
        // Unit names may hold ':'.
        let dbus = #"/user.slice/user-1000.slice/user@1000.service/app.slice/app-dbus\x2d:1.2\x2dorg.gnome.Foo.slice/dbus-:1.2-org.gnome.Foo@0.service"#
        #expect(AppIdentityParser.cgroupPath(fromProcCgroup: "0::\(dbus)\n") == dbus)
    }

    @Test("cgroup v1 (hybrid): the unified line wins, else name=systemd")
    func cgroupV1() {
        let terminal = "/user.slice/user-1000.slice/user@1000.service/apps.slice/apps-org.gnome.Terminal.slice/vte-spawn-228ae109-a869-4533-8988-65ea4c10b492.scope"
        let hybrid = """
            12:pids:/user.slice/user-1000.slice/user@1000.service
            11:perf_event:/
            8:memory:\(terminal)
            3:freezer:/snap.portal-test
            2:cpu,cpuacct:/user.slice
            1:name=systemd:/user.slice/user-1000.slice/session-2.scope
            0::\(terminal)

            """
        #expect(AppIdentityParser.cgroupPath(fromProcCgroup: hybrid) == terminal)
        let legacy = """
            9:name=systemd:\(Self.gnomeMaps)
            8:pids:/
            4:memory:/process_api/f34d885da863238087f1ca31f90dfbcf
            1:cpu:/
            """
        #expect(AppIdentityParser.cgroupPath(fromProcCgroup: legacy) == Self.gnomeMaps)
        // Legacy, with cgroup2 mounted by something else (as on this project's test machines):
        // the kernel lists "0::/" for every process, which names no unit.
        #expect(AppIdentityParser.cgroupPath(fromProcCgroup: legacy + "\n0::/\n") == Self.gnomeMaps)
        #expect(AppIdentityParser.cgroupPath(fromProcCgroup: "0::/\n") == "/")
        #expect(AppIdentityParser.cgroupPath(fromProcCgroup: "1:cpu,cpuacct:/\n2:memory:/x\n") == nil)
        #expect(AppIdentityParser.cgroupPath(fromProcCgroup: "") == nil)
        #expect(AppIdentityParser.cgroupPath(fromProcCgroup: "garbage\n0:x\n") == nil)
    }

    // MARK: Units in cgroup paths

    static let unitsInPaths: [(path: String, unit: String?)] = [
        (gnomeMaps, "app-gnome-org.gnome.Maps-12345.scope"),
        ("/user.slice/user-1000.slice/user@1000.service/app.slice/app-org.kde.dolphin@a1b2.service", "app-org.kde.dolphin@a1b2.service"),
        ("/user.slice/user-1000.slice/session-2.scope", "session-2.scope"),
        ("/user.slice/user-1000.slice/user@1000.service/init.scope", "init.scope"),
        ("/user.slice/user-1000.slice/user@1000.service", "user@1000.service"),
        ("/system.slice/dbus.service", "dbus.service"),
        ("/user.slice/user-1000.slice/user@1000.service/app.slice/app-org.gnome.Terminal.slice/vte-spawn-1.scope", "vte-spawn-1.scope"),
        // A unit's own sub-cgroups (delegation) are not units the manager knows.
        ("/user.slice/user-1000.slice/user@1000.service/user.slice/libpod-abc.scope/container", "libpod-abc.scope"),
        ("/user.slice/user-1000.slice/user@1000.service/app.slice/evil.service/app-gnome-org.gnome.Maps-1.scope", "evil.service"),
        ("/app-gnome-org.example.Test-1.scope", "app-gnome-org.example.Test-1.scope"),
        ("/", nil),
        ("", nil),
        ("/user.slice/user-1000.slice", nil),
        ("/user.slice/user-1000.slice/user@1000.service/app.slice", nil),
        ("/process_api/f34d885da863238087f1ca31f90dfbcf", nil),
        ("/user.slice/.scope", nil),
    ]

    @Test("the unit of a cgroup path", arguments: unitsInPaths)
    func unitInPath(path: String, unit: String?) {
        #expect(AppIdentityParser.unitName(fromCgroupPath: path) == unit)
    }

    // MARK: Snaps

    static let snapPaths: [(path: String, id: String?)] = [
        ("/user.slice/user-1000.slice/user@1000.service/app.slice/snap.firefox.firefox-2bcc5f39-2b4a-4fd4-9b2b-3b2b6f1c8d1e.scope", "snap.firefox"),
        ("/user.slice/user-1000.slice/user@1000.service/snap.spotify.spotify-1234.scope", "snap.spotify"),
        ("/user.slice/user-1000.slice/user@1000.service/app.slice/snap.foo_bar.app-1.scope", "snap.foo_bar"),
        ("/user.slice/user-1000.slice/user@1000.service/app.slice/snap.code.hook.configure-1a2b.scope", "snap.code"),
        ("/system.slice/snap.lxd.daemon.service", "snap.lxd"),
        ("/user.slice/user-1000.slice/user@1000.service/app.slice/snap.something.scope", nil),
        ("/snap.portal-test", nil),
        ("/user.slice/user-1000.slice/session-2.scope", nil),
        ("/user.slice/snapper.service", nil),
        ("/system.slice/snapd.service", nil),
        ("/user.slice/snap..app-1.scope", nil),
        ("/user.slice/snap.bad name.app-1.scope", nil),
        // Below a unit: a delegated subtree, named freely by whoever owns it.
        ("/user.slice/user-1000.slice/user@1000.service/app.slice/evil.service/snap.firefox.firefox-1.scope", nil),
    ]

    @Test("snap scopes name snap.NAME", arguments: snapPaths)
    func snap(path: String, id: String?) {
        #expect(AppIdentityParser.snapAppID(fromCgroupPath: path)?.rawValue == id)
    }

    // MARK: .flatpak-info

    @Test("the [Application] name of .flatpak-info")
    func flatpakInfo() {
        let info = """
            [Application]
            name=org.gnome.Maps
            runtime=runtime/org.gnome.Platform/x86_64/46

            [Instance]
            instance-id=1234567890
            app-path=/var/lib/flatpak/app/org.gnome.Maps/x86_64/stable/abc/files
            branch=stable
            flatpak-version=1.14.4
            session-bus-proxy=true

            [Context]
            shared=network;ipc;
            sockets=x11;wayland;pulseaudio;
            """
        #expect(AppIdentityParser.flatpakAppID(fromInfo: info)?.rawValue == "org.gnome.Maps")
        #expect(AppIdentityParser.flatpakAppID(fromInfo: "# comment\r\n[Application]\r\n  name = org.example.App \r\n")?.rawValue == "org.example.App")
        // The last of repeated keys wins, as in GKeyFile.
        #expect(AppIdentityParser.flatpakAppID(fromInfo: "[Application]\nname=org.a.A\nname=org.b.B\n")?.rawValue == "org.b.B")
        // name= in another group, a runtime instance, or an invalid id name no app.
        #expect(AppIdentityParser.flatpakAppID(fromInfo: "[Instance]\nname=org.a.A\n") == nil)
        #expect(AppIdentityParser.flatpakAppID(fromInfo: "[Runtime]\nname=org.gnome.Sdk\nruntime=runtime/org.gnome.Sdk/x86_64/46\n") == nil)
        #expect(AppIdentityParser.flatpakAppID(fromInfo: "[Application]\nname=not an id\n") == nil)
        #expect(AppIdentityParser.flatpakAppID(fromInfo: "[Application]\nname[de]=org.a.A\nnames=org.b.B\n") == nil)
        #expect(AppIdentityParser.flatpakAppID(fromInfo: "[Application\nname=org.a.A\n") == nil)
        #expect(AppIdentityParser.flatpakAppID(fromInfo: "") == nil)
    }
}
