/* Pipeline parallelism: one training step's gradient computed by P stages,
 * each running its chunks of the model (parallel/pipe_plan.h) for the step's
 * micro-batches on a 1F1B schedule (Megatron's interleaved 1F1B when
 * V > 1; GPipe on request), times a data-parallel degree D = W / P.
 *
 * Ranks.  World rank w is stage w mod P of pipeline replica w / P; the P
 * ranks of a replica talk point to point (activations forward, gradients
 * back, MPI_Isend/MPI_Irecv, the next receive posted while the current op
 * computes); the D ranks of a stage sum their gradient (MPI_Allreduce).
 * Replica r runs micro-batches [r M, (r+1) M) of the step, M = A / D.
 *
 * Rows.  A transition moves the residual rows of pipe_plan.h (the
 * baseline's running sum; Block / Full AttnRes's completed blocks and the
 * partial one), packed into one message per micro-batch, cached or naive;
 * the backward sends each moved row's gradient back along the same
 * transition, added into the sender's accumulator once, and the receiver
 * clears its own copy of that accumulator (the gradient is now upstream's).
 *
 * Memory.  Every rank keeps the whole parameter and gradient layout (one
 * model; the optimizer holds moments for its own chunks only) and one set
 * of activations per micro-batch in flight on it (plan.slots), allocated
 * for its own chunks' sublayers alone; a cached row is stored once per
 * micro-batch, whichever of the stage's virtual stages uses it.
 *
 * Results.  Losses and weights equal a one-process run's up to rounding:
 * sums over micro-batches and over a block's consumers are added in
 * another order (tests/test_pipe.c derives and checks the tolerance). */
#ifndef AR_PIPE_H
#define AR_PIPE_H

#include <stdint.h>

#include "../core/config.h"
#include "../core/error.h"
#include "../lib/model.h"
#include "../lib/optim.h"
#include "comm.h"
#include "parallel.h" /* the sampler; ar_pipelined and ar_parallel_check, the choice of layout */
#include "pipe_plan.h"

typedef struct ar_pipe ar_pipe;

/* Whether cfg can pipeline over the world's ranks: errors name the keys
 * (a world size that parallel.pipeline does not divide, P x V above the
 * sublayers, too few micro-batches, a residual kind that cannot pipeline,
 * a device or option the pipeline does not run with). */
int ar_pipe_check(const ar_comm *world, const ar_config *cfg, ar_err *e);

/* The pipelined step's chunk count C = P V for cfg (1 without a pipeline):
 * the model is created with it (ar_model_split.nchunks). */
int ar_pipe_nchunks(const ar_config *cfg);

/* How this rank creates its model for a pipelined cfg: the chunk count
 * and the parts its stage runs (runs: L+2 flags, ar_model_split's), so
 * that it allocates activations for its own sublayers only.  Without a
 * pipeline: nchunks 1 and runs NULL (everything). */
void ar_pipe_model_split(const ar_config *cfg, int world_rank, unsigned char *runs, ar_model_split *sp);

/* m: this rank's model (created with ar_pipe_model_split), the micro-batch
 * size cfg->train.batch_size. */
ar_pipe *ar_pipe_create(ar_comm *world, const ar_config *cfg, ar_model *m, ar_err *e);
void ar_pipe_free(ar_pipe *p);

/* Fills micro-batch a (0..A-1) of the step: B x T inputs and targets. */
typedef ar_parallel_sample_fn ar_pipe_sample_fn;

/* One step's gradient: on return each rank's grads hold the step's
 * gradient on its own chunks' parameters (zero elsewhere) and loss[0..A-1]
 * every micro-batch's mean loss, on every rank. */
int ar_pipe_step(ar_pipe *p, ar_pipe_sample_fn sample, void *ud, double *loss, ar_err *e);

/* The step's global gradient norm (ar_grad_norm's chunk grid, the parts
 * summed over the stages). */
int ar_pipe_grad_norm(ar_pipe *p, double *norm, ar_err *e);

/* The parameter ranges this rank owns (its chunks'): its optimizer's. */
void ar_pipe_opt_ranges(const ar_pipe *p, int *n, const size_t **lo, const size_t **hi);

/* x (params or grads: the whole layout, backend memory): every stage's
 * ranges from their owner to every rank of the pipeline. */
int ar_pipe_gather(ar_pipe *p, float *x, ar_err *e);

/* The whole moments (pt.total floats each, host memory) on every rank. */
int ar_pipe_full_moments(ar_pipe *p, const ar_adamw *o, float *m, float *v, ar_err *e);

/* The last step, summed over the world: bytes of rows sent forward and
 * of their gradients sent back; the schedule's idle time (waiting on
 * receives) over the ranks' step time; and this rank's own times. */
typedef struct {
    double fwd_bytes, bwd_bytes;
    double bubble;          /* sum of waits / sum of step times */
    double step_s, wait_s;  /* this rank */
} ar_pipe_stats;
int ar_pipe_stats_sum(ar_pipe *p, ar_pipe_stats *s, ar_err *e);

const ar_pipe_plan *ar_pipe_plan_of(const ar_pipe *p);
int ar_pipe_stage(const ar_pipe *p);
int ar_pipe_replicas(const ar_pipe *p);

#endif
