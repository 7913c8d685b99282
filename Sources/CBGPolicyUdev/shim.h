#ifndef CBGPOLICY_UDEV_SHIM_H
#define CBGPOLICY_UDEV_SHIM_H
// Only what Swift cannot import by itself: libudev, and the eventfd that wakes the udev owner
// thread (Glibc's module map leaves <sys/eventfd.h> out; <poll.h> is listed for clarity).
#include <libudev.h>
#include <poll.h>
#include <sys/eventfd.h>
#endif
