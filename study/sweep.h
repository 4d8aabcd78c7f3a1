/* Scaling sweeps: a grid of model sizes x residual variants, each trained
 * with ar_train (the same loop as `attnres train`) into its own run
 * directory, and a results table for `attnres fit-scaling`.  The grid comes
 * from a YAML file (formats/sweep.h parses it; attnres-sweep(1) documents
 * it); here it is plain data.
 *
 * Output directory layout:
 *   DIR/<size>-<variant>/   one run directory per grid point
 *   DIR/results.csv         one row per finished run, rewritten atomically
 *                           after every run (columns: see AR_SWEEP_COLUMNS)
 *
 * A rerun skips runs whose checkpoint has reached the planned steps and
 * resumes (ar_train's resume) those that stopped earlier.  A run directory
 * whose checkpoint was trained with another configuration (anything but
 * train.threads and train.device differs) is an error rather than a silent
 * reuse. */
#ifndef AR_SWEEP_H
#define AR_SWEEP_H

#include <signal.h>

#include "../core/config.h"
#include "../core/error.h"
#include "../formats/sweep.h"
#include "train.h"


/* The results table's header. */
#define AR_SWEEP_COLUMNS "variant,size,nonembed_params,tokens,flops,pflops_days,val_loss,wall_s,steps,run"

/* Compute accounting of a run (docs/reference.md §6): N, 6N + 12*n_layer*d*T
 * FLOPs per token, and for the planned tokens C in FLOPs and PFLOP/s-days. */
typedef struct {
    long nonembed_params;
    double flops_per_token, flops, pflops_days;
} ar_sweep_compute;

int ar_sweep_compute_of(const ar_sweep_run *r, ar_sweep_compute *c, ar_err *e);

typedef enum {
    AR_SWEEP_SKIPPED,     /* finished earlier: reused */
    AR_SWEEP_STARTED,     /* training from scratch */
    AR_SWEEP_RESUMED,     /* continuing from its checkpoint (detail: "step N") */
    AR_SWEEP_FINISHED,    /* trained to its planned steps (detail: "val_loss X") */
    AR_SWEEP_INTERRUPTED, /* stopped by the interrupt, checkpoint saved */
    AR_SWEEP_FAILED,      /* detail: the error message */
} ar_sweep_event;

typedef struct {
    const char *out_dir;
    int jobs;        /* runs trained at once; > 1: each in a child process */
    /* With jobs > 1 each run gets train.threads = max(1, T / jobs), T being
     * the run's train.threads or, when that is 0, the processors online. */
    void (*event)(const ar_sweep_run *r, ar_sweep_event ev, const char *detail, void *ud);
    void (*progress)(const ar_sweep_run *r, const ar_progress *p, void *ud); /* called in the
                                                                             training process */
    void *ud;
    volatile sig_atomic_t *interrupt; /* when set: runs save and stop, no new run starts */
    int rank, nranks; /* nranks > 1: train only the runs i with i % nranks == rank */
} ar_sweep_opts;

typedef struct {
    int finished;    /* runs with results (reused or trained now) */
    int skipped, trained, failed;
    int interrupted;
} ar_sweep_result;

/* Trains the grid.  Stops starting new runs after the first failure (runs
 * in progress finish) and then returns -1 with that run's message. */
int ar_sweep_run_all(const ar_sweep *s, const ar_sweep_opts *o, ar_sweep_result *res, ar_err *e);

/* ar_sweep_run_all over the ranks of an mpirun launch (c NULL or of one
 * rank: this process alone): run i is trained by rank i mod P, each with
 * the whole run to itself; then rank 0 collects every run into
 * results.csv.  res counts the runs of every rank, on every rank. */
struct ar_comm;
int ar_sweep_run_ranks(const ar_sweep *s, const ar_sweep_opts *o, struct ar_comm *c, ar_sweep_result *res,
                       ar_err *e);

/* Sum over the invocations recorded in a run's metrics.jsonl of their last
 * elapsed_s, and the last val_loss (NaN if none). */
int ar_sweep_run_stats(const char *run_dir, double *wall_s, double *val_loss, ar_err *e);

#endif
