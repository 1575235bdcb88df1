/* Preloaded before Debian's libfaketime in the fault runner's clock steps (tests/faults/clock.py).
 *
 * libfaketime 0.9.10 shifts the absolute deadline of clock_nanosleep(TIMER_ABSTIME) by the
 * faked wall clock's start even for CLOCK_MONOTONIC when FAKETIME_DONT_FAKE_MONOTONIC=1, so the
 * kernel gets a negative time and answers EINVAL: Python 3.11's time.sleep() (an absolute
 * monotonic sleep) raises OSError. A stepped wall clock moves no monotonic clock, so this
 * passes every clock but CLOCK_REALTIME straight to the kernel and leaves CLOCK_REALTIME to
 * libfaketime.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

typedef int (*clock_nanosleep_fn)(clockid_t, int, const struct timespec *, struct timespec *);

__attribute__((visibility("default"))) int clock_nanosleep(clockid_t clock_id, int flags,
                                                          const struct timespec *req,
                                                          struct timespec *rem) {
    if (clock_id != CLOCK_REALTIME) {
        if (syscall(SYS_clock_nanosleep, clock_id, flags, req, rem) == 0) {
            return 0;
        }
        return errno; /* clock_nanosleep returns the error, it does not set errno */
    }
    static clock_nanosleep_fn next;
    if (next == NULL) {
        next = (clock_nanosleep_fn)dlsym(RTLD_NEXT, "clock_nanosleep");
    }
    if (next == NULL) {
        return ENOSYS;
    }
    return next(clock_id, flags, req, rem);
}
