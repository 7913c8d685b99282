/// One line of a usage trace (SPEC §4): at `time` (Unix seconds, possibly fractional) the user
/// opened or closed `appID`.
public struct UsageEvent: Sendable, Equatable {
    public enum Kind: String, Sendable, CaseIterable { case open, close }
    public let time: Double
    public let appID: String
    public let kind: Kind
    public init(time: Double, appID: String, kind: Kind) {
        self.time = time
        self.appID = appID
        self.kind = kind
    }
}
