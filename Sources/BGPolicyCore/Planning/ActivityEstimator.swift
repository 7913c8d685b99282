/// Estimates the probability that the user opens *some* app in a coming slot: the signal that
/// decides when a refresh window is worth opening.
///
/// One online logistic model (`OnlineLogistic`) for the user, trained at every slot boundary on
/// whether the slot that just ended saw an open, with the features the slot had when it began
/// (so only from the past). Its one-hot features:
/// - **recency:** the time since the user's last open, in `UsagePredictor.ageBin` bins (5-min
///   steps in the first 90 minutes, then growing). A user who just opened something is likely to
///   open something again soon, and when, depends on the person (and on how the trace was
///   recorded); the bins learn that shape rather than assume it.
/// - **time of day at the slot's own resolution:** which slot of the day it is (96 of them for
///   15-min slots). Routines (the alarm, the commute, the lunch break) and any fixed clock the
///   usage follows recur at the same minutes every day; whole hours blur them.
/// - **hour of day × weekend**, which learns faster than the slot of the day and carries the
///   weekday/weekend difference;
/// - **day of week.**
/// The features add up in log-odds, so recency and the time of day are weighed against each
/// other (a session late at night ends sooner) instead of multiplied as independent signals.
public struct ActivityEstimator: Sendable {
    public let slotSeconds: Double
    /// The rate a cold user starts from: some open in one slot of six.
    public static let prior = 1.0 / 6
    public static let learningRate = 0.5
    public static let l2 = 1e-4

    /// What the features of a slot are made of.
    struct Situation: Sendable, Equatable {
        /// Seconds since the user's last open; nil before the first.
        var age: Double?
        var hour: Int
        /// 0 = Monday.
        var day: Int
        var slotOfDay: Int
    }

    let slotsPerDay: Int
    private var model: OnlineLogistic
    /// Features of the slot being watched, until its outcome is known.
    private var pending: [Int]?

    // Feature layout: [bias | age | hour × weekend | slot of day | day of week].
    static let ageBase = 1
    static let hourBase = ageBase + UsagePredictor.ageCount
    static let slotBase = hourBase + 48
    var dayBase: Int { Self.slotBase + slotsPerDay }

    public init(slotSeconds: Double = 900) {
        self.slotSeconds = slotSeconds
        slotsPerDay = max(1, Int((86_400 / slotSeconds).rounded(.up)))
        model = OnlineLogistic(count: Self.slotBase + slotsPerDay + 7, bias: OnlineLogistic.logit(Self.prior))
    }

    func features(_ s: Situation) -> [Int] {
        [0,
         Self.ageBase + UsagePredictor.ageBin(s.age),
         Self.hourBase + s.hour * 2 + (s.day >= 5 ? 1 : 0),
         Self.slotBase + min(max(s.slotOfDay, 0), slotsPerDay - 1),
         dayBase + s.day]
    }

    func probability(_ s: Situation) -> Double { model.probability(features(s)) }

    /// Closes the slot being watched, learning whether it saw an open, and starts watching the
    /// slot described by `next`.
    mutating func startSlot(_ next: Situation, previousOpened: Bool) {
        if let pending { model.train(pending, previousOpened ? 1 : 0, rate: Self.learningRate, l2: Self.l2) }
        pending = features(next)
    }
}
