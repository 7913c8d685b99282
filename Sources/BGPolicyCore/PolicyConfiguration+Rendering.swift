extension PolicyConfiguration {
    /// The configuration as a file that `ConfigurationParser.parse` reads back to an equal value:
    /// every section and key, each key under a one-line comment with its meaning and SPEC anchor.
    /// Durations use the largest exact unit (`10min`, `7d`, `30s`).
    public func rendered() -> String {
        var lines = [
            "# bgpolicy configuration: the effective policy (SPEC §2 \"Published policy table\").",
            "# Durations take a unit: ms, s, min, h, d, or a sum such as \"1h30min\". Percentages: \"80%\".",
        ]
        for section in ConfigurationSchema.sections {
            lines.append("")
            lines.append("[\(section.name)]")
            lines.append("# \(section.summary)")
            for knob in section.knobs {
                lines.append("")
                lines.append("# \(knob.summary)")
                lines.append("\(knob.key) = \(knob.renderedValue(in: self))")
            }
        }
        return lines.joined(separator: "\n") + "\n"
    }
}

extension PolicyConfiguration {
    /// The knobs whose value differs from `old`, in file order, each as `[section] key: old → new`
    /// in file syntax: what a reload logs.
    public func changes(from old: PolicyConfiguration) -> [String] {
        ConfigurationSchema.sections.flatMap(\.knobs).compactMap { knob in
            let before = knob.renderedValue(in: old), after = knob.renderedValue(in: self)
            return before == after ? nil : "[\(knob.section)] \(knob.key): \(before) → \(after)"
        }
    }
}
