internal import CBGPolicyDBus
import Synchronization

/// The last reply each immediate method sent, as libdbus loaded it, so that the same reply
/// again is sent without being written and validated again (`ObjectServer` uses it for the
/// methods answered on the connection's thread, which read a snapshot).
///
/// `Message.encode` checks a message's values, writes it in the wire format and has libdbus
/// load it, which validates it whole: for `GetStatus`'s dictionary of some twenty variants this
/// was over half the agent's time per call. A reply whose body is equal, value for value, to
/// the last one of its method is instead a copy of that one (`dbus_message_copy`, which
/// validates nothing) with the call's reply serial, and its destination when that differs: the
/// values were checked and the bytes validated when the first was sent. Values are compared as
/// Swift compares them, so a -0.0 where the last reply had 0.0 goes as 0.0. One reply is kept
/// per method, the last one written; it is only ever copied, never sent or changed.
///
/// A reply that carries a Unix file descriptor is never kept. A kept reply holds its body's
/// descriptors open (the `UnixFD`s of the body, and libdbus's duplicates in the message) until
/// the method answers something else: the write end of a pipe handed out would never reach
/// end-of-file at the reader, and a descriptor that stands for a hold (as logind's inhibitors
/// do) would not be released when the caller closes it.
final class ReplyTemplates: Sendable {
    /// A method, by the interface and member its call named (no string is built per call).
    struct Method: Hashable, Sendable {
        var interface: String?
        var member: String?
    }

    private struct Template {
        let body: [DBusValue]
        let destination: String?
        let message: RawMessage
    }

    private let templates = Mutex<[Method: Template]>([:])

    /// A copy of the last reply of `method`, made the answer to `reply`'s call, if its body is
    /// the same; nil if not (or if `reply` is not a plain method return).
    func copy(for reply: Message, method: Method) throws(DBusError) -> RawMessage? {
        guard Self.isPlainReturn(reply),
            let template = templates.withLock({ $0[method].flatMap { $0.body == reply.body ? $0 : nil } })
        else { return nil }
        let copy = try template.message.unsentCopy()
        guard dbus_message_set_reply_serial(copy.pointer, reply.replySerial) != 0 else { throw .outOfMemory }
        if reply.destination != template.destination {
            let set = reply.destination.map { $0.withCString { dbus_message_set_destination(copy.pointer, $0) } }
                ?? dbus_message_set_destination(copy.pointer, nil)
            guard set != 0 else { throw .outOfMemory }
        }
        return copy
    }

    /// Keeps `message`, just encoded from `reply`, as the last reply of `method` (if `reply` is
    /// a plain method return without descriptors). It must not be sent itself: sending gives a
    /// message its serial.
    func keep(_ message: RawMessage, for reply: Message, method: Method) {
        guard Self.isPlainReturn(reply), dbus_message_contains_unix_fds(message.pointer) == 0 else { return }
        templates.withLock { $0[method] = Template(body: reply.body, destination: reply.destination, message: message) }
    }

    /// A method return with no header field but its reply serial, destination and signature,
    /// and no flags: a copy differs from it in those two fields only.
    private static func isPlainReturn(_ m: Message) -> Bool {
        m.kind == .methodReturn && m.path == nil && m.interface == nil && m.member == nil && m.errorName == nil
            && m.sender == nil && !m.noReplyExpected && !m.noAutoStart && !m.allowInteractiveAuthorization
    }
}
