#include "signals.h"

#include <string.h>
#include <unistd.h>

#include "../core/atomic.h"

volatile sig_atomic_t cli_interrupted;

static const char *note_first, *note_again;

/* Only async-signal-safe calls below: write(2) and _exit. */
static void note(int sig, const char *what)
{
    if (!what)
        return;
    const char *name = sig == SIGTERM ? "SIGTERM" : sig == SIGUSR1 ? "SIGUSR1" : "SIGINT";
    (void)ar_write_all(STDERR_FILENO, "\nattnres: ", 10);
    (void)ar_write_all(STDERR_FILENO, name, strlen(name));
    (void)ar_write_all(STDERR_FILENO, what, strlen(what));
}

static void on_signal(int sig)
{
    if (cli_interrupted) {
        note(sig, note_again);
        _exit(128 + sig);
    }
    cli_interrupted = sig;
    note(sig, note_first);
}

void cli_catch_signals(const char *first, const char *again)
{
    note_first = first;
    note_again = again;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    /* the work's reads and writes go on; the flag is polled between steps */
    sa.sa_flags = SA_RESTART;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    /* Open MPI's mpirun passes SIGUSR1 on to every rank as it is; SIGINT
     * and SIGTERM it turns into SIGTERM to every rank and SIGKILL a second
     * later (odls_base_sigkill_timeout), before a longer step can end */
    sigaction(SIGUSR1, &sa, NULL);
}

int cli_interrupt_status(void)
{
    /* a sweep's run in a child process can be interrupted by a signal sent
     * to that child alone: that counts as Ctrl-C */
    return 128 + (cli_interrupted ? (int)cli_interrupted : SIGINT);
}
