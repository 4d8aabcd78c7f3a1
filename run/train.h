/* Training one config: the loop that `attnres train`, and later `ablate` and
 * `sweep`, all call. */
#ifndef AR_TRAIN_H
#define AR_TRAIN_H

#include <signal.h>

#include "../core/config.h"
#include "../core/error.h"
#include "../lib/backend.h"

typedef struct {
    long step, steps;     /* optimizer steps completed / planned */
    long tokens;          /* training tokens seen */
    double loss, lr, grad_norm, tok_per_s;
    double val_loss;      /* last validation loss, NaN before the first */
    double elapsed_s, eta_s;
    int is_eval;          /* this report follows an evaluation */
} ar_progress;

struct ar_model;

typedef struct {
    const char *out_dir;  /* run directory (created if missing) */
    int resume;           /* continue the run in out_dir from its checkpoint */
    int force;            /* start a new run in out_dir even if it holds one:
                             its checkpoints, metrics and figures are removed
                             once the new run has its data and model */
    const ar_backend *be; /* NULL: the backend of train.device and train.precision
                             (ar_backend_open); else this one, as it is set */
    void (*progress)(const ar_progress *p, void *ud);
    /* Warnings (a skipped non-finite step, a resume whose settings, data or
     * thread count differ from the checkpoint's), one line each, no
     * "warning:" prefix; NULL = only metrics.jsonl records them. */
    void (*warn)(const char *msg, void *ud);
    /* Called after each step's backward pass, before its gradient is
     * checked and applied, with the step's number (as in metrics.jsonl):
     * tests use it to inject faults. */
    void (*grad_hook)(struct ar_model *m, long step, void *ud);
    void *ud;
    volatile sig_atomic_t *interrupt; /* when set: save a checkpoint and stop */
    /* The ranks of a data-parallel run (parallel/dp.h): NULL = this process
     * alone.  Every rank calls ar_train with the same config; rank 0 alone
     * reads the checkpoint and writes the run directory. */
    struct ar_comm *comm;
} ar_train_opts;

typedef struct {
    long step;             /* steps completed when training returned */
    int interrupted;
    long skipped;          /* steps skipped (non-finite) in this invocation */
    double final_loss;     /* last training loss */
    double final_val_loss; /* last validation loss */
    double tok_per_s;      /* mean training throughput of this invocation */
} ar_train_result;

/* Trains cfg into o->out_dir, or resumes it (o->resume).  Crash safety:
 *  - the run directory is locked (flock on DIR/.attnres.lock) and checked
 *    for writing before any step; temporary files of a killed run are
 *    removed;
 *  - a new run refuses a directory that holds a checkpoint (of this run:
 *    use resume; of another: use force);
 *  - a step whose loss or gradient norm is not finite is skipped (no
 *    update; a warning and a metrics line with "skipped": true); after
 *    train.max_bad_steps in a row training fails; weights that become
 *    non-finite stop training at once; a checkpoint is never written with
 *    non-finite values (ar_ckpt_save_state);
 *  - a resumed run restores weights, optimizer moments, step, data
 *    position and the count of bad steps, so it ends bit-identical to an
 *    uninterrupted run with the same thread count, build and OpenBLAS
 *    kernels, and warns where the settings, the training data, the thread
 *    count, the kernels or the build differ. */
int ar_train(const ar_config *cfg, const ar_train_opts *o, ar_train_result *res, ar_err *e);

#endif
