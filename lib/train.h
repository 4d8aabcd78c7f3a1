/* Training one config: the loop that `attnres train`, and later `ablate` and
 * `sweep`, all call. */
#ifndef AR_TRAIN_H
#define AR_TRAIN_H

#include <signal.h>

#include "backend.h"
#include "config.h"
#include "error.h"

typedef struct {
    long step, steps;     /* optimizer steps completed / planned */
    long tokens;          /* training tokens seen */
    double loss, lr, grad_norm, tok_per_s;
    double val_loss;      /* last validation loss, NaN before the first */
    double elapsed_s, eta_s;
    int is_eval;          /* this report follows an evaluation */
} ar_progress;

typedef struct {
    const char *out_dir;  /* run directory (created if missing) */
    int resume;           /* continue the run in out_dir from its checkpoint */
    const ar_backend *be; /* NULL = CPU */
    void (*progress)(const ar_progress *p, void *ud);
    void *ud;
    volatile sig_atomic_t *interrupt; /* when set: save a checkpoint and stop */
} ar_train_opts;

typedef struct {
    long step;             /* steps completed when training returned */
    int interrupted;
    double final_loss;     /* last training loss */
    double final_val_loss; /* last validation loss */
    double tok_per_s;      /* mean training throughput of this invocation */
} ar_train_result;

int ar_train(const ar_config *cfg, const ar_train_opts *o, ar_train_result *res, ar_err *e);

/* Writes the run's figures (loss.png; depth_attn.png for AttnRes kinds from
 * the weights in the last metrics line that has them) from metrics.jsonl. */
int ar_train_figures(const char *run_dir, ar_err *e);

#endif
