#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// The feed file: what a real reader would fetch over the network.
///
/// Text: one item per line; blank lines and lines starting with `#` are skipped.
/// JSON: an array of strings or of objects with a "title" (and optionally a "link"), or an
/// object holding such an array under "items".
enum Feed {
    struct ReadError: Error, CustomStringConvertible {
        let description: String
    }

    static func items(at path: String) throws -> [String] {
        let data: Data
        do {
            data = try Data(contentsOf: URL(fileURLWithPath: path))
        } catch {
            throw ReadError(description: "cannot read the feed \(path): \(error)")
        }
        guard let text = String(data: data, encoding: .utf8) else {
            throw ReadError(description: "the feed \(path) is not UTF-8 text")
        }
        let trimmed = text.drop { $0.isWhitespace }
        if trimmed.first == "[" || trimmed.first == "{" {
            return try json(data, path: path)
        }
        return text.split(whereSeparator: \.isNewline)
            .map { oneLine(String($0)) }
            .filter { !$0.isEmpty && !$0.hasPrefix("#") }
    }

    private struct Item: Decodable {
        let text: String

        private enum Keys: String, CodingKey { case title, link }

        init(from decoder: any Decoder) throws {
            if let plain = try? decoder.singleValueContainer().decode(String.self) {
                text = plain
                return
            }
            let object = try decoder.container(keyedBy: Keys.self)
            let title = try object.decode(String.self, forKey: .title)
            let link = try object.decodeIfPresent(String.self, forKey: .link)
            text = link.map { "\(title) <\($0)>" } ?? title
        }
    }

    private struct Document: Decodable {
        let items: [Item]
    }

    private static func json(_ data: Data, path: String) throws -> [String] {
        let decoder = JSONDecoder()
        let items: [Item]
        if let list = try? decoder.decode([Item].self, from: data) {
            items = list
        } else {
            do {
                items = try decoder.decode(Document.self, from: data).items
            } catch {
                throw ReadError(
                    description: "the feed \(path) is JSON but not a list of items (strings, or objects with a \"title\"): \(error)")
            }
        }
        return items.map { oneLine($0.text) }.filter { !$0.isEmpty }
    }

    /// An item is one line of the cache: line breaks inside it become spaces.
    static func oneLine(_ text: String) -> String {
        let joined = text.split(whereSeparator: \.isNewline).joined(separator: " ")
        return String(joined.drop { $0.isWhitespace }.reversed().drop { $0.isWhitespace }.reversed())
    }
}

/// The reader's local copy: one item per line, then `refreshed_at: <Unix seconds>`.
enum FeedCache {
    static let stampPrefix = "refreshed_at: "

    /// The items of the last refresh, or `nil` when there is no cache yet.
    static func items(at path: String) -> [String]? {
        guard let data = try? Data(contentsOf: URL(fileURLWithPath: path)), let text = String(data: data, encoding: .utf8) else {
            return nil
        }
        var lines = text.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
        if lines.last == "" { lines.removeLast() }
        if let last = lines.last, last.hasPrefix(stampPrefix) { lines.removeLast() }
        return lines
    }

    /// Replaces the cache in one step, so a reader never sees half of it.
    static func write(_ items: [String], to path: String, at time: Date) throws {
        let millis = Int64((time.timeIntervalSince1970 * 1000).rounded())
        let stamp = "\(millis / 1000).\(String(millis % 1000).leftPadded(to: 3))"
        let text = (items + [stampPrefix + stamp]).joined(separator: "\n") + "\n"
        try Data(text.utf8).write(to: URL(fileURLWithPath: path), options: .atomic)
    }
}

extension String {
    fileprivate func leftPadded(to width: Int) -> String {
        count >= width ? self : String(repeating: "0", count: width - count) + self
    }
}
