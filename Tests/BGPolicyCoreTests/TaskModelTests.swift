import BGPolicyCore
import Testing

@Suite("Task model")
struct TaskModelTests {
    // MARK: Enums that cross the bus (STYLE.md example 9)

    @Test("TaskKind round-trips", arguments: TaskKind.allCases)
    func taskKind(_ value: TaskKind) { #expect(TaskKind(rawValue: value.rawValue) == value) }

    @Test("DeliveryKind round-trips", arguments: DeliveryKind.allCases)
    func deliveryKind(_ value: DeliveryKind) { #expect(DeliveryKind(rawValue: value.rawValue) == value) }

    @Test("TaskResult round-trips", arguments: TaskResult.allCases)
    func taskResult(_ value: TaskResult) { #expect(TaskResult(rawValue: value.rawValue) == value) }

    @Test("UsageState round-trips", arguments: UsageState.allCases)
    func usageState(_ value: UsageState) { #expect(UsageState(rawValue: value.rawValue) == value) }

    @Test("RefreshStatus round-trips", arguments: RefreshStatus.allCases)
    func refreshStatus(_ value: RefreshStatus) { #expect(RefreshStatus(rawValue: value.rawValue) == value) }

    @Test("IdentitySource round-trips", arguments: IdentitySource.allCases)
    func identitySource(_ value: IdentitySource) { #expect(IdentitySource(rawValue: value.rawValue) == value) }

    @Test("HistoryEvent round-trips", arguments: HistoryEvent.allCases)
    func historyEvent(_ value: HistoryEvent) { #expect(HistoryEvent(rawValue: value.rawValue) == value) }

    @Test("BlockingRule round-trips", arguments: BlockingRule.allCases)
    func blockingRule(_ value: BlockingRule) { #expect(BlockingRule(rawValue: value.rawValue) == value) }

    @Test("the words on the bus are the contract's", arguments: [
        (TaskKind.allCases.map(\.rawValue), ["refresh", "processing"]),
        (DeliveryKind.allCases.map(\.rawValue), ["refresh", "processing", "content-available", "transfers"]),
        (TaskResult.allCases.map(\.rawValue), ["new-data", "no-data", "failed", ""]),
        (UsageState.allCases.map(\.rawValue), ["foreground", "background"]),
        (RefreshStatus.allCases.map(\.rawValue), ["available", "denied", "restricted"]),
        (IdentitySource.allCases.map(\.rawValue), ["flatpak", "snap", "systemd-unit", "unverified"]),
        (BlockingRule.allCases.map(\.rawValue), [
            "global-disabled", "app-disabled", "earliest-begin", "critical-battery", "low-battery", "power-saver",
            "not-idle", "no-network", "no-external-power", "app-inactive", "overrun-penalty", "unreachable",
            "app-busy", "sleeping", "next-window", "predicted-use", "refresh-interval",
        ]),
    ])
    func contractWords(raws: [String], expected: [String]) { #expect(raws == expected) }

    @Test("history events are distinct, lowercase words")
    func historyWords() {
        let raws = HistoryEvent.allCases.map(\.rawValue)
        #expect(Set(raws).count == raws.count)
        #expect(raws.allSatisfy { !$0.isEmpty && $0 == $0.lowercased() && !$0.contains(" ") })
    }

    @Test("violations are the overruns and CPU enforcement")
    func violations() {
        #expect(Set(HistoryEvent.allCases.filter(\.isViolation)) == [
            .expired, .backgroundTaskExpired, .cpuThrottled, .cpuFrozen, .cpuStopped, .cpuObserved,
        ])
    }

    @Test("a submitted kind is delivered under the same word", arguments: TaskKind.allCases)
    func deliveryFromTask(_ kind: TaskKind) { #expect(DeliveryKind(kind).rawValue == kind.rawValue) }

    @Test("only a claimed id is unverified", arguments: IdentitySource.allCases)
    func verified(_ source: IdentitySource) { #expect(source.isVerified == (source != .unverified)) }

    // MARK: App ids and task identifiers

    @Test("app ids accepted", arguments: [
        "org.gnome.Maps", "firefox-esr", "a", "A_b-1.c2", "org.example.App_2", "0.1", "org.-x", "x-",
        String(repeating: "a", count: 255), String(repeating: "ab.", count: 84) + "abc",
    ])
    func appIDAccepted(_ text: String) {
        #expect(AppID.problem(with: text) == nil)
        #expect(AppID(rawValue: text)?.rawValue == text)
    }

    @Test("app ids rejected, with the reason", arguments: [
        ("", "may not be empty"),
        (".org.example", "may not begin or end with a dot"),
        ("org.example.", "may not begin or end with a dot"),
        ("org..example", "two dots in a row"),
        ("org.example/App", "holds only ASCII letters, digits"),
        ("-org.example", "may not begin with '-'"),
        ("--help", "may not begin with '-'"),
        ("org example", "holds only ASCII letters, digits"),
        ("org.exämple", "holds only ASCII letters, digits"),
        ("org.example\n", "holds only ASCII letters, digits"),
        (String(repeating: "a", count: 256), "at most 255 bytes"),
        // 128 two-byte characters: 256 bytes, though only 128 characters.
        (String(repeating: "é", count: 128), "at most 255 bytes"),
    ])
    func appIDRejected(_ text: String, reason: String) {
        #expect(AppID(rawValue: text) == nil)
        #expect(AppID.problem(with: text)?.contains(reason) == true)
    }

    @Test("app ids order and print by their text")
    func appIDOrder() {
        let ids = ["org.b", "org.a.Z", "org.a"].compactMap(AppID.init(rawValue:))
        #expect(ids.sorted().map(\.description) == ["org.a", "org.a.Z", "org.b"])
    }

    @Test("task identifiers accepted", arguments: [
        "org.example.App.refresh", "refresh", "a-b_c", "a..b", ".hidden", "x-", String(repeating: "x", count: 255),
    ])
    func identifierAccepted(_ text: String) { #expect(TaskIdentifier.problem(with: text) == nil) }

    @Test("task identifiers rejected, with the reason", arguments: [
        ("", "may not be empty"),
        ("a b", "holds only ASCII letters, digits"),
        ("-refresh", "may not begin with '-'"),
        ("org/example", "holds only ASCII letters, digits"),
        ("résumé", "holds only ASCII letters, digits"),
        ("tab\t", "holds only ASCII letters, digits"),
        (String(repeating: "x", count: 256), "at most 255 bytes"),
    ])
    func identifierRejected(_ text: String, reason: String) {
        #expect(TaskIdentifier.problem(with: text)?.contains(reason) == true)
    }

    @Test("a record keeps its identifiers sorted")
    func recordSortsIdentifiers() {
        let record = AppRecord(
            appID: AppID(rawValue: "org.example.App")!, identifiers: ["b", "c", "a"], identity: .flatpak, registeredAt: 0)
        #expect(record.identifiers == ["a", "b", "c"])
    }
}
