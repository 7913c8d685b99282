import BGPolicyCore
import Testing

/// `RefreshPlan`: the windows `GetTimeline` draws and `Explain` and `ListPending` read, made
/// as far as asked and gone on with from there. Six apps opened every day at their own hour for
/// three weeks; the plan is made at 06:00 on the day after.
@Suite struct RefreshPlanTests {
    /// Monday 2024-01-08 00:00:00 UTC.
    static let monday: UnixTime = 1_704_672_000
    static func at(day: Int = 21, _ hour: Int, _ minute: Int) -> UnixTime {
        monday + Double(day * 86_400 + hour * 3600 + minute * 60)
    }

    static let habits: [(app: String, hour: Int, minute: Int)] = [
        ("org.example.A", 8, 5), ("org.example.B", 9, 5), ("org.example.C", 12, 35),
        ("org.example.D", 13, 5), ("org.example.E", 18, 35), ("org.example.F", 21, 5),
    ]
    static let now = at(6, 0)
    static let candidates = habits.map { RefreshPlanner.Candidate(appID: $0.app) }

    static func planner() -> RefreshPlanner {
        var refresh = RefreshPlanner(registeredAppCount: habits.count)
        var opens: [(time: UnixTime, app: String)] = []
        for day in 0..<21 {
            for habit in habits { opens.append((at(day: day, habit.hour, habit.minute), habit.app)) }
        }
        for open in opens.sorted(by: { $0.time < $1.time }) { refresh.recordOpen(of: open.app, at: open.time) }
        refresh.advance(to: now)
        return refresh
    }

    static func plan(notBefore: [String: UnixTime] = [:]) -> RefreshPlan {
        RefreshPlan(planner(), from: now, among: candidates, notBefore: notBefore)
    }

    /// The plan is the planner's `nextWindow` one window after another, each recorded as made.
    @Test func thePlanIsTheNextWindowOneAfterAnother() throws {
        var plan = Self.plan()
        plan.extend(through: Self.now + 86_400)
        #expect(plan.windows.count >= 3, "\(plan.windows)")
        #expect(plan.plannedThrough == Self.now + 86_400)
        var future = Self.planner()
        var time = Self.now
        var expected: [RefreshPlan.Window] = []
        while let next = future.nextWindow(after: time, among: Self.candidates, horizon: Self.now + 86_400 - time) {
            expected.append(RefreshPlan.Window(time: next.time, apps: next.apps))
            future.planWindow(at: next.time, refreshing: next.apps)
            time = next.time
        }
        #expect(plan.windows == expected)
        for habit in Self.habits {
            #expect(plan.refreshes[habit.app] ?? [] == expected.filter { $0.apps.contains(habit.app) }.map(\.time))
        }
    }

    /// Made in parts, or up to the first window of one app and then further, the plan is the
    /// one made in one go: it goes on from where it stopped.
    @Test func aPlanMadeInPartsIsThePlanMadeInOneGo() throws {
        var whole = Self.plan()
        whole.extend(through: Self.now + 86_400)
        var parts = Self.plan()
        parts.extend(through: Self.at(11, 0))
        #expect(parts.windows.allSatisfy { $0.time <= Self.at(11, 0) })
        parts.extend(through: Self.now + 86_400)
        #expect(parts.windows == whole.windows)

        var stopped = Self.plan()
        stopped.extend(through: Self.now + 86_400, stoppingAfter: "org.example.D")
        let d = try #require(whole.refreshes["org.example.D"]?.first)
        #expect(stopped.plannedThrough == d)
        #expect(stopped.windows == whole.windows.filter { $0.time <= d })
        stopped.extend(through: Self.now + 86_400)
        #expect(stopped.windows == whole.windows)
    }

    /// `firstWindow(refreshing:after:)` reads the plan; where the plan stopped short of the day
    /// after the time asked about, a copy is planned further, to the same answer.
    @Test func theFirstWindowOfAnAppIsThePlansWhereverThePlanStopped() throws {
        var whole = Self.plan()
        whole.extend(through: Self.now + 2 * 86_400)
        var short = Self.plan()
        short.extend(through: Self.at(12, 0))
        var stopped = Self.plan()
        stopped.extend(through: Self.now + 2 * 86_400, stoppingAfter: "org.example.A")
        var named = 0
        for habit in Self.habits {
            for after in [Self.now, Self.at(10, 0), Self.at(19, 0)] {
                let expected = whole.refreshes[habit.app]?.first { $0 > after && $0 <= after + 86_400 }
                if expected != nil { named += 1 }
                #expect(whole.firstWindow(refreshing: habit.app, after: after) == expected)
                #expect(stopped.firstWindow(refreshing: habit.app, after: after) == expected)
                #expect(short.firstWindow(refreshing: habit.app, after: after) == expected)
            }
        }
        #expect(named >= 12)
        #expect(whole.firstWindow(refreshing: "org.example.Nobody", after: Self.now) == nil)
    }

    /// A refresh held until a time joins the plan then: its first window is the first at or
    /// after the lift. Past the plan's end, the plan goes on from the lift.
    @Test func aHeldRefreshJoinsThePlanAtItsLift() throws {
        let free = Self.plan()
        let lift = Self.at(13, 30)
        var held = Self.plan(notBefore: ["org.example.B": lift])
        held.extend(through: Self.now + 86_400)
        let first = try #require(held.refreshes["org.example.B"]?.first)
        #expect(first >= lift)
        #expect(free.firstWindow(refreshing: "org.example.B", after: Self.now).map { $0 < lift } == true)
        #expect(held.firstWindow(refreshing: "org.example.B", after: lift - 1) == first)

        // Held until two days on, past what was planned: the plan made further, from where it
        // stopped.
        let twoDaysOn = Self.at(day: 23, 6, 0)
        var late = Self.plan(notBefore: ["org.example.B": twoDaysOn])
        late.extend(through: Self.now + 86_400)
        #expect(late.refreshes["org.example.B"] == nil)
        var further = late
        further.extend(through: twoDaysOn + 86_400)
        let window = try #require(further.refreshes["org.example.B"]?.first)
        #expect(window >= twoDaysOn && window <= Self.at(day: 23, 9, 5), "\(window - Self.at(day: 23, 0, 0))")
        #expect(late.firstWindow(refreshing: "org.example.B", after: twoDaysOn - 1) == window)
    }
}
