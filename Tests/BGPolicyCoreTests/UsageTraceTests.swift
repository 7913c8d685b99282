import BGPolicyCore
import Testing

@Suite("UsageTrace")
struct UsageTraceTests {
    @Test func parsesFractionalSecondsBlankLinesAndCRLF() throws {
        let trace = try UsageTrace.parse("timestamp,app_id,event\r\n1.25,org.a,open\r\n\r\n2,org.a,close\r\n")
        #expect(trace.events == [UsageEvent(time: 1.25, appID: "org.a", kind: .open),
                                 UsageEvent(time: 2, appID: "org.a", kind: .close)])
        #expect(trace.span?.start == 1.25)
        #expect(trace.appIDs == ["org.a"])
    }

    @Test func acceptsAByteOrderMarkAndQuotedFields() throws {
        // R's write.csv quotes every text field; a spreadsheet may put a byte-order mark first.
        let trace = try UsageTrace.parse(
            "\u{FEFF}\"timestamp\",\"app_id\",\"event\"\r\n1,\"org.a\",\"open\"\r\n\"2\",\"org.\"\"b\"\", c\",close\r\n")
        #expect(trace.events == [UsageEvent(time: 1, appID: "org.a", kind: .open),
                                 UsageEvent(time: 2, appID: "org.\"b\", c", kind: .close)])
        #expect(try UsageTrace.parse("\u{FEFF}timestamp,app_id,event\n1,a,open\n").events.count == 1)
        // An empty quoted field is an empty field.
        #expect(throws: UsageTraceError(line: 2, "app_id is empty")) {
            try UsageTrace.parse("timestamp,app_id,event\n1,\"\",open\n")
        }
    }

    @Test func headerOnlyIsAnEmptyTrace() throws {
        #expect(try UsageTrace.parse("timestamp,app_id,event\n").events.isEmpty)
    }

    static let errors: [(text: String, line: Int, contains: String)] = [
        ("", 1, "empty"),
        ("time,app,event\n", 1, "header"),
        ("timestamp,app_id,event\n1,a,open\n2,a\n", 3, "3 fields"),
        ("timestamp,app_id,event\n1,a,open,x\n", 2, "3 fields"),
        ("timestamp,app_id,event\nnoon,a,open\n", 2, "not Unix time in decimal seconds"),
        ("timestamp,app_id,event\nnan,a,open\n", 2, "not Unix time in decimal seconds"),
        ("timestamp,app_id,event\ninf,a,open\n", 2, "not Unix time in decimal seconds"),
        ("timestamp,app_id,event\n0x10,a,open\n", 2, "not Unix time in decimal seconds"),
        ("timestamp,app_id,event\n1e9,a,open\n", 2, "not Unix time in decimal seconds"),
        ("timestamp,app_id,event\n-5,a,open\n", 2, "not Unix time in decimal seconds"),
        ("timestamp,app_id,event\n5.,a,open\n", 2, "not Unix time in decimal seconds"),
        ("timestamp,app_id,event\n.5,a,open\n", 2, "not Unix time in decimal seconds"),
        // A digit too many: the year 5138, which a replay would walk slot by slot.
        ("timestamp,app_id,event\n1700000000,a,open\n99999999999,a,close\n", 3, "up to 4102444800"),
        ("timestamp,app_id,event\n1e300,a,open\n", 2, "not Unix time"),
        ("timestamp,app_id,event\n1000000000,a,open\n1400000000,a,close\n", 3, "more than 10 years after the trace's first, 1000000000"),
        ("timestamp,app_id,event\n1,,open\n", 2, "app_id is empty"),
        ("timestamp,app_id,event\n1,a,launch\n", 2, "neither open nor close"),
        ("timestamp,app_id,event\n5,a,open\n\n4,a,close\n", 4, "sorted"),
        ("timestamp,app_id,event\n1,\"a,open\n", 2, "does not close"),
        ("timestamp,app_id,event\n1,\"a\"b,open\n", 2, "followed by \"b\" rather than a comma"),
        ("timestamp,app_id,event\n1,a\"b,open\n", 2, "a double quote inside the unquoted field \"a\"b\""),
        ("\"timestamp,app_id\",event\n", 1, "header"),
        ("\u{FEFF}\u{FEFF}timestamp,app_id,event\n", 1, "header"),
        // Lines that end in a lone "\r" (classic Mac OS) are one line: the message says why.
        ("timestamp,app_id,event\r1,a,open\r2,a,close\r", 1, "lone carriage return"),
    ]

    @Test(arguments: errors)
    func reportsTheLineOfAnError(_ example: (text: String, line: Int, contains: String)) {
        do {
            _ = try UsageTrace.parse(example.text)
            Issue.record("parsed \(example.text.debugDescription)")
        } catch {
            #expect(error.line == example.line)
            #expect(error.description.contains(example.contains), "\(error)")
            #expect(error.description.hasPrefix("line \(example.line): "))
        }
    }

    @Test func anErrorQuotesAtMostTheStartOfALongLineOrField() {
        // Without a cut, a file of one line (or one huge field) was quoted whole.
        let long = String(repeating: "x", count: 100_000)
        for text in ["\(long)\n", "timestamp,app_id,event\n\(long),a,open\n", "timestamp,app_id,event\n1,a,\(long)\n",
                     "timestamp,app_id,event\n1,a\"\(long),open\n"] {
            do {
                _ = try UsageTrace.parse(text)
                Issue.record("parsed a line of \(text.count) characters")
            } catch {
                #expect(error.message.count < 300, "\(error.message.prefix(300))")
                // 60 characters of the line or field (the last one starts with a"), then the count.
                #expect(error.message.contains("\(String(repeating: "x", count: 58))…\" ("), "\(error.message.prefix(300))")
                #expect(error.message.contains(" characters more)"), "\(error.message.prefix(300))")
            }
        }
        // A short one is quoted as it is.
        #expect(throws: UsageTraceError(line: 2, "event \"launch\" is neither open nor close")) {
            try UsageTrace.parse("timestamp,app_id,event\n1,a,launch\n")
        }
    }

    @Test func bytesThatAreNotUTF8AreAnErrorNamingTheirLine() throws {
        // Replaced by U+FFFD, "a\u{FF}" and "a\u{FE}" were one app.
        let text = Array("timestamp,app_id,event\n1,a,open\n2,a".utf8) + [0xFF] + Array(",open\n".utf8)
        #expect(throws: UsageTraceError(line: 3, "the bytes 0xFF are not UTF-8 text: save the trace as UTF-8")) {
            try UsageTrace.parse(utf8: text)
        }
        // A sequence cut short counts as one error, on the line it starts.
        #expect(throws: UsageTraceError(line: 2, "the bytes 0xE2 0x82 are not UTF-8 text: save the trace as UTF-8")) {
            try UsageTrace.parse(utf8: Array("timestamp,app_id,event\n1,".utf8) + [0xE2, 0x82] + Array("a,open\n".utf8))
        }
        let valid = try UsageTrace.parse(utf8: Array("timestamp,app_id,event\n1,caf\u{E9},open\n".utf8))
        #expect(valid.events == [UsageEvent(time: 1, appID: "caf\u{E9}", kind: .open)])
    }
}
