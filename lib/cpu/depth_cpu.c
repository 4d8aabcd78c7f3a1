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
#define RED_CHUNK 128

static float dotf(const float *a, const float *b, int d)
{
    float s = 0.0f;
#pragma omp simd reduction(+ : s)
    for (int j = 0; j < d; j++)
        s += a[j] * b[j];
    return s;
}

/* out[c] = a[c].x for c < C, and *xx = x.x: one sweep of x with C+1
 * independent sums (a single dot product is bound by the latency of its one
 * chain of adds, not by memory), four rows at a time. */
static void dots(const float *const *a, int C, const float *x, int d, float *out, float *xx)
{
    float q = 0.0f;
    for (int c0 = 0; c0 < C; c0 += 4) {
        const float *a0 = a[c0], *a1 = a[c0 + (C - c0 > 1)], *a2 = a[c0 + 2 * (C - c0 > 2)],
                    *a3 = a[c0 + 3 * (C - c0 > 3)];
        float s0 = 0.0f, s1 = 0.0f, s2 = 0.0f, s3 = 0.0f;
        switch (C - c0) {
        case 1:
#pragma omp simd reduction(+ : s0, q)
            for (int j = 0; j < d; j++) {
                s0 += a0[j] * x[j];
                q += x[j] * x[j];
            }
            break;
        case 2:
#pragma omp simd reduction(+ : s0, s1, q)
            for (int j = 0; j < d; j++) {
                s0 += a0[j] * x[j];
                s1 += a1[j] * x[j];
                q += x[j] * x[j];
            }
            break;
        case 3:
#pragma omp simd reduction(+ : s0, s1, s2, q)
            for (int j = 0; j < d; j++) {
                s0 += a0[j] * x[j];
                s1 += a1[j] * x[j];
                s2 += a2[j] * x[j];
                q += x[j] * x[j];
            }
            break;
        default:
#pragma omp simd reduction(+ : s0, s1, s2, s3, q)
            for (int j = 0; j < d; j++) {
                s0 += a0[j] * x[j];
                s1 += a1[j] * x[j];
                s2 += a2[j] * x[j];
                s3 += a3[j] * x[j];
                q += x[j] * x[j];
            }
        }
        float sv[4] = {s0, s1, s2, s3};
        for (int c = c0; c < C && c < c0 + 4; c++)
            out[c] = sv[c - c0];
        if (c0 == 0 && xx)
            *xx = q;
        q = 0.0f;
    }
    if (C == 0 && xx)
        *xx = dotf(x, x, d);
}

/* y = beta y + sum_{r<R} k[r] row[r]  (beta = 0: y is zeroed first, not
 * read, so overwriting and adding onto zeros give the same bits), rows four
 * at a time: one load and store of y per four rows instead of per row. */
static void axpys(float *y, float beta, const float *k, const float *const *row, int R, int d)
{
    if (beta == 0.0f) {
        memset(y, 0, (size_t)d * sizeof(float));
        beta = 1.0f;
    }
    if (R == 0 && beta != 1.0f) {
#pragma omp simd
        for (int j = 0; j < d; j++)
            y[j] *= beta;
    }
    for (int r0 = 0; r0 < R; r0 += 4) {
        float b = r0 == 0 ? beta : 1.0f;
        const float *x0 = row[r0], *x1 = row[r0], *x2 = row[r0], *x3 = row[r0];
        float k0 = k[r0];
        switch (R - r0) {
        case 1:
#pragma omp simd
            for (int j = 0; j < d; j++)
                y[j] = b * y[j] + k0 * x0[j];
            break;
        case 2: {
            float k1 = k[r0 + 1];
            x1 = row[r0 + 1];
#pragma omp simd
            for (int j = 0; j < d; j++)
                y[j] = b * y[j] + k0 * x0[j] + k1 * x1[j];
            break;
        }
        case 3: {
            float k1 = k[r0 + 1], k2 = k[r0 + 2];
            x1 = row[r0 + 1], x2 = row[r0 + 2];
#pragma omp simd
            for (int j = 0; j < d; j++)
                y[j] = b * y[j] + k0 * x0[j] + k1 * x1[j] + k2 * x2[j];
            break;
        }
        default: {
            float k1 = k[r0 + 1], k2 = k[r0 + 2], k3 = k[r0 + 3];
            x1 = row[r0 + 1], x2 = row[r0 + 2], x3 = row[r0 + 3];
#pragma omp simd
            for (int j = 0; j < d; j++)
                y[j] = b * y[j] + k0 * x0[j] + k1 * x1[j] + k2 * x2[j] + k3 * x3[j];
        }
        }
    }
}

/* One row of rmsnorm_fwd, the same arithmetic: *r = 1/sqrt(mean h^2 + eps),
 * xn = h r g (for the sublayer inputs that are never stored). */
static void rms_row(float *xn, float *r, const float *h, const float *g, int d)
{
    float ss = 0.0f;
#pragma omp simd reduction(+ : ss)
    for (int q = 0; q < d; q++)
        ss += h[q] * h[q];
    float rr = 1.0f / sqrtf(ss / d + AR_RMS_EPS);
    *r = rr;
    for (int q = 0; q < d; q++)
        xn[q] = h[q] * rr * g[q];
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
                         const float *const *g, int C, const float *ng, float *xn, float *nrstd,
                         int N, int d)
{
    const float *u = queries(w, g, C, d);
    int nt = omp_get_max_threads();
    /* per thread: z (C x k), the C query rows, k row pointers, k weights */
    size_t per = (size_t)C * k + (size_t)k;
    float *zall = cpu_ws(WS_B, (size_t)nt * per * sizeof(float));
#pragma omp parallel if ((long)N * d * k * C > PAR_MIN)
    {
        float *z = zall + (size_t)omp_get_thread_num() * per, *a = z + (size_t)C * k;
        const float *ur[C], *x[k > 0 ? k : 1];
        float zc[C];
        for (int c = 0; c < C; c++)
            ur[c] = u + (size_t)c * d;
#pragma omp for schedule(static)
        for (int i = 0; i < N; i++) {
            for (int s = 0; s < k; s++) {
                float xx;
                x[s] = src[s] + (size_t)i * d;
                dots(ur, C, x[s], d, zc, &xx);
                float r = 1.0f / sqrtf(xx / d + AR_RMS_EPS);
                rs[s][i] = r;
                for (int c = 0; c < C; c++)
                    z[c * k + s] = r * zc[c];
            }
            for (int c = 0; c < C; c++) {
                const float *zr = z + c * k;
                float mx = zr[0];
                for (int s = 1; s < k; s++)
                    mx = zr[s] > mx ? zr[s] : mx;
                float sum = 0.0f;
                for (int s = 0; s < k; s++)
                    sum += a[s] = expf(zr[s] - mx);
                lse[c][i] = mx + logf(sum);
                float *al = alpha[c] + (size_t)i * n[c];
                for (int s = 0; s < k; s++) {
                    al[s] = zr[s]; /* raw logit; phase 2 normalises */
                    a[s] /= sum;
                }
                if (c > 0 || !xn) {
                    axpys(o[c] + (size_t)i * d, 0.0f, a, x, k, d);
                    continue;
                }
                float hr[d];
                axpys(hr, 0.0f, a, x, k, d);
                rms_row(xn + (size_t)i * d, nrstd + i, hr, ng, d);
            }
        }
    }
}

/* Phase 2: the j = n - k intra sources join by online softmax:
 *   LSE = log(exp(lse) + sum_t exp z_t),  h = exp(lse - LSE) o + sum_t exp(z_t - LSE) x_t */
void cpu_depth_fwd_merge(float *h, float *lse, float *alpha, int n, int k,
                         float *const *rsi, const float *const *intra, const float *w,
                         const float *g, const float *ng, float *xn, float *nrstd, int N, int d)
{
    const float *u = queries(&w, &g, 1, d);
    int j = n - k;
#pragma omp parallel for schedule(static) if ((long)N * d * (j + 1) > PAR_MIN)
    for (int i = 0; i < N; i++) {
        float zt[j > 0 ? j : 1], at[j > 0 ? j : 1];
        const float *x[j > 0 ? j : 1];
        float M = lse[i];
        for (int t = 0; t < j; t++) {
            float xx, ux;
            x[t] = intra[t] + (size_t)i * d;
            dots(&u, 1, x[t], d, &ux, &xx);
            float r = 1.0f / sqrtf(xx / d + AR_RMS_EPS);
            rsi[t][i] = r;
            zt[t] = r * ux;
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
        for (int t = 0; t < j; t++)
            at[t] = al[k + t] = expf(zt[t] - LSE);
        if (!xn) {
            axpys(h + (size_t)i * d, expf(L0 - LSE), at, x, j, d);
            continue;
        }
        /* h in a row of its own, then the sublayer's RMSNorm */
        float hr[d];
        memcpy(hr, h + (size_t)i * d, (size_t)d * sizeof(float));
        axpys(hr, expf(L0 - LSE), at, x, j, d);
        rms_row(xn + (size_t)i * d, nrstd + i, hr, ng, d);
    }
}

/* h_c = sum_s alpha_c[s] src_c[s] for C mixers (the backward's recomputation
 * of the sublayer inputs, which are not kept between forward and backward). */
void cpu_depth_recompute(float *const *h, const float *const *alpha,
                         const float *const *const *src, const int *n, int C, int N, int d)
{
    long work = 0;
    int nmax = 1;
    for (int c = 0; c < C; c++) {
        work += (long)n[c] * d;
        nmax = n[c] > nmax ? n[c] : nmax;
    }
#pragma omp parallel for schedule(static) if (work * N > PAR_MIN)
    for (int i = 0; i < N; i++) {
        const float *x[nmax];
        for (int c = 0; c < C; c++) {
            for (int s = 0; s < n[c]; s++)
                x[s] = src[c][s] + (size_t)i * d;
            axpys(h[c] + (size_t)i * d, 0.0f, alpha[c] + (size_t)i * n[c], x, n[c], d);
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

/* Backward of one mixer's intra sources, with c = dh.h = sum_s alpha_s da_s
 * (and dh copied to keep, which may be h's buffer):
 *   dl_t = alpha_t (dh.x_t - c)
 *   dx_t += alpha_t dh + dl_t (rstd_t u - (u.x_t) rstd_t^3 x_t / d)
 *   P    += dl_t rstd_t x_t   (dw += g P, dg += w P) */
void cpu_depth_bwd_intra(float *const *dintra, float *dw, float *dg, float *cdot,
                         const float *dh, const float *h, float *keep,
                         const float *alpha, const float *lse, int n, int k,
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
            if (keep) /* after the dot: keep may be h's buffer */
                memcpy(keep + (size_t)i * d, dr, (size_t)d * sizeof(float));
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
        /* dx = sum_c a_c dh_c + sum_c c1_c u_c - c2 x: 2C + 1 rows, coef */
        const float *row[2 * C + 1], *dr[C];
        float coef[2 * C + 1], t[C], c1[C];
        for (int c = 0; c < C; c++)
            row[C + c] = u + (size_t)c * d;
        for (int i = ch * RED_CHUNK; i < i1; i++) {
            for (int c = 0; c < C; c++)
                row[c] = dr[c] = dh[c] + (size_t)i * d;
            for (int s = 0; s < k; s++) {
                const float *x = src[s] + (size_t)i * d;
                float *dx = dsrc[s] + (size_t)i * d;
                float r = rs[s][i], norm = 0.0f;
                dots(dr, C, x, d, t, NULL);
                for (int c = 0; c < C; c++) {
                    float a = alpha[c][(size_t)i * n[c] + s];
                    float dl = a * (t[c] - cdot[c][i]);
                    coef[c] = a;
                    coef[C + c] = c1[c] = dl * r;
                    if (a != 0.0f) /* an underflowed weight contributes nothing */
                        norm += dl * key_dot(a, lse[c][i], r);
                }
                coef[2 * C] = -norm * r * r * r / d;
                row[2 * C] = x;
                axpys(dx, overwrite ? 0.0f : 1.0f, coef, row, 2 * C + 1, d);
                /* P_c += c1_c x */
                for (int c = 0; c < C; c++) {
                    float *pc = pp + (size_t)c * d, cc = c1[c];
#pragma omp simd
                    for (int q = 0; q < d; q++)
                        pc[q] += cc * x[q];
                }
            }
        }
    }
    for (int c = 0; c < C; c++)
        reduce_partials(dw[c], dg[c], part + (size_t)c * d, nch, stride, w[c], g[c], d);
}
