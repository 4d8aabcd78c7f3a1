/* Weighted sums of buffers with learned coefficients on the CPU (math
 * in lib/ops.def): wsum_fwd/bwd, the mixing of DenseFormer
 * (lib/residual_denseformer.c) and mHC (lib/residual_mhc.c), and
 * wmix_fwd/bwd, several such sums of the same inputs in one pass (mHC's m
 * streams).
 *
 * Determinism: the coefficient gradients are summed over fixed
 * chunks of WSUM_CHUNK elements, and the partials added in chunk order, so
 * results do not depend on the thread count. */
#include "ops_cpu.h"

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

/* y[i][k] = sum_j C[i ldc + j] x[j][k]: each vector of the n inputs is
 * loaded once and every output formed from the registers. */
void cpu_wmix_fwd(const ar_wmix *m, float *const *y, const float *const *x)
{
    const float *C = m->C;
    int p = m->p, n = m->n, ldc = m->ldc;
    size_t len = m->len;
    size_t nv = len / VL;
#pragma omp parallel for schedule(static) if (len >= WSUM_CHUNK)
    for (size_t b = 0; b < nv; b++) {
        size_t k = b * VL;
        vf xv[AR_WMIX_MAX];
        for (int j = 0; j < n; j++)
            xv[j] = v_ld(x[j] + k);
        for (int i = 0; i < p; i++) {
            const float *c = C + (size_t)i * ldc;
            vf v = c[0] * xv[0];
            for (int j = 1; j < n; j++)
                v += c[j] * xv[j];
            v_st(y[i] + k, v);
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
                    }
                    for (size_t k = bv; k < b1; k++) {
                        float v = accumulate ? d[k] : 0.0f;
                        for (int i = 0; i < p; i++)
                            v += C[(size_t)i * ldc + j] * dy[i][k];
                        d[k] = v;
                    }
                }
            if (dC)
                for (int i = 0; i < p; i++)
                    for (int j = 0; j < n; j++) {
                        const float *g = dy[i], *xs = x[j];
                        vf a = {0};
                        for (size_t k = b0; k < bv; k += VL)
                            a += v_ld(g + k) * v_ld(xs + k);
                        double acc = v_hsum(a);
                        for (size_t k = bv; k < b1; k++)
                            acc += (double)g[k] * xs[k];
                        part[ch * pn + (size_t)i * n + j] += acc;
                    }
        }
    }
    if (dC)
        for (size_t ch = 0; ch < nch; ch++)
            for (int i = 0; i < p; i++)
                for (int j = 0; j < n; j++)
                    dC[(size_t)i * ldc + j] += (float)part[ch * pn + (size_t)i * n + j];
}
