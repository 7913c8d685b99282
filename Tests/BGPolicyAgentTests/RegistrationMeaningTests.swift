import Testing

@testable import BGPolicyAgent

@Suite("RegistrationMeaning: which registrations are the user opening an app")
struct RegistrationMeaningTests {
    static let scope = "app-gnome-org.gnome.Maps-12345.scope"
    static let autostart = #"app-gnome-org.gnome.Evolution\x2dalarm\x2dnotify@autostart.service"#
    static let oldAutostart = "app-gnome-org.gnome.SettingsDaemon.DiskUtilityNotify-autostart.service"

    /// (launched by the agent, background only, unit, process start, agent start) → meaning;
    /// starts in seconds since boot.
    static let cases: [(Bool, Bool, String?, Double?, Double?, RegistrationMeaning)] = [
        // Started after the agent, in the user's scope or in none: opened.
        (false, false, scope, 1000, 900, .opened),
        (false, false, nil, 1000, 900, .opened),
        // Started a moment before the agent: it may be the call that activated the agent.
        (false, false, scope, 896, 900, .opened),
        // Started well before: the agent restarted and the app registers again.
        (false, false, scope, 100, 900, .alreadyRunning),
        (false, false, nil, 894.9, 900, .alreadyRunning),
        // What cannot be read counts as an open.
        (false, false, scope, nil, 900, .opened),
        (false, false, scope, 100, nil, .opened),
        // Not the user's doing, whenever the process started.
        (true, false, scope, 1000, 900, .notOpened(.launchedByTheAgent)),
        (true, false, nil, 100, 900, .notOpened(.launchedByTheAgent)),
        (false, false, autostart, 1000, 900, .notOpened(.autostarted)),
        (false, false, oldAutostart, 100, 900, .notOpened(.autostarted)),
        (false, true, scope, 1000, 900, .notOpened(.backgroundOnly)),
        (false, true, nil, 100, 900, .notOpened(.backgroundOnly)),
    ]

    @Test("the meaning of a registration", arguments: cases)
    func meaning(_ row: (Bool, Bool, String?, Double?, Double?, RegistrationMeaning)) {
        let (launched, backgroundOnly, unit, processStart, agentStart, expected) = row
        #expect(RegistrationMeaning.of(
            launchedByAgent: launched, backgroundOnly: backgroundOnly, unit: unit,
            processStart: processStart, agentStart: agentStart) == expected)
    }
}
