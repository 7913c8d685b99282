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

    /// Text that came over the bus, made safe for one line of a terminal: control characters
    /// (a newline, or an escape sequence an app put in its identifier) become spaces or "?", and
    /// so do the invisible characters that reorder or separate what follows (bidirectional
    /// overrides and isolates, line and paragraph separators), with which an app's text could
    /// make the rest of a line read as something else.
    static func cell(_ text: String) -> String {
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

    /// What a cell shows when there is nothing to show.
    static let none = "—"
}
