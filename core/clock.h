/* Seconds on the monotonic clock, for timing intervals (never the time of
 * day: it does not jump when the system clock is set). */
#ifndef AR_CORE_CLOCK_H
#define AR_CORE_CLOCK_H

#include <time.h>

static inline double ar_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

#endif
