/// Who a process is, read from the text the kernel, systemd and Flatpak leave about it
/// (SPEC §1, App identity). Pure parsing: `ProcessInspector` in BGPolicySystem reads the files.
///
/// The unit-name rules follow xdg-desktop-portal's (`xdp-app-info-host.c`), so that an app gets
/// the same id here as in the portal's permission store.
public enum AppIdentityParser {
    /// The cgroup path from /proc/PID/cgroup text: the cgroup-v2 "0::PATH" line, else the v1
    /// "name=systemd" line. On a legacy (v1) system where something mounted cgroup2 of its own,
    /// the kernel lists "0::/" (or that mount's path) for every process, which no systemd
    /// manages: there the unified line wins only when it names a unit, and "name=systemd" says
    /// where systemd put the process.
    public static func cgroupPath(fromProcCgroup text: String) -> String? {
        var unified: String?
        var systemdV1: String?
        for line in lines(text) {
            // "ID:CONTROLLERS:PATH"; the path itself may hold ':' (unit names allow it).
            let fields = line.split(separator: ":", maxSplits: 2, omittingEmptySubsequences: false)
            guard fields.count == 3, fields[2].hasPrefix("/") else { continue }
            let path = String(fields[2])
            if unified == nil, fields[0] == "0", fields[1].isEmpty { unified = path }
            if systemdV1 == nil, fields[1].split(separator: ",").contains("name=systemd") { systemdV1 = path }
        }
        guard let unified else { return systemdV1 }
        if let systemdV1, unitName(fromCgroupPath: unified) == nil { return systemdV1 }
        return unified
    }

    /// The systemd unit a cgroup path belongs to, read as systemd reads it
    /// (`sd_pid_get_user_unit`, falling back to `sd_pid_get_unit`): past the leading slices and,
    /// when present, the user manager (`user@UID.service`) and its slices, the first component,
    /// when it is a `.scope` or `.service`. For every cgroup systemd creates this is the
    /// innermost unit; deeper components are a delegated subtree whose names the owner chose
    /// freely and that no manager knows as units, so they are never taken for one.
    /// Nothing is unescaped.
    public static func unitName(fromCgroupPath path: String) -> String? {
        let components = path.split(separator: "/")
        var index = components.startIndex
        func skipSlices() {
            while index < components.endIndex, components[index].hasSuffix(".slice") { index += 1 }
        }
        skipSlices()
        guard index < components.endIndex else { return nil }
        let first = components[index]
        if first.hasPrefix("user@"), first.hasSuffix(".service"), components.index(after: index) < components.endIndex {
            index += 1
            skipSlices()
            guard index < components.endIndex else { return nil }
        }
        let unit = components[index]
        guard isUnit(unit, suffix: ".scope") || isUnit(unit, suffix: ".service") else { return nil }
        return String(unit)
    }

    /// The unit name patterns (`ListUnitsByPatterns`) that cover every unit `appID(fromUnitName:)`
    /// can accept: it still has the last word on each name.
    public static let appUnitPatterns = ["app-*.scope", "app-*.service"]

    /// The app id in an app unit name, by xdg-desktop-portal's rules:
    /// `app[-<launcher>]-<id>[-<rand>].scope`, `app[-<launcher>]-<id>[@<rand>].service`,
    /// `\xNN` unescaped; nil for units that are not app units (`session-2.scope`,
    /// `dbus.service`, `user@1000.service`, any `.slice` …) or whose id is not a valid `AppID`.
    ///
    /// The rules, as the portal's two regular expressions behave:
    /// - A scope needs the random part: the id is everything up to the *last* '-', and what
    ///   follows that '-' must be letters and digits only (possibly none).
    ///   A service's random part is optional: the id ends at the last '@' when only letters and
    ///   digits follow it, else before a final `-autostart` (units of systemd < 248's
    ///   xdg-autostart-generator), else at `.service`.
    /// - The launcher (`gnome`, `flatpak`, `KDE` …) is a first segment of letters and digits
    ///   only, ended by '-'. It is taken as the launcher only when an id still remains after
    ///   it: for a scope that means at least two more '-'-separated parts (id and random part),
    ///   so `app-firefox-1234.scope` is the app `firefox`, not launcher `firefox` with no id; for
    ///   a service any non-empty rest. Real ids never hold a bare '-': launchers escape it as
    ///   `\x2d`, which is why a reverse-DNS id (`org.kde.konsole`, whose first segment holds a
    ///   dot) is never mistaken for a launcher.
    /// - Slices are rejected although the portal's pattern accepts them: a slice holds no
    ///   processes of its own, so no process's unit is ever one, and `app-dbus\x2d:1.2\x2d….slice`
    ///   is dbus-broker's grouping, not an app.
    public static func appID(fromUnitName unit: String) -> AppID? {
        guard unit.hasPrefix("app-") else { return nil }
        let escaped: Substring
        if isUnit(unit, suffix: ".scope") {
            guard let id = scopeID(unit.dropFirst(4).dropLast(6)) else { return nil }
            escaped = id
        } else if isUnit(unit, suffix: ".service") {
            guard let id = serviceID(unit.dropFirst(4).dropLast(8)) else { return nil }
            escaped = id
        } else {
            return nil
        }
        return AppID(rawValue: unescape(String(escaped)))
    }

    /// Whether `unit` is an app unit that systemd's xdg-autostart-generator made for an
    /// XDG autostart entry (`app-<launcher>-<id>@autostart.service` since systemd 248,
    /// `…-autostart.service` before): the session started the app at login, the user did not.
    /// `app-autostart.service` is an app called `autostart`.
    public static func isAutostartUnit(_ unit: String) -> Bool {
        guard unit.hasPrefix("app-"), isUnit(unit, suffix: ".service") else { return false }
        let body = unit.dropFirst(4).dropLast(8)
        guard let id = serviceID(body), AppID(rawValue: unescape(String(id))) != nil else { return false }
        // What the id leaves of the body: the instance or the old generator's suffix.
        let rest = body[id.endIndex...]
        return rest == "@autostart" || rest == "-autostart"
    }

    /// The path's unit (`unitName(fromCgroupPath:)`) when it is `snap.NAME.APP-….scope` (or
    /// `.service`) → `snap.NAME`. snapd names an app's scope `snap.<instance>.<app>-<uuid>.scope`,
    /// a hook's `snap.<instance>.hook.<hook>-<uuid>.scope` and a daemon
    /// `snap.<instance>.<app>.service`. Only the unit: a component below it is a delegated
    /// subtree whose owner names it freely (`evil.service/snap.firefox.firefox-1.scope`).
    public static func snapAppID(fromCgroupPath path: String) -> AppID? {
        guard let unit = unitName(fromCgroupPath: path), unit.hasPrefix("snap.") else { return nil }
        let body = isUnit(unit, suffix: ".scope") ? unit.dropFirst(5).dropLast(6) : unit.dropFirst(5).dropLast(8)
        // NAME, then a non-empty APP part: "snap.something.scope" names no app.
        guard let dot = body.firstIndex(of: "."), dot > body.startIndex, body.index(after: dot) < body.endIndex else {
            return nil
        }
        return AppID(rawValue: "snap." + body[..<dot])
    }

    /// The `[Application]` `name=` key of a `.flatpak-info` keyfile (GKeyFile syntax: `#`
    /// comments, blanks around '=' ignored, the last of repeated keys wins).
    public static func flatpakAppID(fromInfo text: String) -> AppID? {
        var group: Substring?
        var name: Substring?
        for rawLine in lines(text) {
            let line = trimmed(rawLine)
            if line.isEmpty || line.hasPrefix("#") { continue }
            if line.hasPrefix("[") {
                group = line.hasSuffix("]") ? line.dropFirst().dropLast() : nil
                continue
            }
            guard group == "Application", let equals = line.firstIndex(of: "=") else { continue }
            if trimmed(line[..<equals]) == "name" {
                name = trimmed(line[line.index(after: equals)...])
            }
        }
        return name.flatMap { AppID(rawValue: String($0)) }
    }

    /// systemd's `\xNN` unescaping: only valid two-hex-digit escapes are decoded; anything else
    /// (other escapes, a short or non-hex `\x`, `\x00`) is kept as written, and so is the whole
    /// text when the decoded bytes would not be UTF-8.
    public static func unescape(_ text: String) -> String {
        let input = Array(text.utf8)
        guard input.contains(UInt8(ascii: "\\")) else { return text }
        var output: [UInt8] = []
        output.reserveCapacity(input.count)
        var i = 0
        while i < input.count {
            if input[i] == UInt8(ascii: "\\"), i + 3 < input.count, input[i + 1] == UInt8(ascii: "x"),
                let high = HexDigit.value(input[i + 2]), let low = HexDigit.value(input[i + 3]),
                // A NUL byte would end the text in every C consumer: keep that escape as written.
                high != 0 || low != 0
            {
                output.append(high << 4 | low)
                i += 4
                continue
            }
            output.append(input[i])
            i += 1
        }
        // Bytes that do not form UTF-8 are not decoded at all: the text stays as written.
        return String(validating: output, as: UTF8.self) ?? text
    }

    // MARK: Helpers

    /// Whether `name` ends with `suffix` and has something before it.
    private static func isUnit<S: StringProtocol>(_ name: S, suffix: String) -> Bool {
        name.utf8.count > suffix.utf8.count && name.hasSuffix(suffix)
    }

    /// The escaped id in the body of `app-<body>.scope`: `[<launcher>-]<id>-<rand>`.
    private static func scopeID(_ body: Substring) -> Substring? {
        guard let lastDash = body.lastIndex(of: "-") else { return nil }
        guard body[body.index(after: lastDash)...].allSatisfy(isASCIIAlphanumeric) else { return nil }
        let head = body[..<lastDash]
        if let launcherEnd = launcherEnd(head) {
            // What follows the launcher's '-' up to the last '-' is the id, when not empty.
            let id = head[head.index(after: launcherEnd)...]
            if !id.isEmpty { return id }
        }
        return head.isEmpty ? nil : head
    }

    /// The escaped id in the body of `app-<body>.service`: `[<launcher>-]<id>[@<rand>]`.
    private static func serviceID(_ body: Substring) -> Substring? {
        var rest = body
        if let launcherEnd = launcherEnd(body), body.index(after: launcherEnd) < body.endIndex {
            rest = body[body.index(after: launcherEnd)...]
        }
        if let at = rest.lastIndex(of: "@"), at > rest.startIndex, rest[rest.index(after: at)...].allSatisfy(isASCIIAlphanumeric) {
            return rest[..<at]
        }
        let autostart = "-autostart"
        if rest.utf8.count > autostart.utf8.count, rest.hasSuffix(autostart) {
            return rest.dropLast(autostart.count)
        }
        return rest.isEmpty ? nil : rest
    }

    /// The index of the '-' ending a leading run of letters and digits, if the text starts so.
    private static func launcherEnd(_ text: Substring) -> Substring.Index? {
        guard let dash = text.firstIndex(of: "-"), dash > text.startIndex,
            text[..<dash].allSatisfy(isASCIIAlphanumeric)
        else { return nil }
        return dash
    }

    private static func isASCIIAlphanumeric(_ c: Character) -> Bool {
        guard let ascii = c.asciiValue else { return false }
        switch ascii {
        case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"):
            return true
        default:
            return false
        }
    }

    /// The lines of `text`, split at each '\n' byte: Swift joins "\r\n" into one Character, so
    /// splitting Characters would miss CRLF line ends.
    private static func lines(_ text: String) -> [Substring] {
        text.utf8.split(separator: UInt8(ascii: "\n")).map { Substring($0) }
    }

    private static func trimmed(_ text: Substring) -> Substring {
        let isBlank: (Character) -> Bool = { $0 == " " || $0 == "\t" || $0 == "\r" }
        guard let start = text.firstIndex(where: { !isBlank($0) }) else { return text[text.endIndex...] }
        let end = text.lastIndex(where: { !isBlank($0) })!
        return text[start...end]
    }
}
