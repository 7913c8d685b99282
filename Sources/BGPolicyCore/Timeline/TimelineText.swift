/// A timeline for the terminal (`bgpolicy timeline`):
///
/// ```
/// Next 24 h from 14:00, times UTC+01:00; a column is 15 min.
///                    14  15  16  17  …
///                    ▼ now
/// windows            │   │       │
/// org.gnome.Maps     ▁▁▂▃▅▇█▇▅▃▂▁
///                     ▲      ▲
/// ```
///
/// One column per slot, or per several merged slots (their most likely one) when the width
/// is short. The heat levels share one scale across the apps shown: a full cell (█) is the
/// highest probability in the picture, which the legend states in per cent, so that apps can
/// be compared with each other and a rarely used app still shows its pattern. Below 0.5 % a
/// cell is blank.
public enum TimelineText {
    /// Blank, then eight heights.
    public static let levels: [String] = [" ", "▁", "▂", "▃", "▄", "▅", "▆", "▇", "█"]
    /// Probabilities below this draw as a blank cell.
    public static let visible = 0.005
    public static let nowMark = "▼"
    public static let windowMark = "│"
    public static let refreshMark = "▲"

    /// - Parameters:
    ///   - utcOffsetSeconds: the local time zone's offset, for the hour ruler.
    ///   - width: the terminal's columns; nil draws every slot, however wide.
    ///   - color: ANSI colours for the marks and cells.
    public static func render(_ t: Timeline, utcOffsetSeconds: Int, width: Int?, color: Bool) -> String {
        Layout(t, offset: utcOffsetSeconds, width: width, color: color).text
    }

    /// The level (0 to 8) of a probability on a scale whose full cell is `scale`.
    public static func level(_ p: Double, scale: Double) -> Int {
        let p = Timeline.clamp(p)
        guard p >= visible, scale > 0 else { return 0 }
        return max(1, min(8, Int((p / scale * 8 - 1e-9).rounded(.up))))
    }

    /// How many slots one column shows so that `slots` fit in `available` columns: the
    /// smallest count whose column is a whole part or a whole multiple of an hour (so that
    /// the ruler stays on the hours), else the smallest that fits.
    public static func mergeFactor(slots: Int, slotSeconds: Int, available: Int?) -> Int {
        guard let available, slots > available else { return 1 }
        let fits = (1...max(1, slots)).filter { (slots + $0 - 1) / $0 <= max(1, available) }
        let even = fits.first { k in
            let seconds = k * slotSeconds
            return seconds > 0 && (3600 % seconds == 0 || seconds % 3600 == 0)
        }
        return even ?? fits.first ?? max(1, slots)
    }

    struct Layout {
        let t: Timeline
        let offset: Int
        let width: Int?
        let color: Bool
        let slots: Int
        let slotSeconds: Int
        let labelWidth: Int
        let merge: Int
        let columns: Int
        let columnSeconds: Int
        /// Each drawn app's cells, before levels: the most likely slot of each column.
        let cells: [[Double]]
        let scale: Double

        init(_ t: Timeline, offset: Int, width: Int?, color: Bool) {
            self.t = t
            self.offset = offset
            self.width = width.map { max(20, $0) }
            self.color = color
            slots = max(0, t.slots)
            slotSeconds = max(1, t.slotSeconds)
            let width = width.map { max(20, $0) }
            let maxLabel = width.map { max(7, min(24, ($0 - 8) / 3)) } ?? 24
            let longest = t.apps.map { TimelineSafeText.clean($0.appID).count }.max() ?? 0
            let labelWidth = max(Self.windowsLabel.count, min(maxLabel, longest))
            self.labelWidth = labelWidth
            merge = TimelineText.mergeFactor(
                slots: slots, slotSeconds: slotSeconds, available: width.map { $0 - labelWidth - 2 })
            columns = (slots + merge - 1) / merge
            columnSeconds = merge * slotSeconds
            let (merge, columns, slots) = (merge, columns, slots)
            cells = t.apps.map { app in
                let p = t.slotProbabilities(app)
                return (0..<columns).map { c in p[(c * merge)..<min(slots, (c + 1) * merge)].max() ?? 0 }
            }
            scale = zip(t.apps, cells).filter { Self.drawsStrip($0.0, in: t) }.flatMap(\.1).max() ?? 0
        }

        static let windowsLabel = "windows"

        static func drawsStrip(_ app: Timeline.App, in t: Timeline) -> Bool {
            !app.inactive && Timeline.hasData(app) && t.flatChance(app) == nil
        }

        var text: String {
            var lines = [header, ruler]
            if let now = nowRow { lines.append(now) }
            lines.append(row(Self.windowsLabel, marks(t.windows, TimelineText.windowMark, ansi: "36")))
            if t.apps.isEmpty { lines.append("No app has registered.") }
            for (app, cells) in zip(t.apps, cells) { lines += appRows(app, cells) }
            lines += legend
            return lines.joined(separator: "\n")
        }

        var header: String {
            let span = TimelineSafeText.span(slots * slotSeconds)
            return wrap(
                "Next \(span) from \(TimelineSafeText.clock(t.start, offset: offset)), times \(TimelineSafeText.offset(offset)); "
                    + "a column is \(TimelineSafeText.span(columnSeconds)).").joined(separator: "\n")
        }

        /// Local hours over the columns, every hour or every few so that labels do not touch.
        var ruler: String {
            var cells = [String](repeating: " ", count: columns)
            let step = [1, 2, 3, 4, 6, 12].first { $0 * 3600 >= 3 * columnSeconds } ?? 24
            var local = (Double(t.start) + Double(offset)) / 3600
            local = local.rounded(.up) * 3600
            var moment = local - Double(offset)
            while moment < t.end {
                let hour = Int(((local / 3600).truncatingRemainder(dividingBy: 24) + 24).truncatingRemainder(dividingBy: 24))
                if hour % step == 0, let c = column(moment), c + 2 <= columns,
                    cells[c] == " ", cells[c + 1] == " ", c == 0 || cells[c - 1] == " "
                {
                    let digits = TimelineSafeText.twoDigits(hour)
                    cells[c] = String(digits.first!)
                    cells[c + 1] = String(digits.last!)
                }
                local += 3600
                moment += 3600
            }
            return row("", cells)
        }

        var nowRow: String? {
            guard let c = column(t.now) else { return nil }
            var cells = [String](repeating: " ", count: columns)
            let mark = paint(TimelineText.nowMark, "1")
            if c + 5 <= columns {
                cells[c] = mark
                for (i, ch) in " now".enumerated() { cells[c + 1 + i] = String(ch) }
            } else if c >= 4 {
                for (i, ch) in "now ".enumerated() { cells[c - 4 + i] = String(ch) }
                cells[c] = mark
            } else {
                cells[c] = mark
            }
            return row("", cells)
        }

        func appRows(_ app: Timeline.App, _ probabilities: [Double]) -> [String] {
            let label = TimelineSafeText.truncated(TimelineSafeText.clean(app.appID), to: labelWidth)
            if app.inactive {
                return wordRows(label, t.inactiveWords)
            }
            var rows: [String]
            if t.strategy == .everyWindow {
                rows = wordRows(label, Timeline.everyWindowWords)
            } else if !Timeline.hasData(app) {
                rows = wordRows(label, "no usage data yet")
            } else if let chance = t.flatChance(app) {
                rows = wordRows(label, t.flatWords(chance))
            } else {
                let strip = probabilities.map { p in
                    let level = TimelineText.level(p, scale: scale)
                    return level == 0 ? " " : paint(TimelineText.levels[level], "34")
                }
                rows = strip.allSatisfy({ $0 == " " })
                    ? wordRows(label, "no use predicted in the next \(TimelineSafeText.span(slots * slotSeconds))")
                    : [row(label, strip)]
            }
            let refreshes = marks(app.refreshes, TimelineText.refreshMark, ansi: "33")
            if refreshes.contains(where: { $0 != " " }) { rows.append(row("", refreshes)) }
            return rows
        }

        var legend: [String] {
            var lines = wrap(
                "\(TimelineText.nowMark) now  \(TimelineText.windowMark) a planned wake window "
                    + "(\(TimelineSafeText.span(max(1, t.gridSeconds))) grid)  "
                    + "\(TimelineText.refreshMark) a planned refresh of the app")
            // Only when a strip shows a cell: the scale is that of the cells shown.
            if scale >= TimelineText.visible {
                let slot = TimelineSafeText.span(slotSeconds)
                let which = merge == 1 ? "in a \(slot) slot" : "in the most likely \(slot) slot of the column"
                lines += wrap(
                    "▁▂▃▄▅▆▇█ the chance that the user opens the app \(which); "
                        + "█ = \(TimelineSafeText.percent(scale)), the highest shown; blank: under 0.5 %.")
            }
            return lines
        }

        /// The column of a moment, or nil outside the span.
        func column(_ time: UnixTime) -> Int? {
            guard time.isFinite, time >= t.start, time < t.end else { return nil }
            return min(columns - 1, Int(((time - t.start) / Double(columnSeconds)).rounded(.down)))
        }

        func marks(_ times: [UnixTime], _ mark: String, ansi: String) -> [String] {
            var cells = [String](repeating: " ", count: columns)
            for time in times { if let c = column(time) { cells[c] = paint(mark, ansi) } }
            return cells
        }

        /// An app's state in words where its strip would be, wrapped, as the header and the
        /// legend are, to the columns beside the label; the lines after the first under the
        /// first.
        func wordRows(_ label: String, _ words: String) -> [String] {
            wrap(words, to: width.map { max(1, $0 - labelWidth - 2) }).enumerated().map { i, line in
                row(i == 0 ? label : "", [paint(line, "2")])
            }
        }

        /// The label column, two spaces, the cells; no trailing blanks.
        func row(_ label: String, _ cells: [String]) -> String {
            var cells = cells
            while cells.last == " " { cells.removeLast() }
            let line = label + String(repeating: " ", count: max(0, labelWidth - label.count) + 2) + cells.joined()
            return cells.isEmpty ? String(line.reversed().drop { $0 == " " }.reversed()) : line
        }

        func paint(_ text: String, _ code: String) -> String {
            color ? "\u{1B}[\(code)m" + text + "\u{1B}[0m" : text
        }

        /// Words wrapped to the width, when there is one.
        func wrap(_ text: String) -> [String] { wrap(text, to: width) }

        /// Words wrapped to `width` columns, when there is a width.
        func wrap(_ text: String, to width: Int?) -> [String] {
            guard let width else { return [text] }
            var lines: [String] = []
            var line = ""
            // A number stays with its unit: "15 min", "58 %".
            var words: [String] = []
            for word in text.split(separator: " ", omittingEmptySubsequences: false) {
                if let last = words.last, !last.isEmpty, last.allSatisfy({ $0.isNumber || $0 == "." }) {
                    words[words.count - 1] += " " + word
                } else {
                    words.append(String(word))
                }
            }
            for word in words {
                let candidate = line.isEmpty ? String(word) : line + " " + word
                if candidate.count > width, !line.isEmpty {
                    lines.append(line)
                    line = String(word)
                } else {
                    line = candidate
                }
            }
            lines.append(line)
            return lines.map { String($0.reversed().drop { $0 == " " }.reversed()) }
        }
    }
}
