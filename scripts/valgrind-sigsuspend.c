/* LD_PRELOADed by scripts/leakcheck.sh under valgrind; never part of bgpolicy.
 *
 * valgrind 3.19 (Debian 12) writes into the signal mask handed to sigsuspend().
 * libdispatch's dispatch_main(), which every Swift `async main` ends in on Linux,
 * passes a mask that lives in read-only memory, and valgrind itself then dies with
 * SIGSEGV ("the 'impossible' happened"). Handing glibc a writable copy of the same
 * mask changes nothing for the program and lets valgrind run it. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <signal.h>

int sigsuspend(const sigset_t *mask) {
    static int (*real_sigsuspend)(const sigset_t *);
    if (real_sigsuspend == NULL)
        real_sigsuspend = (int (*)(const sigset_t *))dlsym(RTLD_NEXT, "sigsuspend");
    sigset_t copy = *mask;
    return real_sigsuspend(&copy);
}
