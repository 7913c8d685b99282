import Testing

@testable import BGPolicyCore

/// Idle for processing work: a locked session, logind's `IdleHint`, or no input for
/// `[idle] no_input_after` (the desktop's idle monitor), from whichever of logind and the idle
/// monitor are live.
@Suite("Idle conditions")
struct IdleConditionsTests {
    struct Case: Sendable, CustomTestStringConvertible {
        let label: String
        let session: SessionSample?
        let input: InputSample?
        let idle: Bool?
        let forProcessing: Bool?
        let sources: Set<ConditionSourceName>
        var testDescription: String { label }
    }

    static let cases: [Case] = [
        Case(label: "no source", session: nil, input: nil, idle: nil, forProcessing: nil, sources: []),
        Case(label: "logind only, in use", session: SessionSample(locked: false, idleHint: false), input: nil,
             idle: false, forProcessing: false, sources: [.logind]),
        Case(label: "logind only, locked", session: SessionSample(locked: true, idleHint: false), input: nil,
             idle: false, forProcessing: true, sources: [.logind]),
        Case(label: "logind only, IdleHint", session: SessionSample(locked: false, idleHint: true), input: nil,
             idle: true, forProcessing: true, sources: [.logind]),
        Case(label: "idle monitor only, recent input", session: nil, input: InputSample(noInput: false),
             idle: false, forProcessing: false, sources: [.mutter]),
        Case(label: "idle monitor only, no input", session: nil, input: InputSample(noInput: true),
             idle: true, forProcessing: true, sources: [.mutter]),
        Case(label: "both, in use", session: SessionSample(locked: false, idleHint: false), input: InputSample(noInput: false),
             idle: false, forProcessing: false, sources: [.logind, .mutter]),
        Case(label: "no input while IdleHint is stale (GNOME)", session: SessionSample(locked: false, idleHint: false),
             input: InputSample(noInput: true), idle: true, forProcessing: true, sources: [.logind, .mutter]),
        Case(label: "IdleHint while the monitor saw input", session: SessionSample(locked: false, idleHint: true),
             input: InputSample(noInput: false), idle: true, forProcessing: true, sources: [.logind, .mutter]),
        Case(label: "locked with recent input", session: SessionSample(locked: true, idleHint: false),
             input: InputSample(noInput: false), idle: false, forProcessing: true, sources: [.logind, .mutter]),
    ]

    @Test("idle and idle-for-processing from logind and the idle monitor", arguments: cases)
    func combined(_ c: Case) {
        var model = ConditionsModel()
        if let session = c.session { model.apply(.session(session), from: .logind) }
        if let input = c.input { model.apply(.input(input), from: .mutter) }
        let conditions = model.conditions
        #expect(conditions.idle == c.idle)
        #expect(conditions.noInput == c.input?.noInput)
        #expect(conditions.locked == c.session?.locked)
        #expect(conditions.isIdleForProcessing == c.forProcessing)
        #expect(conditions.sources == c.sources)
    }

    struct FieldCase: Sendable, CustomTestStringConvertible {
        let locked: Bool?
        let idle: Bool?
        let noInput: Bool?
        let expected: Bool?
        var testDescription: String { "locked \(String(describing: locked)), idle \(String(describing: idle)), noInput \(String(describing: noInput))" }
    }

    /// `isIdleForProcessing` on the fields alone, as the planner's tests set them: any one that
    /// holds is enough; unknown only when all three are.
    static let fieldCases: [FieldCase] = {
        let values: [Bool?] = [nil, false, true]
        var cases: [FieldCase] = []
        for locked in values {
            for idle in values {
                for noInput in values {
                    let all = [locked, idle, noInput]
                    let expected: Bool? =
                        all.contains(true) ? true : all.allSatisfy { $0 == nil } ? nil : false
                    cases.append(FieldCase(locked: locked, idle: idle, noInput: noInput, expected: expected))
                }
            }
        }
        return cases
    }()

    @Test("locked || idle || no input", arguments: fieldCases)
    func fields(_ c: FieldCase) {
        var conditions = Conditions()
        conditions.locked = c.locked
        conditions.idle = c.idle
        conditions.noInput = c.noInput
        #expect(conditions.isIdleForProcessing == c.expected)
    }

    @Test("the idle monitor going away takes exactly its own facts with it")
    func monitorLost() {
        var model = ConditionsModel()
        model.apply(.session(SessionSample(locked: false, idleHint: false)), from: .logind)
        let changed = model.apply(.input(InputSample(noInput: true)), from: .mutter)
        #expect(changed)
        #expect(model.conditions.isIdleForProcessing == true)
        let lost = model.apply(.lost, from: .mutter)
        #expect(lost)
        #expect(model.conditions.noInput == nil)
        #expect(model.conditions.idle == false)
        #expect(model.conditions.locked == false)
        #expect(model.conditions.isIdleForProcessing == false)
        #expect(model.conditions.sources == [.logind])
        // A repeated report changes nothing.
        model.apply(.input(InputSample(noInput: false)), from: .mutter)
        let repeated = model.apply(.input(InputSample(noInput: false)), from: .mutter)
        #expect(!repeated)
    }

    @Test("the summary says idle or in use from the idle monitor alone")
    func summary() {
        var model = ConditionsModel()
        model.apply(.input(InputSample(noInput: true)), from: .mutter)
        #expect(model.conditions.summary.hasSuffix(" — idle"), "\(model.conditions.summary)")
        model.apply(.input(InputSample(noInput: false)), from: .mutter)
        #expect(model.conditions.summary.hasSuffix(" — in use"), "\(model.conditions.summary)")
    }
}
