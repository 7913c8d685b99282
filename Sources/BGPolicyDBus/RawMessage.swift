internal import CBGPolicyDBus

/// Owns one reference to a libdbus `DBusMessage`. Never leaves this module.
///
/// The initialiser's label says who owns the reference (STYLE.md example 5):
/// `taking:` adopts a reference the caller already owns; `retaining:` adds one.
///
/// It is `@unchecked Sendable` because a message is built on one thread and then handed,
/// whole, to the connection's thread: it is never used by two threads at once, and libdbus
/// counts message references atomically.
final class RawMessage: @unchecked Sendable {
    let pointer: OpaquePointer

    init(taking pointer: OpaquePointer) {
        self.pointer = pointer
    }

    init(retaining pointer: OpaquePointer) {
        dbus_message_ref(pointer)
        self.pointer = pointer
    }

    deinit {
        dbus_message_unref(pointer)
    }
}

/// Runs `body` with an initialised libdbus error, and returns what it set, if anything.
/// The libdbus error is always freed.
func withCError<R>(
    _ body: (UnsafeMutablePointer<CBGPolicyDBus.DBusError>) -> R
) -> (result: R, error: (name: String, message: String)?) {
    var raw = CBGPolicyDBus.DBusError()
    dbus_error_init(&raw)
    defer { dbus_error_free(&raw) }
    let result = body(&raw)
    guard dbus_error_is_set(&raw) != 0 else { return (result, nil) }
    let name = raw.name.map { String(cString: $0) } ?? "org.freedesktop.DBus.Error.Failed"
    let message = raw.message.map { String(cString: $0) } ?? ""
    return (result, (name, message))
}
