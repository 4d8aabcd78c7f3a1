/* The wait watchdog (parallel.timeout_s), in the manner of NCCL's: a rank
 * that waits for other ranks (a collective, a message) longer than the
 * timeout is stopped with an error naming its host and rank, instead of
 * waiting forever on a rank that died or a link that went down, which
 * MPI over TCP does.  Stopping one rank ends the job: mpirun takes down
 * the others.  The last checkpoint was written atomically before, so
 * `--resume` continues from it. */
#ifndef AR_WATCHDOG_H
#define AR_WATCHDOG_H

/* Starts the watchdog thread of this process (rank for the message);
 * timeout_s 0: none.  Once per process; later calls change the timeout. */
void ar_watchdog_start(double timeout_s, int rank);
/* A wait for other ranks begins (what: "MPI_Allreduce", ...) / ends.
 * Nested waits count as the outermost one. */
void ar_watchdog_arm(const char *what);
void ar_watchdog_disarm(void);

#endif
