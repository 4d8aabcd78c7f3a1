/* Scaling sweeps: a grid of model sizes x residual variants, each trained
 * with ar_train (the same loop as `attnres train`) into its own run
 * directory, and a results table for `attnres fit-scaling`.  The grid comes
 * from a YAML file (formats/sweep.h parses it; attnres-sweep(1) documents
 * it); here it is plain data.
 *
 * Output directory layout:
 *   DIR/<size>-<variant>/   one run directory per grid point, with the
 *                           run's final evaluation in final_eval.json
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
#include "../run/train.h"


/* The results table's header.  New columns go at the end, so that readers
 * that look columns up by name (fit-scaling, plot-sweep) read old tables
 * too; n_layer (transformer blocks), d_model and n_head are the run's
 * shape, for plots against architecture (plot-sweep); seed is the run's
 * train.seed, so that the tables of one sweep run with several seeds
 * (--set train.seed=K) can be read together (plot-sweep averages them). */
#define AR_SWEEP_COLUMNS                                                                                     \
    "variant,size,nonembed_params,tokens,flops,pflops_days,val_loss,wall_s,steps,run,final_val_loss,"       \
    "final_eval_windows,final_eval_tokens,n_layer,d_model,n_head,seed"

/* The final evaluation of a finished run: the checkpoint at its planned
 * steps evaluated once, after training, by the protocol of `attnres eval`
 * (run/eval.h: fp32, batches of 8 windows) on the first
 * train.final_eval_windows windows of its validation split (0: all of
 * them), and recorded in DIR/<run>/final_eval.json so that a rerun reuses
 * it.  val_loss stays the last evaluation during training
 * (train.eval_windows windows); final_val_loss is the number to compare. */
#define AR_FINAL_EVAL_FILE "final_eval.json"

typedef struct {
    long step;        /* the checkpoint's step */
    long max_windows; /* train.final_eval_windows it was asked for (0 = all) */
    long windows, tokens; /* windows evaluated and predicted positions */
    double loss;      /* mean nats/token */
} ar_final_eval;

/* Reads run_dir/final_eval.json: 1 with *f when it records the evaluation
 * of step `step` with max_windows, 0 when the file is absent or records
 * another step or window count (stale: evaluate again), -1 when it is
 * malformed (the message names the file and the field). */
int ar_final_eval_read(const char *run_dir, long step, long max_windows, ar_final_eval *f, ar_err *e);

/* Evaluates run_dir's checkpoint (which must be at cfg->train.steps) on the
 * validation split of cfg (data.val, or the data.val_fraction tail of
 * data.train) on the device cfg->train.device with `threads` threads, and
 * writes run_dir/final_eval.json atomically. */
int ar_final_eval_run(const char *run_dir, const ar_config *cfg, int threads, ar_final_eval *f, ar_err *e);

/* Compute accounting of a run (docs/reference.md §6): N, 6N + 12*n_layer*d*T
 * FLOPs per token, and for the planned tokens C in FLOPs and PFLOP/s-days. */
typedef struct {
    long nonembed_params;
    double flops_per_token, flops, pflops_days;
} ar_sweep_compute;

int ar_sweep_compute_of(const ar_sweep_run *r, ar_sweep_compute *c, ar_err *e);

/* Sizes given a compute budget (`flops: C`, formats/sweep.h): each run's
 * steps = round(C / (F x tokens per step)), at least 1, with F = 6N + 12
 * n_layer d T its FLOPs per token, so every run of the budget trains on
 * C FLOPs to within half a step; then r->tokens and validation as for
 * the other sizes.  Runs without a budget are left alone. */
int ar_sweep_resolve_budgets(ar_sweep *s, ar_err *e);

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

/* Trains the grid, and gives each run that reaches its planned steps its
 * final evaluation (in the process that trained it); a finished run found
 * without one (interrupted after training, or trained by an older version)
 * is evaluated as a job of its own and reported as reused.  Stops starting new runs after the first failure (runs
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
