/* One-phase depth attention on the CPU (host pointers): the simple
 * reference that the two-phase depth ops of lib/ops.def and the general
 * mixer's depth_mix ops are tested against, itself checked against a
 * double reference and finite differences (test_ops), and the one-phase
 * time bench_depth_chunk compares with.  Test code, not an op: nothing in
 * the library runs it.  Two sweeps of every source row per token, OpenMP
 * over tokens as the CPU backend's loops, deterministic for any thread
 * count. */
#include "depth_attn_ref.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "lib/backend.h"
#include "lib/cpu/loops.h"

/* Parallel over tokens.  h is built in a per-thread row buffer and then
 * stored, so h may alias one of the sources. */
void ref_depth_attn_fwd(float *h, float *alpha, float *rstd, const float *const *src, int n,
                        const float *w, const float *g, int N, int d)
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
 * One pass, parallel over fixed chunks of ATTN_CHUNK tokens: each chunk
 * writes its dsrc rows and its own partial of the (i,s) sum (tokens and
 * sources in order); the partials are then added in chunk order.  So the
 * result is deterministic and independent of the thread count.  The dh row
 * is copied to a per-thread buffer first, so dh may alias one of the dsrc;
 * repeated dsrc pointers accumulate in source order. */
#define ATTN_CHUNK 32
void ref_depth_attn_bwd(float *const *dsrc, float *dw, float *dg, const float *dh,
                        const float *alpha, const float *rstd, const float *const *src, int n,
                        const float *w, const float *g, int N, int d)
{
    int nch = (N + ATTN_CHUNK - 1) / ATTN_CHUNK;
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
            int i1 = (ch + 1) * ATTN_CHUNK < N ? (ch + 1) * ATTN_CHUNK : N;
            for (int i = ch * ATTN_CHUNK; i < i1; i++) {
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
