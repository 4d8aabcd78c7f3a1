/* Two-phase depth attention on the CPU (the AttnRes report's Algorithm 1
 * and Appendix B; the math of each op is in lib/backend.h, the schedule in
 * lib/residual_depth.c).
 *
 * Why it is fast here: every op walks the tokens in the outer loop and, for
 * one token, visits all C mixers of a chunk and all their sources.  A
 * source row (d floats) is read from memory once and then served from L1
 * to every mixer that uses it, so a chunk costs one pass over its shared
 * sources instead of C passes (forward) or 3C passes (backward).  The key
 * RMSNorm is fused into the logit: one sweep of a row gives both sum x^2 and
 * u.x, so logit = rstd * (u.x) needs no normalised copy.
 *
 * Determinism: parameter-gradient reductions over tokens go through
 * partials of RED_CHUNK tokens added in chunk order, so results do not
 * depend on the thread count. */
#include <math.h>
#include <omp.h>
#include <string.h>

#include "../backend.h"
#include "depth_cpu.h"
#include "workspace.h"

#define PAR_MIN 32768
#define RED_CHUNK 32

static float dotf(const float *a, const float *b, int d)
{
    float s = 0.0f;
#pragma omp simd reduction(+ : s)
    for (int j = 0; j < d; j++)
        s += a[j] * b[j];
    return s;
}

/* u[c] = w[c] * g[c], C rows of d, in workspace slot WS_A. */
static float *queries(const float *const *w, const float *const *g, int C, int d)
{
    float *u = cpu_ws(WS_A, (size_t)C * d * sizeof(float));
    for (int c = 0; c < C; c++)
        for (int j = 0; j < d; j++)
            u[(size_t)c * d + j] = w[c][j] * g[c][j];
    return u;
}

/* Phase 1.  Per token: z[c,s] = rstd_s (u_c . x_s) for every mixer and
 * shared source (one read of each x_s), then per mixer the softmax over
 * the k shared sources, lse, and o_c = sum_s softmax_s x_s (the rows are
 * still in L1 for the second sweep). */
void cpu_depth_fwd_inter(float *const *o, float *const *lse, float *const *alpha, const int *n,
                         float *const *rs, const float *const *src, int k, const float *const *w,
                         const float *const *g, int C, int N, int d)
{
    const float *u = queries(w, g, C, d);
    int nt = omp_get_max_threads();
    float *zall = cpu_ws(WS_B, (size_t)nt * C * k * sizeof(float));
#pragma omp parallel if ((long)N * d * k * C > PAR_MIN)
    {
        float *z = zall + (size_t)omp_get_thread_num() * C * k;
#pragma omp for schedule(static)
        for (int i = 0; i < N; i++) {
            for (int s = 0; s < k; s++) {
                const float *x = src[s] + (size_t)i * d;
                float r = 1.0f / sqrtf(dotf(x, x, d) / d + AR_RMS_EPS);
                rs[s][i] = r;
                for (int c = 0; c < C; c++)
                    z[c * k + s] = r * dotf(u + (size_t)c * d, x, d);
            }
            for (int c = 0; c < C; c++) {
                const float *zc = z + c * k;
                float mx = zc[0];
                for (int s = 1; s < k; s++)
                    mx = zc[s] > mx ? zc[s] : mx;
                float sum = 0.0f;
                for (int s = 0; s < k; s++)
                    sum += expf(zc[s] - mx);
                lse[c][i] = mx + logf(sum);
                float *al = alpha[c] + (size_t)i * n[c];
                float *orow = o[c] + (size_t)i * d;
                for (int s = 0; s < k; s++) {
                    al[s] = zc[s]; /* raw logit; phase 2 normalises */
                    float a = expf(zc[s] - mx) / sum;
                    const float *x = src[s] + (size_t)i * d;
                    if (s == 0) {
#pragma omp simd
                        for (int j = 0; j < d; j++)
                            orow[j] = a * x[j];
                    } else {
#pragma omp simd
                        for (int j = 0; j < d; j++)
                            orow[j] += a * x[j];
                    }
                }
            }
        }
    }
}

/* Phase 2: the j = n - k intra sources join by online softmax:
 *   LSE = log(exp(lse) + sum_t exp z_t),  h = exp(lse - LSE) o + sum_t exp(z_t - LSE) x_t */
void cpu_depth_fwd_merge(float *h, float *lse, float *alpha, int n, int k,
                         float *const *rsi, const float *const *intra, const float *w,
                         const float *g, int N, int d)
{
    const float *u = queries(&w, &g, 1, d);
    int j = n - k;
#pragma omp parallel for schedule(static) if ((long)N * d * (j + 1) > PAR_MIN)
    for (int i = 0; i < N; i++) {
        float zt[j > 0 ? j : 1];
        float M = lse[i];
        for (int t = 0; t < j; t++) {
            const float *x = intra[t] + (size_t)i * d;
            float r = 1.0f / sqrtf(dotf(x, x, d) / d + AR_RMS_EPS);
            rsi[t][i] = r;
            zt[t] = r * dotf(u, x, d);
            M = zt[t] > M ? zt[t] : M;
        }
        float S = expf(lse[i] - M);
        for (int t = 0; t < j; t++)
            S += expf(zt[t] - M);
        float LSE = M + logf(S);
        float L0 = lse[i];
        lse[i] = LSE; /* the backward recovers u.x_s = (log alpha_s + LSE) / rstd_s */
        float *al = alpha + (size_t)i * n;
        for (int s = 0; s < k; s++)
            al[s] = expf(al[s] - LSE);
        if (j == 0)
            continue; /* h = o already */
        float ao = expf(L0 - LSE);
        float *hr = h + (size_t)i * d;
#pragma omp simd
        for (int q = 0; q < d; q++)
            hr[q] *= ao;
        for (int t = 0; t < j; t++) {
            float a = al[k + t] = expf(zt[t] - LSE);
            const float *x = intra[t] + (size_t)i * d;
#pragma omp simd
            for (int q = 0; q < d; q++)
                hr[q] += a * x[q];
        }
    }
}

/* h_c = sum_s alpha_c[s] src_c[s] for C mixers (the backward's recomputation
 * of the sublayer inputs, which are not kept between forward and backward). */
void cpu_depth_recompute(float *const *h, const float *const *alpha,
                         const float *const *const *src, const int *n, int C, int N, int d)
{
    long work = 0;
    for (int c = 0; c < C; c++)
        work += (long)n[c] * d;
#pragma omp parallel for schedule(static) if (work * N > PAR_MIN)
    for (int i = 0; i < N; i++) {
        for (int c = 0; c < C; c++) {
            const float *al = alpha[c] + (size_t)i * n[c];
            float *hr = h[c] + (size_t)i * d;
            for (int s = 0; s < n[c]; s++) {
                const float *x = src[c][s] + (size_t)i * d;
                float a = al[s];
                if (s == 0) {
#pragma omp simd
                    for (int q = 0; q < d; q++)
                        hr[q] = a * x[q];
                } else {
#pragma omp simd
                    for (int q = 0; q < d; q++)
                        hr[q] += a * x[q];
                }
            }
        }
    }
}

/* u.x_s from the saved weight: logit = log(alpha_s) + LSE = rstd_s (u.x_s),
 * one log instead of a sweep over x_s.  Only called with alpha_s > 0. */
static inline float key_dot(float a, float LSE, float r) { return (logf(a) + LSE) / r; }

/* dw += g * P, dg += w * P with P the sum of the nch partials (in order). */
static void reduce_partials(float *dw, float *dg, const float *part, int nch, size_t stride,
                            const float *w, const float *g, int d)
{
    for (int q = 0; q < d; q++) {
        float acc = 0.0f;
        for (int ch = 0; ch < nch; ch++)
            acc += part[(size_t)ch * stride + q];
        dw[q] += g[q] * acc;
        dg[q] += w[q] * acc;
    }
}

/* Backward of one mixer's intra sources, with c = dh.h = sum_s alpha_s da_s:
 *   dl_t = alpha_t (dh.x_t - c)
 *   dx_t += alpha_t dh + dl_t (rstd_t u - (u.x_t) rstd_t^3 x_t / d)
 *   P    += dl_t rstd_t x_t   (dw += g P, dg += w P) */
void cpu_depth_bwd_intra(float *const *dintra, float *dw, float *dg, float *cdot,
                         const float *dh, const float *h, const float *alpha, const float *lse,
                         int n, int k,
                         const float *const *rsi, const float *const *intra, const float *w,
                         const float *g, int N, int d)
{
    int j = n - k;
    const float *u = queries(&w, &g, 1, d);
    int nch = (N + RED_CHUNK - 1) / RED_CHUNK;
    float *part = cpu_ws(WS_B, (size_t)nch * d * sizeof(float));
    if (j > 0)
        memset(part, 0, (size_t)nch * d * sizeof(float));
#pragma omp parallel for schedule(static) if ((long)N * d * (j + 1) > PAR_MIN)
    for (int ch = 0; ch < nch; ch++) {
        float *pp = part + (size_t)ch * d;
        int i1 = (ch + 1) * RED_CHUNK < N ? (ch + 1) * RED_CHUNK : N;
        for (int i = ch * RED_CHUNK; i < i1; i++) {
            const float *dr = dh + (size_t)i * d;
            float c = dotf(dr, h + (size_t)i * d, d);
            cdot[i] = c;
            const float *al = alpha + (size_t)i * n + k;
            for (int t = 0; t < j; t++) {
                const float *x = intra[t] + (size_t)i * d;
                float *dx = dintra[t] + (size_t)i * d;
                float a = al[t], r = rsi[t][i];
                if (a == 0.0f)
                    continue; /* underflowed weight: no contribution */
                float dl = a * (dotf(dr, x, d) - c);
                float c1 = dl * r, c2 = dl * key_dot(a, lse[i], r) * r * r * r / d;
#pragma omp simd
                for (int q = 0; q < d; q++) {
                    dx[q] += a * dr[q] + c1 * u[q] - c2 * x[q];
                    pp[q] += c1 * x[q];
                }
            }
        }
    }
    if (j > 0)
        reduce_partials(dw, dg, part, nch, (size_t)d, w, g, d);
}

/* Backward of a chunk's shared sources, all C mixers at once (deferred until
 * the chunk's lowest mixer is done: no shared source is needed earlier):
 *   dl[c,s] = alpha_c[s] (dh_c.x_s - cdot_c)
 *   dx_s   += sum_c (alpha_c[s] dh_c + dl rstd_s u_c) - (sum_c dl (u_c.x_s)) rstd_s^3 x_s / d
 *   P_c    += sum_s dl rstd_s x_s   (dw_c += g_c P_c, dg_c += w_c P_c) */
void cpu_depth_bwd_inter(float *const *dsrc, float *const *dw, float *const *dg,
                         const float *const *dh, const float *const *cdot,
                         const float *const *alpha, const float *const *lse, const int *n,
                         const float *const *rs, const float *const *src, int k,
                         const float *const *w, const float *const *g, int C, int overwrite,
                         int N, int d)
{
    const float *u = queries(w, g, C, d);
    int nch = (N + RED_CHUNK - 1) / RED_CHUNK;
    size_t stride = (size_t)C * d;
    float *part = cpu_ws(WS_B, (size_t)nch * stride * sizeof(float));
    memset(part, 0, (size_t)nch * stride * sizeof(float));
#pragma omp parallel for schedule(static) if ((long)N * d * k * C > PAR_MIN)
    for (int ch = 0; ch < nch; ch++) {
        float *pp = part + (size_t)ch * stride;
        int i1 = (ch + 1) * RED_CHUNK < N ? (ch + 1) * RED_CHUNK : N;
        for (int i = ch * RED_CHUNK; i < i1; i++) {
            for (int s = 0; s < k; s++) {
                const float *x = src[s] + (size_t)i * d;
                float *dx = dsrc[s] + (size_t)i * d;
                float r = rs[s][i], norm = 0.0f;
                if (overwrite)
                    memset(dx, 0, (size_t)d * sizeof(float));
                for (int c = 0; c < C; c++) {
                    const float *dr = dh[c] + (size_t)i * d;
                    const float *uc = u + (size_t)c * d;
                    float a = alpha[c][(size_t)i * n[c] + s];
                    if (a == 0.0f)
                        continue; /* underflowed weight: no contribution */
                    float dl = a * (dotf(dr, x, d) - cdot[c][i]);
                    float c1 = dl * r;
                    norm += dl * key_dot(a, lse[c][i], r);
                    float *pc = pp + (size_t)c * d;
#pragma omp simd
                    for (int q = 0; q < d; q++) {
                        dx[q] += a * dr[q] + c1 * uc[q];
                        pc[q] += c1 * x[q];
                    }
                }
                float c2 = norm * r * r * r / d;
#pragma omp simd
                for (int q = 0; q < d; q++)
                    dx[q] -= c2 * x[q];
            }
        }
    }
    for (int c = 0; c < C; c++)
        reduce_partials(dw[c], dg[c], part + (size_t)c * d, nch, stride, w[c], g[c], d);
}
