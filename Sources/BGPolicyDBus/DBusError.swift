/// Everything that can go wrong in the D-Bus layer.
///
/// `.remote` keeps a peer's error name and message exactly as sent, so callers can match on
/// `org.bgpolicy.Error.*` names; the other cases are local failures with a message a person
/// can act on.
public enum DBusError: Error, Sendable, Equatable {
    /// An error reply from a peer (or synthesised by libdbus, such as `NoReply`).
    case remote(name: String, message: String)
    /// A signature that breaks the specification.
    case invalidSignature(String, reason: String)
    /// A name or path that breaks the specification.
    case invalidName(String, kind: String)
    /// A value that does not fit its declared type, or cannot be sent.
    case invalidValue(String)
    /// A message longer than D-Bus, or the bound it was built under, allows (an array over
    /// 64 MiB, a message over 128 MiB or `ObjectServer.Limits.maximumReplyBytes`): the words
    /// say which, and how long it was. Nothing was sent.
    case limitsExceeded(String)
    /// Arguments that do not have the expected types.
    case typeMismatch(expected: String, got: String)
    /// A message that could not be decoded.
    case malformedMessage(String)
    /// The connection could not be opened.
    case connectionFailed(name: String, message: String)
    /// The connection is closed or was lost.
    case disconnected
    /// libdbus could not allocate memory.
    case outOfMemory
    /// A local programming error in how the layer was used, such as exporting twice.
    case usage(String)

    /// The D-Bus error name for this error, when it is sent back to a caller.
    public var name: String {
        switch self {
        case .remote(let name, _): name
        case .invalidSignature, .typeMismatch, .invalidValue, .invalidName: "org.freedesktop.DBus.Error.InvalidArgs"
        case .malformedMessage: "org.freedesktop.DBus.Error.InvalidArgs"
        case .limitsExceeded: "org.freedesktop.DBus.Error.LimitsExceeded"
        case .connectionFailed(let name, _): name
        case .disconnected: "org.freedesktop.DBus.Error.Disconnected"
        case .outOfMemory: "org.freedesktop.DBus.Error.NoMemory"
        case .usage: "org.freedesktop.DBus.Error.Failed"
        }
    }

    public var message: String {
        switch self {
        case .remote(_, let message): message
        case .invalidSignature(let text, let reason): "invalid D-Bus signature \"\(text)\": \(reason)"
        case .invalidName(let text, let kind): "invalid D-Bus \(kind) \"\(text)\""
        case .invalidValue(let why): why
        case .limitsExceeded(let why): why
        case .typeMismatch(let expected, let got): "expected arguments of type \"\(expected)\", got \"\(got)\""
        case .malformedMessage(let why): "malformed message: \(why)"
        case .connectionFailed(_, let message): message
        case .disconnected: "the D-Bus connection is closed"
        case .outOfMemory: "out of memory in libdbus"
        case .usage(let why): why
        }
    }

    /// Well-known error names, for matching.
    public static let noReply = "org.freedesktop.DBus.Error.NoReply"
    public static let serviceUnknown = "org.freedesktop.DBus.Error.ServiceUnknown"
    public static let nameHasNoOwner = "org.freedesktop.DBus.Error.NameHasNoOwner"
    public static let unknownMethod = "org.freedesktop.DBus.Error.UnknownMethod"
    public static let timedOut = "org.freedesktop.DBus.Error.Timeout"
}

extension DBusError: CustomStringConvertible {
    public var description: String {
        switch self {
        case .remote(let name, let message): "\(name): \(message)"
        default: message
        }
    }
}
