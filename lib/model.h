/* The decoder-only transformer of docs/reference.md §1: token embedding,
 * L = 2*n_layer sublayers (odd: causal RoPE attention, even: SwiGLU MLP,
 * each with its own pre-norm), the residual scheme between them, final_norm
 * and an untied lm_head.  All parameters, gradients and activations are
 * allocated once at creation for at most max_batch sequences of seq_len. */
#ifndef AR_MODEL_H
#define AR_MODEL_H

#include <stdint.h>

#include "../core/config.h"
#include "../core/error.h"
#include "backend.h"
#include "params.h"
#include "residual.h"

typedef struct {
    int attn_norm, q, k, v, o, mlp_norm, gate, up, down; /* parameter indices */
} ar_block_idx;

/* xn, q, k, v, y, mxn, gate, up and act are in the backend's storage
 * precision (ar_alloc_act, lib/backend.h: bf16 on the CUDA backend under
 * bf16 products, half of a block's 6 N d + 3 N d_ff floats), read and
 * written only by the ops that take it (matmul, RMSNorm's forward, the
 * two-phase depth ops' fused norm, rotary, attention, SwiGLU); rstd,
 * mrstd and att are fp32. */
typedef struct {
    float *xn, *rstd, *q, *k, *v, *att, *y; /* attention sublayer (att: be->attention_state floats) */
    float *mxn, *mrstd, *gate, *up, *act;   /* MLP sublayer */
} ar_block_act;

typedef struct ar_model {
    ar_model_cfg cfg;
    const ar_backend *be;
    int maxB, B, T, N, L, d, F, V, nh, hd;
    int shared;            /* params, grads and backward scratch are another model's */
    ar_param_table pt;
    int embed, final_norm, lm_head;
    ar_block_idx *blk;
    float *params, *grads; /* device, pt.total floats each */
    ar_residual *res;
    const float **res_in;  /* h_l returned by the residual scheme in the last
                              forward, l = 1..L (diagnostics: AttnRes kinds
                              reuse these buffers in later chunks, and give
                              NULL where they normalised h_l themselves) */
    const float *res_hout; /* h_out */

    /* activations */
    int32_t *tok, *tgt;    /* device, maxN */
    ar_block_act *act;
    /* cfg.recompute == sublayer: the one set of sublayer internals (q, k, v,
     * att, y, gate, up, act) every block's act points into; each block
     * keeps only its sublayers' normalised inputs and rstd (xn, rstd, mxn,
     * mrstd), and the backward of a sublayer first forms its internals
     * again from them: the same operations on the same inputs, so the same
     * bits.  Activation memory per block falls from
     * 6 N d + 3 N d_ff + A (+ 2 N) to 2 N d (+ 2 N) floats, plus one set of
     * 4 N d + 3 N d_ff + A for the model (A: attention's saved state,
     * B n_head T^2 on the CPU, B n_head T on CUDA). */
    ar_block_act internals;
    /* the head (ar_model_forward_head): hn = final_norm(h_out), N x d;
     * losses, N; logits_c and probs_c, head_rows x V each, one chunk of
     * rows at a time (probs_c becomes dlogits in backward) */
    float *hn, *frstd, *logits_c, *probs_c, *losses;
    int head_rows;         /* rows per head chunk (ar_head_rows) */
    int head_kept;         /* first row of the chunk whose probabilities the
                              last forward left in probs_c, -1: none */
    int head_grad_done;    /* the last forward took the head's gradient too
                              (ar_model_forward_backward) */
    double *loss_parts;    /* device: each head chunk's loss sum (xent_fwd), nc
                              a micro-batch, loss_slots micro-batches */
    double *head_part;     /* host: one slot's parts, read to sum them */
    int loss_slots, loss_slot; /* slots held; the one the next forward fills */
    int loss_on_device;    /* 1: the forward leaves its loss on the device
                              (returns NAN; ar_model_loss_parts) */
    /* backward scratch */
    float *dxn, *dq, *dk, *dv, *datt, *dy, *dgate, *dup, *dact, *dhn;

    /* Gradient buckets: contiguous ranges of grads, in the order the
     * backward finishes them: lm_head with final_norm, then each block from
     * the last to the first, then the residual scheme's tensors, then the
     * embedding (a range may be empty).  ar_model_backward calls
     * grad_ready(m, b, ud) once bucket b's gradients are final, so data
     * parallelism can start reducing it while the backward goes on. */
    int nbuckets;
    size_t *bucket_off, *bucket_len; /* floats */
    /* device: the gradient norm's partial sums, one double per
     * AR_NORM_CHUNK floats of each bucket, buckets in order (optim.h) */
    double *norm_sums;
    void (*grad_ready)(struct ar_model *m, int bucket, void *ud);
    void *grad_ready_ud;

    /* diagnostics of the last forward/backward when collect_stats is set */
    int collect_stats;
    double *out_rms;       /* L: RMS of each sublayer's output v_l */
    float *depth_w;        /* (L+1) x (L+1): row l-1 = token-averaged weights
                              of mixer l over its n_sources(l) sources */
} ar_model;

int ar_model_create(ar_model **out, const ar_model_cfg *cfg, const ar_backend *be, int max_batch,
                    ar_err *e);

/* How a stage of a pipelined run builds the copies of the model it keeps
 * a micro-batch's activations in. */
typedef struct {
    int nchunks;               /* pipeline chunks (lib/chunks.h; 1: none): a residual scheme's
                                  own schedule (the two-phase depth chunks)
                                  never spans one */
    const struct ar_model *share; /* NULL, or the model whose parameters,
                                  gradients and backward-only scratch this copy
                                  uses (same config and batch) */
    const unsigned char *runs; /* NULL (all), or L+2 flags: [0] the embedding,
                                  [l] sublayer l, [L+1] the head: the parts
                                  whose activations this copy allocates */
} ar_model_split;
int ar_model_create_split(ar_model **out, const ar_model_cfg *cfg, const ar_backend *be, int max_batch,
                          const ar_model_split *sp, ar_err *e);
void ar_model_free(ar_model *m);

/* Draws the initial weights (docs/reference.md §1.6: normal(0, 0.02), output projections
 * normal(0, 0.02/sqrt(2*n_layer)), gains one, AttnRes queries zero) from a
 * GSL generator seeded with seed. */
void ar_model_init(ar_model *m, uint64_t seed);

/* Forward over B sequences of T tokens (host arrays, B*T each).  With
 * targets, returns the mean cross-entropy over the B*T positions (the sum is
 * in *sum_nats if non-NULL); without, stops at hn = final_norm(h_out) and
 * returns 0 (ar_model_logits gives the logits of any rows). */
double ar_model_forward(ar_model *m, const int32_t *inputs, const int32_t *targets, int B,
                        double *sum_nats);

/* ar_model_forward, the same outputs and loss bit for bit, for a pass that
 * nobody reads but for them (evaluation, inference): no backward follows
 * it (one aborts) and nobody reads its depth weights, which the depth
 * schemes may leave unwritten (their readers give NaN until the next
 * forward).  With collect_stats set the weights are written. */
double ar_model_forward_unread(ar_model *m, const int32_t *inputs, const int32_t *targets, int B,
                               double *sum_nats);

/* Backward of the last forward: grads += d(scale * sum of token losses)/dparams.
 * scale = 1/(B*T) gives the gradient of the mean loss. */
void ar_model_backward(ar_model *m, float scale);

/* ar_model_forward then ar_model_backward(scale), the same gradients bit for
 * bit, but the head's gradient is taken chunk by chunk in the forward, while
 * each chunk's probabilities are at hand, so no chunk is computed twice
 * (at V = 50257 the head is most of a small model's work).  Training uses it. */
double ar_model_forward_backward(ar_model *m, const int32_t *inputs, const int32_t *targets,
                                 int B, float scale, double *sum_nats);

/* The loss on the device, for a step that reads nothing back until its
 * update is queued (run/train.c, lib/optim.h's ar_step_check_device):
 * with ar_model_loss_on_device(m, 1) the forward functions leave the loss
 * on the device and return NAN; micro-batch a of a step writes its head
 * chunks' loss sums into slot a (ar_model_set_loss_slot; slots 0 ..
 * slots - 1, ar_model_loss_slots grows them).  ar_model_loss_parts: the
 * slots' sums, nc per micro-batch, slot after slot (device). */
void ar_model_loss_slots(ar_model *m, int slots);
void ar_model_set_loss_slot(ar_model *m, int slot);
void ar_model_loss_on_device(ar_model *m, int on);
const double *ar_model_loss_parts(const ar_model *m, int *nc);

/* The forward and backward above in pieces, for a stage that runs
 * sublayers l0..l1 alone (pipeline parallelism):
 *   forward:  set_batch; [embed (sublayer 0's stage)]; sublayers(l0, l1);
 *             [head (the last stage): final mixer, norm, lm_head, loss]
 *   backward: [head]; sublayers(l1, l0) (from l1 down); [embed]
 * The residual rows a stage does not compute are written into the scheme's
 * buffers (residual.h: row, row_grad) between the pieces. */
void ar_model_set_batch(ar_model *m, int B);
void ar_model_forward_embed(ar_model *m, const int32_t *inputs);
void ar_model_forward_sublayers(ar_model *m, int l0, int l1);
double ar_model_forward_head(ar_model *m, const int32_t *targets, double *sum_nats);
void ar_model_backward_head(ar_model *m, float scale);
void ar_model_backward_sublayers(ar_model *m, int l1, int l0);
void ar_model_backward_embed(ar_model *m);
void ar_model_zero_grad(ar_model *m);

/* The output head works over chunks of rows so that it never holds N x V
 * floats (V = 50257 at N = 4096 would be 0.8 GB per buffer):
 *   forward, per chunk c:  logits_c = hn_c W^T;  losses_c = lse - logits_c[target]
 *   backward, per chunk:   logits_c again (unless probs_c still holds the
 *                          chunk: the last one of the forward), then
 *                          dlogits = scale (softmax - onehot),
 *                          dhn_c = dlogits W,  dW += dlogits^T hn_c
 * Rows per chunk: at most R = ar_head_chunk if set, else
 * AR_HEAD_CHUNK_FLOATS / V (64 MiB per head_rows x V buffer; the backend's
 * head_floats() / V: the CUDA backend's chunks are 512 MiB); the N rows
 * go in ceil(N/R) equal chunks.  At V = 256, R = 65536: one chunk for any
 * batch up to that, kept from the forward to the backward, as with no
 * chunking.  At V = 50257, R = 333 (N = 4096: 13 chunks of 316).  The
 * head's buffers are hn, dhn (N x d each), frstd, losses (N each) and the
 * two chunks: 2 N (d + 1) + 2 head_rows V floats, where they were
 * 2 N (d + 1) + 2 N V.
 * Larger chunks cost more memory and less time: each chunk is a matrix
 * product that packs all of W again (OpenBLAS), and all but one chunk's
 * logits are computed twice.  bench-small at V = 50257 on 2 cores, one
 * training step (best of 8): 1 chunk (no recomputation) 2.97 s, chunks of
 * 1024 rows 3.26 s, of 342 to 683 rows 3.5 s, of 164 rows 3.86 s. */
/* Rows per head chunk; 0 (default): the rule above.  Read at creation;
 * tests force small chunks to check that results do not depend on it. */
extern int ar_head_chunk;
/* Rows per head chunk (of the chunk buffers) for vocabulary V and N rows:
 * N split in equal chunks of at most R rows, R = ar_head_chunk if set, else
 * the rule above; _within: with chunk buffers of up to `floats` instead of
 * AR_HEAD_CHUNK_FLOATS (a model takes its backend's head_floats()). */
int ar_head_rows(int V, int N);
int ar_head_rows_within(int V, int N, size_t floats);

/* out = hn[row0 .. row0+nrows-1] W^T (=): the logits of those rows of the
 * last forward (with or without targets).  out is a device buffer of
 * nrows x V floats; the caller picks nrows to bound it. */
void ar_model_logits(ar_model *m, int row0, int nrows, float *out);

/* Pointers into the parameter / gradient buffers by tensor index. */
static inline float *ar_model_param(ar_model *m, int i) { return m->params + m->pt.p[i].offset; }
static inline float *ar_model_grad(ar_model *m, int i) { return m->grads + m->pt.p[i].offset; }

/* Non-embedding parameter count N of the compute formula (everything but
 * embed.weight) and training FLOPs per token 6N + 12*n_layer*d*T. */
long ar_model_nonembed_params(const ar_model *m);
double ar_model_flops_per_token(const ar_model *m);

#endif
