/* One row of the CPU RMSNorm, forward and backward, shared by rmsnorm_fwd
 * / rmsnorm_bwd and the depth ops that fuse the norm of a sublayer input
 * (so the fused and the unfused paths do the same arithmetic). */
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
 *   dx_j (= or +=) r (g_j dout_j - x_j r m);  pdg_j += dout_j x_j r
 * Returns dx.x over the row written, summed in the order of depth_cpu.c's
 * dot products (16-float columns, then the tail), so the depth backward
 * gets the same dh.h bits fused or not (a one-source mixer's weight
 * gradient must cancel to zero); the compiler drops it where unused.  dx
 * may be x's own row: each column of x is read before dx's is written. */
static inline __attribute__((always_inline)) float
cpu_rmsnorm_bwd_row(float *dx, float *pdg, const float *dout, const float *x, const float *g,
                    float r, int overwrite, int d)
{
    v16f sv = {0};
    int j = 0;
    for (; j + VL <= d; j += VL)
        sv += v_ld(g + j) * v_ld(dout + j) * v_ld(x + j);
    float dot = v_hsum(sv);
    for (; j < d; j++)
        dot += g[j] * dout[j] * x[j];
    float m = dot * r / d, rm = r * m;
    v16f xdv = {0};
    for (j = 0; j + VL <= d; j += VL) {
        v16f xv = v_ld(x + j), dv = v_ld(dout + j);
        v16f y = r * (v_ld(g + j) * dv - xv * rm);
        v_st(pdg + j, v_ld(pdg + j) + dv * xv * r);
        if (!overwrite)
            y += v_ld(dx + j);
        v_st(dx + j, y);
        xdv += y * xv;
    }
    float xdx = v_hsum(xdv);
    for (; j < d; j++) {
        float xj = x[j], y = r * (g[j] * dout[j] - xj * rm);
        pdg[j] += dout[j] * xj * r;
        y = overwrite ? y : dx[j] + y;
        dx[j] = y;
        xdx += y * xj;
    }
    return xdx;
}

#endif
