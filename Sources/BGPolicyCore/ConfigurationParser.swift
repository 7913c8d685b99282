/// Reads bgpolicy's configuration file: a systemd/GLib key-file dialect.
///
/// ```
/// # comment            ; also a comment
/// [cpu]
/// limit = 80%          # trailing comments follow whitespace
/// window = 1min
/// ```
///
/// Keys not given keep their `PolicyConfiguration.defaults`. The first problem found is thrown,
/// naming the line, section and key and saying what would be valid. Pure: the caller reads the file.
public enum ConfigurationParser {
    /// Parses `text`; `source` (usually the file's path) prefixes error messages.
    public static func parse(_ text: String, source: String? = nil) throws(ConfigurationError) -> PolicyConfiguration {
        typealias ID = ConfigurationSchema.KnobID
        var configuration = PolicyConfiguration.defaults
        var origins: [ID: Int] = [:]
        var section: ConfigurationSchema.Section?

        func fail(_ line: Int, section: String? = nil, key: String? = nil, _ message: String) -> ConfigurationError {
            ConfigurationError(source: source, line: line, section: section, key: key, message: message)
        }

        // Lines end at "\n" alone (a "\r" before it is dropped), as editors and `wc -l` count
        // them: form feed, vertical tab, U+0085 and U+2028, which Character.isNewline also
        // matches, are text within a line. Split as scalars: "\r\n" is one Character.
        let lines = text.unicodeScalars.split(separator: "\n", omittingEmptySubsequences: false)
        for (offset, rawLine) in lines.enumerated() {
            let lineNumber = offset + 1
            var scalars = rawLine
            if scalars.last == "\r" { scalars.removeLast() }
            var line = Substring(scalars)
            if lineNumber == 1, line.first == "\u{FEFF}" { line = line.dropFirst() }
            let content = String(line).trimmed()
            if content.isEmpty || content.first == "#" || content.first == ";" { continue }

            if content.first == "[" {
                let name = try sectionName(in: content) { message in fail(lineNumber, message) }
                guard let found = ConfigurationSchema.section(named: name) else {
                    let valid = ConfigurationSchema.sections.map { "[\($0.name)]" }.joined(separator: ", ")
                    var message = "unknown section"
                    if let suggestion = Spelling.closest(to: name, among: ConfigurationSchema.sections.map(\.name)) {
                        message += " (did you mean [\(suggestion)]?)"
                    }
                    throw fail(lineNumber, section: name, message + "; valid sections are \(valid)")
                }
                section = found
                continue
            }

            let statement = withoutTrailingComment(content)
            guard let equals = statement.firstIndex(of: "="),
                  case let key = String(statement[..<equals]).trimmed(), !key.isEmpty
            else {
                throw fail(lineNumber, section: section?.name,
                           "expected \"[section]\", \"key = value\" or a comment, got \"\(content)\"")
            }
            let value = String(statement[statement.index(after: equals)...]).trimmed()

            guard let section else {
                let homes = ConfigurationSchema.allKnobs.filter { $0.key == key }.map { "[\($0.section)]" }
                let advice = homes.isEmpty
                    ? "start a section first, one of " + ConfigurationSchema.sections.map { "[\($0.name)]" }.joined(separator: ", ")
                    : "put it under " + Spelling.list(homes, conjunction: "or")
                throw fail(lineNumber, key: key, "key outside any section; \(advice)")
            }
            guard let knob = section.knobs.first(where: { $0.key == key }) else {
                throw fail(lineNumber, section: section.name, key: key, unknownKeyMessage(key, in: section))
            }
            if let earlier = origins[knob.id] {
                throw fail(lineNumber, section: section.name, key: key,
                           "duplicate key, already set on line \(earlier); give each key once per section")
            }
            do throws(ConfigurationValueError) {
                try knob.apply(value, to: &configuration)
            } catch {
                throw fail(lineNumber, section: section.name, key: key, error.message)
            }
            origins[knob.id] = lineNumber
        }

        try configuration.validate(origins: origins, source: source)
        return configuration
    }

    /// The name in `[name]`, allowing a comment after the bracket.
    private static func sectionName(
        in content: String, _ fail: (String) -> ConfigurationError
    ) throws(ConfigurationError) -> String {
        guard let close = content.firstIndex(of: "]") else {
            throw fail("malformed section header; expected \"[name]\", got \"\(content)\"")
        }
        let name = String(content[content.index(after: content.startIndex)..<close]).trimmed()
        guard !name.isEmpty, !name.contains("[") else {
            throw fail("malformed section header; expected \"[name]\", got \"\(content)\"")
        }
        let rest = String(content[content.index(after: close)...]).trimmed()
        guard rest.isEmpty || rest.first == "#" || rest.first == ";" else {
            throw fail("unexpected text after the section header, got \"\(content)\"; only a comment may follow \"]\"")
        }
        return name
    }

    /// `content` up to a `#` or `;` that follows whitespace; one glued to a value stays part of it.
    private static func withoutTrailingComment(_ content: String) -> String {
        var previous: Character?
        for index in content.indices {
            let c = content[index]
            if c == "#" || c == ";", previous?.isWhitespace == true {
                return String(content[..<index]).trimmed()
            }
            previous = c
        }
        return content
    }

    private static func unknownKeyMessage(_ key: String, in section: ConfigurationSchema.Section) -> String {
        let valid = section.knobs.map(\.key)
        let elsewhere = ConfigurationSchema.allKnobs.filter { $0.key == key }.map { "[\($0.section)]" }
        if !elsewhere.isEmpty {
            return "unknown key in [\(section.name)]; \"\(key)\" belongs in \(Spelling.list(elsewhere, conjunction: "or"))"
        }
        var message = "unknown key"
        if let suggestion = Spelling.closest(to: key, among: valid) {
            message += " (did you mean \"\(suggestion)\"?)"
        }
        return message + "; valid keys in [\(section.name)] are \(Spelling.list(valid, conjunction: "and"))"
    }
}
