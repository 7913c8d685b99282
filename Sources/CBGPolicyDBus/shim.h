#ifndef CBGPOLICY_DBUS_SHIM_H
#define CBGPOLICY_DBUS_SHIM_H
// Only what Swift cannot import by itself: libdbus, and the Linux event primitives the
// connection's owner thread sleeps on (Glibc's module map leaves these out).
#include <dbus/dbus.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#endif
