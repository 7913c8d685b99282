/// Predicts, for each app, the probability that the user opens it in a coming interval of
/// `slotSeconds` (15 min by default), from what it has seen so far and nothing else.
///
/// Each app has its own small online logistic model over sparse one-hot features, so that
/// correlated signals (the hour and the time since the last open are strongly related) are
/// weighed against each other rather than multiplied:
/// - **recency of the app:** the time since the app's last open, in bins (5-min steps in the
///   first hour, then growing), and whether the app was ever opened;
/// - **recency of the user:** the time since the last open of any app (is the user active now?);
/// - **the open rate:** the app's opens in the last 24 hours, in bins;
/// - **time of week:** hour of day, day of week (weekday/weekend patterns) and hour of week;
/// - **slot of the day:** which of the day's slots it is, so that a routine at the same minutes
///   each day (the mail read at 08:40) stands out from the rest of its hour, which the hour
///   alone smears it over;
/// - **the same slot on past days:** how often the app was opened in this slot of the day on the
///   days before, decayed by day (`SlotHistoryTable`), in bins of the rate. A habit shows here
///   after two or three days; the slot of the day's own weight, learned once a day in small
///   steps, takes a week or more to stand out, and one habit kept and one dropped look alike
///   to it for as long;
/// - **in use:** whether the app is open (opened and not yet left) when the slot starts. An app
///   in use is opened again in the slot only if the user leaves it and comes back, which the
///   app's recency alone cannot tell from a first open; learned, so that a user who switches
///   back and forth keeps the chance high and one who keeps an app open for an hour does not.
///   It is known for the slot under way and the next one; later slots are predicted as if the
///   app were not in use (most uses end within the hour, and the timeline should not show an
///   app dimmed for a day because it is open now).
/// Time of day is in UTC offset by `utcOffsetSeconds`; a trace carries no time zone.
///
/// An app's forecast is not its model's alone: `ForecastBlend`, one small model for the user,
/// weighs the model's log-odds against those of the app's rate in the same slot on past days,
/// and learns from every app's slots how much this user's use follows the clock.
///
/// Besides the per-app models, `probabilityOfAnyOpen` answers whether the user opens *some*
/// app in a slot, from `ActivityEstimator`'s user-level model (recency, slot of the day, hour,
/// day): that is the signal that decides when a wake window is worth opening.
///
/// Learning is incremental and only from the past: at each slot boundary the previous slot's
/// outcome (did the app open in it?) trains the model with the features it had when the slot
/// began (AdaGrad steps, a little L2, which also makes old evidence decay). A cold app starts
/// from a shared prior: a bias of about one open a day, and the weights that all apps together
/// have learned for the user-level features.
public struct UsagePredictor: Sendable {
    public let slotSeconds: Double
    /// The local time's offset from UTC. The agent sets it before each decision, so that a
    /// change of daylight saving time keeps the learned hours on the local clock.
    public var utcOffsetSeconds: Double

    /// Bin edges (seconds) for "time since the last open".
    static let ageEdges: [Double] = (1...18).map { Double($0) * 300 } + [7200, 10_800, 14_400, 21_600, 28_800,
                                     43_200, 64_800, 86_400, 129_600, 172_800, 259_200, 432_000, 604_800]
    static let rateEdges: [Double] = [1, 2, 3, 5, 8, 13, 21]

    // Feature layout: [bias | app age (bins + never) | user age (bins + never) | rate | hour | day | hour of week
    // | slot of day | the same slot on past days | in use (no, yes)].
    static let ageCount = ageEdges.count + 2
    static let rateCount = rateEdges.count + 1
    static let appAgeBase = 1
    static let userAgeBase = appAgeBase + ageCount
    static let rateBase = userAgeBase + ageCount
    static let hourBase = rateBase + rateCount
    static let dayBase = hourBase + 24
    static let weekHourBase = dayBase + 7
    static let slotOfDayBase = weekHourBase + 168
    /// Slots in a day, the last one short if `slotSeconds` does not divide a day: the slot of
    /// the day's features, after the hour of week.
    let slotsPerDay: Int
    /// Where the bins of "the same slot on past days" start: after the slot of the day's features.
    var historyBase: Int { Self.slotOfDayBase + slotsPerDay }
    /// The two "in use" features (not in use, in use): the last in the layout.
    var inUseBase: Int { historyBase + SlotHistoryTable.binCount }

    /// What the predictor keeps of each app besides its weights (which are `weights`' column of
    /// the same index).
    struct Model: Sendable {
        var lastOpen: Double?
        var recentOpens: [Double] = []
        /// Features of the slot being watched, and whether the app opened in it.
        var pending: [Int]?
        var openedInSlot = false
        /// Opened and not left since (`recordClose`).
        var inUse = false
        /// When the user last left the app, if that time is known (`recordClose(of:at:)`).
        var lastLeft: Double?
    }

    /// The apps in a fixed (sorted) order, so that training (and so every replay) is
    /// deterministic: Swift seeds its hashing per process, and the shared prior learns in this
    /// order. Models stay where they were added (`index` finds an app's), and `sorted` lists
    /// them in app-id order: a new app costs a move of integers, not of models, so a thousand
    /// apps arriving at start stay cheap.
    private var order: [String] = []
    private var sorted: [Int] = []
    private var models: [Model] = []
    /// Each app's logistic model: column `i` is `models[i]`'s.
    private var weights: LogisticTable
    /// Each app's opens in each slot of the day on past days: column `i` is `models[i]`'s.
    private var history: SlotHistoryTable
    private var index: [String: Int] = [:]
    /// Shared weights learned by every app: the prior of a cold app.
    private var shared: OnlineLogistic
    /// The last step of every app's forecast, learned from every app's slots.
    private var blend = ForecastBlend()
    /// The blend as it has learned so far.
    var forecastBlend: ForecastBlend { blend }
    private var lastAnyOpen: Double?
    private var slotStart: Double?
    /// The user-level estimate: is any app opened in the slot? It sees every slot, so it learns
    /// the user's rhythm (sessions, hours, days) faster and more surely than any one app's model.
    private var activity: ActivityEstimator
    private var openedInUserSlot = false

    /// How long after its last open an app stops being trained (`[limits] inactive_after`, which
    /// the planner sets through `RefreshPlanner.inactiveAfterSeconds`): no refresh is planned for
    /// it past that, so nothing its model says is used until it is opened again. Before, a fixed
    /// 7 days: with `inactive_after` at 30 days, an app back after 10 days came back with the
    /// slots of days 7 to 10 never learned as slots without an open.
    public var dormantAfter: Double = 7 * 86_400

    public static let learningRate = 0.5
    public static let l2 = 1e-4
    /// A cold app's prior: about one open a day.
    public static let priorPerSlot = 1.0 / 96

    public init(slotSeconds: Double = 900, utcOffsetSeconds: Double = 0) {
        self.slotSeconds = slotSeconds
        self.utcOffsetSeconds = utcOffsetSeconds
        slotsPerDay = max(1, Int((86_400 / slotSeconds).rounded(.up)))
        let featureCount = Self.slotOfDayBase + slotsPerDay + SlotHistoryTable.binCount + 2
        shared = OnlineLogistic(count: featureCount, bias: OnlineLogistic.logit(Self.priorPerSlot))
        weights = LogisticTable(featureCount: featureCount)
        history = SlotHistoryTable(slotsPerDay: slotsPerDay)
        activity = ActivityEstimator(slotSeconds: slotSeconds)
    }

    /// The apps the predictor knows (opened at least once).
    public var appIDs: [String] { order }

    /// The time of the app's last open, if any.
    public func lastOpen(of appID: String) -> Double? { index[appID].map { models[$0].lastOpen } ?? nil }

    /// Records an open. Opens must arrive in time order.
    public mutating func recordOpen(of appID: String, at time: Double) {
        let i: Int
        if let known = index[appID] {
            i = known
        } else {
            i = weights.append(startingFrom: shared.weights)
            let column = history.append()
            precondition(column == i, "an app's history and weights share a column")
            models.append(Model())
            index[appID] = i
            let place = Self.upperBound(of: appID, in: order)
            order.insert(appID, at: place)
            sorted.insert(i, at: place)
        }
        models[i].openedInSlot = true
        models[i].inUse = true
        models[i].lastOpen = time
        models[i].recentOpens.append(time)
        lastAnyOpen = time
        openedInUserSlot = true
    }

    /// Forgets `appID` as if it had never been opened (the user asked the agent to forget the
    /// app): its model, its weights and its slots on past days go, and the apps after it in the
    /// tables move up one place (so `position(of:)` changes for them). Opened again later, it
    /// starts from the shared prior, as a new app does. What all apps learned together (the
    /// prior, the blend, the user's activity, the last open of any app) stays: it names no app,
    /// and forgetting one app's share of it would mean learning it all again. Returns whether
    /// the predictor knew the app.
    @discardableResult
    public mutating func forget(_ appID: String) -> Bool {
        guard let i = index.removeValue(forKey: appID) else { return false }
        weights.remove(column: i)
        history.remove(column: i)
        models.remove(at: i)
        for (id, position) in index where position > i { index[id] = position - 1 }
        let place = Self.upperBound(of: appID, in: order) - 1
        precondition(place >= 0 && order[place] == appID, "a known app is in the order")
        order.remove(at: place)
        sorted.remove(at: place)
        for k in sorted.indices where sorted[k] > i { sorted[k] -= 1 }
        return true
    }

    /// Records that the user left `appID` (at `time`, when it is known): it is no longer in use.
    public mutating func recordClose(of appID: String, at time: Double? = nil) {
        guard let i = index[appID] else { return }
        models[i].inUse = false
        if let time { models[i].lastLeft = max(models[i].lastLeft ?? time, time) }
    }

    /// When the user last used `appID`: `infinity` while it is in use (it is used now, however
    /// long ago it was opened), else its last open or its last leave, whichever came later; nil
    /// when it was never opened. What the 7-day rule (`[limits] inactive_after`) counts from:
    /// an app kept open a week and then left was used until it was left.
    public func lastUse(of appID: String) -> Double? { index[appID].flatMap { lastUse(at: $0) } }

    /// `lastUse(of:)` of the app at `position` (see `position(of:)`).
    func lastUse(at position: Int) -> Double? {
        let model = models[position]
        guard let lastOpen = model.lastOpen else { return nil }
        if model.inUse { return .infinity }
        return max(lastOpen, model.lastLeft ?? lastOpen)
    }

    /// Records that a known app is in use, opened at a time not known: nothing is learned of
    /// the open. (An app the predictor has never seen opened has no model to mark.)
    public mutating func recordOpenedUnseen(of appID: String) {
        if let i = index[appID] { models[i].inUse = true }
    }

    /// Whether `appID` is in use as far as the predictor knows.
    func isInUse(_ appID: String) -> Bool { index[appID].map { models[$0].inUse } ?? false }

    /// The wall clock was set `step` seconds forward (or back), and the slot being watched now
    /// starts at `slotStart` (`RefreshPlanner.wallClockStepped`): each app's opens, and the
    /// user's last, move with the clock, so that they stay as long ago as they were. What was
    /// learned, and the features the slot under way began with, stay as they were.
    public mutating func wallClockStepped(by step: Double, slotStart newStart: Double) {
        for i in models.indices {
            models[i].lastOpen? += step
            models[i].lastLeft? += step
            for j in models[i].recentOpens.indices { models[i].recentOpens[j] += step }
        }
        lastAnyOpen? += step
        if slotStart != nil { slotStart = newStart }
    }

    /// Closes the slot being watched (training on its outcome) and starts a new one at `time`:
    /// call at each slot boundary, in time order, after recording the opens before it.
    public mutating func startSlot(at time: Double) {
        activity.startSlot(situation(at: time), previousOpened: openedInUserSlot)
        openedInUserSlot = false
        let sharedRate = Self.learningRate / Double(max(models.count, 1)).squareRoot()
        // The same for every app in the slot: worked out once, not once per app.
        let common = sharedFeatures(at: time)
        let closing = slotStart.map { slotOfDay(at: $0) }
        for i in sorted {
            // Apps unused for `[limits] inactive_after` are not refreshed (SPEC §2); they need
            // no training until used.
            // Counted from the last open (the planner's rule counts from the last use: an app
            // kept open, or left, later; counting so here too moved user 00's replay figure
            // down by 0.001, so it was measured and not kept).
            if let last = models[i].lastOpen, time - last > dormantAfter {
                models[i].pending = nil
                continue
            }
            if let features = models[i].pending {
                let y: Double = models[i].openedInSlot ? 1 : 0
                // What the blend weighed as the slot began: the app's weights and the slot's
                // history learn only here, below, so they are as they were then.
                if let closing {
                    blend.train(.init(modelScore: weights.score(features, column: i),
                                      historyLogit: history.rateLogit(column: i, slot: closing)),
                                opened: y == 1)
                }
                weights.train(features, y, column: i, rate: Self.learningRate, l2: Self.l2)
                shared.train(features, y, rate: sharedRate, l2: Self.l2)
                if let closing { history.learn(column: i, slot: closing, opened: y == 1) }
            }
            models[i].recentOpens.removeAll { $0 <= time - 86_400 }
            models[i].pending = features(lastOpen: models[i].lastOpen, recentOpens: models[i].recentOpens,
                                         historyBin: history.bin(column: i, slot: common.slot),
                                         inUse: models[i].inUse, at: time, shared: common)
            models[i].openedInSlot = false
        }
        slotStart = time
    }

    /// The probability that `appID` is opened in `[time, time + slotSeconds)`, given what is known
    /// now. Unknown apps get the cold prior.
    public func probability(of appID: String, inSlotAt time: Double) -> Double {
        guard let i = index[appID] else { return Self.priorPerSlot }
        return probability(ofModelAt: i, inSlotAt: time)
    }

    /// For every app, by `position(of:)`: its probability of being opened in the slot at `time`,
    /// or nil when it was last used (`lastUse(at:)`) `inactiveAfter` seconds ago or more (it
    /// cannot be refreshed).
    func probabilitiesOfActiveApps(inSlotAt time: Double, inactiveAfter: Double) -> [Double?] {
        let shared = sharedFeatures(at: time)
        // Read in place through a pointer: a thousand models are looked at, none is copied or
        // retained (passing a model by value retained its four arrays).
        return weights.withWeights { weights, stride in
            history.withCells { bins, logits, cellStride in
                models.withUnsafeBufferPointer { models in
                    models.indices.map { i in
                        let model = models.baseAddress! + i
                        guard let last = model.pointee.lastOpen,
                            model.pointee.inUse || time - max(last, model.pointee.lastLeft ?? last) < inactiveAfter
                        else { return nil }
                        let cell = shared.slot * cellStride + i
                        let score = Self.score(of: model, column: i, weights: weights, stride: stride,
                                               historyBin: Int(bins[cell]), inSlotAt: time, shared: shared)
                        return blend.probability(.init(modelScore: score, historyLogit: SlotHistoryTable.rateLogit(logits[cell])))
                    }
                }
            }
        }
    }

    /// The decayed share of past days on which `appID` was opened in the slot of the day
    /// `slotOfDay` (0 at midnight): what its "same slot on past days" feature is binned from;
    /// nil for an unknown app, or a slot that has not yet been watched for it.
    func historyRate(of appID: String, slotOfDay: Int) -> Double? {
        index[appID].flatMap { history.rate(column: $0, slot: slotOfDay) }
    }

    /// Where the app's model is: an index into `probabilitiesOfActiveApps`.
    func position(of appID: String) -> Int? { index[appID] }

    /// The apps' ids in id order: `positionsInAppOrder[i]` is the position of `idsInAppOrder[i]`.
    var idsInAppOrder: [String] { order }

    /// The positions in app-id order: sums over all apps run in it, so that they do not depend
    /// on the order apps arrived in.
    var positionsInAppOrder: [Int] { sorted }

    /// The last open of the app at `position` (see `position(of:)`).
    func lastOpen(at position: Int) -> Double? { models[position].lastOpen }

    private func probability(ofModelAt i: Int, inSlotAt time: Double) -> Double {
        blend.probability(blendInputs(ofModelAt: i, inSlotAt: time))
    }

    /// What the blend weighs for `appID` in the slot at `time`; nil for an unknown app.
    func blendInputs(of appID: String, inSlotAt time: Double) -> ForecastBlend.Inputs? {
        index[appID].map { blendInputs(ofModelAt: $0, inSlotAt: time) }
    }

    private func blendInputs(ofModelAt i: Int, inSlotAt time: Double) -> ForecastBlend.Inputs {
        let shared = sharedFeatures(at: time)
        let historyBin = history.bin(column: i, slot: shared.slot)
        let score = weights.withWeights { weights, stride in
            models.withUnsafeBufferPointer {
                Self.score(of: $0.baseAddress! + i, column: i, weights: weights, stride: stride,
                           historyBin: historyBin, inSlotAt: time, shared: shared)
            }
        }
        return .init(modelScore: score, historyLogit: history.rateLogit(column: i, slot: shared.slot))
    }

    /// The app's model's score (log-odds) before the blend; `historyBin` is the app's bin in
    /// `history` at the slot of the day of `time`.
    private static func score(of model: UnsafePointer<Model>, column: Int, weights w: UnsafeBufferPointer<Double>,
                              stride: Int, historyBin: Int, inSlotAt time: Double,
                              shared: SharedFeatures) -> Double {
        let f = featureIndices(lastOpen: model.pointee.lastOpen, recentOpens: model.pointee.recentOpens,
                               historyBin: historyBin, inUse: model.pointee.inUse, at: time, shared: shared)
        // Summed in the order `LogisticTable.score` sums `features(lastOpen:recentOpens:historyBin:inUse:at:shared:)`.
        var score = 0.0
        score += w[f.0 * stride + column]
        score += w[f.1 * stride + column]
        score += w[f.2 * stride + column]
        score += w[f.3 * stride + column]
        score += w[f.4 * stride + column]
        score += w[f.5 * stride + column]
        score += w[f.6 * stride + column]
        score += w[f.7 * stride + column]
        score += w[f.8 * stride + column]
        score += w[f.9 * stride + column]
        return score
    }

    /// The probability that some app is opened in `[time, time + slotSeconds)`.
    public func probabilityOfAnyOpen(inSlotAt time: Double) -> Double {
        activity.probability(situation(at: time))
    }

    /// What the user-level model sees of the slot starting at `time`.
    func situation(at time: Double) -> ActivityEstimator.Situation {
        let (hour, day) = clock(time)
        return .init(age: lastAnyOpen.map { time - $0 }, hour: hour, day: day, slotOfDay: slotOfDay(at: time))
    }

    /// Which slot of the local day `time` falls in, from 0 at midnight.
    func slotOfDay(at time: Double) -> Int {
        let intoDay = Self.remainder(of: time + utcOffsetSeconds, dividingBy: 86_400)
        return min(max(Int((intoDay / slotSeconds).rounded(.down)), 0), slotsPerDay - 1)
    }

    /// `value` modulo `divisor` (positive), from 0 up to `divisor`, for any finite `value`: the
    /// clock's fields are worked out from it, never from a whole number of hours or days, which
    /// past some 10^22 s (a damaged time a look-ahead is asked from) does not fit an `Int`. The
    /// same for any real time: the remainder is exact. Not a number for a time that is not one.
    static func remainder(of value: Double, dividingBy divisor: Double) -> Double {
        let r = value.truncatingRemainder(dividingBy: divisor)
        return r < 0 ? r + divisor : r
    }

    /// Hour of day and day of week (0 = Monday) at `time` in local time.
    func clock(_ time: Double) -> (hour: Int, day: Int) {
        let local = time + utcOffsetSeconds
        let hour = Int((Self.remainder(of: local, dividingBy: 86_400) / 3600).rounded(.down))
        // 1970-01-01 was a Thursday.
        let day = Int(Self.remainder(of: (local / 86_400).rounded(.down) + 3, dividingBy: 7))
        return (min(hour, 23), min(day, 6))
    }

    /// An app's features at `time`, as the model trains on them; `shared` is
    /// `sharedFeatures(at: time)`. `featureIndices` gives the same without building an array:
    /// ranking a thousand apps in a window allocates nothing per app.
    private func features(lastOpen: Double?, recentOpens: [Double], historyBin: Int, inUse: Bool, at time: Double,
                          shared: SharedFeatures) -> [Int] {
        let f = Self.featureIndices(lastOpen: lastOpen, recentOpens: recentOpens, historyBin: historyBin,
                                    inUse: inUse, at: time, shared: shared)
        return [f.0, f.1, f.2, f.3, f.4, f.5, f.6, f.7, f.8, f.9]
    }

    /// The features every app has in common at `time`, as indices, and the bin edges the app's
    /// own features need: worked out once for a whole ranking (the lazily made static layout is
    /// read here, not once per app).
    struct SharedFeatures {
        let userAge: Int
        let hour: Int
        let day: Int
        let weekHour: Int
        let slotOfDay: Int
        /// The slot of the day itself (0 at midnight), and where the history's bins start.
        let slot: Int
        let historyBase: Int
        /// Where the two "in use" features start, and whether an app's use now counts at
        /// `time` (the slot under way and the next; see "in use" above).
        let inUseBase: Int
        let inUseKnown: Bool
        let rateBase: Int
        let ageEdges: [Double]
        let rateEdges: [Double]
    }

    func sharedFeatures(at time: Double) -> SharedFeatures {
        let (hour, day) = clock(time)
        let slot = slotOfDay(at: time)
        return SharedFeatures(userAge: Self.userAgeBase + Self.ageBin(lastAnyOpen.map { time - $0 }),
                              hour: Self.hourBase + hour, day: Self.dayBase + day,
                              weekHour: Self.weekHourBase + day * 24 + hour,
                              slotOfDay: Self.slotOfDayBase + slot, slot: slot, historyBase: historyBase,
                              inUseBase: inUseBase, inUseKnown: slotStart.map { time < $0 + 2 * slotSeconds } ?? true,
                              rateBase: Self.rateBase,
                              ageEdges: Self.ageEdges, rateEdges: Self.rateEdges)
    }

    private static func featureIndices(lastOpen: Double?, recentOpens: borrowing [Double], historyBin: Int,
                                       inUse: Bool, at time: Double, shared: SharedFeatures)
        -> (Int, Int, Int, Int, Int, Int, Int, Int, Int, Int)
    {
        let recent = recentOpens.withUnsafeBufferPointer { opens in
            var count = 0
            for open in opens where open > time - 86_400 { count += 1 }
            return count
        }
        return (0,
                Self.appAgeBase + Self.ageBin(lastOpen.map { time - $0 }, edges: shared.ageEdges),
                shared.userAge,
                shared.rateBase + Self.bin(Double(recent), shared.rateEdges),
                shared.hour,
                shared.day,
                shared.weekHour,
                shared.slotOfDay,
                shared.historyBase + historyBin,
                shared.inUseBase + (inUse && shared.inUseKnown ? 1 : 0))
    }

    static func ageBin(_ age: Double?, edges: [Double] = ageEdges) -> Int {
        guard let age else { return edges.count + 1 }
        return bin(age, edges)
    }

    /// How many of the ascending `edges` are at most `value`: the bin `value` falls in.
    static func bin(_ value: Double, _ edges: [Double]) -> Int { upperBound(of: value, in: edges) }

    /// How many of the ascending `sorted` are at most `value` (binary search): where `value`
    /// goes to keep them sorted, after its equals. Bins features, and places a new app's id.
    static func upperBound<T: Comparable>(of value: T, in sorted: [T]) -> Int {
        var low = 0, high = sorted.count
        while low < high {
            let middle = (low + high) / 2
            if value >= sorted[middle] { low = middle + 1 } else { high = middle }
        }
        return low
    }

}
