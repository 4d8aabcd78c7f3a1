/* The compute backend: one table of operations over device buffers.
 *
 * The model, optimizer and trainer call only these entries; lib/cpu/ fills
 * the table with CBLAS + OpenMP code, lib/cuda/ with CUDA kernels and
 * cuBLAS.  Each family of ops has one file per backend, of the same name:
 *     backend_cpu.c    backend_cuda.cu    memory, device, the table
 *     kernels_cpu.c    kernels_cuda.cu    elementwise, embedding, RMSNorm,
 *                                         rotary, SwiGLU, cross-entropy, AdamW
 *     matmul_cpu.c     matmul_cuda.cu     linear
 *     attention_cpu.c  attention_cuda.cu  causal attention
 *     depth_cpu.c      depth_cuda.cu      depth attention, one- and two-phase
 *     mixer_cpu.c      mixer_cuda.cu      general one-phase depth mixing
 *     wsum_cpu.c       wsum_cuda.cu       weighted sums of buffers (wsum, wmix)
 * Pointers passed to ops are device pointers obtained from be->alloc (for the
 * CPU backend these are ordinary host pointers).  Arrays of pointers (the
 * depth-attention source lists) are host arrays holding device pointers.
 *
 * Conventions (every op, every backend):
 *   - row-major; N = number of token positions (B*T); "x W^T" follows
 *     nn.Linear with W stored [out, in];
 *   - parameter gradients always ACCUMULATE (+=), so gradient accumulation
 *     over micro-batches needs no extra buffer;
 *   - activation gradients accumulate where the comment says "+=" and are
 *     overwritten where it says "=";
 *   - eps of every RMSNorm is AR_RMS_EPS;
 *   - subnormal floats may be flushed to zero (the CPU backend sets FTZ
 *     and DAZ on its threads: lib/cpu/backend_cpu.c says why). */
#ifndef AR_BACKEND_H
#define AR_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define AR_RMS_EPS 1e-6f
#define AR_WMIX_MAX 8 /* most outputs or inputs of one wmix op */

typedef struct ar_backend {
    const char *name;

    /* ---- memory ---- */
    void *(*alloc)(size_t bytes); /* zero-filled, 64-byte aligned */
    void (*free)(void *p);
    void (*upload)(void *dst, const void *src, size_t bytes);   /* host -> device */
    void (*download)(void *dst, const void *src, size_t bytes); /* device -> host */
    void (*zero)(void *p, size_t bytes);
    void (*sync)(void);
    void (*set_threads)(int n); /* 0 = all cores */
    /* Matrix products in bf16 with fp32 accumulation (on = 1) or in fp32
     * (on = 0, the default).  Returns 0, or -1 where the backend has no bf16
     * path (the CPU backend). */
    int (*set_bf16)(int on);
    /* A short name of the device ("NVIDIA H100 80GB HBM3"; the CPU backend:
     * "cpu") and its dense bf16 tensor peak in FLOP/s (0 where unknown: the
     * CPU backend), the denominator of bench's model FLOPs utilisation. */
    const char *(*device_name)(void);
    double (*peak_bf16_flops)(void);

    /* ---- elementwise ---- */
    /* y = x */
    void (*copy)(float *y, const float *x, size_t n);
    /* y += x */
    void (*add)(float *y, const float *x, size_t n);
    /* y *= a */
    void (*scale)(float *y, float a, size_t n);
    /* returns sum_i x_i^2 (accumulated in double) */
    double (*sumsq)(const float *x, size_t n);

    /* ---- embedding ----
     * out[i,:] = wte[tok[i],:]                            (N x d)
     * bwd: dwte[tok[i],:] += dout[i,:] */
    void (*embedding_fwd)(float *out, const int32_t *tok, const float *wte, int N, int d);
    void (*embedding_bwd)(float *dwte, const float *dout, const int32_t *tok, int N, int d);

    /* ---- RMSNorm ----
     * rstd[i] = 1/sqrt(mean_j x[i,j]^2 + eps);  out[i,j] = x[i,j]*rstd[i]*g[j]
     * bwd: with xh = x*rstd, gy = g*dout:
     *   dx[i,:] += rstd[i] * (gy - xh * mean_j(gy*xh))   (overwrite: = instead of +=,
     *                                                    dx's contents never read)
     *   dg[j]   += sum_i dout[i,j]*xh[i,j] */
    void (*rmsnorm_fwd)(float *out, float *rstd, const float *x, const float *g, int N, int d);
    void (*rmsnorm_bwd)(float *dx, float *dg, const float *dout, const float *x, const float *g,
                        const float *rstd, int overwrite, int N, int d);

    /* ---- linear (no bias) ----
     * out = x W^T              x: N x in, W: outd x in, out: N x outd   (=)
     * bwd: dx += dout W  (skipped when dx is NULL);  dW += dout^T x */
    void (*matmul_fwd)(float *out, const float *x, const float *W, int N, int in, int outd);
    void (*matmul_bwd)(float *dx, float *dW, const float *dout, const float *x, const float *W,
                       int N, int in, int outd);

    /* ---- rotary position embedding, rotate-half convention, theta 10000 ----
     * x is B x T x nh x hd (heads interleaved in a d-row); for position t,
     * pair (j, j+hd/2), freq_j = 10000^(-2j/hd), a = t*freq_j:
     *   x'_j = x_j cos a - x_{j+hd/2} sin a ;  x'_{j+hd/2} = x_j sin a + x_{j+hd/2} cos a
     * fwd rotates in place; bwd applies the inverse rotation to dx in place. */
    void (*rope_fwd)(float *x, int B, int T, int nh, int hd);
    void (*rope_bwd)(float *dx, int B, int T, int nh, int hd);

    /* ---- causal multi-head attention (q, k already rotated) ----
     * q,k,v,y: B x T x (nh*hd); att: B x nh x T x T (softmax probabilities,
     * zero above the diagonal).  s = q k^T / sqrt(hd), causal, att = softmax(s),
     * y = att v                                                       (=)
     * bwd (=, overwrites dq dk dv; datt is B x nh x T x T scratch):
     *   dv = att^T dy; dA = dy v^T; ds = att*(dA - rowsum(dA*att)) / sqrt(hd);
     *   dq = ds k; dk = ds^T q */
    void (*attention_fwd)(float *y, float *att, const float *q, const float *k, const float *v,
                          int B, int T, int nh, int hd);
    void (*attention_bwd)(float *dq, float *dk, float *dv, float *datt, const float *dy,
                          const float *att, const float *q, const float *k, const float *v,
                          int B, int T, int nh, int hd);

    /* ---- incremental decoding against a key/value cache (lib/decode.c) ----
     * rope_fwd_at: rope_fwd on n rows at absolute positions: x is n x nh x hd
     * and row i is rotated by a = (pos0 + i) * freq_j (in place); with
     * pos0 = 0 and n = T it is rope_fwd of one sequence, bit for bit.
     * attention_decode: n new queries at positions pos0..pos0+n-1 against
     * the cache k, v of Tk = pos0+n rows of nh*hd (rows pos0.. hold the new
     * tokens' rotated keys and their values); q, y: n x (nh*hd);
     * att: nh x n x Tk, the probabilities (zeros right of the diagonal).
     * Per head:  s[i,c] = q_i . k_c / sqrt(hd),  causal: c <= pos0 + i,
     *            att[i,:] = softmax(s[i,:]),  y_i = sum_c att[i,c] v_c      (=)
     * With pos0 = 0 and n = T it is attention_fwd's forward with B = 1. */
    void (*rope_fwd_at)(float *x, int n, int pos0, int nh, int hd);
    void (*attention_decode)(float *y, float *att, const float *q, const float *k, const float *v,
                             int n, int pos0, int nh, int hd);
    /* matvec_fwd: one token's linear layer, out = W x (matmul_fwd with
     * N = 1, to rounding: not bit for bit), x: in, W: outd x in, out: outd
     * (=); its own entry because a matrix-vector product is several times
     * faster than a one-row matrix product (OpenBLAS: 4-7x at d = 192..512).
     * In lib/cpu/matmul_cpu.c and lib/cuda/matmul_cuda.cu. */
    void (*matvec_fwd)(float *out, const float *x, const float *W, int in, int outd);

    /* ---- SwiGLU gate ----
     * out = silu(gate) * up, silu(a) = a*sigmoid(a)                   (=)
     * bwd (=): dgate = dout*up*sigmoid(a)*(1 + a*(1-sigmoid(a))), dup = dout*silu(a) */
    void (*swiglu_fwd)(float *out, const float *gate, const float *up, size_t n);
    void (*swiglu_bwd)(float *dgate, float *dup, const float *dout, const float *gate,
                       const float *up, size_t n);

    /* ---- depth attention (docs/reference.md §2.3-2.4) ----
     * n sources src[0..n-1], each N x d; per token i:
     *   rstd[i,s]  = 1/sqrt(mean_j src[s][i,j]^2 + eps)
     *   logit[i,s] = sum_j w_j g_j src[s][i,j] rstd[i,s]
     *   alpha[i,:] = softmax_s(logit[i,:]);  h[i,:] = sum_s alpha[i,s] src[s][i,:]   (=)
     * alpha, rstd: N x n, saved for the backward.
     * bwd, with u = w*g, da_s = dh.src_s, dl_s = alpha_s (da_s - sum_r alpha_r da_r):
     *   dsrc[s] += alpha_s dh + dl_s (rstd_s u - (u.src_s) rstd_s^3 src_s / d)
     *   dw += g * sum_{i,s} dl_s rstd_s src_s ;  dg += w * (same sum)
     * dsrc entries may repeat a pointer only if the caller accepts accumulation
     * order (they are processed in index order per token). */
    void (*depth_attn_fwd)(float *h, float *alpha, float *rstd, const float *const *src, int n,
                           const float *w, const float *g, int N, int d);
    void (*depth_attn_bwd)(float *const *dsrc, float *dw, float *dg, const float *dh,
                           const float *alpha, const float *rstd, const float *const *src, int n,
                           const float *w, const float *g, int N, int d);

    /* ---- two-phase depth attention (the report's Algorithm 1; the schedule
     * is in lib/residual_depth.c) ----
     * The simple ops above mix one mixer's sources in two sweeps each.  These
     * split the work of a chunk of C mixers (c = 0..C-1) that share their
     * first k sources src[0..k-1] (available before the chunk runs); mixer c
     * has n[c] >= k sources, the other n[c]-k ("intra", produced inside the
     * chunk) join later.  u_c = w[c]*g[c]; alpha[c] is N x n[c]; rs[s] (N) is
     * the rstd of source s.  The results equal the simple ops' to rounding.
     * Without key norm (`key_norm: false`) g is NULL (the array g and dg of
     * the chunk ops, the row g of the one-mixer ops, and their dg): u_c =
     * w[c], every rstd is 1 (rs, rsi written with 1), the backward has no
     * r^3 term and no dg; the logit is u.x, as depth_mix_fwd's without g.
     * sigmoid != 0 (`score: sigmoid`): every weight is sigmoid(z), not
     * normalised, so phase 1's o = sum_{s<k} sigmoid(z[c,s]) src[s] and
     * phase 2's h = o + sum_t sigmoid(z_t) intra[t]; lse is not used
     * (written 0); the backward's dl = alpha (1 - alpha) da (no cdot term;
     * a mixer of one source has one too), with u.x = logit(alpha) / rstd
     * where the key norm needs it.
     *
     * Phase 1, all mixers of a chunk, per token i:
     *   rs[s][i] = 1/sqrt(mean_j src[s][i,j]^2 + eps)   (=)
     *   z[c,s]   = rs[s][i] * (u_c . src[s][i,:])
     *   lse[c][i] = log sum_{s<k} exp z[c,s]             (=)
     *   o[c][i,:] = sum_{s<k} exp(z[c,s] - lse) src[s][i,:]   (=)
     *   alpha[c][i,s] = z[c,s] for s < k (raw logits until phase 2)
     * xn (or NULL): mixer 0's o is not written; its RMSNorm is, as
     * rmsnorm_fwd(xn, nrstd, o, ng) would (for a mixer with no sources of its
     * own, whose h is o: saves writing h and reading it back).
     * o[c] NULL: that o is not written (with k = 1, o = src[0] exactly, since
     * its one weight is exp(0)/1, and phase 2 can read src[0] instead). */
    void (*depth_fwd_inter)(float *const *o, float *const *lse, float *const *alpha, const int *n,
                            float *const *rs, const float *const *src, int k,
                            const float *const *w, const float *const *g, int C, const float *ng,
                            float *xn, float *nrstd, int sigmoid, int N, int d);
    /* Phase 2, one mixer with j = n-k intra sources, h holding o on entry:
     *   rsi[t][i] = rstd(intra[t][i,:]) (=);  z_t = rsi[t][i] (u . intra[t][i,:])
     *   LSE = log(exp(lse[i]) + sum_t exp z_t)
     *   h[i,:] = exp(lse[i]-LSE) h[i,:] + sum_t exp(z_t-LSE) intra[t][i,:]
     *   alpha[i,s] = exp(alpha[i,s] - LSE) (s < k);  alpha[i,k+t] = exp(z_t - LSE)
     *   lse[i] = LSE (=)   (the backward gets u.x_s back as (log alpha_s + LSE)/rstd_s)
     * xn (or NULL), with j > 0: h is left alone and the sublayer's RMSNorm of
     * the new h is written instead, as rmsnorm_fwd(xn, nrstd, h, ng) would
     * (saves writing h and reading it back). */
    void (*depth_fwd_merge)(float *h, float *lse, float *alpha, int n, int k,
                            float *const *rsi, const float *const *intra, const float *w,
                            const float *g, const float *ng, float *xn, float *nrstd,
                            int sigmoid, int N, int d);
    /* Backward, intra part of one mixer (as soon as its dh is known), over
     * its own sources src[k..n-1] (src lists all n):
     *   cdot[i] = dh[i,:].h[i,:]   (=)   (= sum_s alpha_s da_s)
     *   for t < n-k, x = src[k+t], a = alpha[i,k+t], r = rsi[t][i]:
     *     dl = a (dh.x - cdot) (0 where n = 1);  dintra[t] += a dh + dl (r u - (u.x) r^3 x / d)
     *   dw += g * sum dl r x;  dg += w * (same sum)
     * lse is phase 2's: u.x = (log a + lse[i]) / r without touching x again.
     * dxn (or NULL): h is not given (NULL) and dh not either: dh is formed
     * (=) by the backward of the sublayer's norm xn = RMSNorm(h) (gain ng,
     * rstd nrstd), from xn and dxn, as rmsnorm_bwd with overwrite:
     *   xh = h nrstd = xn / ng  (where ng_j = 0: nrstd sum_s alpha_s src[s][:,j])
     *   dh = nrstd (ng dxn - xh m), m = (ng dxn).xh / d;  dng += sum_i dxn xh
     * so the backward needs neither h nor its recomputation. */
    void (*depth_bwd_intra)(float *const *dintra, float *dw, float *dg, float *cdot, float *dh,
                            const float *h, const float *dxn, const float *xn,
                            const float *ng, float *dng, const float *nrstd, const float *alpha,
                            const float *lse, int n, int k, const float *const *rsi,
                            const float *const *src, const float *w, const float *g,
                            int sigmoid, int N, int d);
    /* Backward, shared part of a chunk (after its lowest mixer's intra part):
     *   dl[c,s] = alpha[c][i,s] (dh[c].x_s - cdot[c][i])   (0 where n[c] = 1)
     *   dsrc[s] += sum_c alpha dh[c] + dl (rs u_c - (u_c.x_s) rs^3 x_s / d)
     *   dw[c] += g_c * sum dl rs x_s;  dg[c] += w_c * (same sum)
     * overwrite: dsrc[s] = (...) instead of += (the first mixer differentiated
     * reaches every gradient buffer, so they need no zeroing pass). */
    void (*depth_bwd_inter)(float *const *dsrc, float *const *dw, float *const *dg,
                            const float *const *dh, const float *const *cdot,
                            const float *const *alpha, const float *const *lse, const int *n,
                            const float *const *rs, const float *const *src, int k,
                            const float *const *w, const float *const *g, int C,
                            int overwrite, int sigmoid, int N, int d);

    /* ---- general one-phase depth mixing (the general depth mixer,
     * lib/residual_mixer.c) ----
     * n sources src[s] (N x d), H heads over channel groups G_a of e = d/H
     * channels; per token i, with q = w (wstride 0: one query for all
     * tokens) or w + i*wstride (per-token queries, wstride = d):
     *   g non-NULL (key norm): r_s = rstd[i,s] = 1/sqrt(mean_j src[s][i,j]^2 + eps) (=),
     *                          k_s[j] = src[s][i,j] r_s g[j];   else k_s = src[s][i,:], r_s = 1
     *   logit[a,s] = sum_{j in G_a} q[j] k_s[j];  theta non-NULL: theta[s];
     *                both w and theta NULL: 0 (uniform softmax)
     *   alpha[i,a,s] = softmax_s(logit[a,:]) or, sigmoid != 0, sigmoid(logit[a,s])
     *   h[i,j] = sum_s alpha[i,a(j),s] src[s][i,j]                          (=)
     * alpha is N x H x n, rstd N x n (only with g), both saved for the backward.
     * bwd, da[a,s] = sum_{j in G_a} dh[j] src_s[j];
     *   dl = alpha (da - sum_r alpha_r da_r)  (softmax)  |  da alpha (1 - alpha)  (sigmoid)
     *   u[a,s] = sum_{j in G_a} q[j] g[j] src_s[j]
     *   dsrc[s][j] += alpha[a(j),s] dh[j] + dl[a(j),s] r_s q[j] g[j]
     *                 - (sum_a dl[a,s] u[a,s]) r_s^3 src_s[j] / d    (last term with g only)
     *   dw[j] += sum dl[a(j),s] r_s g[j] src_s[j]   (over tokens too when wstride is 0;
     *            per token into dw[i*d+j] otherwise; g = 1 without key norm)
     *   dg[j] += sum_{i,s} dl[a(j),s] r_s q[j] src_s[j];   dtheta[s] += sum_{i,a} dl[a,s]
     * dsrc[s] may be NULL (no gradient wanted); dw, dg, dtheta may be NULL. */
    void (*depth_mix_fwd)(float *h, float *alpha, float *rstd, const float *const *src, int n,
                          const float *w, int wstride, const float *g, const float *theta,
                          int sigmoid, int H, int N, int d);
    void (*depth_mix_bwd)(float *const *dsrc, float *dw, float *dg, float *dtheta, const float *dh,
                          const float *alpha, const float *rstd, const float *const *src, int n,
                          const float *w, int wstride, const float *g, const float *theta,
                          int sigmoid, int H, int N, int d);
    /* The same backward in pieces, so that mixers sharing sources take
     * them in one pass (lib/residual_mixer.c's chunks; shared queries only,
     * wstride 0).  depth_mix_cdot, per token and head:
     *   cdot[i,a] = sum_{j in G_a} dh[i,j] h[i,j]   (=, N x H)
     * which equals sum_s alpha[i,a,s] da[a,s] over all of a mixer's sources
     * (h = sum_s alpha src_s), the softmax's only term that needs them all.
     * depth_mix_bwd_chunk: for C mixers c < C that list the same buffers
     * src[s], dsrc[s] at places s0 <= s < s1 of their source lists (n[c]
     * sources each; alpha[c], rstd[c], w[c], g[c], theta[c], dh[c] theirs
     * as in depth_mix_bwd, cdot[c] from depth_mix_cdot), depth_mix_bwd's
     * sums restricted to those s, with dl = alpha (da - cdot) (softmax) or
     * da alpha (1 - alpha) (sigmoid):
     *   dsrc[s] += sum_c (alpha_c dh_c + dl_c r ...)   (as depth_mix_bwd)
     *   dw[c], dg[c] += their terms of those s;  dtheta[c][s] += sum_a dl
     * Each source row is read once per token for all C mixers.  w[c], g[c],
     * theta[c] are all NULL or all set; dw, dg, dtheta entries may be NULL.
     * cdot then the chunk op over every mixer's whole list (s0 = 0, s1 = n)
     * equals depth_mix_bwd to rounding. */
    void (*depth_mix_cdot)(float *cdot, const float *dh, const float *h, int H, int N, int d);
    void (*depth_mix_bwd_chunk)(float *const *dsrc, const float *const *src, int s0, int s1, int C, float *const *dw,
                                float *const *dg, float *const *dtheta, const float *const *dh,
                                const float *const *cdot, const float *const *alpha,
                                const float *const *rstd, const int *n, const float *const *w,
                                const float *const *g, const float *const *theta, int sigmoid,
                                int H, int N, int d);

    /* ---- weighted sum of buffers with learned coefficients (DenseFormer,
     * mHC) ----
     * y = sum_s c[s] x[s]   ((=), or += when accumulate)   c: n floats (device)
     * bwd: dx[s] += c[s] dy (dx or dx[s] NULL: skipped);  dc[s] += dy . x[s]
     *      (dc NULL: skipped) */
    void (*wsum_fwd)(float *y, const float *const *x, const float *c, int n, int accumulate,
                     size_t len);
    void (*wsum_bwd)(float *const *dx, float *dc, const float *dy, const float *const *x,
                     const float *c, int n, size_t len);

    /* ---- several weighted sums of the same buffers (mHC's streams) ----
     * y[i] = sum_j C[i ldc + j] x[j]   (=)   i < p, j < n; p, n <= AR_WMIX_MAX
     * bwd: dx[j] = sum_i C[i ldc + j] dy[i]  (=, or += when accumulate;
     *            dx NULL: skipped)
     *      dC[i ldc + j] += dy[i] . x[j]      (dC NULL: skipped)
     * C, dC: device, rows ldc floats apart.  Outputs alias no input.  One
     * pass reads every input and writes every output once, where p separate
     * wsum calls would read the inputs p times. */
    void (*wmix_fwd)(float *const *y, int p, const float *const *x, int n, const float *C, int ldc,
                     size_t len);
    void (*wmix_bwd)(float *const *dx, int accumulate, float *dC, const float *const *dy, int p,
                     const float *const *x, int n, const float *C, int ldc, size_t len);

    /* ---- softmax cross-entropy ----
     * probs = softmax(logits) (N x V, =); losses[i] = -log probs[i, targets[i]];
     * returns sum_i losses[i] (double-accumulated).
     * bwd (=): dlogits = scale * (probs - onehot(targets)); dlogits may alias probs */
    double (*xent_fwd)(float *losses, float *probs, const float *logits, const int32_t *targets,
                       int N, int V);
    void (*xent_bwd)(float *dlogits, const float *probs, const int32_t *targets, float scale,
                     int N, int V);

    /* ---- AdamW, decoupled weight decay (Loshchilov & Hutter) ----
     * m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2
     * p -= lr * ( (m/(1-b1^t)) / (sqrt(v/(1-b2^t)) + eps) + wd * p )
     * g is read after multiplication by gscale (gradient clipping factor). */
    void (*adamw)(float *p, const float *g, float *m, float *v, size_t n, float gscale, float lr,
                  float b1, float b2, float eps, float wd, long t);
} ar_backend;

/* The CPU backend (always built). */
const ar_backend *ar_backend_cpu(void);

/* The CUDA backend on the current CUDA device (lib/cuda/), created on first
 * use.  NULL with e set where attnres was built without CUDA
 * (lib/cuda/backend_cuda_load.c) or no CUDA device can be used. */
struct ar_err;
const ar_backend *ar_backend_cuda(struct ar_err *e);
/* 1 when this build has the CUDA backend compiled in. */
int ar_cuda_built(void);

/* The backend of a train.device value ("cpu" or NULL: the CPU backend;
 * "cuda": ar_backend_cuda) with bf16 matrix products on or off (set_bf16).
 * NULL with e set, naming the key, where that device cannot be used
 * ("'train.device' cuda: " and ar_backend_cuda's message) or has no bf16
 * path ("'train.precision' bf16 needs 'train.device' cuda ...").
 * lib/backend_select.c */
const ar_backend *ar_backend_open(const char *device, int bf16, struct ar_err *e);

#ifdef __cplusplus
}
#endif

#endif
