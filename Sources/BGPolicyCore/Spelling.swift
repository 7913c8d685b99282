/// Helpers for messages: "did you mean" suggestions and readable lists.
enum Spelling {
    /// The candidate `word` is most plausibly a misspelling of, or `nil` when none is close or the
    /// closest is not unique. Case-insensitive; a swap of neighbours counts as one edit.
    static func closest(to word: String, among candidates: [String]) -> String? {
        let best = closestCandidates(to: word, among: candidates)
        return best.count == 1 ? best[0] : nil
    }

    /// Every candidate at the smallest edit distance from `word`, if that distance is small enough
    /// (at most a third of the candidate's length, and at least one edit) to call it a typo.
    static func closestCandidates(to word: String, among candidates: [String]) -> [String] {
        let typed = Array(word.lowercased())
        guard !typed.isEmpty else { return [] }
        var best: [String] = []
        var bestDistance = Int.max
        for candidate in candidates where !best.contains(candidate) {
            let distance = editDistance(typed, Array(candidate.lowercased()))
            guard distance <= max(1, candidate.count / 3), distance <= bestDistance else { continue }
            if distance < bestDistance { best = [] }
            best.append(candidate)
            bestDistance = distance
        }
        return best
    }

    /// Optimal-string-alignment distance: insertions, deletions, substitutions and adjacent swaps.
    static func editDistance(_ a: [Character], _ b: [Character]) -> Int {
        if a.isEmpty { return b.count }
        if b.isEmpty { return a.count }
        var previousPrevious = [Int](repeating: 0, count: b.count + 1)
        var previous = Array(0...b.count)
        var current = [Int](repeating: 0, count: b.count + 1)
        for i in 1...a.count {
            current[0] = i
            for j in 1...b.count {
                let cost = a[i - 1] == b[j - 1] ? 0 : 1
                current[j] = min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + cost)
                if i > 1, j > 1, a[i - 1] == b[j - 2], a[i - 2] == b[j - 1] {
                    current[j] = min(current[j], previousPrevious[j - 2] + 1)
                }
            }
            (previousPrevious, previous, current) = (previous, current, previousPrevious)
        }
        return previous[b.count]
    }

    /// `a, b and c` / `a, b or c`.
    static func list(_ items: [String], conjunction: String) -> String {
        switch items.count {
        case 0: return ""
        case 1: return items[0]
        default: return items.dropLast().joined(separator: ", ") + " \(conjunction) " + items[items.count - 1]
        }
    }
}
