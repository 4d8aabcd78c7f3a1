#include "watchdog.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../core/clock.h"

static _Atomic long long g_since_ms; /* when the outermost wait began; 0: none */
static _Atomic(const char *) g_what;
static _Atomic long long g_timeout_ms;
static int g_depth, g_rank, g_started;

static long long now_ms(void) { return (long long)(ar_now_s() * 1e3); }

/* Looks four times a second; past the timeout it reports and ends the
 * process at once (_exit: the main thread is inside MPI, which nothing may
 * call from here). */
static void *watch(void *arg)
{
    (void)arg;
    for (;;) {
        struct timespec q = {0, 250 * 1000000};
        nanosleep(&q, NULL);
        long long since = atomic_load(&g_since_ms), lim = atomic_load(&g_timeout_ms);
        if (!since || lim <= 0 || now_ms() - since <= lim)
            continue;
        char host[256] = "?";
        gethostname(host, sizeof host - 1);
        const char *what = atomic_load(&g_what);
        fprintf(stderr,
                "%sattnres: error: rank %d on host '%s': %s waited %.1f s for the other ranks "
                "(parallel.timeout_s is %g): a rank stopped or the network between the hosts failed; "
                "stopping this rank (continue from the last checkpoint with 'attnres train --resume')\n",
                isatty(2) ? "\n" : "", g_rank, host, what ? what : "a wait", (double)(now_ms() - since) / 1000, (double)lim / 1000);
        fflush(stderr);
        _exit(1);
    }
    return NULL;
}

void ar_watchdog_start(double timeout_s, int rank)
{
    atomic_store(&g_timeout_ms, (long long)(timeout_s * 1000));
    g_rank = rank;
    if (g_started || timeout_s <= 0)
        return;
    pthread_t t;
    pthread_attr_t a;
    pthread_attr_init(&a);
    pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
    if (pthread_create(&t, &a, watch, NULL) == 0)
        g_started = 1;
    pthread_attr_destroy(&a);
}

void ar_watchdog_arm(const char *what)
{
    if (g_depth++ == 0) {
        atomic_store(&g_what, what);
        atomic_store(&g_since_ms, now_ms());
    }
}

void ar_watchdog_disarm(void)
{
    if (g_depth > 0 && --g_depth == 0)
        atomic_store(&g_since_ms, 0);
}
