/* Data parallelism: the gradient of one training step, summed over its
 * grad_accum micro-batches and spread over the P ranks of a communicator,
 * the same bits for every P.
 *
 * The step's gradient is defined as a tree sum over its A micro-batch
 * gradients g_0..g_{A-1}, whatever P:
 *     T(lo, hi) = g_lo                                  hi - lo = 1
 *               = T(lo, mid) + T(mid, hi)               hi - lo even, mid = (lo + hi) / 2
 *               = ((g_lo + g_lo+1) + ...) + g_hi-1      hi - lo odd
 * Rank r computes micro-batches [r k, (r+1) k), k = A / P, P a power of
 * two that divides A: the subtree T(r k, (r+1) k), summed locally; the
 * ranks' subtrees are then summed pairwise, nearest first, by recursive
 * halving (a reduce-scatter: each rank ends with 1/P of every bucket) and,
 * unless the optimizer is sharded, recursive doubling (an all-gather).
 * Float addition is commutative bit for bit, so both partners of an
 * exchange compute the same sum, and the result is T(0, A) on every rank,
 * as one process computes it.
 *
 * A bucket (model.h) is reduced as soon as the backward of the step's last
 * micro-batch has finished it, while the backward goes on; the exchanges
 * move forward whenever the backward finishes another bucket, and
 * ar_dp_finish waits for the rest. */
#ifndef AR_DP_H
#define AR_DP_H

#include "../core/config.h"
#include "../core/error.h"
#include "../lib/model.h"
#include "../lib/optim.h"
#include "comm.h"

typedef struct ar_dp ar_dp;

/* Checks that the world's size P can split grad_accum micro-batches:
 * "... 'train.grad_accum' (3) is not a multiple of the 2 ranks ...". */
int ar_dp_check(const ar_comm *c, const ar_train_cfg *tc, ar_err *e);

/* shard: ZeRO-1, each rank keeps (and updates) its shard of each bucket. */
ar_dp *ar_dp_create(ar_comm *c, ar_model *m, int grad_accum, int shard, ar_err *e);
void ar_dp_free(ar_dp *d);
/* Whether the optimizer is sharded (ZeRO-1 over more than one rank). */
int ar_dp_sharded(const ar_dp *d);

/* Micro-batches of this rank per step (k = grad_accum / P) and the index
 * of its first. */
int ar_dp_local(const ar_dp *d, int *first);

/* Before micro-batch i (0..k-1) of this rank: clears the gradient and, for
 * the last, arms the per-bucket reduction. */
void ar_dp_begin(ar_dp *d, int i);
/* After micro-batch i's backward. */
int ar_dp_end(ar_dp *d, int i, ar_err *e);
/* Waits for every bucket: then m->grads holds the step's gradient (with
 * shard: exactly on this rank's shard). */
int ar_dp_finish(ar_dp *d, ar_err *e);

/* Timing, for metrics.jsonl: ar_dp_measure times one blocking reduction
 * of the whole gradient (all ranks call it together); ar_dp_times gives
 * that and the last step's wait in ar_dp_finish, the part of the
 * reduction the backward did not hide. */
int ar_dp_measure(ar_dp *d, ar_err *e);
void ar_dp_times(const ar_dp *d, double *wait_s, double *reduce_s);

/* The step's global gradient norm (ar_grad_norm's chunk grid). */
int ar_dp_grad_norm(ar_dp *d, double *norm, ar_err *e);

/* The parameter ranges this rank's optimizer updates: all of them, or its
 * shards. */
void ar_dp_opt_ranges(const ar_dp *d, int *n, const size_t **lo, const size_t **hi);
/* After a sharded update: every rank gets every updated parameter. */
int ar_dp_gather_params(ar_dp *d, ar_err *e);
/* Sharded: every rank gets the whole reduced gradient (diagnostics). */
int ar_dp_gather_grads(ar_dp *d, ar_err *e);
/* Sharded: the whole moments (pt.total floats each, host memory) gathered
 * from every rank's shards, on every rank; unsharded: a copy. */
int ar_dp_full_moments(ar_dp *d, const ar_adamw *o, float *m, float *v, ar_err *e);

#endif
