/// A timeline as a standalone SVG image (`bgpolicy timeline --svg FILE`), for documents and
/// bug reports: the same picture as `TimelineText`, at full resolution (one cell per slot,
/// marks at their exact times). Cell opacity follows the probability on the same shared
/// scale as the text: a solid cell is the highest probability shown, which the legend states.
/// The output depends only on its inputs: the same timeline gives the same bytes.
public enum TimelineSVG {
    static let margin = 12.0
    static let cellWidth = 8.0
    static let stripHeight = 16.0
    static let appRowHeight = 30.0
    static let labelCharacters = 32
    static let heat = "#1f6feb"
    static let windowColor = "#0a7f8c"
    static let refreshColor = "#c26a00"
    static let nowColor = "#d1242f"

    public static func render(_ t: Timeline, utcOffsetSeconds offset: Int) -> String {
        let slots = max(0, t.slots)
        let slotSeconds = max(1, t.slotSeconds)
        let labels = t.apps.map { TimelineSafeText.truncated(TimelineSafeText.clean($0.appID), to: labelCharacters) }
        let labelWidth = max(80, Double(labels.map(\.count).max() ?? 0) * 7.2 + 12)
        let left = margin + labelWidth
        let stripWidth = Double(slots) * cellWidth
        let width = left + max(stripWidth, 560) + margin
        let rulerY = 44.0
        let windowsY = 54.0
        let appsY = windowsY + 26
        let chartBottom = appsY + Double(max(1, t.apps.count)) * appRowHeight
        let legendY = chartBottom + 16
        let height = legendY + 44
        let x = { (time: UnixTime) -> Double in left + (time - t.start) / Double(slotSeconds) * cellWidth }
        let inSpan = { (time: UnixTime) -> Bool in time.isFinite && time >= t.start && time < t.end }
        let drawn = t.apps.filter { !$0.inactive && Timeline.hasData($0) && t.flatChance($0) == nil }
        let scale = drawn.flatMap { t.slotProbabilities($0) }.max() ?? 0

        var out: [String] = [
            ##"<?xml version="1.0" encoding="UTF-8"?>"##,
            ##"<svg xmlns="http://www.w3.org/2000/svg" width="\##(num(width))" height="\##(num(height))" "##
                + ##"viewBox="0 0 \##(num(width)) \##(num(height))" font-family="sans-serif" font-size="12">"##,
            "<title>bgpolicy timeline from \(TimelineSafeText.clock(t.start, offset: offset)) (\(TimelineSafeText.offset(offset)))</title>",
            ##"<rect x="0" y="0" width="\##(num(width))" height="\##(num(height))" fill="#ffffff"/>"##,
            text(
                margin, 20,
                "Next \(TimelineSafeText.span(slots * slotSeconds)) from \(TimelineSafeText.clock(t.start, offset: offset)), "
                    + "times \(TimelineSafeText.offset(offset)); a cell is \(TimelineSafeText.span(slotSeconds))",
                attributes: ##"font-weight="bold""##),
        ]

        // The hour ruler: a label and a faint line at each local hour, labels every 2 hours.
        out.append(##"<g id="ruler" fill="#57606a" stroke="#d0d7de" stroke-width="1">"##)
        var local = ((t.start + Double(offset)) / 3600).rounded(.up) * 3600
        while local - Double(offset) < t.end {
            let hx = x(local - Double(offset))
            let hour = Int(((local / 3600).truncatingRemainder(dividingBy: 24) + 24).truncatingRemainder(dividingBy: 24))
            out.append(line(hx, rulerY - 8, hx, chartBottom))
            if hour % 2 == 0 { out.append(text(hx + 2, rulerY - 10, TimelineSafeText.twoDigits(hour), attributes: ##"stroke="none""##)) }
            local += 3600
        }
        out.append("</g>")

        // The agent's wake windows: a tick in their row and a faint line through the apps.
        out.append(##"<g id="windows" stroke="\##(windowColor)" stroke-width="1.5">"##)
        out.append(text(margin, windowsY + 11, "windows", attributes: ##"stroke="none" fill="#24292f""##))
        for window in t.windows where inSpan(window) {
            let wx = x(window)
            out.append(line(wx, windowsY, wx, windowsY + 14))
            out.append(line(wx, windowsY + 14, wx, chartBottom, attributes: ##"stroke-opacity="0.25""##))
        }
        out.append("</g>")

        out.append(##"<g id="apps">"##)
        if t.apps.isEmpty {
            out.append(text(left, appsY + 12, "No app has registered.", attributes: ##"fill="#57606a""##))
        }
        for (i, app) in t.apps.enumerated() {
            let y = appsY + Double(i) * appRowHeight
            out.append(text(margin, y + 12, labels[i], attributes: ##"fill="#24292f""##))
            if app.inactive {
                out.append(text(left + 6, y + 12, t.inactiveWords, attributes: ##"fill="#57606a""##))
                continue
            }
            out.append(
                ##"<rect x="\##(num(left))" y="\##(num(y))" width="\##(num(stripWidth))" height="\##(num(stripHeight))" "##
                    + ##"fill="#f6f8fa" stroke="#d0d7de" stroke-width="0.5"/>"##)
            let flat = t.flatChance(app)
            if t.strategy == .everyWindow {
                out.append(text(left + 4, y + 12, Timeline.everyWindowWords, attributes: ##"fill="#57606a""##))
            } else if !Timeline.hasData(app) {
                out.append(text(left + 4, y + 12, "no usage data yet", attributes: ##"fill="#57606a""##))
            } else if let flat {
                out.append(text(left + 4, y + 12, t.flatWords(flat), attributes: ##"fill="#57606a""##))
            }
            for (slot, p) in t.slotProbabilities(app).enumerated() where p >= TimelineText.visible && scale > 0 && flat == nil {
                let from = t.start + Double(slot * slotSeconds)
                out.append(
                    ##"<rect x="\##(num(left + Double(slot) * cellWidth))" y="\##(num(y))" width="\##(num(cellWidth))" "##
                        + ##"height="\##(num(stripHeight))" fill="\##(heat)" fill-opacity="\##(num(p / scale, places: 3))">"##
                        + "<title>\(TimelineSafeText.clock(from, offset: offset))–"
                        + "\(TimelineSafeText.clock(from + Double(slotSeconds), offset: offset)): \(TimelineSafeText.percent(p))</title></rect>")
            }
            for refresh in app.refreshes where inSpan(refresh) {
                out.append(triangle(x(refresh), y + stripHeight + 2, refreshColor))
            }
        }
        out.append("</g>")

        if let nowX = inSpan(t.now) ? x(t.now) : nil {
            out.append(##"<g id="now" stroke="\##(nowColor)" fill="\##(nowColor)" stroke-width="1.5">"##)
            out.append(line(nowX, rulerY - 4, nowX, chartBottom))
            out.append(text(nowX + 3, windowsY - 2, "now", attributes: ##"stroke="none""##))
            out.append("</g>")
        }

        // The legend: the heat scale, then the marks.
        out.append(##"<g id="legend" fill="#24292f">"##)
        var lx = margin
        if scale > 0 {
            out.append(text(lx, legendY + 12, "chance the user opens the app in a \(TimelineSafeText.span(slotSeconds)) slot:"))
            lx += 300
            for (i, opacity) in [0.25, 0.5, 0.75, 1].enumerated() {
                out.append(
                    ##"<rect x="\##(num(lx + Double(i) * cellWidth))" y="\##(num(legendY + 1))" width="\##(num(cellWidth))" "##
                        + ##"height="\##(num(stripHeight - 2))" fill="\##(heat)" fill-opacity="\##(num(opacity, places: 3))"/>"##)
            }
            out.append(text(lx + 4 * cellWidth + 4, legendY + 12, "solid = \(TimelineSafeText.percent(scale)) (the highest shown)"))
        }
        // The marks, each followed by its meaning; widths estimated at 6.6 px a character.
        let marksY = legendY + 30
        var mx = margin + 4
        let grid = "a wake window of bgpolicyd (on a \(TimelineSafeText.span(max(1, t.gridSeconds))) grid)"
        out.append(line(mx, marksY - 10, mx, marksY + 2, attributes: ##"stroke="\##(windowColor)" stroke-width="1.5""##))
        out.append(text(mx + 6, marksY, grid))
        mx += 6 + Double(grid.count) * 6.6 + 24
        out.append(triangle(mx, marksY - 9, refreshColor))
        let refresh = "a refresh planned for the app"
        out.append(text(mx + 8, marksY, refresh))
        mx += 8 + Double(refresh.count) * 6.6 + 24
        out.append(line(mx, marksY - 10, mx, marksY + 2, attributes: ##"stroke="\##(nowColor)" stroke-width="1.5""##))
        out.append(text(mx + 6, marksY, "now"))
        out.append("</g>")
        out.append("</svg>")
        return out.joined(separator: "\n") + "\n"
    }

    /// Text with `&`, `<`, `>`, `"` and `'` escaped, for element content and attributes.
    public static func escaped(_ text: String) -> String {
        var out = ""
        for ch in TimelineSafeText.clean(text) {
            switch ch {
            case "&": out += "&amp;"
            case "<": out += "&lt;"
            case ">": out += "&gt;"
            case "\"": out += "&quot;"
            case "'": out += "&apos;"
            default: out.append(ch)
            }
        }
        return out
    }

    static func text(_ x: Double, _ y: Double, _ content: String, attributes: String = "") -> String {
        ##"<text x="\##(num(x))" y="\##(num(y))""## + (attributes.isEmpty ? "" : " " + attributes) + ">" + escaped(content) + "</text>"
    }

    static func line(_ x1: Double, _ y1: Double, _ x2: Double, _ y2: Double, attributes: String = "") -> String {
        ##"<line x1="\##(num(x1))" y1="\##(num(y1))" x2="\##(num(x2))" y2="\##(num(y2))""##
            + (attributes.isEmpty ? "" : " " + attributes) + "/>"
    }

    /// A small triangle pointing up at `(x, y)`.
    static func triangle(_ x: Double, _ y: Double, _ fill: String) -> String {
        ##"<polygon points="\##(num(x)),\##(num(y)) \##(num(x - 4)),\##(num(y + 8)) \##(num(x + 4)),\##(num(y + 8))" fill="\##(fill)"/>"##
    }

    /// A number with at most `places` decimals and no trailing zeros, the same on every
    /// machine (no locale, no exponent).
    static func num(_ value: Double, places: Int = 2) -> String {
        guard value.isFinite else { return "0" }
        var scale = 1
        for _ in 0..<places { scale *= 10 }
        let scaled = Int((abs(value) * Double(scale)).rounded())
        let sign = value < 0 && scaled > 0 ? "-" : ""
        var fraction = scaled % scale
        var digits = places
        while digits > 0 && fraction % 10 == 0 {
            fraction /= 10
            digits -= 1
        }
        let whole = "\(scaled / scale)"
        guard digits > 0 else { return sign + whole }
        let f = String(fraction)
        return sign + whole + "." + String(repeating: "0", count: digits - f.count) + f
    }
}
