/* The argument structs of the ops in lib/ops.def: an op that would take
 * more than about eight arguments takes the description of what it works
 * on (the sources, the query, the gain, the shape, the flags) as one of
 * these, passed by pointer.  Pointers in them are device pointers; arrays
 * of pointers are host arrays holding device pointers, as everywhere in
 * the op table (lib/backend.h).
 *
 * Each struct comes with its AR_*_USES(x) words: the buffers it names and
 * their extents, in the vocabulary of lib/ops.def's "uses" (expanded only
 * where that vocabulary is defined, as tests/guard_backend.c does). */
#ifndef AR_OP_ARGS_H
#define AR_OP_ARGS_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The RMSNorm of the sublayer that reads a mixed row, fused into the depth
 * op that forms it: xn = RMSNorm(h) with gain (d) and rstd (N) per token,
 * as rmsnorm_fwd(xn, rstd, h, gain) would write them (xn: N x d). */
typedef struct {
    const float *gain;
    float *xn, *rstd;
} ar_norm_out;
#define AR_NORM_OUT_USES(nf, N, d)                                                                   \
    DEV((nf)->gain, d) DEV((nf)->xn, (size_t)(N) * (d)) DEV((nf)->rstd, N)

/* The backward of that norm, from dL/dxn (dxn) and the xn and rstd the
 * forward left: dL/dh is RMSNorm's backward of dxn, and dgain += its gain
 * gradient. */
typedef struct {
    const float *gain;
    float *dgain;
    const float *dxn, *xn, *rstd;
} ar_norm_grad;
#define AR_NORM_GRAD_USES(ng, N, d)                                                                  \
    DEV((ng)->gain, d) DEV((ng)->dgain, d) DEV((ng)->dxn, (size_t)(N) * (d))                      \
    DEV((ng)->xn, (size_t)(N) * (d)) DEV((ng)->rstd, N)

/* Causal multi-head attention over B sequences of T tokens, nh heads of hd
 * channels: the rotated queries q and keys k and the values v (B x T x
 * (nh*hd) each), and att, what the forward saves for the backward: the
 * backend's attention_state(B, T, nh) floats (lib/backend.h: the softmax
 * probabilities, B x nh x T x T, on the CPU; each row's log-sum-exp,
 * B x nh x T, in the CUDA backend's fused kernels). */
typedef struct {
    const float *q, *k, *v;
    float *att;
    int B, T, nh, hd;
} ar_attention;
#define AR_ATTENTION_ROWS(a) ((size_t)(a)->B * (a)->T * (a)->nh * (a)->hd)
#define AR_ATTENTION_USES(a)                                                                         \
    DEV((a)->q, AR_ATTENTION_ROWS(a)) DEV((a)->k, AR_ATTENTION_ROWS(a))                           \
    DEV((a)->v, AR_ATTENTION_ROWS(a)) ATT_STATE((a)->att, (a)->B, (a)->T, (a)->nh)

/* Two-phase depth attention (lib/residual_depth.c's chunks; the ops'
 * math is in lib/ops.def).  A chunk: C mixers c < C sharing their first k
 * sources src[0..k-1] (N x d each).  Mixer c has n[c] >= k sources, its
 * query w[c] and key-norm gain g[c] (d each; g NULL: no key norm, the
 * logit is w.x unnormalised), its weights alpha[c] (N x n[c]) and
 * log-sum-exps lse[c] (N); rs[s] (N) is the rstd of shared source s.
 * Phase 1 writes rs, alpha and lse; the shared backward reads them.
 * sigmoid: `score: sigmoid`.  weights_unread: nothing reads alpha after
 * this pass (no backward follows it, no study reads the weights), so the
 * op may leave it unwritten; the CPU's do, saving k exps a token and
 * mixer in phase 2.  rs, lse and the outputs are the same either way. */
typedef struct {
    int C, k;
    const int *n;
    const float *const *src;
    float *const *rs;
    const float *const *w, *const *g;
    float *const *alpha, *const *lse;
    int sigmoid, weights_unread;
    int N, d;
} ar_depth_inter;
#define AR_DEPTH_INTER_USES(c)                                                                       \
    HOST_ARRAY((c)->n, (c)->C) LIST((c)->src, (c)->k, (size_t)(c)->N * (c)->d)                     \
    LIST((c)->rs, (c)->k, (c)->N) LIST((c)->w, (c)->C, (c)->d)                                     \
    WHEN((c)->g, LIST((c)->g, (c)->C, (c)->d)) LIST((c)->lse, (c)->C, (c)->N) HOST((c)->alpha)     \
    EACH(i_, (c)->C, DEV((c)->alpha[i_], (size_t)(c)->N * (c)->n[i_]))

/* One mixer of such a chunk, for its own ("intra") sources: n sources
 * src[0..n-1] (N x d), the first k the chunk's shared ones, the other n-k
 * its own; rsi[t] (N) the rstd of its own source k+t; its query w and
 * gain g (d; g NULL: no key norm), weights alpha (N x n) and lse (N).
 * Phase 2 reads src[k..n-1] and writes rsi; the intra backward reads all
 * n sources and rsi.  weights_unread: as in ar_depth_inter. */
typedef struct {
    int n, k;
    const float *const *src;
    float *const *rsi;
    const float *w, *g;
    float *alpha, *lse;
    int sigmoid, weights_unread;
    int N, d;
} ar_depth_intra;
#define AR_DEPTH_INTRA_USES(m)                                                                       \
    LIST((m)->src + (m)->k, (m)->n - (m)->k, (size_t)(m)->N * (m)->d)                              \
    LIST((m)->rsi, (m)->n - (m)->k, (m)->N) DEV((m)->w, (m)->d) DEV_OPT((m)->g, (m)->d)             \
    DEV((m)->alpha, (size_t)(m)->N * (m)->n) DEV((m)->lse, (m)->N)

/* One general depth mixer (lib/residual_mixer.c): n sources src[s] (N x
 * d), H heads over channel groups of d/H; the query w (d, or wstride = d:
 * one per token, N x d; NULL: none), the key-norm gain g (d; NULL: no key
 * norm), the per-source logits theta (n; static mixing; NULL: none);
 * alpha (N x n x H, source-major: token i's weight of source s for head a
 * at alpha[(i n + s) H + a], so that a source's H heads are contiguous)
 * and rstd (N x n, only with g) written by the forward and read by the
 * backward.  sigmoid: `score: sigmoid`.  weights_unread
 * (forward only): as in ar_depth_inter, the op may leave alpha unwritten;
 * the CPU's fast one does (N H n floats a mixer not stored), and h and
 * rstd are the same either way.
 * rsc, rsc_ok (forward only; NULL: none): a cache of each source's
 * key-norm rstd, kept by the caller for rows that several mixers list
 * (rsc[s]: N floats; rsc_ok[s], host: nonzero where rsc[s] already holds
 * this op's rstd of src[s]'s N rows).  An op may read rsc[s] where
 * rsc_ok[s] is set instead of summing the row's squares again, and where
 * it fills rsc[s] it sets rsc_ok[s]; the caller clears rsc_ok where a
 * row changes.  A backend may ignore both (the CUDA one does); the CPU's
 * fast ops use them, and every one of them sums squares the same way, so
 * h, alpha and rstd are the same bits with or without the cache. */
typedef struct {
    int n;
    const float *const *src;
    const float *w;
    int wstride;
    const float *g, *theta;
    float *alpha, *rstd;
    int sigmoid, H, weights_unread;
    int N, d;
    float *const *rsc;
    int *rsc_ok;
} ar_depth_mix;
#define AR_DEPTH_MIX_USES(m)                                                                         \
    LIST((m)->src, (m)->n, (size_t)(m)->N * (m)->d)                                                \
    DEV_OPT((m)->w, (m)->wstride ? (size_t)(m)->N * (m)->d : (size_t)(m)->d)                        \
    DEV_OPT((m)->g, (m)->d) DEV_OPT((m)->theta, (m)->n)                                            \
    DEV((m)->alpha, (size_t)(m)->N * (m)->H * (m)->n) DEV_IF((m)->g, (m)->rstd, (size_t)(m)->N * (m)->n) \
    WHEN((m)->rsc, LIST((m)->rsc, (m)->n, (m)->N) HOST_ARRAY((m)->rsc_ok, (m)->n))

/* C general mixers c < C (shared queries: wstride 0) whose source lists
 * hold the same buffers src[s], s0 <= s < s1, at places s + off[c] (off
 * NULL: at places s; off[c] >= 0); each mixer's number of sources n[c],
 * query w[c], gain g[c], logits theta[c] (all NULL or all set, per
 * kind), weights alpha[c] and rstd[c], as in ar_depth_mix.  (swa's
 * windows hold their shared sources at places that shift by one from a
 * mixer to the next.) */
typedef struct {
    int C, s0, s1;
    const float *const *src;
    const int *n, *off;
    const float *const *w, *const *g, *const *theta;
    const float *const *alpha, *const *rstd;
    int sigmoid, H;
    int N, d;
} ar_depth_mix_chunk;
#define AR_DEPTH_MIX_CHUNK_USES(c)                                                                   \
    HOST_ARRAY((c)->n, (c)->C) WHEN((c)->off, HOST_ARRAY((c)->off, (c)->C))                        \
    LIST((c)->src, (c)->s1, (size_t)(c)->N * (c)->d)                                               \
    LIST_OPT((c)->w, (c)->C, (c)->d) LIST_OPT((c)->g, (c)->C, (c)->d) HOST((c)->alpha)             \
    HOST((c)->rstd) HOST((c)->theta)                                                                \
    EACH(i_, (c)->C, DEV((c)->alpha[i_], (size_t)(c)->N * (c)->H * (c)->n[i_])                      \
                         DEV_IF((c)->g[i_], (c)->rstd[i_], (size_t)(c)->N * (c)->n[i_])             \
                         DEV_OPT((c)->theta[i_], (c)->n[i_]))

/* p weighted sums of the same n buffers of len floats (mHC's streams,
 * static's chunks of mixers; p <= AR_WMIX_MAX, n <= AR_WMIX_MAX_IN):
 * output i takes C[i ldc + j] of input j (C: device, rows ldc floats
 * apart).  z (wmix_fwd only; NULL: none): one more sum, of the outputs,
 * with the p weights zc (device). */
typedef struct {
    int p, n;
    const float *C;
    int ldc;
    size_t len;
    const float *zc;
    float *z;
} ar_wmix;
#define AR_WMIX_COEFS(m) ((size_t)((m)->p - 1) * (m)->ldc + (m)->n)
#define AR_WMIX_USES(m)                                                                             \
    DEV((m)->C, AR_WMIX_COEFS(m)) DEV_OPT((m)->z, (m)->len) DEV_IF((m)->z, (m)->zc, (m)->p)

/* One AdamW step's hyperparameters (host values): learning rate, betas,
 * eps and decoupled weight decay.  What depends on the step's gradient
 * (the clipping factor, whether to update at all, the bias corrections'
 * step count) comes from the step's record, on the device. */
typedef struct {
    float lr, b1, b2, eps, wd;
} ar_adamw_hparams;

/* A training step's record, in device memory, written by step_check
 * (lib/ops.def) from the step's losses and gradient norm and read by
 * adamw, so that the update needs no host decision; the host reads it
 * once, after the update. */
typedef struct {
    double loss, gnorm;  /* the step's mean loss and global gradient norm */
    int64_t t;           /* AdamW steps taken, this one included */
    float gscale;        /* the clipping factor the gradient is read with */
    float bc1, bc2;      /* 1 - b1^t, 1 - b2^t */
    int32_t skip;        /* 1: non-finite loss or norm: no update */
    int32_t bad_param;   /* set by adamw where an updated parameter is not finite */
    int32_t pad_;
} ar_step_rec;

/* step_check's inputs: the losses of A micro-batches as nc head-chunk sums
 * each (device, A x nc; micro-batch a's mean is its sum / N), the
 * gradient's nsums chunk sums of squares (device; or, norm_given, the
 * norm itself in sums[0]), the clipping threshold (0: none) and the betas
 * as AdamW reads them (floats). */
typedef struct {
    const double *parts;
    int A, nc;
    double N;
    const double *sums;
    size_t nsums;
    int norm_given;
    double clip;
    float b1, b2;
} ar_step_check;
#define AR_STEP_CHECK_USES(c)                                                                        \
    DEV((c)->parts, (size_t)(c)->A * (c)->nc) DEV((c)->sums, (c)->nsums)

#ifdef __cplusplus
}
#endif

#endif
