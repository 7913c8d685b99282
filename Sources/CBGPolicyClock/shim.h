#ifndef CBGPOLICY_CLOCK_SHIM_H
#define CBGPOLICY_CLOCK_SHIM_H
// timerfd, which Glibc's module map leaves out: the wall-clock watch hears the clock being set
// through it. Part of the C library: nothing to link.
#include <sys/timerfd.h>
#endif
