/// For each app and each slot of the day, how often the app was opened in that slot on the days
/// before: the evidence behind `UsagePredictor`'s "opened at this time on past days" feature,
/// and one of the two inputs of `ForecastBlend`.
///
/// Each cell is a decaying count (`DecayingEvidence`'s rule, kept in `Float` to halve the
/// table): the slot's outcome on a day counts `decay` times as much a day later. A habit (mail at
/// 08:40 on most days) shows after two or three days as a high rate in its slot, where the
/// logistic model's one weight per slot of the day, updated once a day, takes a week or more to
/// climb; a habit dropped fades within a couple of weeks.
///
/// Cells are stored slot by slot (`cells[slot * capacity + column]`, as `ColumnRows` lays
/// them out), the column being the app's column in `UsagePredictor`'s `LogisticTable`, so that
/// a window, which ranks every app at one slot, reads the apps' bins as one run of memory. Each
/// cell's bin (`bin(column:slot:)`) and the log-odds of its rate shrunk towards a prior
/// (`rateLogit(column:slot:)`, for `ForecastBlend`) are kept with it, worked out when the cell
/// learns rather than at every ranking.
struct SlotHistoryTable: Sendable {
    /// How much a day's outcome counts a day later.
    static let decay: Float = 0.9
    /// Bin edges of the rate (opens over days seen, decayed). Bin 0 is "no day seen yet".
    static let rateEdges: [Double] = [0.02, 0.05, 0.1, 0.2, 0.3, 0.45, 0.6, 0.8]
    /// How many bins a cell can be in: no day seen, and one per interval of `rateEdges`.
    static let binCount = rateEdges.count + 2
    /// Less than this many days' weight counts as none (a cell is bin 0 until it learns once).
    static let minimumDays: Float = 0.5

    let slotsPerDay: Int
    /// The apps in the table: columns `0..<count`.
    private(set) var count = 0
    /// Columns allocated: a slot's row length.
    private(set) var capacity = 0
    private var opens: [Float] = []
    private var days: [Float] = []
    private var bins: [UInt8] = []
    /// NaN in a cell that has not learned.
    private var logits: [Float] = []

    init(slotsPerDay: Int) {
        self.slotsPerDay = max(1, slotsPerDay)
    }

    /// Adds an app with no history, and returns its column.
    mutating func append() -> Int {
        if count == capacity { grow(to: max(16, capacity * 2)) }
        count += 1
        return count - 1
    }

    /// Takes the app in `column` out of the table: the apps after it move one column to the left
    /// (as in `LogisticTable.remove(column:)`), and the column freed at the end has no history.
    mutating func remove(column: Int) {
        ColumnRows.removeColumn(column, from: &opens, rows: slotsPerDay, capacity: capacity, count: count, fill: 0)
        ColumnRows.removeColumn(column, from: &days, rows: slotsPerDay, capacity: capacity, count: count, fill: 0)
        ColumnRows.removeColumn(column, from: &bins, rows: slotsPerDay, capacity: capacity, count: count, fill: 0)
        ColumnRows.removeColumn(column, from: &logits, rows: slotsPerDay, capacity: capacity, count: count, fill: .nan)
        count -= 1
    }

    /// Moves every slot's row to rows of `newCapacity` columns (`ColumnRows.widened`).
    private mutating func grow(to newCapacity: Int) {
        opens = ColumnRows.widened(opens, rows: slotsPerDay, capacity: capacity, count: count, to: newCapacity, fill: 0)
        days = ColumnRows.widened(days, rows: slotsPerDay, capacity: capacity, count: count, to: newCapacity, fill: 0)
        bins = ColumnRows.widened(bins, rows: slotsPerDay, capacity: capacity, count: count, to: newCapacity, fill: 0)
        logits = ColumnRows.widened(
            logits, rows: slotsPerDay, capacity: capacity, count: count, to: newCapacity, fill: .nan)
        capacity = newCapacity
    }

    /// Learns the outcome of one day's `slot` for the app in `column`: opened in it or not.
    mutating func learn(column: Int, slot: Int, opened: Bool) {
        let at = slot * capacity + column
        opens[at] = opens[at] * Self.decay + (opened ? 1 : 0)
        days[at] = days[at] * Self.decay + 1
        bins[at] = UInt8(rate(column: column, slot: slot).map { 1 + UsagePredictor.bin($0, Self.rateEdges) } ?? 0)
        logits[at] = Float(ForecastBlend.historyLogit(opens: Double(opens[at]), days: Double(days[at])))
    }

    /// The decayed share of past days on which the app was opened in `slot`; nil before any.
    func rate(column: Int, slot: Int) -> Double? {
        let at = slot * capacity + column
        return days[at] < Self.minimumDays ? nil : Double(opens[at]) / Double(days[at])
    }

    /// The cell's bin, 0 to `binCount - 1` (see `rateEdges`).
    func bin(column: Int, slot: Int) -> Int { Int(bins[slot * capacity + column]) }

    /// The log-odds of the cell's rate shrunk towards `ForecastBlend.priorRate`; nil before the
    /// cell learns.
    func rateLogit(column: Int, slot: Int) -> Double? { Self.rateLogit(logits[slot * capacity + column]) }

    /// A stored log-odds as `rateLogit` gives it.
    static func rateLogit(_ stored: Float) -> Double? { stored.isNaN ? nil : Double(stored) }

    /// Reads the bins and the rates' log-odds in place: `body` finds those of the app in column
    /// `c` at slot `s` at `s * stride + c`, where `stride` is the capacity it is handed (a
    /// log-odds is read through `rateLogit(_:)`).
    func withCells<R>(
        _ body: (_ bins: UnsafeBufferPointer<UInt8>, _ logits: UnsafeBufferPointer<Float>, _ stride: Int) -> R
    ) -> R {
        bins.withUnsafeBufferPointer { bins in logits.withUnsafeBufferPointer { body(bins, $0, capacity) } }
    }
}
