@testable import BGPolicyCore
import Testing

// MARK: - Defaults

@Suite("PolicyConfiguration defaults")
struct PolicyConfigurationDefaultsTests {
    /// Each number of SPEC §2, written out again so that a changed default fails here.
    @Test func defaultsEqualTheSpecTable() {
        let d = PolicyConfiguration.defaults
        #expect(d.slices.refresh == .seconds(30))
        #expect(d.slices.processing == .seconds(600))
        #expect(d.slices.completion == .seconds(30))
        #expect(d.slices.contentAvailable == .seconds(30))
        #expect(d.slices.expirationWarning == .seconds(5))
        #expect(d.limits.pendingRefresh == 1)
        #expect(d.limits.pendingProcessing == 10)
        #expect(d.limits.earliestBeginMax == .seconds(7 * 24 * 3600))
        #expect(d.limits.inactiveAfter == .seconds(7 * 24 * 3600))
        #expect(d.limits.contentAvailablePerHour == 3)
        #expect(d.battery.low.value == 20)
        #expect(d.battery.critical.value == 10)
        #expect(d.battery.discretionaryMin.value == 50)
        #expect(d.idle.noInputAfter == .seconds(300))
        #expect(d.cpu.limit.value == 80)
        #expect(d.cpu.window == .seconds(60))
        #expect(d.cpu.action == .throttle)
        #expect(d.cpu.throttleQuota.value == 10)
        #expect(d.windows.gridOnBattery == .seconds(900))
        #expect(d.windows.gridOnAC == .seconds(300))
        #expect(d.refresh.lead == .seconds(600))
        #expect(d.refresh.minInterval == .seconds(900))
        #expect(d.refresh.budget == 2.2)
        #expect(d.refresh.windowsPerDay == 21)
        #expect(d.transfers.resourceTimeout == .seconds(7 * 24 * 3600))
        #expect(d.transfers.requestTimeout == .seconds(60))
        #expect(d.transfers.backoffInitial == .seconds(30))
        #expect(d.transfers.backoffMax == .seconds(5 * 3600))
    }

    @Test func defaultsAreValid() throws {
        try PolicyConfiguration.defaults.validate()
    }

    @Test func emptyAndCommentOnlyFilesGiveTheDefaults() throws {
        #expect(try ConfigurationParser.parse("", source: nil) == .defaults)
        #expect(try ConfigurationParser.parse("\n\n   \n# nothing\n; here\n", source: "x.conf") == .defaults)
        #expect(try ConfigurationParser.parse("[cpu]\n[slices]\n", source: nil) == .defaults)
    }
}

// MARK: - Every key

/// One key of the file, a value different from its default, and where that value must land.
struct KeyOverride: Sendable, CustomTestStringConvertible {
    let section: String
    let key: String
    let text: String
    let apply: @Sendable (inout PolicyConfiguration) -> Void

    var testDescription: String { "[\(section)] \(key) = \(text)" }

    static let all: [KeyOverride] = [
        .init(section: "slices", key: "refresh", text: "45s") { $0.slices.refresh = .seconds(45) },
        .init(section: "slices", key: "processing", text: "20min") { $0.slices.processing = .seconds(1200) },
        .init(section: "slices", key: "completion", text: "1min") { $0.slices.completion = .seconds(60) },
        .init(section: "slices", key: "content_available", text: "20s") { $0.slices.contentAvailable = .seconds(20) },
        .init(section: "slices", key: "expiration_warning", text: "2500ms") { $0.slices.expirationWarning = .milliseconds(2500) },
        .init(section: "slices", key: "concurrent_starts", text: "4") { $0.slices.concurrentStarts = 4 },
        .init(section: "limits", key: "pending_refresh", text: "2") { $0.limits.pendingRefresh = 2 },
        .init(section: "limits", key: "pending_processing", text: "25") { $0.limits.pendingProcessing = 25 },
        .init(section: "limits", key: "earliest_begin_max", text: "3d") { $0.limits.earliestBeginMax = .seconds(3 * 86_400) },
        .init(section: "limits", key: "inactive_after", text: "14d") { $0.limits.inactiveAfter = .seconds(14 * 86_400) },
        .init(section: "limits", key: "content_available_per_hour", text: "0") { $0.limits.contentAvailablePerHour = 0 },
        .init(section: "limits", key: "apps", text: "250") { $0.limits.apps = 250 },
        .init(section: "battery", key: "low", text: "25%") { $0.battery.low = 25 },
        .init(section: "battery", key: "critical", text: "5 %") { $0.battery.critical = 5 },
        .init(section: "battery", key: "discretionary_min", text: "40%") { $0.battery.discretionaryMin = 40 },
        .init(section: "battery", key: "udev_read_interval", text: "2min") { $0.battery.udevReadInterval = .seconds(120) },
        .init(section: "idle", key: "no_input_after", text: "2 minutes") { $0.idle.noInputAfter = .seconds(120) },
        .init(section: "cpu", key: "limit", text: "90%") { $0.cpu.limit = 90 },
        .init(section: "cpu", key: "window", text: "30 sec") { $0.cpu.window = .seconds(30) },
        .init(section: "cpu", key: "action", text: "freeze") { $0.cpu.action = .freeze },
        .init(section: "cpu", key: "throttle_quota", text: "5%") { $0.cpu.throttleQuota = 5 },
        .init(section: "cpu", key: "sample_interval", text: "2s") { $0.cpu.sampleInterval = .seconds(2) },
        .init(section: "windows", key: "grid_on_battery", text: "30min") { $0.windows.gridOnBattery = .seconds(1800) },
        .init(section: "windows", key: "grid_on_ac", text: "1min") { $0.windows.gridOnAC = .seconds(60) },
        .init(section: "refresh", key: "lead", text: "5min") { $0.refresh.lead = .seconds(300) },
        .init(section: "refresh", key: "min_interval", text: "1h") { $0.refresh.minInterval = .seconds(3600) },
        .init(section: "refresh", key: "strategy", text: "every-window") { $0.refresh.strategy = .everyWindow },
        .init(section: "refresh", key: "budget", text: "4.5") { $0.refresh.budget = 4.5 },
        .init(section: "refresh", key: "windows_per_day", text: "12") { $0.refresh.windowsPerDay = 12 },
        .init(section: "transfers", key: "resource_timeout", text: "2d") { $0.transfers.resourceTimeout = .seconds(2 * 86_400) },
        .init(section: "transfers", key: "request_timeout", text: "90s") { $0.transfers.requestTimeout = .seconds(90) },
        .init(section: "transfers", key: "backoff_initial", text: "1min") { $0.transfers.backoffInitial = .seconds(60) },
        .init(section: "transfers", key: "backoff_max", text: "1h30min") { $0.transfers.backoffMax = .seconds(5400) },
    ]
}

@Suite("Every key parses and overrides")
struct KeyOverrideTests {
    @Test(arguments: KeyOverride.all)
    func keyOverridesItsKnobOnly(_ override: KeyOverride) throws {
        var expected = PolicyConfiguration.defaults
        override.apply(&expected)
        #expect(expected != .defaults, "the test value must differ from the default")

        let parsed = try ConfigurationParser.parse("[\(override.section)]\n\(override.key) = \(override.text)\n", source: nil)
        #expect(parsed == expected)
    }

    @Test func theTableCoversEveryKeyOfTheSchema() {
        let tested = Set(KeyOverride.all.map { "\($0.section).\($0.key)" })
        let schema = Set(ConfigurationSchema.allKnobs.map { "\($0.section).\($0.key)" })
        #expect(tested == schema)
        #expect(schema.count == 33)
    }

    @Test func allOverridesTogether() throws {
        var expected = PolicyConfiguration.defaults
        var text = ""
        for section in ConfigurationSchema.sections {
            text += "[\(section.name)]\n"
            for override in KeyOverride.all where override.section == section.name {
                text += "\(override.key) = \(override.text)\n"
                override.apply(&expected)
            }
        }
        #expect(try ConfigurationParser.parse(text, source: nil) == expected)
    }

    @Test func repeatedSectionHeadersMerge() throws {
        let parsed = try ConfigurationParser.parse("[cpu]\nlimit = 70%\n[slices]\nrefresh = 20s\n[cpu]\nwindow = 2min\n", source: nil)
        var expected = PolicyConfiguration.defaults
        expected.cpu.limit = 70
        expected.cpu.window = .seconds(120)
        expected.slices.refresh = .seconds(20)
        #expect(parsed == expected)
    }
}

// MARK: - Rendering

@Suite("rendered()")
struct RenderingTests {
    @Test func defaultsRoundTrip() throws {
        let text = PolicyConfiguration.defaults.rendered()
        #expect(try ConfigurationParser.parse(text, source: "rendered") == .defaults)
    }

    @Test func modifiedConfigurationRoundTrips() throws {
        var modified = PolicyConfiguration.defaults
        for override in KeyOverride.all { override.apply(&modified) }
        modified.slices.processing = .seconds(5400)  // 90min: not a whole number of hours
        modified.cpu.action = .observe
        modified.transfers.requestTimeout = .milliseconds(1500)
        let text = modified.rendered()
        #expect(try ConfigurationParser.parse(text, source: "rendered") == modified)
    }

    @Test(arguments: CPUAction.allCases)
    func everyCPUActionRoundTrips(_ action: CPUAction) throws {
        var configuration = PolicyConfiguration.defaults
        configuration.cpu.action = action
        #expect(configuration.rendered().contains("action = \(action.rawValue)\n"))
        #expect(try ConfigurationParser.parse(configuration.rendered(), source: nil) == configuration)
    }

    @Test func defaultsRenderInTheLargestExactUnit() {
        let text = PolicyConfiguration.defaults.rendered()
        for line in [
            "refresh = 30s", "processing = 10min", "expiration_warning = 5s", "earliest_begin_max = 7d",
            "pending_processing = 10", "low = 20%", "limit = 80%", "action = throttle", "backoff_max = 5h",
            "grid_on_ac = 5min",
        ] {
            #expect(text.contains("\n\(line)\n"), "missing \(line)")
        }
    }

    @Test func everySectionAndKeyAppearsOnceUnderAComment() {
        let lines = PolicyConfiguration.defaults.rendered().split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
        for section in ConfigurationSchema.sections {
            #expect(lines.filter { $0 == "[\(section.name)]" }.count == 1)
            for knob in section.knobs {
                let indices = lines.indices.filter { lines[$0].hasPrefix("\(knob.key) = ") }
                #expect(indices.count == 1, "\(knob.key)")
                guard let index = indices.first else { continue }
                let comment = lines[index - 1]
                #expect(comment.hasPrefix("# "), "\(knob.key) has no comment")
                #expect(comment.contains("SPEC §"), "\(knob.key)'s comment has no SPEC anchor")
            }
        }
    }
}

// MARK: - Comments and whitespace

@Suite("Comments and whitespace")
struct CommentAndWhitespaceTests {
    @Test func commentsAndWhitespaceAreIgnored() throws {
        // A "#" glued to a value is part of it, as in systemd: "70%#x" is not a percentage.
        let glued = #expect(throws: ConfigurationError.self) {
            try ConfigurationParser.parse("[cpu]\nlimit = 70%#x\n", source: nil)
        }
        #expect(glued?.message.contains("got \"70%#x\"") == true)

        let good = """
        \u{FEFF}# bgpolicy

          [ cpu ]   # trailing comment on a header
        \tlimit=70%    # trailing comment after whitespace
           window   =   2min   ; semicolon comment
        action = freeze\t
            ;   indented comment
        [battery];comment glued to a header
        low = 30 %
        """
        var expected = PolicyConfiguration.defaults
        expected.cpu.limit = 70
        expected.cpu.window = .seconds(120)
        expected.cpu.action = .freeze
        expected.battery.low = 30
        #expect(try ConfigurationParser.parse(good, source: nil) == expected)
    }

    @Test func windowsLineEndingsAreAccepted() throws {
        let parsed = try ConfigurationParser.parse("[cpu]\r\nlimit = 60%\r\n\r\n[idle]\r\nno_input_after = 1min\r\n", source: nil)
        #expect(parsed.cpu.limit == 60)
        #expect(parsed.idle.noInputAfter == .seconds(60))
    }

    /// Lines end at "\n" alone: a form feed (a page break), a vertical tab, NEL or LINE
    /// SEPARATOR in a comment ended the line, and the rest of the comment was read as a line
    /// of its own, invalid, with every later line number one too high.
    @Test func onlyLineFeedsEndLines() throws {
        let text = "# see page\u{0C}break\n# a\u{0B}b\u{85}c\u{2028}d\n[cpu]\nlimit = 60%\n"
        #expect(try ConfigurationParser.parse(text, source: nil).cpu.limit == 60)
        let error = #expect(throws: ConfigurationError.self) {
            try ConfigurationParser.parse("# x\u{0C}y\n[cpu]\nlimit = lots\n", source: nil)
        }
        #expect(error?.line == 3)
    }

    @Test func lineNumbersCountBlankAndCommentLines() {
        let text = "\n# one\n\n[cpu]\r\n\n; two\nlimit = lots\n"
        let error = #expect(throws: ConfigurationError.self) { try ConfigurationParser.parse(text, source: nil) }
        #expect(error?.line == 7)
    }
}

// MARK: - Errors

/// A broken file and the error it must give.
struct ErrorCase: Sendable, CustomTestStringConvertible {
    let name: String
    let text: String
    let line: Int?
    let section: String?
    let key: String?
    /// The full human message, `ConfigurationError.description` without a source.
    let description: String

    var testDescription: String { name }

    static let all: [ErrorCase] = [
        .init(name: "unknown section", text: "# x\n[cpux]\nlimit = 80%\n", line: 2, section: "cpux", key: nil,
              description: "line 2: [cpux]: unknown section (did you mean [cpu]?); valid sections are [slices], [limits], [battery], [idle], [cpu], [windows], [refresh], [transfers]"),
        .init(name: "unknown section, no suggestion", text: "[network]\n", line: 1, section: "network", key: nil,
              description: "line 1: [network]: unknown section; valid sections are [slices], [limits], [battery], [idle], [cpu], [windows], [refresh], [transfers]"),
        .init(name: "unknown key with typo", text: "[cpu]\nlimt = 80%\n", line: 2, section: "cpu", key: "limt",
              description: "line 2: [cpu] limt: unknown key (did you mean \"limit\"?); valid keys in [cpu] are limit, window, action, throttle_quota and sample_interval"),
        .init(name: "unknown key, transposed letters", text: "[slices]\nrefersh = 30s\n", line: 2, section: "slices", key: "refersh",
              description: "line 2: [slices] refersh: unknown key (did you mean \"refresh\"?); valid keys in [slices] are refresh, processing, completion, content_available, expiration_warning and concurrent_starts"),
        .init(name: "unknown key, no suggestion", text: "[idle]\nlocked = yes\n", line: 2, section: "idle", key: "locked",
              description: "line 2: [idle] locked: unknown key; valid keys in [idle] are no_input_after"),
        .init(name: "misspelt key outside any section", text: "windw = 1min\n", line: 1, section: nil, key: "windw",
              description: "line 1: windw: key outside any section; start a section first, one of [slices], [limits], [battery], [idle], [cpu], [windows], [refresh], [transfers]"),
        .init(name: "key in the wrong section", text: "[slices]\nmin_interval = 15min\n", line: 2, section: "slices", key: "min_interval",
              description: "line 2: [slices] min_interval: unknown key in [slices]; \"min_interval\" belongs in [refresh]"),
        .init(name: "duplicate key", text: "[cpu]\nlimit = 80%\nwindow = 60s\nlimit = 70%\n", line: 4, section: "cpu", key: "limit",
              description: "line 4: [cpu] limit: duplicate key, already set on line 2; give each key once per section"),
        .init(name: "duplicate key across repeated headers", text: "[cpu]\nlimit = 80%\n[idle]\n[cpu]\nlimit = 70%\n", line: 5, section: "cpu", key: "limit",
              description: "line 5: [cpu] limit: duplicate key, already set on line 2; give each key once per section"),
        .init(name: "key outside any section", text: "\nrefresh = 30s\n", line: 2, section: nil, key: "refresh",
              description: "line 2: refresh: key outside any section; put it under [slices]"),
        .init(name: "unknown key outside any section", text: "foo = 1\n", line: 1, section: nil, key: "foo",
              description: "line 1: foo: key outside any section; start a section first, one of [slices], [limits], [battery], [idle], [cpu], [windows], [refresh], [transfers]"),
        .init(name: "line without =", text: "[cpu]\nlimit 80%\n", line: 2, section: "cpu", key: nil,
              description: "line 2: [cpu]: expected \"[section]\", \"key = value\" or a comment, got \"limit 80%\""),
        .init(name: "empty key", text: "[cpu]\n = 80%\n", line: 2, section: "cpu", key: nil,
              description: "line 2: [cpu]: expected \"[section]\", \"key = value\" or a comment, got \"= 80%\""),
        .init(name: "unclosed header", text: "[cpu\n", line: 1, section: nil, key: nil,
              description: "line 1: malformed section header; expected \"[name]\", got \"[cpu\""),
        .init(name: "empty header", text: "[ ]\n", line: 1, section: nil, key: nil,
              description: "line 1: malformed section header; expected \"[name]\", got \"[ ]\""),
        .init(name: "text after header", text: "[cpu] limit = 80%\n", line: 1, section: nil, key: nil,
              description: "line 1: unexpected text after the section header, got \"[cpu] limit = 80%\"; only a comment may follow \"]\""),
        .init(name: "bad percentage", text: "[slices]\n\n\n\n\n\n\n\n\n\n[cpu]\nlimit = abc\n", line: 12, section: "cpu", key: "limit",
              description: "line 12: [cpu] limit: expected a whole percentage from 1% to 100%, like \"80%\", got \"abc\""),
        .init(name: "percentage without %", text: "[battery]\nlow = 20\n", line: 2, section: "battery", key: "low",
              description: "line 2: [battery] low: expected a whole percentage from 0% to 100%, like \"20%\", got \"20\"; add the \"%\" sign"),
        .init(name: "percentage above 100", text: "[battery]\ndiscretionary_min = 101%\n", line: 2, section: "battery", key: "discretionary_min",
              description: "line 2: [battery] discretionary_min: expected a whole percentage from 0% to 100%, like \"50%\", got \"101%\""),
        .init(name: "fractional percentage", text: "[cpu]\nthrottle_quota = 2.5%\n", line: 2, section: "cpu", key: "throttle_quota",
              description: "line 2: [cpu] throttle_quota: expected a whole percentage from 1% to 100%, like \"10%\", got \"2.5%\""),
        .init(name: "zero CPU limit", text: "[cpu]\nlimit = 0%\n", line: 2, section: "cpu", key: "limit",
              description: "line 2: [cpu] limit: expected a whole percentage from 1% to 100%, like \"80%\", got \"0%\""),
        .init(name: "bare number duration", text: "[slices]\nrefresh = 30\n", line: 2, section: "slices", key: "refresh",
              description: "line 2: [slices] refresh: expected a duration, but \"30\" has no unit; add one, like \"30s\" or \"30min\""),
        .init(name: "trailing number without unit", text: "[slices]\nprocessing = 1h30\n", line: 2, section: "slices", key: "processing",
              description: "line 2: [slices] processing: expected a duration, but \"30\" in \"1h30\" has no unit; add one, like \"30s\" or \"30min\""),
        .init(name: "unknown duration unit", text: "[limits]\ninactive_after = 2w\n", line: 2, section: "limits", key: "inactive_after",
              description: "line 2: [limits] inactive_after: expected a duration, but \"2w\" has the unknown unit \"w\"; units are ms, s, min, h and d"),
        .init(name: "misspelt duration unit", text: "[idle]\nno_input_after = 5 minuts\n", line: 2, section: "idle", key: "no_input_after",
              description: "line 2: [idle] no_input_after: expected a duration, but \"5 minuts\" has the unknown unit \"minuts\" (did you mean \"min\"?); units are ms, s, min, h and d"),
        .init(name: "garbage duration", text: "[cpu]\nwindow = soon\n", line: 2, section: "cpu", key: "window",
              description: "line 2: [cpu] window: expected a duration such as \"30s\", \"10min\", \"2h\", \"7d\" or \"1h30min\", got \"soon\""),
        .init(name: "text after a duration", text: "[cpu]\nwindow = 10min, 5min\n", line: 2, section: "cpu", key: "window",
              description: "line 2: [cpu] window: expected a duration such as \"30s\", \"10min\", \"2h\", \"7d\" or \"1h30min\", got \"10min, 5min\", where \", 5min\" is not part of one"),
        .init(name: "empty value", text: "[cpu]\nwindow =\n", line: 2, section: "cpu", key: "window",
              description: "line 2: [cpu] window: expected a duration such as \"30s\", \"10min\", \"2h\", \"7d\" or \"1h30min\", got \"\""),
        .init(name: "zero duration", text: "[refresh]\nmin_interval = 0s\n", line: 2, section: "refresh", key: "min_interval",
              description: "line 2: [refresh] min_interval: expected a duration greater than 0 and at most 365d, like \"15min\", got \"0s\""),
        .init(name: "zero grid", text: "[windows]\ngrid_on_ac = 0s\n", line: 2, section: "windows", key: "grid_on_ac",
              description: "line 2: [windows] grid_on_ac: expected a duration from 1s to 1d, like \"5min\", got \"0s\""),
        .init(name: "grid under a second", text: "[windows]\ngrid_on_ac = 500ms\n", line: 2, section: "windows", key: "grid_on_ac",
              description: "line 2: [windows] grid_on_ac: expected a duration from 1s to 1d, like \"5min\", got \"500ms\""),
        .init(name: "grid over a day", text: "[windows]\ngrid_on_battery = 2d\n", line: 2, section: "windows", key: "grid_on_battery",
              description: "line 2: [windows] grid_on_battery: expected a duration from 1s to 1d, like \"15min\", got \"2d\""),
        .init(name: "duration too long", text: "[refresh]\nlead = 400d\n", line: 2, section: "refresh", key: "lead",
              description: "line 2: [refresh] lead: expected a duration greater than 0 and at most 365d, like \"10min\", got \"400d\""),
        .init(name: "overflowing duration", text: "[refresh]\nlead = 99999999999999999999d\n", line: 2, section: "refresh", key: "lead",
              description: "line 2: [refresh] lead: expected a duration greater than 0 and at most 365d, like \"10min\", got \"99999999999999999999d\""),
        .init(name: "negative duration", text: "[refresh]\nlead = -5min\n", line: 2, section: "refresh", key: "lead",
              description: "line 2: [refresh] lead: expected a duration such as \"30s\", \"10min\", \"2h\", \"7d\" or \"1h30min\", got \"-5min\""),
        .init(name: "count not a number", text: "[limits]\npending_refresh = one\n", line: 2, section: "limits", key: "pending_refresh",
              description: "line 2: [limits] pending_refresh: expected a whole number from 1 to 100, like \"1\", got \"one\""),
        .init(name: "negative count", text: "[limits]\npending_processing = -1\n", line: 2, section: "limits", key: "pending_processing",
              description: "line 2: [limits] pending_processing: expected a whole number from 1 to 1000, like \"10\", got \"-1\""),
        .init(name: "zero pending refresh", text: "[limits]\npending_refresh = 0\n", line: 2, section: "limits", key: "pending_refresh",
              description: "line 2: [limits] pending_refresh: expected a whole number from 1 to 100, like \"1\", got \"0\""),
        .init(name: "count too large", text: "[limits]\ncontent_available_per_hour = 99999999999999999999999\n", line: 2, section: "limits", key: "content_available_per_hour",
              description: "line 2: [limits] content_available_per_hour: expected a whole number from 0 to 3600, like \"3\", got \"99999999999999999999999\""),
        .init(name: "unknown CPU action", text: "[cpu]\naction = kill\n", line: 2, section: "cpu", key: "action",
              description: "line 2: [cpu] action: expected \"throttle\", \"freeze\" or \"observe\", got \"kill\""),
        .init(name: "misspelt CPU action", text: "[cpu]\naction = throtle\n", line: 2, section: "cpu", key: "action",
              description: "line 2: [cpu] action: expected \"throttle\", \"freeze\" or \"observe\", got \"throtle\" (did you mean \"throttle\"?)"),
        .init(name: "CPU action in capitals", text: "[cpu]\naction = Freeze\n", line: 2, section: "cpu", key: "action",
              description: "line 2: [cpu] action: expected \"throttle\", \"freeze\" or \"observe\", got \"Freeze\" (did you mean \"freeze\"?)"),
        // Cross-field rules: blamed on a key the file set, naming the other value and where it came from.
        .init(name: "critical not below low", text: "[battery]\nlow = 20%\ncritical = 25%\n", line: 3, section: "battery", key: "critical",
              description: "line 3: [battery] critical: must be below low (20%, line 2), got 25%"),
        .init(name: "critical above default low", text: "[battery]\ncritical = 20%\n", line: 2, section: "battery", key: "critical",
              description: "line 2: [battery] critical: must be below low (20%, the default), got 20%"),
        .init(name: "low not above default critical", text: "[battery]\nlow = 5%\n", line: 2, section: "battery", key: "low",
              description: "line 2: [battery] low: must be above critical (10%, the default), got 5%"),
        .init(name: "warning not shorter than a set slice", text: "[slices]\nrefresh = 3s\nexpiration_warning = 5s\n", line: 3, section: "slices", key: "expiration_warning",
              description: "line 3: [slices] expiration_warning: must be shorter than every slice, including refresh (3s, line 2), got 5s"),
        .init(name: "warning not shorter than a default slice", text: "[slices]\nexpiration_warning = 1min\n", line: 2, section: "slices", key: "expiration_warning",
              description: "line 2: [slices] expiration_warning: must be shorter than every slice, including refresh (30s, the default), got 1min"),
        .init(name: "slice not longer than the default warning", text: "[slices]\n\ncompletion = 5s\n", line: 3, section: "slices", key: "completion",
              description: "line 3: [slices] completion: must be longer than expiration_warning (5s, the default), got 5s"),
        .init(name: "backoff initial above max", text: "[transfers]\nbackoff_initial = 6h\n", line: 2, section: "transfers", key: "backoff_initial",
              description: "line 2: [transfers] backoff_initial: must not be longer than backoff_max (5h, the default), got 6h"),
        .init(name: "backoff max below default initial", text: "[transfers]\nbackoff_max = 10s\n", line: 2, section: "transfers", key: "backoff_max",
              description: "line 2: [transfers] backoff_max: must not be shorter than backoff_initial (30s, the default), got 10s"),
        .init(name: "request timeout above resource timeout", text: "[transfers]\nresource_timeout = 1min\nrequest_timeout = 2min\n", line: 3, section: "transfers", key: "request_timeout",
              description: "line 3: [transfers] request_timeout: must not be longer than resource_timeout (1min, line 2), got 2min"),
    ]
}

@Suite("Configuration errors")
struct ConfigurationErrorTests {
    @Test(arguments: ErrorCase.all)
    func errorNamesLineSectionKeyAndWhatIsValid(_ errorCase: ErrorCase) {
        let error = #expect(throws: ConfigurationError.self) {
            try ConfigurationParser.parse(errorCase.text, source: nil)
        }
        #expect(error?.line == errorCase.line)
        #expect(error?.section == errorCase.section)
        #expect(error?.key == errorCase.key)
        #expect(error?.source == nil)
        #expect(error?.description == errorCase.description)
    }

    /// Values that parsed but made no sense: idle after a millisecond without input (processing
    /// ran while the user worked), a CPU window of a nanosecond with readings a second apart at
    /// best, and a slice of 5.5 s, which `RunTask` announced as 6.
    @Test(arguments: [
        ("[idle]\nno_input_after = 1ms\n", "idle", "no_input_after",
         "expected a duration from 1s to 365d, like \"5min\", got \"1ms\""),
        ("[cpu]\nwindow = 1ns\n", "cpu", "window", "expected a duration from 1s to 365d, like \"1min\", got \"1ns\""),
        ("[cpu]\nwindow = 4s\nsample_interval = 10s\n", "cpu", "window",
         "must not be shorter than sample_interval (10s, line 3), got 4s"),
        ("[slices]\nrefresh = 5500ms\n", "slices", "refresh",
         "expected a duration in whole seconds from 1s to 365d, like \"30s\", got \"5500ms\""),
        ("[slices]\nprocessing = 1.5min\n[slices]\n", "slices", "processing", nil),
        ("[slices]\ncompletion = 0.5s\n", "slices", "completion",
         "expected a duration in whole seconds from 1s to 365d, like \"30s\", got \"0.5s\""),
        ("[slices]\ncontent_available = 30s 1ms\n", "slices", "content_available",
         "expected a duration in whole seconds from 1s to 365d, like \"30s\", got \"30s 1ms\""),
    ] as [(String, String, String, String?)])
    func valuesWithoutSenseAreRefused(_ text: String, _ section: String, _ key: String, _ message: String?) throws {
        guard let message else {
            // 1.5min is 90 whole seconds.
            #expect(try ConfigurationParser.parse(text, source: nil).slices.processing == .seconds(90))
            return
        }
        let error = #expect(throws: ConfigurationError.self) { try ConfigurationParser.parse(text, source: nil) }
        #expect(error?.line == 2)
        #expect(error?.section == section)
        #expect(error?.key == key)
        #expect(error?.message == message)
    }

    @Test func descriptionStartsWithTheSourceWhenGiven() {
        let path = "/home/u/.config/bgpolicy/bgpolicy.conf"
        let text = String(repeating: "\n", count: 10) + "[cpu]\nlimit = abc\n"
        let error = #expect(throws: ConfigurationError.self) { try ConfigurationParser.parse(text, source: path) }
        #expect(error == ConfigurationError(
            source: path, line: 12, section: "cpu", key: "limit",
            message: "expected a whole percentage from 1% to 100%, like \"80%\", got \"abc\""))
        #expect(error?.description == "\(path):12: [cpu] limit: expected a whole percentage from 1% to 100%, like \"80%\", got \"abc\"")
    }

    @Test(arguments: [
        (ConfigurationError(message: "m"), "m"),
        (ConfigurationError(source: "f.conf", message: "m"), "f.conf: m"),
        (ConfigurationError(line: 3, message: "m"), "line 3: m"),
        (ConfigurationError(source: "f.conf", line: 3, section: "cpu", message: "m"), "f.conf:3: [cpu]: m"),
        (ConfigurationError(section: "cpu", key: "limit", message: "m"), "[cpu] limit: m"),
        (ConfigurationError(line: 1, key: "limit", message: "m"), "line 1: limit: m"),
    ])
    func descriptionFormat(_ error: ConfigurationError, _ expected: String) {
        #expect(error.description == expected)
    }

    @Test func validateChecksConfigurationsBuiltInCode() {
        var configuration = PolicyConfiguration.defaults
        configuration.battery.critical = 30
        #expect(throws: ConfigurationError(
            section: "battery", key: "critical", message: "must be below low (20%, the default), got 30%")) {
            try configuration.validate()
        }

        configuration = .defaults
        configuration.limits.pendingProcessing = -3
        #expect(throws: ConfigurationError(
            section: "limits", key: "pending_processing",
            message: "expected a whole number from 1 to 1000, like \"10\", got \"-3\"")) {
            try configuration.validate()
        }

        configuration = .defaults
        configuration.cpu.window = .zero
        #expect(throws: ConfigurationError.self) { try configuration.validate() }

        configuration = .defaults
        configuration.slices.expirationWarning = .seconds(40)
        configuration.slices.refresh = .seconds(45)
        configuration.slices.completion = .seconds(45)
        configuration.slices.contentAvailable = .seconds(45)
        #expect(throws: Never.self) { try configuration.validate() }
    }
}

// MARK: - Values

@Suite("Value syntax")
struct ValueSyntaxTests {
    @Test(arguments: [
        ("30s", Duration.seconds(30)),
        ("30 s", .seconds(30)),
        ("30sec", .seconds(30)),
        ("1 second", .seconds(1)),
        ("45 seconds", .seconds(45)),
        ("10min", .seconds(600)),
        ("5 min", .seconds(300)),
        ("1 minute", .seconds(60)),
        ("3 minutes", .seconds(180)),
        ("10m", .seconds(600)),
        ("1h30m", .seconds(5400)),
        ("2h", .seconds(7200)),
        ("1 hour", .seconds(3600)),
        ("3 hours", .seconds(10_800)),
        ("7d", .seconds(604_800)),
        ("1 day", .seconds(86_400)),
        ("2 days", .seconds(172_800)),
        ("500ms", .milliseconds(500)),
        ("1h30min", .seconds(5400)),
        ("1h 30min", .seconds(5400)),
        ("1d2h3min4s5ms", .seconds(93_784) + .milliseconds(5)),
        ("1.5h", .seconds(5400)),
        ("0.25s", .milliseconds(250)),
        ("  90s  ", .seconds(90)),
        ("007s", .seconds(7)),
        ("365d", .seconds(365 * 86_400)),
        ("1ns", .nanoseconds(1)),
        ("250us", .microseconds(250)),
    ])
    func durationParses(_ text: String, _ expected: Duration) throws {
        #expect(try ConfigurationSyntax.duration(text, in: ConfigurationSchema.positiveDuration, example: "30s") == expected)
    }

    @Test(arguments: ["", "30", "1h30", "s", "-1s", "1.s", ".5s", "1,5s", "30 %", "1h-30min", "2w", "30 mins please", "1.5ns", "0s", "0.0001ns", "366d"])
    func durationIsRejected(_ text: String) {
        #expect(throws: ConfigurationValueError.self) {
            try ConfigurationSyntax.duration(text, in: ConfigurationSchema.positiveDuration, example: "30s")
        }
    }

    @Test(arguments: [
        (Duration.seconds(30), "30s"),
        (.seconds(600), "10min"),
        (.seconds(604_800), "7d"),
        (.seconds(18_000), "5h"),
        (.seconds(5400), "90min"),
        (.seconds(90_000), "25h"),
        (.seconds(61), "61s"),
        (.milliseconds(500), "500ms"),
        (.milliseconds(1500), "1500ms"),
        (.microseconds(5), "5us"),
        (.nanoseconds(7), "7ns"),
        (.zero, "0s"),
    ])
    func durationRendersInTheLargestExactUnit(_ duration: Duration, _ expected: String) throws {
        #expect(ConfigurationSyntax.render(duration) == expected)
        if duration > .zero {
            #expect(try ConfigurationSyntax.duration(expected, in: ConfigurationSchema.positiveDuration, example: "30s") == duration)
        }
    }

    @Test(arguments: [("80%", 80), ("80 %", 80), (" 0% ", 0), ("100%", 100), ("007%", 7)])
    func percentageParses(_ text: String, _ expected: Int) throws {
        #expect(try ConfigurationSyntax.percentage(text, in: 0...100, example: 80).value == expected)
    }

    @Test(arguments: ["", "%", "80", "101%", "-1%", "12.5%", "80%%", "eighty%", "8 0%"])
    func percentageIsRejected(_ text: String) {
        #expect(throws: ConfigurationValueError.self) { try ConfigurationSyntax.percentage(text, in: 0...100, example: 80) }
    }

    @Test(arguments: [("2.2", 2.2), ("3", 3), (" 0.25 ", 0.25), ("96", 96), ("0.1", 0.1), ("007.50", 7.5), ("10.05", 10.05)])
    func decimalParses(_ text: String, _ expected: Double) throws {
        #expect(try ConfigurationSyntax.decimal(text, in: 0.1 ... 96, example: "2.2") == expected)
    }

    @Test(arguments: ["", ".", "2.", ".5", "2.225", "-1", "+2", "1e1", "2,2", "0.09", "96.01", "0", "nan", "inf", "2 .2", "1_000", "١"])
    func decimalIsRejected(_ text: String) {
        #expect(throws: ConfigurationValueError.self) { try ConfigurationSyntax.decimal(text, in: 0.1 ... 96, example: "2.2") }
    }

    @Test func decimalSaysWhatIsExpectedAndNamesAComma() throws {
        let error = #expect(throws: ConfigurationValueError.self) {
            try ConfigurationSyntax.decimal("2,5", in: 0.1 ... 96, example: "2.2")
        }
        #expect(error?.message == "expected a number from 0.1 to 96 with at most two decimals, like \"2.2\", got \"2,5\" (the decimal separator is \".\")")
    }

    @Test(arguments: [(2.2, "2.2"), (3, "3"), (0.25, "0.25"), (10.05, "10.05"), (96, "96"), (0.1, "0.1"), (2.999, "3")])
    func decimalRendersAsItIsReadBack(_ value: Double, _ expected: String) throws {
        #expect(ConfigurationSyntax.render(decimal: value) == expected)
        #expect(try ConfigurationSyntax.decimal(expected, in: 0 ... 100, example: "2.2") == (value * 100).rounded() / 100)
    }

    @Test func percentageValueType() {
        #expect(Percentage(percent: 0)?.value == 0)
        #expect(Percentage(percent: 100)?.fraction == 1.0)
        #expect(Percentage(percent: 101) == nil)
        #expect(Percentage(percent: -1) == nil)
        #expect(Percentage(percent: 80)?.description == "80%")
        let literal: Percentage = 80
        #expect(Percentage(percent: 80) == literal)
        #expect(Percentage(10) < Percentage(20))
    }

    @Test(arguments: CPUAction.allCases)
    func cpuActionRawValueRoundTrips(_ action: CPUAction) throws {
        #expect(CPUAction(rawValue: action.rawValue) == action)
        #expect(try ConfigurationSyntax.word(action.rawValue, as: CPUAction.self) == action)
    }

    @Test func cpuActionWordsAreTheSpecsWords() {
        #expect(CPUAction.allCases.map(\.rawValue) == ["throttle", "freeze", "observe"])
    }

    @Test(arguments: [
        ("limt", ["limit", "window"], "limit"),
        ("LIMIT", ["limit", "window"], "limit"),
        ("windwo", ["limit", "window"], "window"),
        ("ide", ["idle", "cpu"], "idle"),
    ] as [(String, [String], String?)])
    func spellingSuggestsAnObviousTypo(_ typed: String, _ candidates: [String], _ expected: String?) {
        #expect(Spelling.closest(to: typed, among: candidates) == expected)
    }

    @Test(arguments: [
        ("network", ["slices", "limits", "battery", "idle", "cpu"]),
        ("a", ["b", "c"]),  // tied: no obvious choice
        ("", ["idle"]),
    ])
    func spellingStaysQuietWithoutAnObviousTypo(_ typed: String, _ candidates: [String]) {
        #expect(Spelling.closest(to: typed, among: candidates) == nil)
    }

    @Test func changesNameEachKnobThatDiffersInFileSyntaxAndOrder() throws {
        let old = try ConfigurationParser.parse("[cpu]\nlimit = 80%\n[slices]\nrefresh = 30s\n", source: "old")
        let new = try ConfigurationParser.parse(
            "[slices]\nrefresh = 1min\n[cpu]\nlimit = 60%\naction = freeze\n", source: "new")
        #expect(new.changes(from: old) == [
            "[slices] refresh: 30s → 1min", "[cpu] limit: 80% → 60%", "[cpu] action: throttle → freeze",
        ])
        #expect(old.changes(from: old).isEmpty)
        // A key written out with its default value is no change.
        let explicitDefault = try ConfigurationParser.parse("[cpu]\nlimit = 80%\n", source: "same")
        #expect(explicitDefault.changes(from: .defaults).isEmpty)
    }
}
