import BGPolicyCore
import Testing

/// Small timelines whose pictures are worked out by hand (Docs/CLI.md, "bgpolicy timeline").
enum TimelineFixture {
    /// 2026-11-22 13:00:00 UTC.
    static let start: UnixTime = 1_795_352_400

    /// Two hours, two apps. Mail's highest chance (80 %) is the full cell, so 0.1 is ▁,
    /// 0.4 is ▄ and 0.05 still ▁; Feeds' 0.3 is ▃ and its 0.003 is under 0.5 %: blank.
    /// Windows at 13:15 and 14:30 (the one after the span is left out), Mail's refreshes
    /// at 13:45 and 14:31.
    static let small = Timeline(
        now: start + 120, start: start, slotSeconds: 900, slots: 8, gridSeconds: 300,
        windows: [start + 900, start + 5400, start + 99_999],
        apps: [
            .init(
                appID: "org.example.Mail", probabilities: [0, 0.1, 0.2, 0.4, 0.8, 0.4, 0.05, 0],
                refreshes: [start + 2700, start + 5460], pending: ["fetch"]),
            .init(appID: "com.example.Feeds", probabilities: [0.3, 0.3, 0, 0, 0, 0, 0, 0.003]),
        ])

    static let smallLegend = """
        ▼ now  │ a planned wake window (5 min grid)  ▲ a planned refresh of the app
        ▁▂▃▄▅▆▇█ the chance that the user opens the app in a 15 min slot; █ = 80 %, the highest shown; blank: under 0.5 %.
        """

    static func day(_ apps: [Timeline.App], windows: [UnixTime] = []) -> Timeline {
        Timeline(now: start + 60, start: start, windows: windows, apps: apps, inactiveAfterSeconds: 7 * 86_400)
    }

    static func probabilities(_ values: [Int: Double], slots: Int = 96) -> [Double] {
        (0..<slots).map { values[$0] ?? 0 }
    }
}

@Suite("Timeline rendering")
struct TimelineRenderTests {
    static let smallPictures: [(offset: Int, text: String)] = [
        (
            0,
            """
            Next 2 h from 13:00, times UTC; a column is 15 min.
                               13  14
                               ▼ now
            windows             │    │
            org.example.Mail    ▁▂▄█▄▁
                                  ▲  ▲
            com.example.Feeds  ▃▃

            """ + TimelineFixture.smallLegend
        ),
        (
            3600,
            """
            Next 2 h from 14:00, times UTC+01:00; a column is 15 min.
                               14  15
                               ▼ now
            windows             │    │
            org.example.Mail    ▁▂▄█▄▁
                                  ▲  ▲
            com.example.Feeds  ▃▃

            """ + TimelineFixture.smallLegend
        ),
        (
            // Half an hour off: the hours fall in the middle of the span.
            -1800,
            """
            Next 2 h from 12:30, times UTC-00:30; a column is 15 min.
                                 13  14
                               ▼ now
            windows             │    │
            org.example.Mail    ▁▂▄█▄▁
                                  ▲  ▲
            com.example.Feeds  ▃▃

            """ + TimelineFixture.smallLegend
        ),
    ]

    @Test(arguments: smallPictures)
    func smallTimelineText(_ example: (offset: Int, text: String)) {
        let text = TimelineText.render(TimelineFixture.small, utcOffsetSeconds: example.offset, width: nil, color: false)
        #expect(text == example.text)
    }

    @Test func noLineEndsInABlank() {
        let text = TimelineText.render(TimelineFixture.small, utcOffsetSeconds: 0, width: nil, color: false)
        for line in text.split(separator: "\n") { #expect(line.last != " ") }
    }

    @Test func colorOnlyWhenAsked() {
        let plain = TimelineText.render(TimelineFixture.small, utcOffsetSeconds: 0, width: nil, color: false)
        let colored = TimelineText.render(TimelineFixture.small, utcOffsetSeconds: 0, width: nil, color: true)
        #expect(!plain.contains("\u{1B}"))
        #expect(colored.contains("\u{1B}[36m│\u{1B}[0m"))
        #expect(colored.replacing(#/\x1B\[[0-9;]*m/#, with: "") == plain)
    }

    static let merges: [(slots: Int, available: Int?, merge: Int)] = [
        (96, nil, 1), (96, 200, 1), (96, 96, 1), (96, 95, 2), (96, 48, 2),
        // 3 slots would fit in 47 columns, but 45 min does not divide an hour.
        (96, 47, 4), (96, 31, 4), (96, 24, 4), (96, 23, 8), (96, 10, 12), (96, 1, 96), (8, 3, 4),
    ]

    @Test(arguments: merges)
    func mergeFactor(_ example: (slots: Int, available: Int?, merge: Int)) {
        #expect(TimelineText.mergeFactor(slots: example.slots, slotSeconds: 900, available: example.available) == example.merge)
    }

    /// 40 columns leave 31 for the strip (7 for the label, 2 between): 4 slots a column.
    /// A column shows the most likely of its slots, so slot 5 fills column 1 and slot 40
    /// (a quarter of it) column 10.
    @Test func narrowWidthMergesSlots() {
        let app = Timeline.App(appID: "a", probabilities: TimelineFixture.probabilities([5: 0.5, 6: 0.25, 40: 0.125]))
        let timeline = TimelineFixture.day([app], windows: [TimelineFixture.start + 3 * 3600 + 60])
        let lines = TimelineText.render(timeline, utcOffsetSeconds: 0, width: 40, color: false).split(separator: "\n")
        #expect(lines[0] == "Next 24 h from 13:00, times UTC; a")
        #expect(lines[1] == "column is 1 h.")
        // Labels every 3 hours, so that they do not touch.
        #expect(lines[2] == "           15 18 21 00 03 06 09")
        #expect(lines[3] == "         ▼ now")
        #expect(lines[4] == "windows     │")
        #expect(lines[5] == "a         █        ▂")
        for line in lines { #expect(line.count <= 40) }
    }

    @Test func fullWidthWithoutALimit() {
        let app = Timeline.App(appID: "a", probabilities: TimelineFixture.probabilities([95: 1]))
        let lines = TimelineText.render(TimelineFixture.day([app]), utcOffsetSeconds: 0, width: nil, color: false)
            .split(separator: "\n")
        #expect(lines.contains { $0 == "a" + String(repeating: " ", count: 8 + 95) + "█" })
    }

    @Test func inactiveAndEmptyApps() {
        let timeline = TimelineFixture.day([
            .init(appID: "org.example.Backup", probabilities: TimelineFixture.probabilities([3: 0.9]), pending: ["nightly"], inactive: true),
            .init(appID: "org.example.New", probabilities: []),
            .init(appID: "org.example.Quiet", probabilities: TimelineFixture.probabilities([:])),
        ])
        let text = TimelineText.render(timeline, utcOffsetSeconds: 0, width: nil, color: false)
        let lines = text.split(separator: "\n")
        #expect(lines.contains("org.example.Backup  inactive: unused for 7 days, nothing planned"))
        #expect(lines.contains("org.example.New     no usage data yet"))
        // As configured: `[limits] inactive_after = 36h`; and from an agent that did not say.
        var configured = timeline
        configured.inactiveAfterSeconds = 36 * 3600
        #expect(TimelineText.render(configured, utcOffsetSeconds: 0, width: nil, color: false).split(separator: "\n")
            .contains("org.example.Backup  inactive: unused for 1 day 12 h, nothing planned"))
        configured.inactiveAfterSeconds = nil
        #expect(TimelineText.render(configured, utcOffsetSeconds: 0, width: nil, color: false).split(separator: "\n")
            .contains("org.example.Backup  inactive: unused for [limits] inactive_after, nothing planned"))
        #expect(lines.contains("org.example.Quiet   no use predicted in the next 24 h"))
        // The inactive app's chances are not drawn, and nothing else has any: no heat legend.
        #expect(!text.contains("█"))
    }

    /// An app whose use the agent has not seen has its prior (about 1 %) in every slot. Drawn
    /// on the shared scale, a fresh agent's apps, all at their prior, filled every cell: a
    /// strip that read "certain all day". Such an app says what it is instead, and its
    /// chance does not set the scale of the apps that have a pattern.
    @Test func anAppWithTheSameChanceInEverySlotSaysItHasNoPatternYet() {
        let prior = 1.0 / 96
        let timeline = TimelineFixture.day([
            .init(appID: "org.example.New", probabilities: Array(repeating: prior, count: 96), refreshes: [TimelineFixture.start + 1800]),
            .init(appID: "org.example.Mail", probabilities: TimelineFixture.probabilities([4: 0.4, 5: 0.2])),
        ])
        let text = TimelineText.render(timeline, utcOffsetSeconds: 0, width: nil, color: false)
        let lines = text.split(separator: "\n").map(String.init)
        #expect(lines.contains("org.example.New   no use seen yet: 1 % in every 15 min slot until it is learned"))
        // Its planned refresh is still marked, under the words.
        let new = lines.firstIndex { $0.hasPrefix("org.example.New") }!
        #expect(lines[new + 1] == String(repeating: " ", count: 18 + 2) + "▲")
        // Mail's 40 % is the full cell, not the prior's 1 %.
        #expect(lines.contains("org.example.Mail      █▄"))
        #expect(text.contains("█ = 40 %"))
        let svg = TimelineSVG.render(timeline, utcOffsetSeconds: 0)
        #expect(svg.contains("no use seen yet: 1 % in every 15 min slot"))
        #expect(svg.contains("solid = 40 %"))
        #expect(!svg.contains(": 1 %</title>"))

        // Alone, on a fresh agent: words, and no heat legend, since no strip shows a cell.
        let fresh = TimelineFixture.day([.init(appID: "org.example.New", probabilities: Array(repeating: prior, count: 96))])
        let freshText = TimelineText.render(fresh, utcOffsetSeconds: 0, width: nil, color: false)
        #expect(!freshText.contains("█"))
        #expect(freshText.contains("no use seen yet"))

        // One slot different is a pattern, drawn as one.
        var almost = Array(repeating: prior, count: 96)
        almost[10] = 0.02
        #expect(timeline.flatChance(.init(appID: "a", probabilities: almost)) == nil)
        // All under 0.5 %, or none sent, is not this case.
        #expect(timeline.flatChance(.init(appID: "a", probabilities: Array(repeating: 0.001, count: 96))) == nil)
        #expect(timeline.flatChance(.init(appID: "a", probabilities: [])) == nil)
    }

    /// With `every-window` the agent predicts nothing: every strip says so, rather than "no use
    /// predicted", and the windows row still shows the next window.
    @Test func everyWindowPredictsNothing() {
        var timeline = TimelineFixture.day([
            .init(appID: "org.example.Backup", probabilities: [], pending: ["nightly"], inactive: true),
            .init(appID: "org.example.Mail", probabilities: [], pending: ["fetch"]),
        ], windows: [TimelineFixture.start + 900])
        timeline.strategy = .everyWindow
        let text = TimelineText.render(timeline, utcOffsetSeconds: 0, width: nil, color: false)
        let lines = text.split(separator: "\n")
        #expect(lines.contains("org.example.Backup  inactive: unused for 7 days, nothing planned"))
        #expect(lines.contains("org.example.Mail    " + Timeline.everyWindowWords))
        #expect(!text.contains("no usage data yet") && !text.contains("no use predicted"))
        #expect(lines.contains { $0.hasPrefix("windows  ") && $0.contains("│") })
        let svg = TimelineSVG.render(timeline, utcOffsetSeconds: 0)
        #expect(svg.contains(Timeline.everyWindowWords))
        #expect(!svg.contains("no usage data yet"))
    }

    /// At `COLUMNS=20` the header and the legend were wrapped, but an app's state in words ran
    /// on in one line of 70 columns. 20 columns leave 11 beside the 7-column label: the words
    /// wrap there, the lines after the first under the first, a planned refresh still under them.
    @Test func wordsInPlaceOfAStripWrapToTheWidth() {
        let prior = 1.0 / 96
        let timeline = TimelineFixture.day([
            .init(appID: "a", probabilities: Array(repeating: prior, count: 96), refreshes: [TimelineFixture.start + 1800]),
            .init(appID: "b", probabilities: [], inactive: true),
            .init(appID: "c", probabilities: []),
            .init(appID: "d", probabilities: TimelineFixture.probabilities([:])),
        ])
        let lines = TimelineText.render(timeline, utcOffsetSeconds: 0, width: 20, color: false)
            .split(separator: "\n").map(String.init)
        for line in lines { #expect(line.count <= 20, "\(line)") }
        let pad = String(repeating: " ", count: 9)
        let a = lines.firstIndex(of: "a        no use seen")!
        #expect(Array(lines[a...].prefix(7)) == [
            "a        no use seen", pad + "yet: 1 % in", pad + "every", pad + "15 min slot", pad + "until it is",
            pad + "learned", pad + "▲",
        ])
        #expect(lines.contains("b        inactive:"))
        #expect(lines.contains(pad + "unused for"))
        #expect(lines.contains("c        no usage"))
        #expect(lines.contains("d        no use"))

        // Each state's words are all there, in order, once the rows are joined again.
        func words(after label: String, in lines: [String]) -> String {
            let first = lines.firstIndex { $0.hasPrefix(label + " ") }!
            let rows = [lines[first]] + lines[(first + 1)...].prefix { $0.hasPrefix(pad) && !$0.hasSuffix("▲") }
            return rows.map { $0.dropFirst(9) }.joined(separator: " ")
        }
        #expect(words(after: "b", in: lines) == "inactive: unused for 7 days, nothing planned")
        #expect(words(after: "c", in: lines) == "no usage data yet")
        #expect(words(after: "d", in: lines) == "no use predicted in the next 24 h")

        var everyWindow = timeline
        everyWindow.strategy = .everyWindow
        let wider = TimelineText.render(everyWindow, utcOffsetSeconds: 0, width: 24, color: false)
            .split(separator: "\n").map(String.init)
        for line in wider { #expect(line.count <= 24, "\(line)") }
        #expect(words(after: "c", in: wider) == Timeline.everyWindowWords)
        // Without a width (a pipe), one line each, as before.
        #expect(TimelineText.render(timeline, utcOffsetSeconds: 0, width: nil, color: false).split(separator: "\n")
            .contains("a        no use seen yet: 1 % in every 15 min slot until it is learned"))
    }

    @Test func noApps() {
        let timeline = TimelineFixture.day([], windows: [TimelineFixture.start + 900])
        let lines = TimelineText.render(timeline, utcOffsetSeconds: 0, width: 80, color: false).split(separator: "\n")
        #expect(lines.count == 6)
        // 71 columns for the strip: two slots a column, so 13:15 is in the first.
        #expect(lines[3] == "windows  │")
        #expect(lines[4] == "No app has registered.")
        #expect(lines[5].hasPrefix("▼ now"))
    }

    /// A long id keeps its end; control characters never reach the terminal.
    @Test func appIDsAreShortenedAndCleaned() {
        let timeline = TimelineFixture.day([
            .init(appID: "org.example.averyveryverylongvendor.Reader", probabilities: TimelineFixture.probabilities([0: 0.5])),
            .init(appID: "bad\u{1B}[2Jid", probabilities: TimelineFixture.probabilities([0: 0.5])),
        ])
        let text = TimelineText.render(timeline, utcOffsetSeconds: 0, width: 60, color: false)
        // 60 columns: labels of at most (60 - 8) / 3 = 17 characters.
        #expect(text.contains("\n…ongvendor.Reader  █\n"))
        #expect(text.contains("bad?[2Jid"))
        #expect(!text.contains("\u{1B}"))
    }

    static let clamps: [(p: Double, clamped: Double, level: Int)] = [
        (-0.5, 0, 0), (0, 0, 0), (0.004, 0.004, 0), (0.005, 0.005, 1), (0.125, 0.125, 1), (0.126, 0.126, 2),
        (0.5, 0.5, 4), (1, 1, 8), (1.5, 1, 8), (.nan, 0, 0), (.infinity, 1, 8), (-.infinity, 0, 0),
    ]

    @Test(arguments: clamps)
    func probabilitiesOutOfRangeAreClamped(_ example: (p: Double, clamped: Double, level: Int)) {
        #expect(Timeline.clamp(example.p) == example.clamped)
        #expect(TimelineText.level(example.p, scale: 1) == example.level)
    }

    @Test func outOfRangeInAPicture() {
        let app = Timeline.App(appID: "a", probabilities: [-0.5, 1.5, .nan, .infinity, 0.5, 2, 0, 0])
        let timeline = Timeline(now: TimelineFixture.start, start: TimelineFixture.start, slots: 8, apps: [app])
        let text = TimelineText.render(timeline, utcOffsetSeconds: 0, width: nil, color: false)
        #expect(text.contains("\na         █ █▄█\n"))
        #expect(text.contains("█ = 100 %"))
        let svg = TimelineSVG.render(timeline, utcOffsetSeconds: 0)
        for opacity in TimelineSVGCheck.attributeValues("fill-opacity", in: svg) {
            let value = Double(opacity)
            #expect(value != nil && value! > 0 && value! <= 1, "fill-opacity \(opacity)")
        }
    }

    @Test func svgIsWellFormedAndEscaped() throws {
        var timeline = TimelineFixture.small
        timeline.apps.append(.init(appID: #"a<b&"c'd>"#, probabilities: [0.2], refreshes: [], inactive: false))
        timeline.apps.append(.init(appID: "org.example.Backup", probabilities: [], inactive: true))
        let svg = TimelineSVG.render(timeline, utcOffsetSeconds: 3600)
        #expect(svg.hasPrefix(#"<?xml version="1.0" encoding="UTF-8"?>"# + "\n<svg "))
        #expect(svg.hasSuffix("</svg>\n"))
        try TimelineSVGCheck.balanced(svg)
        #expect(svg.contains(">a&lt;b&amp;&quot;c&apos;d&gt;</text>"))
        #expect(!svg.contains("a<b"))
        #expect(svg.contains(">org.example.Mail</text>"))
        // `small` does not say for how long (an agent from before it did).
        #expect(svg.contains("inactive: unused for [limits] inactive_after, nothing planned"))
        timeline.inactiveAfterSeconds = 2 * 86_400
        #expect(TimelineSVG.render(timeline, utcOffsetSeconds: 3600).contains("inactive: unused for 2 days, nothing planned"))
        // One cell per slot with a visible chance: Mail's six, Feeds' two, the new app's one,
        // and the legend's four.
        #expect(svg.ranges(of: ##"fill="#1f6feb" fill-opacity"##).count == 6 + 2 + 1 + 4)
        // Mail's two refreshes, and the legend's mark.
        #expect(svg.ranges(of: "<polygon").count == 3)
    }

    @Test func svgIsDeterministic() throws {
        let a = TimelineSVG.render(TimelineFixture.small, utcOffsetSeconds: 0)
        let b = TimelineSVG.render(TimelineFixture.small, utcOffsetSeconds: 0)
        #expect(a == b)
        try TimelineSVGCheck.balanced(TimelineSVG.render(TimelineFixture.day([]), utcOffsetSeconds: -3600))
    }
}

/// Just enough XML reading to tell that the tags nest and the text is escaped.
enum TimelineSVGCheck {
    struct Unbalanced: Error, CustomStringConvertible {
        let description: String
    }

    static func balanced(_ xml: String) throws {
        var stack: [String] = []
        var rest = Substring(xml)
        while let open = rest.firstIndex(of: "<") {
            try checkText(rest[..<open])
            guard let close = rest[open...].firstIndex(of: ">") else { throw Unbalanced(description: "unclosed <") }
            let tag = rest[rest.index(after: open)..<close]
            rest = rest[rest.index(after: close)...]
            if tag.hasPrefix("?") || tag.hasPrefix("!") { continue }
            if tag.hasSuffix("/") { continue }
            let name = String(tag.drop { $0 == "/" }.prefix { $0 != " " && $0 != "\n" })
            if tag.hasPrefix("/") {
                guard stack.popLast() == name else { throw Unbalanced(description: "</\(name)> closes \(stack)") }
            } else {
                try checkText(tag)
                stack.append(name)
            }
        }
        try checkText(rest)
        guard stack.isEmpty else { throw Unbalanced(description: "left open: \(stack)") }
    }

    /// Every `&` starts one of the five entities.
    static func checkText(_ text: Substring) throws {
        var rest = text
        while let amp = rest.firstIndex(of: "&") {
            let after = rest[amp...]
            guard ["&amp;", "&lt;", "&gt;", "&quot;", "&apos;"].contains(where: { after.hasPrefix($0) }) else {
                throw Unbalanced(description: "bare & in \(text)")
            }
            rest = rest[rest.index(after: amp)...]
        }
    }

    static func attributeValues(_ name: String, in xml: String) -> [String] {
        xml.split(separator: " \(name)=\"", omittingEmptySubsequences: false).dropFirst().map { String($0.prefix { $0 != "\"" }) }
    }
}
