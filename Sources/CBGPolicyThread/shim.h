#ifndef CBGPOLICY_THREAD_SHIM_H
#define CBGPOLICY_THREAD_SHIM_H
// Names the calling thread, as `top -H`, `ps -L`, gdb and /proc/PID/task/TID/comm show it:
// prctl(PR_SET_NAME), which Swift cannot call (it is variadic), and pthread_setname_np, which
// Glibc's module map leaves out (it needs _GNU_SOURCE). At most 15 bytes are kept. Part of
// the C library: nothing to link.
#include <sys/prctl.h>

static inline int bgpolicy_name_this_thread(const char *name) {
    return prctl(PR_SET_NAME, (unsigned long)name, 0UL, 0UL, 0UL);
}
#endif
