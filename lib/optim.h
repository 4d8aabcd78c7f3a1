/* AdamW with global-norm gradient clipping.  The moments cover a set of
 * ranges of the flat parameter array, stored one after another: all of it
 * ([0, pt.total), the moments then have the parameter table's layout), or,
 * with a sharded optimizer (ZeRO-1), the ranges one rank updates.  Weight
 * decay applies to the tensors the table marks (2-D weight matrices).
 *
 * With muon set (train.optimizer: muon), the matrices ar_muon_param picks
 * are updated by Muon instead, the rest by AdamW.  A Muon matrix W (m x n)
 * with clipped gradient g keeps one momentum buffer B, in m at W's place
 * (its v stays 0):
 *   B = mu B + g;   X = g + mu B (muon_nesterov) or B
 *   O = NS(X)       (ar_muon_ns: X / (||X||_F + 1e-7), then muon_ns_steps
 *                    quintic Newton-Schulz iterations)
 *   W = W (1 - lr_m muon_weight_decay) - lr_m s O
 * with s = max(1, m/n)^0.5 (muon_scale keller) or 0.2 sqrt(max(m, n))
 * (moonlight) and lr_m = muon_lr * lr / train.lr (the schedule's factor).
 * Muon needs each of its matrices whole inside one range (no ZeRO-1
 * sharding: config validation refuses it).  The matrix products are the
 * backend's matmul ops, so every backend runs it. */
#ifndef AR_OPTIM_H
#define AR_OPTIM_H

#include "model.h"

typedef struct {
    const ar_backend *be;
    float *m, *v;     /* device, n floats each */
    size_t n;         /* the ranges' total length */
    int nranges;
    size_t *lo, *hi;  /* range r covers parameters [lo[r], hi[r]) */
    long t;           /* optimizer steps taken (bias correction), as of the
                         last ar_adamw_read or host step */
    ar_step_rec *rec; /* device: the step's record (lib/op_args.h) */
    double *given;    /* device: a loss and a norm from the host (ar_step_check_given) */
    int muon;         /* 1: Muon on the ar_muon_param matrices */
    float *ns[4];     /* Muon's scratch (device), allocated at its first step */
} ar_adamw;

/* Whether Muon updates parameter i (with train.optimizer muon): the 2-D
 * matrices of the transformer blocks, attn q, k, v, o and mlp gate, up,
 * down.  The embedding, lm_head, every norm gain and every residual-scheme
 * tensor (AttnRes pseudo-queries and their query.weight matrices, static
 * logits, DenseFormer and mHC coefficients) stay with AdamW. */
int ar_muon_param(const ar_model *model, int i);

/* Newton-Schulz orthogonalisation of an m x n matrix x (device), in place:
 * X = x / (||x||_F + 1e-7), transposed when m > n, then `steps` times
 *   A = X X^T;  B = b A + c A A;  X = a X + B X
 * with (a, b, c) = (3.4445, -4.7750, 2.0315); the result (transposed
 * back) replaces x.  Scratch: s[0] m*n floats, s[1] and s[2]
 * min(m,n)^2 floats each. */
#define AR_NS_A 3.4445
#define AR_NS_B (-4.7750)
#define AR_NS_C 2.0315
void ar_muon_ns(const ar_backend *be, float *x, int m, int n, int steps, float *const s[3]);

/* Moments for every parameter. */
void ar_adamw_init(ar_adamw *o, const ar_model *model);
/* Moments for the given ranges only (ascending, disjoint). */
void ar_adamw_init_ranges(ar_adamw *o, const ar_model *model, int n, const size_t *lo, const size_t *hi);
void ar_adamw_free(ar_adamw *o);

/* The gradient's global L2 norm is summed in a fixed grid of chunks that
 * does not depend on how the gradient is spread over processes: chunks of
 * AR_NORM_CHUNK floats from the start of each gradient bucket (model.h), in
 * bucket order.  Each chunk's sum of squares is a double; the norm is
 * sqrt of their sum in chunk order. */
#define AR_NORM_CHUNK 16384
/* Number of chunks of bucket b, and of all buckets before it (first). */
size_t ar_norm_chunks(const ar_model *model, int b, size_t *first);
/* Sums of squares of chunks [c0, c1) of bucket b into out[0 .. c1-c0). */
void ar_norm_chunk_sumsq(const ar_model *model, int b, size_t c0, size_t c1, double *out);
/* sqrt of the sum, in order, of n chunk sums. */
double ar_norm_from_chunks(const double *sums, size_t n);
/* Every chunk's sum of squares, in grid order (malloc'd, *n of them). */
double *ar_norm_chunk_sums(const ar_model *model, size_t *n);
/* Global L2 norm of the gradient buffer (the chunk grid above). */
double ar_grad_norm(const ar_model *model);

/* The moments of o's ranges at their parameters' offsets in whole host
 * arrays m, v (pt.total floats; zero elsewhere), and the inverse: o's
 * ranges taken from whole host arrays. */
void ar_adamw_moments_to_full(const ar_adamw *o, size_t total, float *m, float *v);
void ar_adamw_moments_from_full(ar_adamw *o, const float *m, const float *v);

/* One step from a norm known on the host: clips to grad_clip (if > 0)
 * using `gnorm`, then updates the parameters of o's ranges with learning
 * rate lr (AdamW) and, with muon, the Muon matrices with muon_lr * lr /
 * tc->lr; a non-finite gnorm skips the update.  ar_step_check_given,
 * ar_adamw_update and ar_adamw_read in one call (a wait for the device). */
void ar_adamw_step(ar_adamw *o, ar_model *model, const ar_train_cfg *tc, double lr, double gnorm);

/* A training step's decision on the device, without a wait for it: the
 * step_check op (lib/ops.def) fills o's record from the step's losses and
 * gradient norm; ar_adamw_update then updates, or not, as the record says,
 * and ar_adamw_read brings the record to the host afterwards.
 *   _device: from head-chunk loss sums on the device, nc for each of
 *            micro-batches 0..A-1 (the model's: ar_model_loss_parts) and
 *            the gradient's chunk sums, formed on the device here (the
 *            ar_norm_chunk_sums grid);
 *   _given:  from a mean loss and a norm the host computed (a run over
 *            several processes, whose reductions are the host's). */
void ar_step_check_device(ar_adamw *o, ar_model *model, const ar_train_cfg *tc, const double *parts, int A,
                          int nc);
void ar_step_check_given(ar_adamw *o, const ar_train_cfg *tc, double loss, double gnorm);
/* The update of o's ranges that o's record decides (nothing where it
 * skips), with learning rate lr; with Muon, the record is read first (its
 * Newton-Schulz steps take the clipping factor on the host). */
void ar_adamw_update(ar_adamw *o, ar_model *model, const ar_train_cfg *tc, double lr);
/* The record on the host (a wait for the device); sets o->t from it. */
void ar_adamw_read(ar_adamw *o, ar_step_rec *out);
/* o->t to the device record (after a resume sets o->t). */
void ar_adamw_sync_t(ar_adamw *o);
#endif
