/* How the ranks of a run share one training step: one table of operations,
 * chosen by the config once at start-up, that the trainer (run/train.c)
 * calls without knowing which it holds.  Two implementations:
 *   data       every rank a whole model, the step's micro-batches split over
 *              the ranks, the gradient summed by dp.h's deterministic
 *              reduction (parallel_dp.c); one process is its P = 1
 *   pipeline   every rank a stage of a pipeline replica, running its chunks
 *              of the model on pipe.h's schedule (parallel_pipe.c)
 * The model and its parameter layout are the same on every rank; what
 * differs is which parameters a rank updates (opt_ranges) and what it has
 * to receive before it holds the whole of them. */
#ifndef AR_PARALLEL_H
#define AR_PARALLEL_H

#include <stddef.h>
#include <stdint.h>

#include "../core/config.h"
#include "../core/error.h"
#include "../formats/json.h"
#include "../lib/model.h"
#include "../lib/optim.h"
#include "comm.h"

typedef struct ar_parallel ar_parallel;

/* Fills micro-batch a (0..A-1) of the step: B x T inputs and targets
 * (pipe.h's ar_pipe_sample_fn). */
typedef void (*ar_parallel_sample_fn)(void *ud, int a, int32_t *in, int32_t *tg);

typedef struct {
    const char *name; /* "data" or "pipeline" */
    /* One step's gradient from micro-batches 0..A-1 (A = train.grad_accum),
     * each scaled by 1 / (B T A) so that the gradient is the mean's: on
     * return m->grads holds it where this rank's optimizer reads it
     * (opt_ranges), and loss[a] is micro-batch a's mean loss on every
     * rank (loss: A doubles). */
    int (*step)(ar_parallel *p, ar_parallel_sample_fn sample, void *ud, double *loss, ar_err *e);
    /* The step's global gradient norm, on every rank (ar_grad_norm's chunk
     * grid, the same sum whatever the layout). */
    int (*grad_norm)(ar_parallel *p, double *norm, ar_err *e);
    /* The parameter ranges this rank's optimizer updates. */
    void (*opt_ranges)(const ar_parallel *p, int *n, const size_t **lo, const size_t **hi);
    /* After this rank's update of its ranges: every rank gets the
     * parameters the next step needs from the others. */
    int (*updated)(ar_parallel *p, ar_err *e);
    /* rc of a check of the updated parameters on this rank (0 or -1),
     * agreed over the ranks where their parameters can differ. */
    int (*agree)(ar_parallel *p, int rc, ar_err *e);
    /* Every rank holds the whole parameters and gradient (diagnostics). */
    int (*gather_model)(ar_parallel *p, ar_err *e);
    /* A model that evaluates every sublayer with m's parameters: m itself,
     * or a copy sharing them that the caller frees (ar_model_free). */
    int (*eval_model)(ar_parallel *p, ar_model **em, ar_err *e);
    /* For a checkpoint: the whole parameters in m->params and the whole
     * moments of o (pt.total floats each, host memory) on every rank. */
    int (*full_state)(ar_parallel *p, const ar_adamw *o, float *m, float *v, ar_err *e);
    /* Once after the state is shared, every rank together: what the step's
     * metrics compare against (data: one blocking reduction's time). */
    int (*measure)(ar_parallel *p, ar_err *e);
    /* The last step's fields of a metrics line (every rank together). */
    int (*metrics)(ar_parallel *p, ar_jw *w, long tok_per_step, ar_err *e);
    void (*free)(ar_parallel *p);
} ar_parallel_ops;

struct ar_parallel {
    const ar_parallel_ops *ops;
    ar_comm *comm;  /* the ranks of the run */
    ar_model *m;    /* this rank's model */
    int whole_opt;  /* this rank's optimizer updates every parameter: a
                       checkpoint is written from it as it is */
    int loss_on_device; /* step() leaves each micro-batch's loss on the device,
                           in the model's slot a (model.h), loss[a] NAN:
                           the trainer sets it where one process runs the
                           whole model (data layout, P = 1) */
    void *impl;
};

/* Whether cfg pipelines (parallel.pipeline or parallel.virtual above 1). */
int ar_pipelined(const ar_config *cfg);

/* The layout's check, whichever it is: ar_pipe_check for a pipeline, else
 * ar_dp_check. */
int ar_parallel_check(const ar_comm *world, const ar_config *cfg, ar_err *e);

/* The communicator of the gradient's exchanges, in *c: data parallelism
 * over GPUs moves them over NCCL (ar_comm_nccl), which picks each rank's
 * GPU, so this runs before the backend starts; otherwise *c is kept.
 * Every rank calls it; it fails on every rank if NCCL fails on one. */
int ar_parallel_comm(ar_comm **c, const ar_config *cfg, ar_err *e);

/* This rank's model for cfg on be (micro-batch train.batch_size): a
 * pipeline stage allocates activations for its own sublayers alone. */
int ar_parallel_model(const ar_config *cfg, int rank, const ar_backend *be, ar_model **m, ar_err *e);

/* The implementation cfg chooses, over c, for this rank's model m. */
ar_parallel *ar_parallel_create(ar_comm *c, const ar_config *cfg, ar_model *m, ar_err *e);
ar_parallel *ar_parallel_dp(ar_comm *c, const ar_config *cfg, ar_model *m, ar_err *e);
ar_parallel *ar_parallel_pipe(ar_comm *c, const ar_config *cfg, ar_model *m, ar_err *e);
void ar_parallel_free(ar_parallel *p); /* NULL: nothing */

/* The optimizer state of a checkpoint (every rank calls it): *out = o
 * where p->whole_opt; else the whole parameters and moments are gathered
 * (full_state) and, where full is not NULL, set up in *full (ar_adamw_init;
 * the caller frees it with ar_adamw_free) and *out = full. */
int ar_parallel_checkpoint_opt(ar_parallel *p, const ar_adamw *o, ar_adamw *full, const ar_adamw **out,
                               ar_err *e);

#endif
