/* Weighted sums of buffers with learned coefficients on the CPU (math
 * in lib/ops.def): wsum_fwd/bwd, the mixing of DenseFormer
 * (lib/residual_denseformer.c) and mHC (lib/residual_mhc.c), and
 * wmix_fwd/bwd, several such sums of the same inputs in one pass (mHC's m
 * streams, and static's chunks of mixers, lib/residual_mixer.c).
 *
 * Determinism: the coefficient gradients are summed over fixed
 * chunks of WSUM_CHUNK elements, and the partials added in chunk order, so
 * results do not depend on the thread count. */
#include "ops_cpu.h"

#include <omp.h>
#include <stdlib.h>

#include "../backend.h"
#include "vec.h"
#include "workspace.h"

#define WSUM_CHUNK 16384

/* Rows of 16-float vectors (vec.h): the reductions accumulate in
 * vector registers over blocks of WSUM_BLOCK elements (still in L1 when the
 * gradient pass reads them again), then per block in double. */
#define WSUM_BLOCK 2048

/* y[k] = (accumulate ? y[k] : 0) + sum_s c[s] x[s][k]   (s in order) */
void cpu_wsum_fwd(float *y, const float *const *x, const float *c, int n, int accumulate, size_t len)
{
    size_t nv = len / VL;
#pragma omp parallel for schedule(static) if (len >= WSUM_CHUNK)
    for (size_t b = 0; b < nv; b++) {
        size_t k = b * VL;
        vf v = accumulate ? v_ld(y + k) : (vf){0};
        for (int s = 0; s < n; s++)
            v += c[s] * v_ld(x[s] + k);
        v_st(y + k, v);
    }
    for (size_t k = nv * VL; k < len; k++) {
        float v = accumulate ? y[k] : 0.0f;
        for (int s = 0; s < n; s++)
            v += c[s] * x[s][k];
        y[k] = v;
    }
}

/* dx[s][k] += c[s] dy[k]  (dx or dx[s] NULL: skipped)
 * dc[s] += sum_k dy[k] x[s][k]  (dc NULL: skipped): in float vectors over
 * blocks of WSUM_BLOCK, in double over the blocks of a chunk, and the
 * chunks' partials added in chunk order */
void cpu_wsum_bwd(float *const *dx, float *dc, const float *dy, const float *const *x, const float *c,
                  int n, size_t len)
{
    size_t nch = (len + WSUM_CHUNK - 1) / WSUM_CHUNK;
    double *part = cpu_ws(WS_C, nch * (size_t)n * sizeof(double));
#pragma omp parallel for schedule(static)
    for (size_t ch = 0; ch < nch; ch++) {
        size_t k0 = ch * WSUM_CHUNK, k1 = k0 + WSUM_CHUNK < len ? k0 + WSUM_CHUNK : len;
        for (int s = 0; s < n; s++)
            part[ch * n + s] = 0;
        for (size_t b0 = k0; b0 < k1; b0 += WSUM_BLOCK) {
            size_t b1 = b0 + WSUM_BLOCK < k1 ? b0 + WSUM_BLOCK : k1;
            size_t bv = b0 + (b1 - b0) / (2 * VL) * (2 * VL);
            for (int s = 0; s < n; s++) {
                const float *xs = x[s];
                float *ds = dx ? dx[s] : NULL;
                if (dc) {
                    vf a0 = {0}, a1 = {0};
                    for (size_t k = b0; k < bv; k += 2 * VL) {
                        a0 += v_ld(dy + k) * v_ld(xs + k);
                        a1 += v_ld(dy + k + VL) * v_ld(xs + k + VL);
                    }
                    double acc = v_hsum(a0 + a1);
                    for (size_t k = bv; k < b1; k++)
                        acc += (double)dy[k] * xs[k];
                    part[ch * n + s] += acc;
                }
                if (ds)
                    for (size_t k = b0; k < b1; k++)
                        ds[k] += c[s] * dy[k];
            }
        }
    }
    if (dc)
        for (size_t ch = 0; ch < nch; ch++)
            for (int s = 0; s < n; s++)
                dc[s] += (float)part[ch * n + s];
}

/* Elements per wmix_bwd block: the block's rows of every dy, x and dx
 * (p + 2n rows, at most 24 of 2 KiB) stay in L1 between the dx sweep and
 * the dot products. */
#define WMIX_BLOCK 512

/* Floats ahead of the sweep that wmix_fwd prefetches each input: with 29
 * inputs of 256 KiB from memory (static's chunks at the ablation shape) the
 * hardware prefetchers alone left a call at 1.15 ms, 0.82 with 128 floats
 * ahead, 0.86 with 256 and 1.04 with 512 (Zen 3, 2 threads, best of 50,
 * caches flushed before each). */
#define WMIX_PF 128
/* Vector k (two vectors, k and k + VL, where two) of y[i] = sum_j C[i ldc
 * + j] x[j] for P outputs, P a constant: the sums stay in registers (with P
 * read at run time GCC kept them on the stack, and every FMA waited on a
 * store and a load).  Each input vector is loaded once and feeds every
 * output, j in order. */
static inline __attribute__((always_inline)) void wmix_fwd_step(float *const *y, const float *const *x,
                                                                const float *C, int ldc, int n,
                                                                const float *zc, float *z,
                                                                int P, size_t k, int two)
{
    vf a0[AR_WMIX_MAX], a1[AR_WMIX_MAX];
    vf x0 = v_ld(x[0] + k), x1 = two ? v_ld(x[0] + k + VL) : x0;
    for (int i = 0; i < P; i++) {
        a0[i] = C[(size_t)i * ldc] * x0;
        a1[i] = C[(size_t)i * ldc] * x1;
    }
    for (int j = 1; j < n; j++) {
        x0 = v_ld(x[j] + k);
        if (two)
            x1 = v_ld(x[j] + k + VL);
        __builtin_prefetch(x[j] + k + WMIX_PF, 0, 0);
        for (int i = 0; i < P; i++) {
            vf c = v_set1(C[(size_t)i * ldc + j]);
            V_FMA2(c, x0, a0[i], x1, a1[i], two);
        }
    }
    for (int i = 0; i < P; i++) {
        v_st(y[i] + k, a0[i]);
        if (two)
            v_st(y[i] + k + VL, a1[i]);
    }
    if (z) { /* the sum of the outputs in wsum_fwd's form: the same bits */
        vf z0 = {0}, z1 = {0};
        for (int i = 0; i < P; i++) {
            z0 += zc[i] * a0[i];
            if (two)
                z1 += zc[i] * a1[i];
        }
        v_st(z + k, z0);
        if (two)
            v_st(z + k + VL, z1);
    }
}

/* Vectors k0 .. k1 - 1 of every output: two at a time where P is at most 4
 * (2 P sums in registers) */
static inline __attribute__((always_inline)) void wmix_fwd_cols(float *const *y, const float *const *x,
                                                                const float *C, int ldc, int n,
                                                                const float *zc, float *z, int P,
                                                                size_t k0, size_t k1)
{
    size_t b = k0;
    if (P <= 4)
        for (; b + 1 < k1; b += 2)
            wmix_fwd_step(y, x, C, ldc, n, zc, z, P, b * VL, 1);
    for (; b < k1; b++)
        wmix_fwd_step(y, x, C, ldc, n, zc, z, P, b * VL, 0);
}

/* y[i][k] = sum_j C[i ldc + j] x[j][k], j in order; z[k] = sum_i zc[i]
 * y[i][k], i in order, where z */
void cpu_wmix_fwd(const ar_wmix *m, float *const *y, const float *const *x)
{
    const float *C = m->C, *zc = m->zc;
    float *z = m->z;
    int p = m->p, n = m->n, ldc = m->ldc;
    size_t len = m->len;
    size_t nv = len / VL;
    int nt = len >= WSUM_CHUNK ? omp_get_max_threads() : 1;
#pragma omp parallel num_threads(nt)
    {
        int t = omp_get_thread_num(), T = omp_get_num_threads();
        size_t k0 = nv * t / T, k1 = nv * (t + 1) / T;
        _Static_assert(AR_WMIX_MAX == 8, "a case for every output count");
        switch (p) {
#define WMIX_FWD_CASE(P)                                                                           \
    case P:                                                                                        \
        wmix_fwd_cols(y, x, C, ldc, n, zc, z, P, k0, k1);                                          \
        break;
            WMIX_FWD_CASE(1)
            WMIX_FWD_CASE(2)
            WMIX_FWD_CASE(3)
            WMIX_FWD_CASE(4)
            WMIX_FWD_CASE(5)
            WMIX_FWD_CASE(6)
            WMIX_FWD_CASE(7)
            WMIX_FWD_CASE(8)
#undef WMIX_FWD_CASE
        }
    }
    for (size_t k = nv * VL; k < len; k++)
        for (int i = 0; i < p; i++) {
            const float *c = C + (size_t)i * ldc;
            float v = c[0] * x[0][k];
            for (int j = 1; j < n; j++)
                v += c[j] * x[j][k];
            y[i][k] = v;
        }
    for (size_t k = nv * VL; z && k < len; k++) {
        float v = 0.0f;
        for (int i = 0; i < p; i++)
            v += zc[i] * y[i][k];
        z[k] = v;
    }
}

/* The dot products dy[i] . x[j] of a wmix_bwd block, a tile of I rows of
 * dy by J inputs at a time: I + J loads a vector feed I J independent sums
 * (one sum at a time waited 4-5 cycles a vector on its own previous FMA on
 * Zen 3, and loaded both of its rows).  Each sum is in its own vector, in
 * element order, then in double: the same bits as one sum at a time.
 * Rows past p or n repeat the last and their sums are dropped. */
static inline __attribute__((always_inline)) void wmix_dots_tile(double *part, int i0, int j0, int p,
                                                                 int n, int I, int J,
                                                                 const float *const *dy,
                                                                 const float *const *x, size_t b0,
                                                                 size_t bv, size_t b1)
{
    const float *g[4], *xs[4];
    vf a[4][4];
    for (int u = 0; u < I; u++)
        g[u] = dy[i0 + u < p ? i0 + u : p - 1];
    for (int v = 0; v < J; v++)
        xs[v] = x[j0 + v < n ? j0 + v : n - 1];
    for (int u = 0; u < I; u++)
        for (int v = 0; v < J; v++)
            a[u][v] = (vf){0};
    for (size_t k = b0; k < bv; k += VL) {
        vf xv[4];
        for (int v = 0; v < J; v++)
            xv[v] = v_ld(xs[v] + k);
        for (int u = 0; u < I; u++) {
            vf gv = v_ld(g[u] + k);
            for (int v = 0; v < J; v++)
                a[u][v] = v_fma(gv, xv[v], a[u][v]);
        }
    }
    for (int u = 0; u < I && i0 + u < p; u++)
        for (int v = 0; v < J && j0 + v < n; v++) {
            double acc = v_hsum(a[u][v]);
            for (size_t k = bv; k < b1; k++)
                acc += (double)g[u][k] * xs[v][k];
            part[(size_t)(i0 + u) * n + j0 + v] += acc;
        }
}

/* part[i n + j] += dy[i] . x[j] over elements b0..b1, every i < p, j < n,
 * in tiles of 8 sums (2 x 4, 4 x 2 or 8 x 1 by n). */
static void wmix_dots(double *part, int p, int n, const float *const *dy, const float *const *x,
                      size_t b0, size_t bv, size_t b1)
{
    if (n >= 3) {
        for (int i = 0; i < p; i += 2)
            for (int j = 0; j < n; j += 4)
                wmix_dots_tile(part, i, j, p, n, 2, 4, dy, x, b0, bv, b1);
    } else if (n == 2) {
        for (int i = 0; i < p; i += 4)
            wmix_dots_tile(part, i, 0, p, n, 4, 2, dy, x, b0, bv, b1);
    } else {
        for (int i = 0; i < p; i += 4)
            wmix_dots_tile(part, i, 0, p, n, 4, 1, dy, x, b0, bv, b1);
    }
}

/* dx[j] = (accumulate ? dx[j] : 0) + sum_i C[i ldc + j] dy[i]
 * dC[i ldc + j] += dy[i] . x[j]: over blocks of WMIX_BLOCK elements, the dx
 * sweep first, then the p n dot products from L1 (float vectors, then
 * double per block); per chunk of WSUM_CHUNK in double, the chunks added in
 * order, so the result does not depend on the thread count. */
void cpu_wmix_bwd(const ar_wmix *m, float *const *dx, int accumulate, float *dC,
                  const float *const *dy, const float *const *x)
{
    const float *C = m->C;
    int p = m->p, n = m->n, ldc = m->ldc;
    size_t len = m->len;
    size_t nch = (len + WSUM_CHUNK - 1) / WSUM_CHUNK, pn = (size_t)p * n;
    double *part = dC ? cpu_ws(WS_C, nch * pn * sizeof(double)) : NULL;
#pragma omp parallel for schedule(static)
    for (size_t ch = 0; ch < nch; ch++) {
        size_t k0 = ch * WSUM_CHUNK, k1 = k0 + WSUM_CHUNK < len ? k0 + WSUM_CHUNK : len;
        if (dC)
            for (size_t t = 0; t < pn; t++)
                part[ch * pn + t] = 0;
        for (size_t b0 = k0; b0 < k1; b0 += WMIX_BLOCK) {
            size_t b1 = b0 + WMIX_BLOCK < k1 ? b0 + WMIX_BLOCK : k1;
            size_t bv = b0 + (b1 - b0) / VL * VL;
            if (dx)
                for (int j = 0; j < n; j++) {
                    float *d = dx[j];
                    for (size_t k = b0; k < bv; k += VL) {
                        vf v = accumulate ? v_ld(d + k) : (vf){0};
                        for (int i = 0; i < p; i++)
                            v += C[(size_t)i * ldc + j] * v_ld(dy[i] + k);
                        v_st(d + k, v);
                        /* the next block's rows of dx and x (the dot
                         * products read x) */
                        __builtin_prefetch(d + k + WMIX_BLOCK, 1, 0);
                        __builtin_prefetch(x[j] + k + WMIX_BLOCK, 0, 0);
                    }
                    for (size_t k = bv; k < b1; k++) {
                        float v = accumulate ? d[k] : 0.0f;
                        for (int i = 0; i < p; i++)
                            v += C[(size_t)i * ldc + j] * dy[i][k];
                        d[k] = v;
                    }
                }
            if (dC)
                wmix_dots(part + ch * pn, p, n, dy, x, b0, bv, b1);
        }
    }
    if (dC)
        for (size_t ch = 0; ch < nch; ch++)
            for (int i = 0; i < p; i++)
                for (int j = 0; j < n; j++)
                    dC[(size_t)i * ldc + j] += (float)part[ch * pn + (size_t)i * n + j];
}
