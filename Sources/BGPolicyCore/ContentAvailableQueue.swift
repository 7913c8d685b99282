/// The pure part of `NotifyContentAvailable` (SPEC §1 "silent push", §2 "content-available
/// wake"): another process asks the agent to wake an app; the wake waits for the next wake
/// window, where the agent delivers it as a `content-available` slice next to the other work.
///
/// Two rules, as APNs applies them to background pushes:
/// - **Rate.** On battery each app has a token bucket holding `perHour` tokens; a new wake costs
///   one, and each token comes back one hour after it was spent. That is exactly "at most
///   `perHour` in any hour": a bucket that refilled continuously at `perHour` an hour accepted 3
///   at once, one 20 min later and one 40 min later, 5 within 40 min. The bucket is kept as the
///   times of its charges that have not come back yet. On AC nothing is counted. Whether the
///   machine is on AC comes from `Conditions.onBattery`; unknown counts as battery.
/// - **Newest only.** An app has at most one undelivered wake. A notification while one waits
///   replaces its payload and costs nothing: the app is woken once either way.
///
/// Generic over the payload so that Core stays free of D-Bus: the agent keeps the `a{sv}` it
/// received, tests keep strings. Reads no clock: every call that depends on time takes `now`.
/// Memory is bounded by the number of apps: one bucket (at most `perHour` charges, or as many
/// as an hour held under a higher `perHour` before a reload) and at most one wake each, and a
/// bucket that has refilled completely and has no wake is dropped (an absent bucket reads as
/// full).
///
/// The agent stores each app's wake and bucket after every notification and puts them back
/// with `restore(_:wake:bucket:)` when it starts, so that a restart neither drops a wake nor
/// refills a bucket.
public struct ContentAvailableQueue<Payload: Sendable & Equatable>: Sendable, Equatable {
    /// A wake waiting for the next window.
    public struct Wake: Sendable, Equatable {
        /// The newest notification's payload; older ones were replaced.
        public var payload: Payload
        /// When the newest notification, the one whose payload this is, arrived.
        public var receivedAt: UnixTime
        /// When the first notification this wake stands for arrived: how long the app has waited.
        public var firstReceivedAt: UnixTime
        /// How many notifications this wake stands for: 1, plus one for each replaced payload.
        public var notificationCount: Int

        public init(payload: Payload, receivedAt: UnixTime, firstReceivedAt: UnixTime, notificationCount: Int) {
            self.payload = payload
            self.receivedAt = receivedAt
            self.firstReceivedAt = firstReceivedAt
            self.notificationCount = notificationCount
        }
    }

    /// The answer to one notification.
    public enum Outcome: Sendable, Equatable {
        /// The wake waits for the next window. `replaced`: an undelivered wake of the app took the
        /// new payload, and no token was spent. `tokensLeft`: what is left in the bucket after
        /// this notification (a whole number: tokens come back whole, an hour after each was
        /// spent); `nil` on AC, where nothing is counted.
        case queued(replaced: Bool, tokensLeft: Double?)
        /// Refused by the bucket; nothing was queued. `nextAllowedAt` is when the next token is
        /// available on battery: `.infinity` when `perHour` is 0, so that no token ever comes
        /// (the message then says so instead of naming a time; on AC it is allowed at once).
        case rateLimited(nextAllowedAt: UnixTime)
    }

    public typealias Bucket = ContentAvailableBucket

    /// Wakes per app per hour on battery (`limits.content_available_per_hour`), which is also
    /// the bucket's size. May change when the configuration is reloaded: buckets take the new
    /// size the next time they are read. Below 0 counts as 0.
    public var perHour: Int

    private var buckets: [AppID: Bucket] = [:]
    private var wakes: [AppID: Wake] = [:]

    /// How long a spent token stays spent.
    private static var hour: Double { 3600 }

    public init(perHour: Int) {
        self.perHour = perHour
    }

    private var capacity: Double { Double(max(perHour, 0)) }

    // MARK: Notifications

    /// Records a notification for `appID` at `now`. `onBattery` as in `Conditions`: `false`
    /// only when the machine is known to be on AC.
    public mutating func notify(
        _ appID: AppID, payload: Payload, at now: UnixTime, onBattery: Bool?
    ) -> Outcome {
        dropFullBuckets(at: now)
        let counted = onBattery != false
        var bucket = counted ? refilledBucket(for: appID, at: now) : nil
        defer {
            if let bucket { buckets[appID] = bucket }
        }

        if var wake = wakes[appID] {
            wake.payload = payload
            wake.receivedAt = now
            wake.notificationCount += 1
            wakes[appID] = wake
            return .queued(replaced: true, tokensLeft: bucket?.tokens(capacity: capacity))
        }

        if var spending = bucket {
            guard spending.tokens(capacity: capacity) >= 1 else {
                return .rateLimited(nextAllowedAt: nextTokenTime(spending))
            }
            spending.charges.append(now)
            bucket = spending
        }
        wakes[appID] = Wake(payload: payload, receivedAt: now, firstReceivedAt: now, notificationCount: 1)
        return .queued(replaced: false, tokensLeft: bucket?.tokens(capacity: capacity))
    }

    // MARK: Delivery

    /// Removes and returns the app's undelivered wake, when the agent starts its slice.
    public mutating func take(_ appID: AppID) -> Wake? {
        wakes.removeValue(forKey: appID)
    }

    /// Puts back a wake `take` removed whose delivery failed, as it was (first received, times
    /// notified), for the next window; unless a newer one came meanwhile, which replaced it
    /// (only the newest is kept). No token is spent again.
    public mutating func putBack(_ appID: AppID, wake: Wake) {
        if wakes[appID] == nil { wakes[appID] = wake }
    }

    /// The app's undelivered wake, left in place (for `Explain` and `ListPending`).
    public func wake(for appID: AppID) -> Wake? {
        wakes[appID]
    }

    /// How many apps have an undelivered wake.
    public var undeliveredCount: Int { wakes.count }

    /// The apps with an undelivered wake, sorted.
    public var undelivered: [AppID] {
        wakes.keys.sorted()
    }

    /// What is in the app's bucket at `now`: between 0 and `perHour`.
    public func tokensLeft(for appID: AppID, at now: UnixTime) -> Double {
        refilledBucket(for: appID, at: now).tokens(capacity: capacity)
    }

    /// Forgets the app, its bucket and its undelivered wake: it unregistered.
    public mutating func remove(_ appID: AppID) {
        buckets.removeValue(forKey: appID)
        wakes.removeValue(forKey: appID)
    }

    /// The wall clock was set by `step` seconds (later: positive): each bucket's and each wake's
    /// times move with it, so that a token comes back as long after a step as it would have
    /// without one. Unmoved, a clock set forward gave back every token spent within the step
    /// at once, and one set back held them until the next notification.
    public mutating func wallClockStepped(by step: Double) {
        guard step.isFinite else { return }
        for (appID, bucket) in buckets {
            buckets[appID]?.charges = bucket.charges.map { $0.isFinite ? $0 + step : $0 }
        }
        for appID in wakes.keys {
            wakes[appID]?.receivedAt += step
            wakes[appID]?.firstReceivedAt += step
        }
    }

    // MARK: Saving and restoring

    /// The app's bucket as it was last worked out, not brought forward to any time: what the
    /// agent stores so that a restart keeps the times its tokens come back. `nil` when the
    /// app has none, which reads as a full bucket.
    public func bucket(for appID: AppID) -> Bucket? {
        buckets[appID]
    }

    /// Puts back what an earlier run of the agent stored for `appID`, replacing what the queue
    /// holds for it: the undelivered wake, if any, and the bucket, if any (`nil` reads as full).
    /// More charges than `perHour` leave no token until enough have come back. A charge whose
    /// time is not finite, or later than the time the bucket is read at (the clock was set
    /// back), counts as spent at that time, so that a damaged value can never fill the bucket
    /// at once.
    public mutating func restore(_ appID: AppID, wake: Wake?, bucket: Bucket?) {
        wakes[appID] = wake
        guard let bucket else {
            buckets.removeValue(forKey: appID)
            return
        }
        buckets[appID] = bucket
    }

    // MARK: Words

    /// Why a notification was refused, for the `LimitsExceeded` error message: "org.example.Mail
    /// has used its 3 content-available wakes per hour on battery; the next is allowed in 12 min
    /// (unlimited on AC)": when the oldest charge of the last hour comes back.
    public static func refusalMessage(
        appID: AppID, perHour: Int, nextAllowedAt: UnixTime, now: UnixTime
    ) -> String {
        guard perHour > 0, nextAllowedAt != .infinity else {
            return "\(appID) may not be woken by content-available notifications on battery "
                + "(limits.content_available_per_hour is 0); they are unlimited on AC"
        }
        let wakes = perHour == 1 ? "1 content-available wake" : "\(perHour) content-available wakes"
        let wait = RunWhenEligiblePolicy.durationWords(max(nextAllowedAt - now, 0))
        return "\(appID) has used its \(wakes) per hour on battery; the next is allowed in \(wait) (unlimited on AC)"
    }

    // MARK: The bucket

    /// The app's bucket brought forward to `now`: the charges spent an hour or more before
    /// `now` have come back. An app without one has a full bucket.
    ///
    /// Time that goes backwards (the clock was set back) gives nothing back, and a charge later
    /// than `now` counts as spent at `now`: its token comes back an hour after the new time
    /// instead of waiting for the clock to catch up. A huge step forward gives every charge
    /// back, which fills the bucket and no more.
    private func refilledBucket(for appID: AppID, at now: UnixTime) -> Bucket {
        guard var bucket = buckets[appID] else { return Bucket(charges: []) }
        // A non-finite time carries no interval: keep the bucket as it was.
        guard now.isFinite else { return bucket }
        bucket.charges = bucket.charges.compactMap { charge in
            guard charge.isFinite, charge <= now else { return now }
            // The same sum as `nextTokenTime`, so that a notification at exactly that time is let through.
            return charge + Self.hour <= now ? nil : charge
        }
        bucket.charges.sort()
        return bucket
    }

    /// When the bucket, as worked out at some time, next holds a whole token: when enough of
    /// its oldest charges have come back that fewer than `perHour` are left.
    private func nextTokenTime(_ bucket: Bucket) -> UnixTime {
        guard capacity > 0 else { return .infinity }
        let mustReturn = bucket.charges.count - Int(capacity)
        guard mustReturn >= 0, mustReturn < bucket.charges.count else { return -.infinity }
        return bucket.charges[mustReturn] + Self.hour
    }

    /// Drops the buckets that have refilled completely and have no wake: they read the same as
    /// no bucket, so memory follows only the apps that used their bucket lately. Not while
    /// `perHour` is 0: every bucket is then "full" at 0, and dropping them would hand each app
    /// a full bucket when the limit is raised again, while the stored ones still say spent.
    private mutating func dropFullBuckets(at now: UnixTime) {
        guard now.isFinite, capacity > 0 else { return }
        let full = buckets.keys.filter { appID in
            wakes[appID] == nil && refilledBucket(for: appID, at: now).charges.isEmpty
        }
        for appID in full { buckets.removeValue(forKey: appID) }
    }
}

/// One app's token bucket for content-available wakes, as `ContentAvailableQueue` keeps it and
/// the agent stores it: the times of the tokens spent that have not come back yet, each an hour
/// after it was spent. What is left is `perHour` less their number.
public struct ContentAvailableBucket: Sendable, Equatable {
    /// When each token not yet back was spent, oldest first.
    public var charges: [UnixTime]

    public init(charges: [UnixTime]) {
        self.charges = charges
    }

    /// The bucket an earlier agent stored as `tokens` left at `updatedAt`, refilling
    /// continuously: it does not say when its tokens were spent, nor how many wakes that rule let
    /// through in the hour before (up to 5 at 3 an hour). So a bucket short of any token counts as
    /// spent whole at `updatedAt`, and gives nothing until an hour after it: the hour that
    /// follows the old agent's last wake adds none to what it let through. A full one, or one
    /// with more, is empty of charges.
    public init(tokens: Double, updatedAt: UnixTime, perHour: Int) {
        let full = tokens >= Double(max(perHour, 0))
        self.charges = full ? [] : Array(repeating: updatedAt, count: max(perHour, 0))
    }

    /// What is left of `capacity` tokens: 0 when there are more charges than that.
    func tokens(capacity: Double) -> Double {
        max(capacity - Double(charges.count), 0)
    }
}
