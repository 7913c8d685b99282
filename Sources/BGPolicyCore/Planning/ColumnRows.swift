/// The tables behind the predictor (`LogisticTable`, `SlotHistoryTable`) keep one column per
/// app in rows of `capacity` cells, a row per feature or per slot of the day, so that ranking
/// every app at once reads one run of memory per row.
enum ColumnRows {
    /// `cells` (`rows` rows of `capacity` cells, the first `count` of each in use) moved to rows
    /// of `newCapacity` cells, the new ones `fill`. Doubling the capacity at each growth keeps a
    /// thousand appends at about two copies of the table in all.
    static func widened<T>(_ cells: [T], rows: Int, capacity: Int, count: Int, to newCapacity: Int, fill: T) -> [T] {
        var wider = [T](repeating: fill, count: rows * newCapacity)
        for row in 0..<rows {
            for column in 0..<count {
                wider[row * newCapacity + column] = cells[row * capacity + column]
            }
        }
        return wider
    }
}

extension ColumnRows {
    /// Takes `column` out of `cells` (`rows` rows of `capacity` cells, the first `count` of each
    /// in use): the columns after it move one to the left in every row, and the cell left free at
    /// the end of each row is `fill`, as a cell never used is. The capacity stays: a forgotten
    /// app (`UsagePredictor.forget`) frees its column for the next one rather than its memory.
    static func removeColumn<T>(_ column: Int, from cells: inout [T], rows: Int, capacity: Int, count: Int, fill: T) {
        precondition(column >= 0 && column < count, "a column in use")
        for row in 0..<rows {
            let start = row * capacity
            for c in column..<(count - 1) { cells[start + c] = cells[start + c + 1] }
            cells[start + count - 1] = fill
        }
    }
}
