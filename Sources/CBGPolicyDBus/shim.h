#ifndef CBGPOLICY_DBUS_SHIM_H
#define CBGPOLICY_DBUS_SHIM_H
// Only what Swift cannot import by itself: libdbus, and the Linux event primitives the
// connection's owner thread sleeps on (Glibc's module map leaves these out).
#include <dbus/dbus.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>

// An array's length in bytes on the wire, from its header: what measuring a call's arguments
// needs, without a step per element. libdbus marks it deprecated ("you do not want to know
// that probably"); we do, and it is exported and stable.
static inline int bgpolicy_dbus_iter_array_bytes(DBusMessageIter *iter) {
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
    return dbus_message_iter_get_array_len(iter);
#pragma GCC diagnostic pop
}
#endif
