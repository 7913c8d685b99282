import BGPolicyCore

/// A plain-text table for the terminal: a header row in capitals, columns two spaces apart,
/// numbers aligned right, and no trailing blanks.
struct TableText {
    enum Alignment { case left, right }

    struct Column {
        let title: String
        let alignment: Alignment
        init(_ title: String, _ alignment: Alignment = .left) {
            self.title = title
            self.alignment = alignment
        }
    }

    let columns: [Column]
    private(set) var rows: [[String]] = []

    init(_ columns: [Column]) { self.columns = columns }

    /// Adds a row; its cells are made safe to print (see `cell`).
    mutating func append(_ cells: [String]) {
        precondition(cells.count == columns.count, "a row has one cell per column")
        rows.append(cells.map(Self.cell))
    }

    var text: String {
        let widths = columns.indices.map { i in
            max(columns[i].title.count, rows.map { $0[i].count }.max() ?? 0)
        }
        let lines = [columns.map(\.title)] + rows
        return lines.map { cells in
            var line = ""
            for (i, cell) in cells.enumerated() {
                let pad = String(repeating: " ", count: widths[i] - cell.count)
                let last = i == cells.count - 1
                switch columns[i].alignment {
                case .left: line += cell + (last ? "" : pad)
                case .right: line += pad + cell
                }
                if !last { line += "  " }
            }
            while line.last == " " { line.removeLast() }
            return line
        }.joined(separator: "\n")
    }

    /// Text that came over the bus, made safe for one line of a terminal (`TerminalText.oneLine`):
    /// control characters (a newline, or an escape sequence an app put in its identifier) become
    /// spaces or "?", and so do bidirectional overrides and isolates, and line and paragraph
    /// separators.
    static func cell(_ text: String) -> String { TerminalText.oneLine(text) }

    /// What a cell shows when there is nothing to show.
    static let none = "—"
}
