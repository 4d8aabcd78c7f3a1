/* The weighted sum of buffers with learned coefficients on the CPU (math
 * in lib/backend.h): wsum_fwd/bwd, the mixing of DenseFormer
 * (lib/residual_denseformer.c) and mHC (lib/residual_mhc.c).
 *
 * Determinism: the coefficient gradients are summed in double over fixed
 * chunks of WSUM_CHUNK elements, and the partials added in chunk order, so
 * results do not depend on the thread count. */
#include "wsum_cpu.h"

#include <stdlib.h>

#include "workspace.h"

#define WSUM_CHUNK 16384

/* y[k] = (accumulate ? y[k] : 0) + sum_s c[s] x[s][k]   (s in order) */
void cpu_wsum_fwd(float *y, const float *const *x, const float *c, int n, int accumulate, size_t len)
{
#pragma omp parallel for schedule(static) if (len >= WSUM_CHUNK)
    for (size_t k = 0; k < len; k++) {
        float v = accumulate ? y[k] : 0.0f;
        for (int s = 0; s < n; s++)
            v += c[s] * x[s][k];
        y[k] = v;
    }
}

/* dx[s][k] += c[s] dy[k]  (dx or dx[s] NULL: skipped)
 * dc[s] += sum_k dy[k] x[s][k]  (dc NULL: skipped), in double per chunk */
void cpu_wsum_bwd(float *const *dx, float *dc, const float *dy, const float *const *x, const float *c,
                  int n, size_t len)
{
    size_t nch = (len + WSUM_CHUNK - 1) / WSUM_CHUNK;
    double *part = cpu_xcalloc(nch * (size_t)n, sizeof(double));
#pragma omp parallel for schedule(static)
    for (size_t ch = 0; ch < nch; ch++) {
        size_t k0 = ch * WSUM_CHUNK, k1 = k0 + WSUM_CHUNK < len ? k0 + WSUM_CHUNK : len;
        for (int s = 0; s < n; s++) {
            double acc = 0;
            const float *xs = x[s];
            for (size_t k = k0; k < k1; k++)
                acc += (double)dy[k] * xs[k];
            part[ch * n + s] = acc;
            if (dx && dx[s])
                for (size_t k = k0; k < k1; k++)
                    dx[s][k] += c[s] * dy[k];
        }
    }
    if (dc)
        for (size_t ch = 0; ch < nch; ch++)
            for (int s = 0; s < n; s++)
                dc[s] += (float)part[ch * n + s];
    free(part);
}
