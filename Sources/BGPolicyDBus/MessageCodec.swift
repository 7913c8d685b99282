internal import CBGPolicyDBus
import Glibc

/// Reading and writing D-Bus values through libdbus's iterators.
///
/// Reading never traps: every type code and every nested signature is checked, and anything
/// unexpected becomes `DBusError.malformedMessage`. Writing validates the whole value first,
/// because libdbus aborts the process when handed invalid data.
enum MessageCodec {
    static let invalidTypeCode: Int32 = 0

    // MARK: Reading

    static func readAll(from message: OpaquePointer) throws(DBusError) -> [DBusValue] {
        var iter = DBusMessageIter()
        guard dbus_message_iter_init(message, &iter) != 0 else { return [] }  // empty body
        var values: [DBusValue] = []
        while dbus_message_iter_get_arg_type(&iter) != invalidTypeCode {
            values.append(try read(&iter, depth: 0))
            dbus_message_iter_next(&iter)
        }
        return values
    }

    /// The complete type at the iterator's position, from libdbus's own signature text.
    private static func currentType(_ iter: inout DBusMessageIter) throws(DBusError) -> DBusType {
        guard let raw = dbus_message_iter_get_signature(&iter) else { throw .outOfMemory }
        defer { dbus_free(raw) }
        let text = String(cString: raw)
        do {
            return try DBusType(signature: text)
        } catch {
            throw .malformedMessage("unreadable type signature \"\(text)\"")
        }
    }

    private static func read(_ iter: inout DBusMessageIter, depth: Int) throws(DBusError) -> DBusValue {
        guard depth <= DBusValue.maximumDepth else { throw .malformedMessage("values nested too deeply") }
        let code = dbus_message_iter_get_arg_type(&iter)
        switch code {
        case DBusType.byte.typeCode:
            var v: UInt8 = 0
            dbus_message_iter_get_basic(&iter, &v)
            return .byte(v)
        case DBusType.boolean.typeCode:
            var v: dbus_bool_t = 0
            dbus_message_iter_get_basic(&iter, &v)
            return .boolean(v != 0)
        case DBusType.int16.typeCode:
            var v: Int16 = 0
            dbus_message_iter_get_basic(&iter, &v)
            return .int16(v)
        case DBusType.uint16.typeCode:
            var v: UInt16 = 0
            dbus_message_iter_get_basic(&iter, &v)
            return .uint16(v)
        case DBusType.int32.typeCode:
            var v: Int32 = 0
            dbus_message_iter_get_basic(&iter, &v)
            return .int32(v)
        case DBusType.uint32.typeCode:
            var v: UInt32 = 0
            dbus_message_iter_get_basic(&iter, &v)
            return .uint32(v)
        case DBusType.int64.typeCode:
            var v: Int64 = 0
            dbus_message_iter_get_basic(&iter, &v)
            return .int64(v)
        case DBusType.uint64.typeCode:
            var v: UInt64 = 0
            dbus_message_iter_get_basic(&iter, &v)
            return .uint64(v)
        case DBusType.double.typeCode:
            var v: Double = 0
            dbus_message_iter_get_basic(&iter, &v)
            return .double(v)
        case DBusType.string.typeCode:
            return .string(readString(&iter))
        case DBusType.objectPath.typeCode:
            let text = readString(&iter)
            do { return .objectPath(try ObjectPath(text)) } catch {
                throw .malformedMessage("invalid object path \"\(text)\"")
            }
        case DBusType.signature.typeCode:
            let text = readString(&iter)
            do { return .signature(try Signature(text)) } catch {
                throw .malformedMessage("invalid signature value \"\(text)\"")
            }
        case DBusType.unixFD.typeCode:
            var fd: Int32 = -1
            dbus_message_iter_get_basic(&iter, &fd)  // libdbus hands us a duplicate we own
            guard fd >= 0 else { throw .malformedMessage("a file descriptor argument refers to no passed descriptor") }
            return .unixFD(UnixFD(taking: fd))
        case DBusType.variant.typeCode:
            var sub = DBusMessageIter()
            dbus_message_iter_recurse(&iter, &sub)
            guard dbus_message_iter_get_arg_type(&sub) != invalidTypeCode else {
                throw .malformedMessage("empty variant")
            }
            return .variant(try read(&sub, depth: depth + 1))
        case 97:  // 'a'
            let type = try currentType(&iter)
            var sub = DBusMessageIter()
            dbus_message_iter_recurse(&iter, &sub)
            switch type {
            case .array(let element):
                var items: [DBusValue] = []
                while dbus_message_iter_get_arg_type(&sub) != invalidTypeCode {
                    let item = try read(&sub, depth: depth + 1)
                    guard item.type == element else { throw .malformedMessage("array element does not match its type") }
                    items.append(item)
                    dbus_message_iter_next(&sub)
                }
                return .array(element: element, items)
            case .dictionary(let keyType, let valueType):
                var entries: [DBusDictEntry] = []
                while dbus_message_iter_get_arg_type(&sub) != invalidTypeCode {
                    var entry = DBusMessageIter()
                    dbus_message_iter_recurse(&sub, &entry)
                    let key = try read(&entry, depth: depth + 2)
                    guard dbus_message_iter_next(&entry) != 0 else { throw .malformedMessage("dictionary entry without a value") }
                    let value = try read(&entry, depth: depth + 2)
                    guard key.type == keyType, value.type == valueType else {
                        throw .malformedMessage("dictionary entry does not match its type")
                    }
                    entries.append(DBusDictEntry(key: key, value: value))
                    dbus_message_iter_next(&sub)
                }
                return .dictionary(key: keyType, value: valueType, entries)
            default:
                throw .malformedMessage("array with signature \"\(type.signature)\"")
            }
        case 114:  // 'r', a struct
            var sub = DBusMessageIter()
            dbus_message_iter_recurse(&iter, &sub)
            var fields: [DBusValue] = []
            while dbus_message_iter_get_arg_type(&sub) != invalidTypeCode {
                fields.append(try read(&sub, depth: depth + 1))
                dbus_message_iter_next(&sub)
            }
            guard !fields.isEmpty else { throw .malformedMessage("empty struct") }
            return .structure(fields)
        default:
            throw .malformedMessage("unexpected type code \(code)")
        }
    }

    private static func readString(_ iter: inout DBusMessageIter) -> String {
        var p: UnsafePointer<CChar>? = nil
        dbus_message_iter_get_basic(&iter, &p)
        guard let p else { return "" }
        // Repairs invalid UTF-8 rather than trapping; libdbus has already validated it.
        return String(cString: p)
    }

    // MARK: Writing

    /// Validates a body before it is written, by either writer: every value (`validate`), and
    /// the body's signature length.
    static func checkBody(_ values: [DBusValue]) throws(DBusError) {
        var signatureLength = 0
        for value in values {
            try value.validate()
            signatureLength += value.type.signatureLength
        }
        // Given a longer body signature, libdbus loops forever ("type unknown not a basic
        // type"); no peer could load such a message anyway.
        guard signatureLength <= Signature.maximumLength else {
            throw .invalidValue("the body's signature is longer than \(Signature.maximumLength) bytes")
        }
    }

    /// Appends `values`, which `checkBody` has passed, through libdbus's iterators (the writer
    /// for bodies that carry Unix file descriptors; `WireWriter` writes the others).
    static func append(_ values: [DBusValue], to message: OpaquePointer) throws(DBusError) {
        var iter = DBusMessageIter()
        dbus_message_iter_init_append(message, &iter)
        for value in values {
            try write(value, into: &iter)
        }
    }

    private static func ok(_ result: dbus_bool_t) throws(DBusError) {
        guard result != 0 else { throw .outOfMemory }
    }

    private static func write(_ value: DBusValue, into iter: inout DBusMessageIter) throws(DBusError) {
        switch value {
        case .byte(var v): try ok(dbus_message_iter_append_basic(&iter, value.type.typeCode, &v))
        case .boolean(let b):
            var v: dbus_bool_t = b ? 1 : 0
            try ok(dbus_message_iter_append_basic(&iter, value.type.typeCode, &v))
        case .int16(var v): try ok(dbus_message_iter_append_basic(&iter, value.type.typeCode, &v))
        case .uint16(var v): try ok(dbus_message_iter_append_basic(&iter, value.type.typeCode, &v))
        case .int32(var v): try ok(dbus_message_iter_append_basic(&iter, value.type.typeCode, &v))
        case .uint32(var v): try ok(dbus_message_iter_append_basic(&iter, value.type.typeCode, &v))
        case .int64(var v): try ok(dbus_message_iter_append_basic(&iter, value.type.typeCode, &v))
        case .uint64(var v): try ok(dbus_message_iter_append_basic(&iter, value.type.typeCode, &v))
        case .double(var v): try ok(dbus_message_iter_append_basic(&iter, value.type.typeCode, &v))
        case .string(let s): try appendString(s, code: value.type.typeCode, into: &iter)
        case .objectPath(let p): try appendString(p.rawValue, code: value.type.typeCode, into: &iter)
        case .signature(let g): try appendString(g.rawValue, code: value.type.typeCode, into: &iter)
        case .unixFD(let fd):
            // libdbus reports a failed dup as out of memory; say what is really wrong.
            guard fcntl(fd.rawValue, F_GETFD) >= 0 else { throw .invalidValue("file descriptor \(fd.rawValue) is not open") }
            var raw = fd.rawValue  // libdbus duplicates it
            try ok(dbus_message_iter_append_basic(&iter, value.type.typeCode, &raw))
        case .variant(let inner):
            try container(&iter, code: DBusType.variant.typeCode, signature: inner.type.signature) { sub throws(DBusError) in
                try write(inner, into: &sub)
            }
        case .array(let element, let items):
            try container(&iter, code: 97, signature: element.signature) { sub throws(DBusError) in
                for item in items { try write(item, into: &sub) }
            }
        case .dictionary(let key, let valueType, let entries):
            let entrySignature = "{" + key.signature + valueType.signature + "}"
            try container(&iter, code: 97, signature: entrySignature) { sub throws(DBusError) in
                for entry in entries {
                    try container(&sub, code: 101, signature: nil) { e throws(DBusError) in  // 'e'
                        try write(entry.key, into: &e)
                        try write(entry.value, into: &e)
                    }
                }
            }
        case .structure(let fields):
            try container(&iter, code: 114, signature: nil) { sub throws(DBusError) in
                for field in fields { try write(field, into: &sub) }
            }
        }
    }

    private static func appendString(_ s: String, code: Int32, into iter: inout DBusMessageIter) throws(DBusError) {
        // validate() has ruled out embedded NULs, so the C string is the whole string.
        let result: dbus_bool_t = s.withCString { p in
            var cstr: UnsafePointer<CChar>? = p
            return dbus_message_iter_append_basic(&iter, code, &cstr)
        }
        try ok(result)
    }

    private static func container(
        _ iter: inout DBusMessageIter, code: Int32, signature: String?,
        _ body: (inout DBusMessageIter) throws(DBusError) -> Void
    ) throws(DBusError) {
        var sub = DBusMessageIter()
        let opened: dbus_bool_t
        if let signature {
            opened = signature.withCString { dbus_message_iter_open_container(&iter, code, $0, &sub) }
        } else {
            opened = dbus_message_iter_open_container(&iter, code, nil, &sub)
        }
        try ok(opened)
        do {
            try body(&sub)
        } catch {
            dbus_message_iter_abandon_container(&iter, &sub)
            throw error
        }
        guard dbus_message_iter_close_container(&iter, &sub) != 0 else {
            throw .outOfMemory
        }
    }
}
