/* One row of the CPU RMSNorm: the forward, shared by rmsnorm_fwd and the
 * depth ops that normalise a sublayer input they have just built (so the
 * fused and the unfused paths do the same arithmetic), and the backward,
 * shared by rmsnorm_bwd and the depth op that fuses it. */
#ifndef AR_CPU_RMSNORM_ROW_H
#define AR_CPU_RMSNORM_ROW_H

#include <math.h>

#include "../backend.h"
#include "vec.h"

/* The rstd of a row of d floats from its sum of squares ss: the one
 * formula of every RMSNorm here (a sublayer's, a key norm's), so that a
 * fused path and the op it replaces round alike. */
static inline float rms_rstd(float ss, int d) { return 1.0f / sqrtf(ss / d + AR_RMS_EPS); }

/* rms_rstd lane by lane (v_sqrt rounds as sqrtf: the same bits) */
static inline vf v_rms_rstd(vf ss, int d) { return 1.0f / v_sqrt(ss / (float)d + AR_RMS_EPS); }

/* sum x^2 in VL lanes, then the tail: a fixed order whatever the row's
 * address (`omp simd reduction` let GCC peel to align x, so the sum of a
 * row depended on where it lay, and a fused path's stack row could differ
 * from the same row in a buffer) */
static inline void cpu_rmsnorm_row(float *out, float *rstd, const float *x, const float *g, int d)
{
    vf sv = {0};
    int j = 0;
    for (; j + VL <= d; j += VL) {
        vf xv = v_ld(x + j);
        sv = v_fma(xv, xv, sv); /* fused at every inlined site alike */
    }
    float ss = v_hsum(sv);
    for (; j < d; j++)
        ss += x[j] * x[j];
    float r = rms_rstd(ss, d);
    *rstd = r;
    for (j = 0; j < d; j++)
        out[j] = x[j] * r * g[j];
}

/* Backward of one row from xh = x rstd (r = rstd):
 *   m = sum_j g_j dout_j xh_j / d;  dx_j (= or +=) r (g_j dout_j - xh_j m);
 *   pdg_j += dout_j xh_j
 * Returns dx.xh over the row written (dropped by the compiler where
 * unused). */
static inline __attribute__((always_inline)) float
cpu_rmsnorm_bwd_row(float *dx, float *pdg, const float *dout, const float *xh, const float *g,
                    float r, int overwrite, int d)
{
    vf sv = {0};
    int j = 0;
    for (; j + VL <= d; j += VL)
        sv += v_ld(g + j) * v_ld(dout + j) * v_ld(xh + j);
    float dot = v_hsum(sv);
    for (; j < d; j++)
        dot += g[j] * dout[j] * xh[j];
    float m = dot / d;
    vf cv = {0};
    for (j = 0; j + VL <= d; j += VL) {
        vf xv = v_ld(xh + j), dv = v_ld(dout + j);
        vf y = r * (v_ld(g + j) * dv - xv * m);
        v_st(pdg + j, v_ld(pdg + j) + dv * xv);
        if (!overwrite)
            y += v_ld(dx + j);
        v_st(dx + j, y);
        cv += y * xv;
    }
    float c = v_hsum(cv);
    for (; j < d; j++) {
        float y = r * (g[j] * dout[j] - xh[j] * m);
        pdg[j] += dout[j] * xh[j];
        dx[j] = y = overwrite ? y : dx[j] + y;
        c += y * xh[j];
    }
    return c;
}

#endif
