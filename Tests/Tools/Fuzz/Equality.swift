import BGPolicyDBus

/// Exact structural comparison for round trips. `DBusValue`'s own `==` is not what a round
/// trip promises: doubles compare by value (NaN != NaN, -0 == 0) and strings by canonical
/// equivalence. The wire carries bits and bytes, so this compares bits and bytes.
enum Same {
    static func values(_ a: DBusValue, _ b: DBusValue) -> Bool {
        switch (a, b) {
        case (.byte(let x), .byte(let y)): x == y
        case (.boolean(let x), .boolean(let y)): x == y
        case (.int16(let x), .int16(let y)): x == y
        case (.uint16(let x), .uint16(let y)): x == y
        case (.int32(let x), .int32(let y)): x == y
        case (.uint32(let x), .uint32(let y)): x == y
        case (.int64(let x), .int64(let y)): x == y
        case (.uint64(let x), .uint64(let y)): x == y
        case (.double(let x), .double(let y)): x.bitPattern == y.bitPattern
        case (.string(let x), .string(let y)): strings(x, y)
        case (.objectPath(let x), .objectPath(let y)): strings(x.rawValue, y.rawValue)
        case (.signature(let x), .signature(let y)): strings(x.rawValue, y.rawValue)
        case (.unixFD, .unixFD): true  // descriptors are duplicated on every hop
        case (.variant(let x), .variant(let y)): values(x, y)
        case (.array(let ex, let x), .array(let ey, let y)):
            ex == ey && x.count == y.count && zip(x, y).allSatisfy { values($0, $1) }
        case (.dictionary(let kx, let vx, let x), .dictionary(let ky, let vy, let y)):
            kx == ky && vx == vy && x.count == y.count
                && zip(x, y).allSatisfy { values($0.key, $1.key) && values($0.value, $1.value) }
        case (.structure(let x), .structure(let y)):
            x.count == y.count && zip(x, y).allSatisfy { values($0, $1) }
        default: false
        }
    }

    static func bodies(_ a: [DBusValue], _ b: [DBusValue]) -> Bool {
        a.count == b.count && zip(a, b).allSatisfy { values($0, $1) }
    }

    static func strings(_ a: String, _ b: String) -> Bool { a.utf8.elementsEqual(b.utf8) }

    static func optionalStrings(_ a: String?, _ b: String?) -> Bool {
        switch (a, b) {
        case (nil, nil): true
        case (let x?, let y?): strings(x, y)
        default: false
        }
    }

    /// The first difference between two messages, or nil. `serial` is compared as given.
    static func difference(_ a: Message, _ b: Message, compareSerial: Bool = true) -> String? {
        if a.kind != b.kind { return "kind \(a.kind) vs \(b.kind)" }
        if compareSerial && a.serial != b.serial { return "serial \(a.serial) vs \(b.serial)" }
        if a.replySerial != b.replySerial { return "replySerial \(a.replySerial) vs \(b.replySerial)" }
        if !optionalStrings(a.path?.rawValue, b.path?.rawValue) { return "path \(String(describing: a.path)) vs \(String(describing: b.path))" }
        if !optionalStrings(a.interface, b.interface) { return "interface \(a.interface ?? "nil") vs \(b.interface ?? "nil")" }
        if !optionalStrings(a.member, b.member) { return "member \(a.member ?? "nil") vs \(b.member ?? "nil")" }
        if !optionalStrings(a.errorName, b.errorName) { return "errorName \(a.errorName ?? "nil") vs \(b.errorName ?? "nil")" }
        if !optionalStrings(a.destination, b.destination) { return "destination \(a.destination ?? "nil") vs \(b.destination ?? "nil")" }
        if !optionalStrings(a.sender, b.sender) { return "sender \(a.sender ?? "nil") vs \(b.sender ?? "nil")" }
        if a.noReplyExpected != b.noReplyExpected { return "noReplyExpected" }
        if a.noAutoStart != b.noAutoStart { return "noAutoStart" }
        if a.allowInteractiveAuthorization != b.allowInteractiveAuthorization { return "allowInteractiveAuthorization" }
        if !bodies(a.body, b.body) {
            return "body \"\(a.body.signatureText)\" \(a.body.description.prefix(200)) vs \"\(b.body.signatureText)\" \(b.body.description.prefix(200))"
        }
        return nil
    }
}
