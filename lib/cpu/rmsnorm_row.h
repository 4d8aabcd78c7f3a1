/* One row of the CPU RMSNorm forward, shared by rmsnorm_fwd and the depth
 * ops that normalise a sublayer input they have just built (so the fused
 * and the unfused paths do the same arithmetic):
 *   *rstd = 1/sqrt(mean_j x_j^2 + eps);  out_j = x_j * rstd * g_j */
#ifndef AR_CPU_RMSNORM_ROW_H
#define AR_CPU_RMSNORM_ROW_H

#include <math.h>

#include "../backend.h"

static inline void cpu_rmsnorm_row(float *out, float *rstd, const float *x, const float *g, int d)
{
    float ss = 0.0f;
#pragma omp simd reduction(+ : ss)
    for (int j = 0; j < d; j++)
        ss += x[j] * x[j];
    float r = 1.0f / sqrtf(ss / d + AR_RMS_EPS);
    *rstd = r;
    for (int j = 0; j < d; j++)
        out[j] = x[j] * r * g[j];
}

#endif
