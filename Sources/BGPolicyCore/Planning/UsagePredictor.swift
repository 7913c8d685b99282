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
/// - **time of week:** hour of day, day of week (weekday/weekend patterns) and hour of week.
/// Time of day is in UTC offset by `utcOffsetSeconds`; a trace carries no time zone.
///
/// Besides the per-app models, `probabilityOfAnyOpen` answers whether the user opens *some*
/// app in a slot, from `ActivityEstimator`'s counts over recency × hour × weekend: that is the
/// signal that decides when a wake window is worth opening.
///
/// Learning is incremental and only from the past: at each slot boundary the previous slot's
/// outcome (did the app open in it?) trains the model with the features it had when the slot
/// began (AdaGrad steps, a little L2, which also makes old evidence decay). A cold app starts
/// from a shared prior: a bias of about one open a day, and the weights that all apps together
/// have learned for the user-level features.
public struct UsagePredictor: Sendable {
    public let slotSeconds: Double
    public let utcOffsetSeconds: Double

    /// Bin edges (seconds) for "time since the last open".
    static let ageEdges: [Double] = (1...18).map { Double($0) * 300 } + [7200, 10_800, 14_400, 21_600, 28_800,
                                     43_200, 64_800, 86_400, 129_600, 172_800, 259_200, 432_000, 604_800]
    static let rateEdges: [Double] = [1, 2, 3, 5, 8, 13, 21]

    // Feature layout: [bias | app age (bins + never) | user age (bins + never) | rate | hour | day | hour of week].
    static let ageCount = ageEdges.count + 2
    static let rateCount = rateEdges.count + 1
    static let appAgeBase = 1
    static let userAgeBase = appAgeBase + ageCount
    static let rateBase = userAgeBase + ageCount
    static let hourBase = rateBase + rateCount
    static let dayBase = hourBase + 24
    static let weekHourBase = dayBase + 7
    static let featureCount = weekHourBase + 168

    struct Model: Sendable {
        var weights: [Double]
        var squares: [Double]
        var lastOpen: Double?
        var recentOpens: [Double] = []
        /// Features of the slot being watched, and whether the app opened in it.
        var pending: [Int]?
        var openedInSlot = false
    }

    private var models: [String: Model] = [:]
    /// The apps in a fixed order, so that training (and so every replay) is deterministic:
    /// Swift seeds its hashing per process, and the shared prior learns in this order.
    private var order: [String] = []
    /// Shared weights learned by every app: the prior of a cold app.
    private var shared: Model
    private var lastAnyOpen: Double?
    private var slotStart: Double?
    /// The user-level estimate: is any app opened in the slot? It sees every slot, so it learns
    /// the user's rhythm (sessions, hours, days) faster and more surely than any one app's model.
    private var activity = ActivityEstimator()
    private var userSlot: (age: Double?, hour: Int, weekend: Bool, day: Int)?
    private var openedInUserSlot = false

    public static let learningRate = 0.5
    public static let l2 = 1e-4
    /// A cold app's prior: about one open a day.
    public static let priorPerSlot = 1.0 / 96

    public init(slotSeconds: Double = 900, utcOffsetSeconds: Double = 0) {
        self.slotSeconds = slotSeconds
        self.utcOffsetSeconds = utcOffsetSeconds
        var weights = [Double](repeating: 0, count: Self.featureCount)
        weights[0] = Self.logit(Self.priorPerSlot)
        shared = Model(weights: weights, squares: [Double](repeating: 1, count: Self.featureCount))
    }

    /// The apps the predictor knows (opened at least once).
    public var appIDs: [String] { order }

    /// The time of the app's last open, if any.
    public func lastOpen(of appID: String) -> Double? { models[appID]?.lastOpen }

    /// Records an open. Opens must arrive in time order.
    public mutating func recordOpen(of appID: String, at time: Double) {
        if models[appID] == nil {
            models[appID] = Model(weights: shared.weights, squares: [Double](repeating: 1, count: Self.featureCount))
            order.insert(appID, at: order.firstIndex { $0 > appID } ?? order.endIndex)
        }
        models[appID]!.openedInSlot = true
        models[appID]!.lastOpen = time
        models[appID]!.recentOpens.append(time)
        lastAnyOpen = time
        openedInUserSlot = true
    }

    /// Closes the slot being watched (training on its outcome) and starts a new one at `time`:
    /// call at each slot boundary, in time order, after recording the opens before it.
    public mutating func startSlot(at time: Double) {
        if let slot = userSlot {
            activity.record(age: slot.age, hour: slot.hour, weekend: slot.weekend, opened: openedInUserSlot, day: slot.day)
        }
        let (hour, day) = clock(time)
        userSlot = (lastAnyOpen.map { time - $0 }, hour, day >= 5, Int(((time + utcOffsetSeconds) / 86_400).rounded(.down)))
        openedInUserSlot = false
        for appID in order {
            var model = models[appID]!
            // Apps unused for 7 days are not refreshed (SPEC §2); they need no training until used.
            if let last = model.lastOpen, time - last > Self.dormantAfter {
                model.pending = nil
                models[appID] = model
                continue
            }
            if let features = model.pending {
                let y: Double = model.openedInSlot ? 1 : 0
                Self.train(&model, features, y)
                Self.train(&shared, features, y, rate: Self.learningRate / Double(max(models.count, 1)).squareRoot())
            }
            model.recentOpens.removeAll { $0 <= time - 86_400 }
            model.pending = features(of: model, at: time)
            model.openedInSlot = false
            models[appID] = model
        }
        slotStart = time
    }

    /// The probability that `appID` is opened in `[time, time + slotSeconds)`, given what is known
    /// now. Unknown apps get the cold prior.
    public func probability(of appID: String, inSlotAt time: Double) -> Double {
        guard let model = models[appID] else { return Self.priorPerSlot }
        return Self.sigmoid(Self.score(model.weights, features(of: model, at: time)))
    }

    /// The probability that some app is opened in `[time, time + slotSeconds)`.
    public func probabilityOfAnyOpen(inSlotAt time: Double) -> Double {
        let (hour, day) = clock(time)
        return activity.probability(age: lastAnyOpen.map { time - $0 }, hour: hour, weekend: day >= 5)
    }

    static let dormantAfter: Double = 7 * 86_400
    /// Hour of day and day of week (0 = Monday) at `time` in local time.
    func clock(_ time: Double) -> (hour: Int, day: Int) {
        let local = time + utcOffsetSeconds
        let hourIndex = Int((local / 3600).rounded(.down))
        let hour = ((hourIndex % 24) + 24) % 24
        // 1970-01-01 was a Thursday.
        let dayIndex = Int((local / 86_400).rounded(.down))
        return (hour, (((dayIndex + 3) % 7) + 7) % 7)
    }

    func features(of model: Model, at time: Double) -> [Int] {
        let (hour, day) = clock(time)
        let recent = model.recentOpens.reduce(0) { $0 + ($1 > time - 86_400 ? 1 : 0) }
        return [
            0,
            Self.appAgeBase + Self.ageBin(model.lastOpen.map { time - $0 }),
            Self.userAgeBase + Self.ageBin(lastAnyOpen.map { time - $0 }),
            Self.rateBase + Self.bin(Double(recent), Self.rateEdges),
            Self.hourBase + hour,
            Self.dayBase + day,
            Self.weekHourBase + day * 24 + hour,
        ]
    }

    static func ageBin(_ age: Double?) -> Int {
        guard let age else { return ageEdges.count + 1 }
        return bin(age, ageEdges)
    }

    static func bin(_ value: Double, _ edges: [Double]) -> Int {
        var i = 0
        while i < edges.count, value >= edges[i] { i += 1 }
        return i
    }

    static func score(_ weights: [Double], _ features: [Int]) -> Double {
        features.reduce(0) { $0 + weights[$1] }
    }

    static func train(_ model: inout Model, _ features: [Int], _ y: Double, rate: Double = learningRate) {
        let p = sigmoid(score(model.weights, features))
        let gradient = p - y
        for f in features {
            let g = gradient + l2 * model.weights[f]
            model.squares[f] += g * g
            model.weights[f] -= rate * g / model.squares[f].squareRoot()
        }
    }

    static func sigmoid(_ x: Double) -> Double { 1 / (1 + ReplayMath.exp(-x)) }
    static func logit(_ p: Double) -> Double { ReplayMath.log(p / (1 - p)) }
}
