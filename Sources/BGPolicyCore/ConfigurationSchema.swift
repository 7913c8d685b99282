/// The configuration file's sections and keys, each bound to its knob in `PolicyConfiguration`.
///
/// One table drives parsing, rendering and the messages, so that a knob added here is at once
/// readable, writable and documented; tests walk the same table.
enum ConfigurationSchema {
    struct Section: Sendable {
        let name: String
        let summary: String
        let knobs: [Knob]
    }

    struct Knob: Sendable {
        enum Kind: Sendable {
            case duration(any WritableKeyPath<PolicyConfiguration, Duration> & Sendable, ClosedRange<Duration>)
            /// A duration of whole seconds: a slice's length, which `RunTask` passes in whole
            /// seconds (5.5 s was announced as 6).
            case wholeSeconds(any WritableKeyPath<PolicyConfiguration, Duration> & Sendable, ClosedRange<Duration>)
            case percentage(any WritableKeyPath<PolicyConfiguration, Percentage> & Sendable, ClosedRange<Int>)
            case count(any WritableKeyPath<PolicyConfiguration, Int> & Sendable, ClosedRange<Int>)
            /// A number with at most two decimals (`2.2`), within the range.
            case decimal(any WritableKeyPath<PolicyConfiguration, Double> & Sendable, ClosedRange<Double>)
            case cpuAction(any WritableKeyPath<PolicyConfiguration, CPUAction> & Sendable)
            case refreshStrategy(any WritableKeyPath<PolicyConfiguration, RefreshStrategy> & Sendable)
        }

        let section: String
        let key: String
        /// One line for the rendered file: what the knob means and its SPEC anchor.
        let summary: String
        let kind: Kind

        var id: KnobID { KnobID(section: section, key: key) }

        /// The value in `configuration`, in file syntax.
        func renderedValue(in configuration: PolicyConfiguration) -> String {
            switch kind {
            case let .duration(path, _), let .wholeSeconds(path, _): ConfigurationSyntax.render(configuration[keyPath: path])
            case let .percentage(path, _): ConfigurationSyntax.render(configuration[keyPath: path])
            case let .count(path, _): String(configuration[keyPath: path])
            case let .decimal(path, _): ConfigurationSyntax.render(decimal: configuration[keyPath: path])
            case let .cpuAction(path): configuration[keyPath: path].rawValue
            case let .refreshStrategy(path): configuration[keyPath: path].rawValue
            }
        }

        /// Parses `text` and stores it in `configuration`.
        func apply(_ text: String, to configuration: inout PolicyConfiguration) throws(ConfigurationValueError) {
            let defaults = PolicyConfiguration.defaults
            switch kind {
            case let .duration(path, range):
                configuration[keyPath: path] = try ConfigurationSyntax.duration(
                    text, in: range, example: ConfigurationSyntax.render(defaults[keyPath: path]))
            case let .wholeSeconds(path, range):
                configuration[keyPath: path] = try ConfigurationSyntax.duration(
                    text, in: range, example: ConfigurationSyntax.render(defaults[keyPath: path]), wholeSeconds: true)
            case let .percentage(path, range):
                configuration[keyPath: path] = try ConfigurationSyntax.percentage(
                    text, in: range, example: defaults[keyPath: path])
            case let .count(path, range):
                configuration[keyPath: path] = try ConfigurationSyntax.count(
                    text, in: range, example: defaults[keyPath: path])
            case let .decimal(path, range):
                configuration[keyPath: path] = try ConfigurationSyntax.decimal(
                    text, in: range, example: ConfigurationSyntax.render(decimal: defaults[keyPath: path]))
            case let .cpuAction(path):
                configuration[keyPath: path] = try ConfigurationSyntax.word(text, as: CPUAction.self)
            case let .refreshStrategy(path):
                configuration[keyPath: path] = try ConfigurationSyntax.word(text, as: RefreshStrategy.self)
            }
        }

        /// Why the knob's value in `configuration` is out of its own range, or `nil` if it is fine.
        /// For configurations built in code; the parser checks ranges as it reads.
        func rangeProblem(in configuration: PolicyConfiguration) -> ConfigurationValueError? {
            do throws(ConfigurationValueError) {
                var scratch = configuration
                try apply(renderedValue(in: configuration), to: &scratch)
                // Rendering drops sub-nanosecond precision; anything else that does not survive
                // the round trip is out of range and was reported by `apply`.
                return nil
            } catch {
                return error
            }
        }
    }

    /// A key's identity: section and key name.
    struct KnobID: Hashable, Sendable {
        let section: String
        let key: String
    }

    /// Durations must be positive; a year is far beyond any sensible setting and keeps arithmetic
    /// on them far from overflow.
    static let positiveDuration: ClosedRange<Duration> = .nanoseconds(1) ... .seconds(365 * 86_400)

    /// The window grid: at least a second (a finer grid would wake the machine several times a
    /// second while work waits), at most a day (work would wait a day for its window).
    static let gridDuration: ClosedRange<Duration> = .seconds(1) ... .seconds(86_400)

    /// A slice's length: whole seconds (see `Knob.Kind.wholeSeconds`), at least one.
    static let sliceDuration: ClosedRange<Duration> = .seconds(1) ... .seconds(365 * 86_400)

    /// At least a second: `[idle] no_input_after` (idle after a millisecond without input is
    /// never idle to the user: processing would run while they work) and `[cpu] window` (CPU
    /// use is read every `sample_interval`, a second at the least).
    static let secondOrMore: ClosedRange<Duration> = .seconds(1) ... .seconds(365 * 86_400)

    static let sections: [Section] = [
        Section(name: "slices", summary: "How long each kind of grant lasts (SPEC §1 \"Slice\"), and how many apps start for them at once.", knobs: [
            Knob(section: "slices", key: "refresh",
                 summary: "Slice granted for a refresh task (SPEC §2 refresh slice; iOS BGAppRefreshTask: 30 s).",
                 kind: .wholeSeconds(\.slices.refresh, sliceDuration)),
            Knob(section: "slices", key: "processing",
                 summary: "Slice granted for a processing task, only while idle (SPEC §2 processing slice; Android 10-min job cap).",
                 kind: .wholeSeconds(\.slices.processing, sliceDuration)),
            Knob(section: "slices", key: "completion",
                 summary: "Time to finish user-started work after BeginBackgroundTask (SPEC §2 background-task completion).",
                 kind: .wholeSeconds(\.slices.completion, sliceDuration)),
            Knob(section: "slices", key: "content_available",
                 summary: "Slice granted for a content-available wake (SPEC §2 content-available wake).",
                 kind: .wholeSeconds(\.slices.contentAvailable, sliceDuration)),
            Knob(section: "slices", key: "expiration_warning",
                 summary: "ExpireTask is sent this long before a slice ends; shorter than every slice (SPEC §2 refresh slice).",
                 kind: .duration(\.slices.expirationWarning, positiveDuration)),
            Knob(section: "slices", key: "concurrent_starts",
                 summary: "Apps started by D-Bus activation at once for their slices; the others wait their turn, apps already running do not (not in SPEC §2).",
                 kind: .count(\.slices.concurrentStarts, 1...64)),
        ]),
        Section(name: "limits", summary: "How much an app may ask for.", knobs: [
            Knob(section: "limits", key: "pending_refresh",
                 summary: "Pending refresh requests per app (SPEC §2 pending requests per app; BGTaskScheduler limit).",
                 kind: .count(\.limits.pendingRefresh, 1...100)),
            Knob(section: "limits", key: "pending_processing",
                 summary: "Pending processing requests per app (SPEC §2 pending requests per app; BGTaskScheduler limit).",
                 kind: .count(\.limits.pendingProcessing, 1...1000)),
            Knob(section: "limits", key: "earliest_begin_max",
                 summary: "Furthest ahead a request's earliest_begin may be, else InvalidArgument (SPEC §2 earliest_begin).",
                 kind: .duration(\.limits.earliestBeginMax, positiveDuration)),
            Knob(section: "limits", key: "inactive_after",
                 summary: "An app not used for this long gets no background launches until used again (SPEC §2 app not used for).",
                 kind: .duration(\.limits.inactiveAfter, positiveDuration)),
            Knob(section: "limits", key: "content_available_per_hour",
                 summary: "Content-available wakes per app per hour on battery, 0 for none; unlimited on AC (SPEC §2 content-available wake).",
                 kind: .count(\.limits.contentAvailablePerHour, 0...3600)),
            Knob(section: "limits", key: "apps",
                 summary: "Registered apps the agent keeps at most; Register of a new app id beyond it is LimitsExceeded until one is forgotten (not in SPEC §2).",
                 kind: .count(\.limits.apps, 1...1_000_000)),
        ]),
        Section(name: "battery", summary: "Battery levels that gate work while discharging.", knobs: [
            Knob(section: "battery", key: "low",
                 summary: "Below this and discharging, only user-started work runs (SPEC §2 low battery).",
                 kind: .percentage(\.battery.low, 0...100)),
            Knob(section: "battery", key: "critical",
                 summary: "Below this, nothing new starts; must be below low (SPEC §2 low battery).",
                 kind: .percentage(\.battery.critical, 0...100)),
            Knob(section: "battery", key: "discretionary_min",
                 summary: "Battery needed for discretionary transfers when not on AC (SPEC §2 discretionary transfer).",
                 kind: .percentage(\.battery.discretionaryMin, 0...100)),
            Knob(section: "battery", key: "udev_read_interval",
                 summary: "Without UPower, on battery: the battery's charge is read from the kernel this often; never on AC or while UPower runs (not in SPEC §2).",
                 kind: .duration(\.battery.udevReadInterval, .seconds(1) ... .seconds(3600))),
        ]),
        Section(name: "idle", summary: "When the machine counts as idle, for processing slices.", knobs: [
            Knob(section: "idle", key: "no_input_after",
                 summary: "No input for this long counts as idle (SPEC §2 processing slice).",
                 kind: .duration(\.idle.noInputAfter, secondOrMore)),
        ]),
        Section(name: "cpu", summary: "The CPU monitor.", knobs: [
            Knob(section: "cpu", key: "limit",
                 summary: "CPU use, as a share of one core, above which a slice is warned, then enforced (SPEC §2 CPU monitor).",
                 kind: .percentage(\.cpu.limit, 1...100)),
            Knob(section: "cpu", key: "window",
                 summary: "CPU use is averaged over this window, or over the slice if shorter (SPEC §2 CPU monitor).",
                 kind: .duration(\.cpu.window, secondOrMore)),
            Knob(section: "cpu", key: "action",
                 summary: "Enforcement after the warning: throttle, freeze or observe (SPEC §2 CPU monitor).",
                 kind: .cpuAction(\.cpu.action)),
            Knob(section: "cpu", key: "throttle_quota",
                 summary: "CPU quota, as a share of one core, that the throttle action applies (SPEC §2 CPU monitor).",
                 kind: .percentage(\.cpu.throttleQuota, 1...100)),
            Knob(section: "cpu", key: "sample_interval",
                 summary: "How often CPU use is read during a slice; never outside slices (SPEC §2 CPU monitor).",
                 kind: .duration(\.cpu.sampleInterval, .seconds(1) ... .seconds(60))),
        ]),
        Section(name: "windows", summary: "The grid planned wake windows fall on.", knobs: [
            Knob(section: "windows", key: "grid_on_battery",
                 summary: "Planned wake windows fall on this grid on battery (SPEC §2 window grid).",
                 kind: .duration(\.windows.gridOnBattery, gridDuration)),
            Knob(section: "windows", key: "grid_on_ac",
                 summary: "Planned wake windows fall on this grid on AC (SPEC §2 window grid).",
                 kind: .duration(\.windows.gridOnAC, gridDuration)),
        ]),
        Section(name: "refresh", summary: "Refreshing just before predicted use.", knobs: [
            Knob(section: "refresh", key: "lead",
                 summary: "A refresh runs this long before the predicted open (SPEC §2 refresh before predicted use).",
                 kind: .duration(\.refresh.lead, positiveDuration)),
            Knob(section: "refresh", key: "min_interval",
                 summary: "At most one refresh per app per this interval (SPEC §2 refresh before predicted use).",
                 kind: .duration(\.refresh.minInterval, positiveDuration)),
            Knob(section: "refresh", key: "strategy",
                 summary: "predicted: before predicted opens, within a budget (SPEC §2 refresh before predicted use); every-window: in every window, at most once per app per min_interval.",
                 kind: .refreshStrategy(\.refresh.strategy)),
            Knob(section: "refresh", key: "budget",
                 summary: "predicted: refreshes a day for each app, pooled; 2.4 is a tenth of an hourly timer per app, and more buys fresher apps for more battery (not in SPEC §2).",
                 kind: .decimal(\.refresh.budget, 0.1 ... 96)),
            Knob(section: "refresh", key: "windows_per_day",
                 summary: "predicted: wake-ups with refreshes a day that the planner aims for, at most 48 in any 24 hours (not in SPEC §2).",
                 kind: .count(\.refresh.windowsPerDay, 1 ... RefreshPlanner.wakesPerDayBound)),
        ]),
        Section(name: "transfers", summary: "Background transfers.", knobs: [
            Knob(section: "transfers", key: "resource_timeout",
                 summary: "A transfer not finished after this long fails (SPEC §2 transfer resource timeout).",
                 kind: .duration(\.transfers.resourceTimeout, positiveDuration)),
            Knob(section: "transfers", key: "request_timeout",
                 summary: "A request that receives no data for this long is retried (SPEC §2 transfer resource timeout).",
                 kind: .duration(\.transfers.requestTimeout, positiveDuration)),
            Knob(section: "transfers", key: "backoff_initial",
                 summary: "First retry delay, doubled on each further retry (SPEC §2 transfer resource timeout).",
                 kind: .duration(\.transfers.backoffInitial, positiveDuration)),
            Knob(section: "transfers", key: "backoff_max",
                 summary: "Retry delays never grow past this (SPEC §2 transfer resource timeout).",
                 kind: .duration(\.transfers.backoffMax, positiveDuration)),
        ]),
    ]

    static func section(named name: String) -> Section? {
        sections.first { $0.name == name }
    }

    static func knob(_ id: KnobID) -> Knob? {
        section(named: id.section)?.knobs.first { $0.key == id.key }
    }

    static var allKnobs: [Knob] { sections.flatMap(\.knobs) }
}
