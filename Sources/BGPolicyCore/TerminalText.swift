/// Text made safe for one line of a terminal: what `bgpolicy` prints of what came over the bus
/// (an app's identifier, the agent's words), and what `bgpolicy` and `bgpolicyd` print back of
/// the user's own input (a first word that is no command, a configuration value): control
/// characters (a newline, or an escape sequence) become spaces or "?", and so do the invisible
/// characters that reorder or separate what follows (bidirectional overrides and isolates, line
/// and paragraph separators), with which the text could make the rest of a line read as
/// something else.
public enum TerminalText {
    public static func oneLine(_ text: String) -> String {
        var out = ""
        for scalar in text.unicodeScalars {
            switch scalar.value {
            case 0x09, 0x0A, 0x0D, 0x2028, 0x2029: out.unicodeScalars.append(" ")
            case 0x00..<0x20, 0x7F..<0xA0: out.unicodeScalars.append("?")
            case 0x061C, 0x200E, 0x200F, 0x202A...0x202E, 0x2066...0x2069: out.unicodeScalars.append("?")
            default: out.unicodeScalars.append(scalar)
            }
        }
        return out
    }
}
