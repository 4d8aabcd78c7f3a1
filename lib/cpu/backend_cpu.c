/* The CPU backend: every entry of the op table in lib/backend.h over flat
 * float arrays, in the style of llm.c: each op a plain forward/backward pair
 * with its math in a comment above it.
 *
 * Matrix products go through CBLAS (OpenBLAS, OpenMP build); the remaining
 * loops are parallelised with OpenMP over rows / tokens / (batch, head).
 *
 * Determinism: results are bit-reproducible run to run with the same thread
 * count.  There are no float atomics; every loop uses a static schedule; and
 * every reduction across tokens (parameter gradients dg, dw, dwte; sumsq;
 * the xent loss sum) is either computed by looping over output columns in
 * parallel with the token loop sequential inside, or summed from partials of
 * a fixed chunking in a fixed order.  Those reductions therefore do not even
 * depend on the thread count.  OpenBLAS sgemm splits only the output (M, N)
 * among its threads, so it is reproducible for a given thread count too.
 *
 * Inside OpenMP parallel regions (attention) sgemm is called per
 * (batch, head); the OpenMP build of OpenBLAS runs single-threaded when it
 * is called from inside a parallel region. */
#include "../backend.h"
#include "ablate_cpu.h"
#include "depth_cpu.h"
#include "rmsnorm_row.h"
#include "workspace.h"

#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

/* Below this many elements an elementwise loop runs on one thread: the
 * fork/join costs more than the work. */
#define PAR_MIN 32768
/* Row-block size of the causal attention sgemm tiling. */
#define ATT_BLOCK 64
/* Fixed chunk of the deterministic sumsq reduction. */
#define SUMSQ_CHUNK 16384

/* ------------------------------------------------------------------------ */
/* memory                                                                    */

static void *cpu_alloc(size_t bytes)
{
    size_t n = (bytes + 63) & ~(size_t)63;
    if (n == 0)
        n = 64;
    void *p = aligned_alloc(64, n);
    if (p)
        memset(p, 0, n);
    return p;
}

static void cpu_free(void *p) { free(p); }

static void cpu_upload(void *dst, const void *src, size_t bytes)
{
    if (bytes)
        memcpy(dst, src, bytes);
}

static void cpu_download(void *dst, const void *src, size_t bytes)
{
    if (bytes)
        memcpy(dst, src, bytes);
}

static void cpu_zero(void *p, size_t bytes)
{
    if (bytes)
        memset(p, 0, bytes);
}

static void cpu_sync(void) {}

/* n = 0 means all cores. */
/* n <= 0: OMP_NUM_THREADS if set, else every processor (omp_get_max_threads
 * before any omp_set_num_threads call says exactly that, so remember it). */
static void cpu_set_threads(int n)
{
    static int initial;
    if (!initial)
        initial = omp_get_max_threads();
    if (n <= 0)
        n = initial;
    omp_set_num_threads(n);
    openblas_set_num_threads(n);
}

/* Grow-only scratch (workspace.h). */
void *cpu_ws(int slot, size_t bytes)
{
    static void *buf[WS_NSLOTS];
    static size_t cap[WS_NSLOTS];
    if (bytes > cap[slot]) {
        free(buf[slot]);
        size_t n = (bytes + 63) & ~(size_t)63;
        buf[slot] = aligned_alloc(64, n);
        if (!buf[slot])
            abort();
        cap[slot] = n;
    }
    return buf[slot];
}

/* ------------------------------------------------------------------------ */
/* elementwise                                                               */

/* y = x */
static void copy_forward(float *y, const float *x, size_t n)
{
    if (n && y != x)
        memmove(y, x, n * sizeof(float));
}

/* y += x */
static void add_forward(float *y, const float *x, size_t n)
{
    long nn = (long)n;
#pragma omp parallel for schedule(static) if (nn > PAR_MIN)
    for (long i = 0; i < nn; i++)
        y[i] += x[i];
}

/* y *= a */
static void scale_forward(float *y, float a, size_t n)
{
    long nn = (long)n;
#pragma omp parallel for schedule(static) if (nn > PAR_MIN)
    for (long i = 0; i < nn; i++)
        y[i] *= a;
}

/* sum_i x_i^2 in double: partial sums over fixed chunks of SUMSQ_CHUNK
 * elements, added in chunk order (independent of the thread count). */
static double sumsq_forward(const float *x, size_t n)
{
    long nc = (long)((n + SUMSQ_CHUNK - 1) / SUMSQ_CHUNK);
    if (nc <= 1) {
        double s = 0;
        for (size_t i = 0; i < n; i++)
            s += (double)x[i] * x[i];
        return s;
    }
    double *part = cpu_ws(WS_C, (size_t)nc * sizeof(double));
#pragma omp parallel for schedule(static)
    for (long c = 0; c < nc; c++) {
        size_t lo = (size_t)c * SUMSQ_CHUNK;
        size_t hi = lo + SUMSQ_CHUNK < n ? lo + SUMSQ_CHUNK : n;
        double s = 0;
        for (size_t i = lo; i < hi; i++)
            s += (double)x[i] * x[i];
        part[c] = s;
    }
    double s = 0;
    for (long c = 0; c < nc; c++)
        s += part[c];
    
    return s;
}

/* Splits [0, n) into `parts` near-equal contiguous ranges; range k. */
static void split_range(int n, int parts, int k, int *lo, int *hi)
{
    int q = n / parts, r = n % parts;
    *lo = k * q + (k < r ? k : r);
    *hi = *lo + q + (k < r ? 1 : 0);
}

/* Number of column chunks for the column-parallel reductions: one per
 * thread, but no chunk narrower than 16 floats. */
static int col_chunks(int d)
{
    int t = omp_get_max_threads();
    int c = d / 16;
    if (c < 1)
        c = 1;
    return c < t ? c : t;
}

/* exp(x) in float, written so that loops calling it vectorise (no libm
 * call, no branches): Cephes expf.  n = round(x/ln2) by the 1.5*2^23 trick,
 * r = x - n ln2 (two-part ln2), e^r by a degree-6 polynomial on
 * [-ln2/2, ln2/2], times 2^n built in the exponent bits.  Relative error
 * about 1e-7 (a couple of ulp).  x is clamped to [-87.3, 88.3] so 2^n stays
 * a normal float: exp(-inf..-87.3) returns ~1.2e-38 instead of 0, which is
 * harmless wherever it is added to a sum containing exp(0) = 1. */
static inline float fast_expf(float x)
{
    /* clamp with bit masks: a ternary here gets turned into a branch (the
     * clamped path is constant-folded) and the calling loop no longer
     * vectorises */
    union {
        float f;
        int32_t i;
    } ux = {x}, ulo = {-87.3f}, uhi = {88.3f};
    int32_t mlo = -(int32_t)(x < -87.3f), mhi = -(int32_t)(x > 88.3f);
    ux.i = (ux.i & ~(mlo | mhi)) | (ulo.i & mlo) | (uhi.i & mhi);
    x = ux.f;
    float fn = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
    float r = x - fn * 0.693359375f;
    r = r + fn * 2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    union {
        uint32_t u;
        float f;
    } e;
    e.u = (uint32_t)((int32_t)fn + 127) << 23;
    return p * e.f;
}

/* sum of x[0..n) with 8 interleaved partial sums (vectorises without
 * -ffast-math; the order is fixed, so the result is deterministic) */
static inline float sum8(const float *x, int n)
{
    float acc[8] = {0};
    int i = 0;
    for (; i + 8 <= n; i += 8)
        for (int l = 0; l < 8; l++)
            acc[l] += x[i + l];
    float s = 0.0f;
    for (; i < n; i++)
        s += x[i];
    for (int l = 0; l < 8; l++)
        s += acc[l];
    return s;
}

/* the same in double */
static inline double sum8d(const float *x, int n)
{
    double acc[8] = {0};
    int i = 0;
    for (; i + 8 <= n; i += 8)
        for (int l = 0; l < 8; l++)
            acc[l] += x[i + l];
    double s = 0.0;
    for (; i < n; i++)
        s += x[i];
    for (int l = 0; l < 8; l++)
        s += acc[l];
    return s;
}

/* ------------------------------------------------------------------------ */
/* embedding                                                                 */

/* out[i,:] = wte[tok[i],:]    (N x d) */
static void embedding_forward(float *out, const int32_t *tok, const float *wte, int N, int d)
{
#pragma omp parallel for schedule(static) if ((long)N * d > PAR_MIN)
    for (int i = 0; i < N; i++)
        memcpy(out + (size_t)i * d, wte + (size_t)tok[i] * d, (size_t)d * sizeof(float));
}

/* dwte[tok[i],:] += dout[i,:]
 * Parallel over column chunks; within a chunk tokens are added in order, so
 * repeated tokens accumulate deterministically. */
static void embedding_backward(float *dwte, const float *dout, const int32_t *tok, int N, int d)
{
    int nc = col_chunks(d);
#pragma omp parallel for schedule(static) num_threads(nc) if (nc > 1 && (long)N * d > PAR_MIN)
    for (int c = 0; c < nc; c++) {
        int j0, j1;
        split_range(d, nc, c, &j0, &j1);
        for (int i = 0; i < N; i++) {
            float *dst = dwte + (size_t)tok[i] * d;
            const float *src = dout + (size_t)i * d;
            for (int j = j0; j < j1; j++)
                dst[j] += src[j];
        }
    }
}

/* ------------------------------------------------------------------------ */
/* RMSNorm                                                                   */

/* rstd[i] = 1/sqrt(mean_j x[i,j]^2 + eps);  out[i,j] = x[i,j]*rstd[i]*g[j] */
static void rmsnorm_forward(float *out, float *rstd, const float *x, const float *g, int N, int d)
{
#pragma omp parallel for schedule(static) if ((long)N * d > PAR_MIN)
    for (int i = 0; i < N; i++)
        cpu_rmsnorm_row(out + (size_t)i * d, rstd + i, x + (size_t)i * d, g, d);
}

/* xh = x*rstd, gy = g*dout:
 *   dx[i,:] += rstd[i] * (gy - xh * mean_j(gy*xh))
 *   dg[j]   += sum_i dout[i,j]*xh[i,j]
 * One pass over the rows: dg through partial sums of RMS_RED rows added in
 * order (deterministic, thread-count independent), not a second sweep of
 * dout and x. */
#define RMS_RED 128
static void rmsnorm_backward(float *dx, float *dg, const float *dout, const float *x,
                             const float *g, const float *rstd, int overwrite, int N, int d)
{
    int nch = (N + RMS_RED - 1) / RMS_RED;
    float *part = cpu_ws(WS_C, (size_t)nch * d * sizeof(float));
#pragma omp parallel if ((long)N * d > PAR_MIN)
    {
        float xh[d];
#pragma omp for schedule(static)
        for (int ch = 0; ch < nch; ch++) {
            float *pp = part + (size_t)ch * d;
            memset(pp, 0, (size_t)d * sizeof(float));
            int i1 = (ch + 1) * RMS_RED < N ? (ch + 1) * RMS_RED : N;
            for (int i = ch * RMS_RED; i < i1; i++) {
                const float *xi = x + (size_t)i * d;
                for (int j = 0; j < d; j++)
                    xh[j] = xi[j] * rstd[i];
                cpu_rmsnorm_bwd_row(dx + (size_t)i * d, pp, dout + (size_t)i * d, xh, g, rstd[i],
                                    overwrite, d);
            }
        }
    }
    for (int j = 0; j < d; j++) {
        double acc = 0.0;
        for (int ch = 0; ch < nch; ch++)
            acc += part[(size_t)ch * d + j];
        dg[j] += (float)acc;
    }
}

/* ------------------------------------------------------------------------ */
/* linear (no bias)                                                          */

/* out = x W^T     x: N x in, W: outd x in, out: N x outd   (=) */
static void matmul_forward(float *out, const float *x, const float *W, int N, int in, int outd)
{
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, outd, in, 1.0f, x, in, W, in, 0.0f,
                out, outd);
}

/* dx += dout W   (skipped when dx is NULL);   dW += dout^T x */
static void matmul_backward(float *dx, float *dW, const float *dout, const float *x,
                            const float *W, int N, int in, int outd)
{
    if (dx)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, in, outd, 1.0f, dout, outd, W,
                    in, 1.0f, dx, in);
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, outd, in, N, 1.0f, dout, outd, x, in,
                1.0f, dW, in);
}

/* ------------------------------------------------------------------------ */
/* rotary position embedding (rotate-half, theta 10000)                      */

/* cos/sin table T x hd/2: angle t*10000^(-2j/hd) in double, rounded to
 * float; kept in the workspace and rebuilt only when (T, hd) changes. */
static float *rope_table(int T, int hd)
{
    static int cT = -1, chd = -1;
    int h2 = hd / 2;
    float *tab = cpu_ws(WS_ROPE, (size_t)T * h2 * 2 * sizeof(float) + (size_t)h2 * sizeof(double));
    if (T == cT && hd == chd)
        return tab;
    cT = T, chd = hd;
    double *freq = (double *)(tab + (size_t)T * h2 * 2);
    for (int j = 0; j < h2; j++)
        freq[j] = pow(10000.0, -2.0 * j / hd);
#pragma omp parallel for schedule(static) if ((long)T * h2 > 4096)
    for (int t = 0; t < T; t++) {
        for (int j = 0; j < h2; j++) {
            double a = (double)t * freq[j];
            tab[((size_t)t * h2 + j) * 2] = (float)cos(a);
            tab[((size_t)t * h2 + j) * 2 + 1] = (float)sin(a);
        }
    }
    return tab;
}

/* Rotates every (j, j+hd/2) pair of every head of x (B x T x nh x hd) by the
 * angle +a (dir = +1, forward) or -a (dir = -1, inverse = transpose). */
static void rope_apply(float *x, int B, int T, int nh, int hd, float dir)
{
    int h2 = hd / 2;
    if (h2 == 0)
        return;
    float *tab = rope_table(T, hd);
    long BT = (long)B * T;
#pragma omp parallel for schedule(static) if (BT * nh * hd > PAR_MIN)
    for (long bt = 0; bt < BT; bt++) {
        int t = (int)(bt % T);
        const float *cs = tab + (size_t)t * h2 * 2;
        for (int h = 0; h < nh; h++) {
            float *xh = x + ((size_t)bt * nh + h) * hd;
            for (int j = 0; j < h2; j++) {
                float c = cs[2 * j], s = dir * cs[2 * j + 1];
                float x0 = xh[j], x1 = xh[j + h2];
                xh[j] = x0 * c - x1 * s;
                xh[j + h2] = x0 * s + x1 * c;
            }
        }
    }
}

/* x'_j = x_j cos a - x_{j+hd/2} sin a ;  x'_{j+hd/2} = x_j sin a + x_{j+hd/2} cos a
 * a = t * 10000^(-2j/hd), in place. */
static void rope_forward(float *x, int B, int T, int nh, int hd)
{
    rope_apply(x, B, T, nh, hd, 1.0f);
}

/* The rotation is orthogonal: the backward is the inverse rotation (angle -a)
 * applied to dx in place. */
static void rope_backward(float *dx, int B, int T, int nh, int hd)
{
    rope_apply(dx, B, T, nh, hd, -1.0f);
}

/* ------------------------------------------------------------------------ */
/* causal multi-head attention                                               */

/* q,k,v,y: B x T x C (C = nh*hd); att: B x nh x T x T.
 *   s = q k^T / sqrt(hd) (causal), att = softmax(s), y = att v        (=)
 * Per (b, h), in parallel; heads are strided views (ld = C) of the
 * interleaved rows.  Rows are tiled in blocks of ATT_BLOCK: row block
 * [r0, r1) only needs key columns [0, r1), which skips most of the masked
 * upper triangle in both sgemms.  att is written in full (zeros above the
 * diagonal). */
static void attention_forward(float *y, float *att, const float *q, const float *k,
                              const float *v, int B, int T, int nh, int hd)
{
    int C = nh * hd;
    float scale = 1.0f / sqrtf((float)hd);
#pragma omp parallel for schedule(static)
    for (int bh = 0; bh < B * nh; bh++) {
        int b = bh / nh, h = bh % nh;
        size_t off = (size_t)b * T * C + (size_t)h * hd;
        const float *qb = q + off, *kb = k + off, *vb = v + off;
        float *yb = y + off;
        float *A = att + (size_t)bh * T * T;
        for (int r0 = 0; r0 < T; r0 += ATT_BLOCK) {
            int r1 = r0 + ATT_BLOCK < T ? r0 + ATT_BLOCK : T;
            int M = r1 - r0;
            /* scores for rows [r0,r1), columns [0,r1) */
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, r1, hd, scale,
                        qb + (size_t)r0 * C, C, kb, C, 0.0f, A + (size_t)r0 * T, T);
            for (int r = r0; r < r1; r++) {
                float *ar = A + (size_t)r * T;
                float mx = ar[0];
#pragma omp simd reduction(max : mx)
                for (int c = 1; c <= r; c++)
                    mx = ar[c] > mx ? ar[c] : mx;
                for (int c = 0; c <= r; c++)
                    ar[c] = fast_expf(ar[c] - mx);
                float inv = 1.0f / sum8(ar, r + 1);
                for (int c = 0; c <= r; c++)
                    ar[c] *= inv;
                if (r + 1 < T)
                    memset(ar + r + 1, 0, (size_t)(T - r - 1) * sizeof(float));
            }
            /* y[r0:r1] = att[r0:r1, 0:r1] v[0:r1] */
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, hd, r1, 1.0f,
                        A + (size_t)r0 * T, T, vb, C, 0.0f, yb + (size_t)r0 * C, C);
        }
    }
}

/* (=, overwrites dq dk dv; datt is B x nh x T x T scratch):
 *   dv = att^T dy;  dA = dy v^T;  ds = att*(dA - rowsum(dA*att)) / sqrt(hd);
 *   dq = ds k;  dk = ds^T q
 * Same row tiling as the forward: for row block [r0,r1) dA, ds and dq use
 * columns [0,r1); dv and dk are computed per column block [c0,c1) from rows
 * [c0,T) only (att and ds vanish above the diagonal). */
static void attention_backward(float *dq, float *dk, float *dv, float *datt, const float *dy,
                               const float *att, const float *q, const float *k, const float *v,
                               int B, int T, int nh, int hd)
{
    int C = nh * hd;
    float scale = 1.0f / sqrtf((float)hd);
#pragma omp parallel for schedule(static)
    for (int bh = 0; bh < B * nh; bh++) {
        int b = bh / nh, h = bh % nh;
        size_t off = (size_t)b * T * C + (size_t)h * hd;
        const float *qb = q + off, *kb = k + off, *vb = v + off, *dyb = dy + off;
        float *dqb = dq + off, *dkb = dk + off, *dvb = dv + off;
        const float *A = att + (size_t)bh * T * T;
        float *D = datt + (size_t)bh * T * T;
        for (int r0 = 0; r0 < T; r0 += ATT_BLOCK) {
            int r1 = r0 + ATT_BLOCK < T ? r0 + ATT_BLOCK : T;
            int M = r1 - r0;
            /* dA[r0:r1, 0:r1] = dy[r0:r1] v[0:r1]^T */
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, r1, hd, 1.0f,
                        dyb + (size_t)r0 * C, C, vb, C, 0.0f, D + (size_t)r0 * T, T);
            /* softmax backward, in place: ds */
            for (int r = r0; r < r1; r++) {
                const float *ar = A + (size_t)r * T;
                float *dr = D + (size_t)r * T;
                float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
                for (int c = 0; c <= r; c++)
                    dot += dr[c] * ar[c];
                for (int c = 0; c <= r; c++)
                    dr[c] = ar[c] * (dr[c] - dot) * scale;
                for (int c = r + 1; c < r1; c++)
                    dr[c] = 0.0f;
            }
            /* dq[r0:r1] = ds[r0:r1, 0:r1] k[0:r1] */
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, hd, r1, 1.0f,
                        D + (size_t)r0 * T, T, kb, C, 0.0f, dqb + (size_t)r0 * C, C);
        }
        for (int c0 = 0; c0 < T; c0 += ATT_BLOCK) {
            int c1 = c0 + ATT_BLOCK < T ? c0 + ATT_BLOCK : T;
            int M = c1 - c0, K = T - c0;
            /* dv[c0:c1] = att[c0:T, c0:c1]^T dy[c0:T] */
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, M, hd, K, 1.0f,
                        A + (size_t)c0 * T + c0, T, dyb + (size_t)c0 * C, C, 0.0f,
                        dvb + (size_t)c0 * C, C);
            /* dk[c0:c1] = ds[c0:T, c0:c1]^T q[c0:T] */
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, M, hd, K, 1.0f,
                        D + (size_t)c0 * T + c0, T, qb + (size_t)c0 * C, C, 0.0f,
                        dkb + (size_t)c0 * C, C);
        }
    }
}

/* ------------------------------------------------------------------------ */
/* SwiGLU gate                                                               */

/* out = silu(gate) * up,  silu(a) = a*sigmoid(a)     (=) */
static void swiglu_forward(float *out, const float *gate, const float *up, size_t n)
{
    long nn = (long)n;
#pragma omp parallel for schedule(static) if (nn > PAR_MIN)
    for (long i = 0; i < nn; i++) {
        float a = gate[i];
        float sg = 1.0f / (1.0f + fast_expf(-a));
        out[i] = a * sg * up[i];
    }
}

/* (=) dgate = dout*up*sigmoid(a)*(1 + a*(1-sigmoid(a))),  dup = dout*silu(a) */
static void swiglu_backward(float *dgate, float *dup, const float *dout, const float *gate,
                            const float *up, size_t n)
{
    long nn = (long)n;
#pragma omp parallel for schedule(static) if (nn > PAR_MIN)
    for (long i = 0; i < nn; i++) {
        float a = gate[i], u = up[i], go = dout[i];
        float sg = 1.0f / (1.0f + fast_expf(-a));
        dgate[i] = go * u * sg * (1.0f + a * (1.0f - sg));
        dup[i] = go * a * sg;
    }
}

/* ------------------------------------------------------------------------ */
/* depth attention                                                           */

/* n sources src[0..n-1], each N x d; per token i:
 *   rstd[i,s]  = 1/sqrt(mean_j src[s][i,j]^2 + eps)
 *   logit[i,s] = sum_j w_j g_j src[s][i,j] rstd[i,s]
 *   alpha[i,:] = softmax_s(logit[i,:]);  h[i,:] = sum_s alpha[i,s] src[s][i,:]   (=)
 * Parallel over tokens.  h is built in a per-thread row buffer and then
 * stored, so h may alias one of the sources. */
static void depth_attn_forward(float *h, float *alpha, float *rstd, const float *const *src,
                               int n, const float *w, const float *g, int N, int d)
{
#pragma omp parallel if ((long)N * d * n > PAR_MIN)
    {
        float *acc = malloc((size_t)d * sizeof(float) + 1);
        float *u = malloc((size_t)d * sizeof(float) + 1);
        float *lg = malloc((size_t)n * sizeof(float) + 1);
        if (!acc || !u || !lg)
            abort();
        for (int j = 0; j < d; j++)
            u[j] = w[j] * g[j];
#pragma omp for schedule(static)
        for (int i = 0; i < N; i++) {
            float *al = alpha + (size_t)i * n;
            float *rs = rstd + (size_t)i * n;
            float mx = -INFINITY;
            for (int s = 0; s < n; s++) {
                const float *x = src[s] + (size_t)i * d;
                float ss = 0.0f, dot = 0.0f;
#pragma omp simd reduction(+ : ss, dot)
                for (int j = 0; j < d; j++) {
                    ss += x[j] * x[j];
                    dot += u[j] * x[j];
                }
                float r = 1.0f / sqrtf(ss / d + AR_RMS_EPS);
                rs[s] = r;
                lg[s] = dot * r;
                mx = lg[s] > mx ? lg[s] : mx;
            }
            float sum = 0.0f;
            for (int s = 0; s < n; s++) {
                lg[s] = expf(lg[s] - mx);
                sum += lg[s];
            }
            for (int s = 0; s < n; s++)
                al[s] = lg[s] / sum;
            for (int j = 0; j < d; j++)
                acc[j] = 0.0f;
            for (int s = 0; s < n; s++) {
                const float *x = src[s] + (size_t)i * d;
                float a = al[s];
                for (int j = 0; j < d; j++)
                    acc[j] += a * x[j];
            }
            memcpy(h + (size_t)i * d, acc, (size_t)d * sizeof(float));
        }
        free(acc);
        free(u);
        free(lg);
    }
}

/* u = w*g, da_s = dh.src_s, dl_s = alpha_s (da_s - sum_r alpha_r da_r):
 *   dsrc[s] += alpha_s dh + dl_s (rstd_s u - (u.src_s) rstd_s^3 src_s / d)
 *   dw += g * sum_{i,s} dl_s rstd_s src_s ;  dg += w * (same sum)
 * One pass, parallel over fixed chunks of RED_CHUNK tokens: each chunk
 * writes its dsrc rows and its own partial of the (i,s) sum (tokens and
 * sources in order); the partials are then added in chunk order.  So the
 * result is deterministic and independent of the thread count.  The dh row
 * is copied to a per-thread buffer first, so dh may alias one of the dsrc;
 * repeated dsrc pointers accumulate in source order. */
#define RED_CHUNK 32
static void depth_attn_backward(float *const *dsrc, float *dw, float *dg, const float *dh,
                                const float *alpha, const float *rstd, const float *const *src,
                                int n, const float *w, const float *g, int N, int d)
{
    int nch = (N + RED_CHUNK - 1) / RED_CHUNK;
    float *part = calloc((size_t)nch * d + 1, sizeof(float));
    if (!part)
        abort();
#pragma omp parallel if ((long)N * d * n > PAR_MIN)
    {
        float *dhr = malloc((size_t)d * sizeof(float) + 1);
        float *u = malloc((size_t)d * sizeof(float) + 1);
        float *da = malloc((size_t)n * sizeof(float) + 1);
        float *us = malloc((size_t)n * sizeof(float) + 1);
        if (!dhr || !u || !da || !us)
            abort();
        for (int j = 0; j < d; j++)
            u[j] = w[j] * g[j];
#pragma omp for schedule(static)
        for (int ch = 0; ch < nch; ch++) {
            float *pp = part + (size_t)ch * d;
            int i1 = (ch + 1) * RED_CHUNK < N ? (ch + 1) * RED_CHUNK : N;
            for (int i = ch * RED_CHUNK; i < i1; i++) {
                const float *al = alpha + (size_t)i * n;
                const float *rs = rstd + (size_t)i * n;
                memcpy(dhr, dh + (size_t)i * d, (size_t)d * sizeof(float));
                float mean_da = 0.0f;
                for (int s = 0; s < n; s++) {
                    const float *x = src[s] + (size_t)i * d;
                    float a = 0.0f, ux = 0.0f;
#pragma omp simd reduction(+ : a, ux)
                    for (int j = 0; j < d; j++) {
                        a += dhr[j] * x[j];
                        ux += u[j] * x[j];
                    }
                    da[s] = a;
                    us[s] = ux;
                    mean_da += al[s] * a;
                }
                for (int s = 0; s < n; s++) {
                    const float *x = src[s] + (size_t)i * d;
                    float *dx = dsrc[s] + (size_t)i * d;
                    float a = al[s], r = rs[s];
                    float dl = a * (da[s] - mean_da);
                    float c1 = dl * r;
                    float c2 = dl * us[s] * r * r * r / d;
                    for (int j = 0; j < d; j++) {
                        dx[j] += a * dhr[j] + c1 * u[j] - c2 * x[j];
                        pp[j] += c1 * x[j];
                    }
                }
            }
        }
        free(dhr);
        free(u);
        free(da);
        free(us);
    }
    for (int j = 0; j < d; j++) {
        float acc = 0.0f;
        for (int ch = 0; ch < nch; ch++)
            acc += part[(size_t)ch * d + j];
        dw[j] += g[j] * acc;
        dg[j] += w[j] * acc;
    }
    free(part);
}

/* ------------------------------------------------------------------------ */
/* softmax cross-entropy                                                     */

/* probs = softmax(logits) (N x V, =); losses[i] = -log probs[i, targets[i]];
 * returns sum_i losses[i] (double, summed in row order).
 * Stable: subtract the row max; the loss is log(sum exp) - (z_t - max). */
static double xent_forward(float *losses, float *probs, const float *logits,
                           const int32_t *targets, int N, int V)
{
#pragma omp parallel for schedule(static) if ((long)N * V > PAR_MIN)
    for (int i = 0; i < N; i++) {
        const float *z = logits + (size_t)i * V;
        float *p = probs + (size_t)i * V;
        float mx = z[0];
#pragma omp simd reduction(max : mx)
        for (int c = 1; c < V; c++)
            mx = z[c] > mx ? z[c] : mx;
        for (int c = 0; c < V; c++)
            p[c] = fast_expf(z[c] - mx);
        double sum = sum8d(p, V);
        float inv = (float)(1.0 / sum);
        for (int c = 0; c < V; c++)
            p[c] *= inv;
        losses[i] = (float)(log(sum) - ((double)z[targets[i]] - mx));
    }
    double tot = 0.0;
    for (int i = 0; i < N; i++)
        tot += losses[i];
    return tot;
}

/* (=) dlogits = scale * (probs - onehot(targets)); dlogits may be probs
 * itself (the model turns its probabilities into dlogits in place). */
static void xent_backward(float *dlogits, const float *probs, const int32_t *targets,
                          float scale, int N, int V)
{
#pragma omp parallel for schedule(static) if ((long)N * V > PAR_MIN)
    for (int i = 0; i < N; i++) {
        const float *p = probs + (size_t)i * V;
        float *dz = dlogits + (size_t)i * V;
        float pt = p[targets[i]];
        for (int c = 0; c < V; c++)
            dz[c] = scale * p[c];
        dz[targets[i]] = scale * (pt - 1.0f);
    }
}

/* ------------------------------------------------------------------------ */
/* AdamW                                                                     */

/* g' = gscale * g
 * m = b1 m + (1-b1) g';  v = b2 v + (1-b2) g'^2
 * p -= lr * ( (m/(1-b1^t)) / (sqrt(v/(1-b2^t)) + eps) + wd * p )
 * bias corrections 1-b^t computed in double. */
static void adamw_update(float *p, const float *g, float *m, float *v, size_t n, float gscale,
                         float lr, float b1, float b2, float eps, float wd, long t)
{
    float bc1 = (float)(1.0 - pow((double)b1, (double)t));
    float bc2 = (float)(1.0 - pow((double)b2, (double)t));
    long nn = (long)n;
#pragma omp parallel for schedule(static) if (nn > PAR_MIN)
    for (long i = 0; i < nn; i++) {
        float gi = g[i] * gscale;
        float mi = b1 * m[i] + (1.0f - b1) * gi;
        float vi = b2 * v[i] + (1.0f - b2) * gi * gi;
        m[i] = mi;
        v[i] = vi;
        float mh = mi / bc1;
        float vh = vi / bc2;
        p[i] -= lr * (mh / (sqrtf(vh) + eps) + wd * p[i]);
    }
}

/* ------------------------------------------------------------------------ */

/* matrix products stay fp32: OpenBLAS has no bf16 sgemm worth using here */
static int cpu_set_bf16(int on) { return on ? -1 : 0; }
static const char *cpu_device_name(void) { return "cpu"; }
static double cpu_peak_bf16_flops(void) { return 0; }

static const ar_backend cpu_backend = {
    .name = "cpu",
    .alloc = cpu_alloc,
    .free = cpu_free,
    .upload = cpu_upload,
    .download = cpu_download,
    .zero = cpu_zero,
    .sync = cpu_sync,
    .set_threads = cpu_set_threads,
    .set_bf16 = cpu_set_bf16,
    .device_name = cpu_device_name,
    .peak_bf16_flops = cpu_peak_bf16_flops,
    .copy = copy_forward,
    .add = add_forward,
    .scale = scale_forward,
    .sumsq = sumsq_forward,
    .embedding_fwd = embedding_forward,
    .embedding_bwd = embedding_backward,
    .rmsnorm_fwd = rmsnorm_forward,
    .rmsnorm_bwd = rmsnorm_backward,
    .matmul_fwd = matmul_forward,
    .matmul_bwd = matmul_backward,
    .rope_fwd = rope_forward,
    .rope_bwd = rope_backward,
    .attention_fwd = attention_forward,
    .attention_bwd = attention_backward,
    .swiglu_fwd = swiglu_forward,
    .swiglu_bwd = swiglu_backward,
    .depth_attn_fwd = depth_attn_forward,
    .depth_attn_bwd = depth_attn_backward,
    .depth_fwd_inter = cpu_depth_fwd_inter,
    .depth_fwd_merge = cpu_depth_fwd_merge,
    .depth_bwd_intra = cpu_depth_bwd_intra,
    .depth_bwd_inter = cpu_depth_bwd_inter,
    .depth_mix_fwd = cpu_depth_mix_fwd,
    .depth_mix_bwd = cpu_depth_mix_bwd,
    .wsum_fwd = cpu_wsum_fwd,
    .wsum_bwd = cpu_wsum_bwd,
    .xent_fwd = xent_forward,
    .xent_bwd = xent_backward,
    .adamw = adamw_update,
};

const ar_backend *ar_backend_cpu(void) { return &cpu_backend; }
