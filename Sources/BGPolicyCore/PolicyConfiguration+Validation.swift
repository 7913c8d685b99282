extension PolicyConfiguration {
    /// Checks every knob's range and the rules that tie knobs together: the critical battery level
    /// is below the low one, the expiration warning is shorter than every slice, the CPU window
    /// holds a reading at least, and retry and request times fit inside their limits. The parser applies the same checks, with lines.
    public func validate() throws(ConfigurationError) {
        try validate(origins: [:], source: nil)
    }

    /// `origins` maps the keys a file set to their lines: a broken rule is blamed on a key the
    /// file set, so that the message points at a line the user wrote.
    func validate(origins: [ConfigurationSchema.KnobID: Int], source: String?) throws(ConfigurationError) {
        for knob in ConfigurationSchema.allKnobs {
            if let problem = knob.rangeProblem(in: self) {
                throw ConfigurationError(
                    source: source, line: origins[knob.id], section: knob.section, key: knob.key, message: problem.message)
            }
        }

        typealias ID = ConfigurationSchema.KnobID
        func require(
            _ holds: Bool,
            _ constrained: ID, _ constrainedRule: String,
            _ other: ID, _ otherRule: String
        ) throws(ConfigurationError) {
            guard !holds else { return }
            // Blame the constrained key unless only the other one came from the file.
            let blameOther = origins[constrained] == nil && origins[other] != nil
            let (blamed, partner, rule) = blameOther ? (other, constrained, otherRule) : (constrained, other, constrainedRule)
            guard let blamedKnob = ConfigurationSchema.knob(blamed), let partnerKnob = ConfigurationSchema.knob(partner) else {
                preconditionFailure("validation names a key missing from ConfigurationSchema")
            }
            let partnerValue = partnerKnob.renderedValue(in: self)
            var partnerOrigin = ""
            if let line = origins[partner] {
                partnerOrigin = ", line \(line)"
            } else if partnerValue == partnerKnob.renderedValue(in: .defaults) {
                partnerOrigin = ", the default"
            }
            let partnerName = partner.section == blamed.section ? partner.key : "[\(partner.section)] \(partner.key)"
            throw ConfigurationError(
                source: source, line: origins[blamed], section: blamed.section, key: blamed.key,
                message: "\(rule) \(partnerName) (\(partnerValue)\(partnerOrigin)), got \(blamedKnob.renderedValue(in: self))"
            )
        }

        try require(
            battery.critical < battery.low,
            ID(section: "battery", key: "critical"), "must be below",
            ID(section: "battery", key: "low"), "must be above"
        )
        let warning = ID(section: "slices", key: "expiration_warning")
        for (key, slice) in [
            ("refresh", slices.refresh), ("processing", slices.processing),
            ("completion", slices.completion), ("content_available", slices.contentAvailable),
        ] {
            try require(
                slices.expirationWarning < slice,
                warning, "must be shorter than every slice, including",
                ID(section: "slices", key: key), "must be longer than"
            )
        }
        // CPU use is averaged from readings `sample_interval` apart: a shorter window holds none.
        try require(
            cpu.window >= cpu.sampleInterval,
            ID(section: "cpu", key: "window"), "must not be shorter than",
            ID(section: "cpu", key: "sample_interval"), "must not be longer than"
        )
        try require(
            transfers.backoffInitial <= transfers.backoffMax,
            ID(section: "transfers", key: "backoff_initial"), "must not be longer than",
            ID(section: "transfers", key: "backoff_max"), "must not be shorter than"
        )
        try require(
            transfers.requestTimeout <= transfers.resourceTimeout,
            ID(section: "transfers", key: "request_timeout"), "must not be longer than",
            ID(section: "transfers", key: "resource_timeout"), "must not be shorter than"
        )
    }
}
