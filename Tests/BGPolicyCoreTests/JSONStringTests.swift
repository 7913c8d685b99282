@testable import BGPolicyCore
import Foundation
import Testing

@Suite("JSONString")
struct JSONStringTests {
    /// Every control character, the two that must be escaped, and text beyond ASCII: each comes
    /// back from a JSON parser as it went in, and the literal holds no raw control character.
    @Test(arguments: [
        "", "plain", "a \"quoted\" word", "back\\slash", "line\nbreak\r\n\ttab",
        String((0..<0x20).map { Character(Unicode.Scalar(UInt8($0))) }), "Prévisions ☀︎ 天气 🌧", "\u{7F}\u{2028}",
    ])
    func parsesBackToTheSameString(_ text: String) throws {
        let literal = JSONString.quoted(text)
        #expect(!literal.unicodeScalars.contains { $0.value < 0x20 })
        let parsed = try JSONSerialization.jsonObject(with: Data("[\(literal)]".utf8)) as? [String]
        #expect(parsed == [text])
    }

    @Test func escapesAsJSONWritersDo() {
        #expect(JSONString.quoted("a\"b\\c\nd\u{1}") == #""a\"b\\c\nd\u0001""#)
        #expect(JSONString.quoted("\u{1F}") == #""\u001f""#)
    }
}
