import Glibc

/// The terminal's width, for the timeline, and the width ArgumentParser wraps help and usage
/// text to, which must not be too narrow.
///
/// ArgumentParser takes `COLUMNS`, else the terminal's width, and sets its option labels in a
/// column of 26: narrower than that (`COLUMNS=5`, a split pane of 25 columns) a debug build
/// traps ("`columns - wrappingIndent` should be always be greater than 0") and a release build
/// prints the help without its descriptions, for `--help` and every usage error alike. So
/// bgpolicy gives it `minimumForHelp` columns at least, through `COLUMNS`, and the timeline,
/// which draws to the real width, reads the width as it was before (`columns`).
enum TerminalWidth {
    static let minimumForHelp = 40

    /// `COLUMNS` if set to a width, else the terminal's; nil for neither (a pipe, a file).
    /// Read once, before `keepHelpReadable()` may set `COLUMNS`.
    static let columns: Int? = {
        if let text = getenv("COLUMNS"), let columns = Int(String(cString: text)), columns > 0 { return columns }
        return terminal
    }()

    /// Sets `COLUMNS` to `minimumForHelp` when ArgumentParser would wrap to fewer: it reads any
    /// whole number in `COLUMNS` (0 and below too), else the terminal's width, else 80.
    static func keepHelpReadable() {
        _ = columns
        let given = getenv("COLUMNS").flatMap { Int(String(cString: $0)) }
        if (given ?? terminal ?? 80) < minimumForHelp { setenv("COLUMNS", "\(minimumForHelp)", 1) }
    }

    /// The width of the terminal standard output is, if it is one.
    private static var terminal: Int? {
        guard isatty(STDOUT_FILENO) == 1 else { return nil }
        var size = winsize()
        guard ioctl(STDOUT_FILENO, UInt(TIOCGWINSZ), &size) == 0, size.ws_col > 0 else { return nil }
        return Int(size.ws_col)
    }
}
