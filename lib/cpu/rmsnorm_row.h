/* One row of the CPU RMSNorm: the forward, shared by rmsnorm_fwd and the
 * depth ops that normalise a sublayer input they have just built (so the
 * fused and the unfused paths do the same arithmetic), and the backward of
 * rmsnorm_bwd. */
#ifndef AR_CPU_RMSNORM_ROW_H
#define AR_CPU_RMSNORM_ROW_H

#include <math.h>

#include "../backend.h"
#include "vec.h"

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

/* Backward of one row, r = rstd of x, m = r sum_j g_j dout_j x_j / d:
 *   dx_j (= or +=) r (g_j dout_j - x_j r m);  pdg_j += dout_j x_j r */
static inline void cpu_rmsnorm_bwd_row(float *dx, float *pdg, const float *dout, const float *x,
                                       const float *g, float r, int overwrite, int d)
{
    v16f sv = {0};
    int j = 0;
    for (; j + VL <= d; j += VL)
        sv += v_ld(g + j) * v_ld(dout + j) * v_ld(x + j);
    float dot = v_hsum(sv);
    for (; j < d; j++)
        dot += g[j] * dout[j] * x[j];
    float rm = r * (dot * r / d);
    for (j = 0; j + VL <= d; j += VL) {
        v16f xv = v_ld(x + j), dv = v_ld(dout + j);
        v16f y = r * (v_ld(g + j) * dv - xv * rm);
        v_st(pdg + j, v_ld(pdg + j) + dv * xv * r);
        v_st(dx + j, overwrite ? y : v_ld(dx + j) + y);
    }
    for (; j < d; j++) {
        float y = r * (g[j] * dout[j] - x[j] * rm);
        pdg[j] += dout[j] * x[j] * r;
        dx[j] = overwrite ? y : dx[j] + y;
    }
}

#endif
