/* The compute backend: one table of operations over device buffers.
 *
 * The model, optimizer and trainer call only these entries; lib/cpu/ fills
 * the table with CBLAS + OpenMP code, a CUDA backend fills it with kernels.
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
 *   - eps of every RMSNorm is AR_RMS_EPS. */
#ifndef AR_BACKEND_H
#define AR_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#define AR_RMS_EPS 1e-6f

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
     *   dx[i,:] += rstd[i] * (gy - xh * mean_j(gy*xh))
     *   dg[j]   += sum_i dout[i,j]*xh[i,j] */
    void (*rmsnorm_fwd)(float *out, float *rstd, const float *x, const float *g, int N, int d);
    void (*rmsnorm_bwd)(float *dx, float *dg, const float *dout, const float *x, const float *g,
                        const float *rstd, int N, int d);

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

    /* ---- SwiGLU gate ----
     * out = silu(gate) * up, silu(a) = a*sigmoid(a)                   (=)
     * bwd (=): dgate = dout*up*sigmoid(a)*(1 + a*(1-sigmoid(a))), dup = dout*silu(a) */
    void (*swiglu_fwd)(float *out, const float *gate, const float *up, size_t n);
    void (*swiglu_bwd)(float *dgate, float *dup, const float *dout, const float *gate,
                       const float *up, size_t n);

    /* ---- depth attention (DESIGN.md section 1) ----
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

    /* ---- softmax cross-entropy ----
     * probs = softmax(logits) (N x V, =); losses[i] = -log probs[i, targets[i]];
     * returns sum_i losses[i] (double-accumulated).
     * bwd (=): dlogits = scale * (probs - onehot(targets)) */
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

#endif
