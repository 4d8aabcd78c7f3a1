/* SIGINT (Ctrl-C), SIGTERM and SIGUSR1 for the commands whose work can
 * stop cleanly (train, sweep, ablate): the first asks the work to stop, the
 * second stops the process at once.  SIGUSR1 is the one to send to mpirun,
 * which passes it on to every rank unchanged. */
#ifndef AR_CMD_SIGNALS_H
#define AR_CMD_SIGNALS_H

#include <signal.h>

/* The number of the first signal, 0 before one: the flag the work polls
 * (ar_train_opts.interrupt, ar_sweep_opts.interrupt). */
extern volatile sig_atomic_t cli_interrupted;

/* Catches SIGINT, SIGTERM and SIGUSR1 from now on.  The first sets
 * cli_interrupted; the second ends the process at once with status 128 +
 * its number.  With notes, each is announced on stderr as
 * "attnres: SIGINT<first>" and "attnres: SIGINT<again>" (SIGTERM and
 * SIGUSR1 likewise); the strings must live as long as the process. */
void cli_catch_signals(const char *first, const char *again);

/* The exit status of work that stopped on the first signal: 128 + its
 * number, as if the signal had ended the process (130, SIGINT's, when the
 * signal reached only a child process). */
int cli_interrupt_status(void);

#endif
