/* The general depth mixer's ops on the CPU (math in lib/backend.h), for
 * lib/residual_mixer.c: depth_mix_fwd/bwd, one-phase depth mixing with
 * sigmoid scores, keys without RMSNorm, per-token queries, static logits,
 * uniform weights and multiple heads.
 *
 * Determinism as the rest of the CPU backend: tokens are split into fixed
 * chunks of MIX_CHUNK; each chunk's parameter gradients go to its own
 * partial, and the partials are summed in chunk order, so results do not
 * depend on the thread count.  Inner loops run in float over contiguous
 * channels so that the compiler vectorises them. */
#include "mixer_cpu.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "../backend.h"
#include "workspace.h"

#define MIX_CHUNK 32
#define MAX_SRC_HEADS 4096 /* n * H per token on the stack */

/* logits of token i into a[H*n] (head-major), then scores */
static void mix_logits(float *a, float *rs, const float *const *src, int n, const float *q,
                       const float *g, const float *theta, int sigmoid, int H, size_t i, int d)
{
    int e = d / H;
    for (int s = 0; s < n; s++) {
        const float *x = src[s] + i * d;
        float r = 1.0f;
        if (g) {
            float ss = 0;
            for (int j = 0; j < d; j++)
                ss += x[j] * x[j];
            r = 1.0f / sqrtf(ss / d + AR_RMS_EPS);
            rs[s] = r;
        }
        for (int hh = 0; hh < H; hh++) {
            float z = 0;
            if (theta)
                z = theta[s];
            else if (q) {
                const int j0 = hh * e;
                if (g)
                    for (int j = j0; j < j0 + e; j++)
                        z += q[j] * g[j] * x[j];
                else
                    for (int j = j0; j < j0 + e; j++)
                        z += q[j] * x[j];
                z *= r;
            }
            a[hh * n + s] = z;
        }
    }
    for (int hh = 0; hh < H; hh++) {
        float *ah = a + hh * n;
        if (sigmoid) {
            for (int s = 0; s < n; s++)
                ah[s] = 1.0f / (1.0f + expf(-ah[s]));
            continue;
        }
        float mx = ah[0];
        for (int s = 1; s < n; s++)
            mx = ah[s] > mx ? ah[s] : mx;
        double sum = 0;
        for (int s = 0; s < n; s++) {
            ah[s] = expf(ah[s] - mx);
            sum += ah[s];
        }
        for (int s = 0; s < n; s++)
            ah[s] = (float)(ah[s] / sum);
    }
}

void cpu_depth_mix_fwd(float *h, float *alpha, float *rstd, const float *const *src, int n,
                       const float *w, int wstride, const float *g, const float *theta, int sigmoid,
                       int H, int N, int d)
{
    int e = d / H;
#pragma omp parallel for schedule(static)
    for (int i = 0; i < N; i++) {
        float *a = alpha + (size_t)i * H * n;
        const float *q = w ? w + (size_t)i * wstride : NULL;
        mix_logits(a, g ? rstd + (size_t)i * n : NULL, src, n, q, g, theta, sigmoid, H, (size_t)i, d);
        float *y = h + (size_t)i * d;
        memset(y, 0, (size_t)d * sizeof(float));
        for (int s = 0; s < n; s++) {
            const float *x = src[s] + (size_t)i * d;
            for (int hh = 0; hh < H; hh++) {
                float as = a[hh * n + s];
                for (int j = hh * e; j < (hh + 1) * e; j++)
                    y[j] += as * x[j];
            }
        }
    }
}

void cpu_depth_mix_bwd(float *const *dsrc, float *dw, float *dg, float *dtheta, const float *dh,
                       const float *alpha, const float *rstd, const float *const *src, int n,
                       const float *w, int wstride, const float *g, const float *theta, int sigmoid,
                       int H, int N, int d)
{
    int e = d / H;
    int nch = (N + MIX_CHUNK - 1) / MIX_CHUNK;
    int shared_w = w && !theta && wstride == 0 && dw;
    /* per chunk partials (float within a chunk of MIX_CHUNK tokens):
     * dw (d), dg (d), dtheta (n) */
    size_t stride = (size_t)2 * d + n;
    float *part = cpu_xcalloc((size_t)nch * stride, sizeof(float));
#pragma omp parallel for schedule(static)
    for (int c = 0; c < nch; c++) {
        float *pw = part + (size_t)c * stride, *pg = pw + d, *pt = pg + d;
        float da[MAX_SRC_HEADS], dl[MAX_SRC_HEADS], dot[MAX_SRC_HEADS];
        int i1 = (c + 1) * MIX_CHUNK < N ? (c + 1) * MIX_CHUNK : N;
        for (int i = c * MIX_CHUNK; i < i1; i++) {
            const float *a = alpha + (size_t)i * H * n;
            const float *gy = dh + (size_t)i * d;
            const float *q = w && !theta ? w + (size_t)i * wstride : NULL;
            for (int s = 0; s < n; s++) {
                const float *x = src[s] + (size_t)i * d;
                for (int hh = 0; hh < H; hh++) {
                    const int j0 = hh * e, j1 = j0 + e;
                    float acc = 0, u = 0;
                    for (int j = j0; j < j1; j++)
                        acc += gy[j] * x[j];
                    if (q && g)
                        for (int j = j0; j < j1; j++)
                            u += q[j] * g[j] * x[j];
                    else if (q)
                        for (int j = j0; j < j1; j++)
                            u += q[j] * x[j];
                    da[hh * n + s] = acc;
                    dot[hh * n + s] = u;
                }
            }
            for (int hh = 0; hh < H; hh++) {
                const float *ah = a + hh * n;
                if (sigmoid) {
                    for (int s = 0; s < n; s++)
                        dl[hh * n + s] = da[hh * n + s] * ah[s] * (1.0f - ah[s]);
                } else {
                    double cd = 0;
                    for (int s = 0; s < n; s++)
                        cd += (double)ah[s] * da[hh * n + s];
                    for (int s = 0; s < n; s++)
                        dl[hh * n + s] = ah[s] * (float)(da[hh * n + s] - cd);
                }
            }
            for (int s = 0; s < n; s++) {
                const float *x = src[s] + (size_t)i * d;
                float *dx = dsrc[s] ? dsrc[s] + (size_t)i * d : NULL;
                float r = g ? rstd[(size_t)i * n + s] : 1.0f;
                float cross = 0; /* sum_h dl dot: through rstd */
                for (int hh = 0; hh < H; hh++)
                    cross += dl[hh * n + s] * dot[hh * n + s];
                const float c3 = cross * r * r * r / d;
                if (theta)
                    for (int hh = 0; hh < H; hh++)
                        pt[s] += dl[hh * n + s];
                for (int hh = 0; hh < H; hh++) {
                    const float as = a[hh * n + s], ca = dl[hh * n + s] * r;
                    const int j0 = hh * e, j1 = j0 + e;
                    if (dx) {
                        if (q && g)
                            for (int j = j0; j < j1; j++)
                                dx[j] += as * gy[j] + ca * q[j] * g[j] - c3 * x[j];
                        else if (q)
                            for (int j = j0; j < j1; j++)
                                dx[j] += as * gy[j] + ca * q[j];
                        else
                            for (int j = j0; j < j1; j++)
                                dx[j] += as * gy[j];
                    }
                    if (!q)
                        continue;
                    /* d logit / d q_j = r g_j x_j;  d logit / d g_j = r q_j x_j */
                    if (shared_w && g)
                        for (int j = j0; j < j1; j++)
                            pw[j] += ca * g[j] * x[j];
                    else if (shared_w)
                        for (int j = j0; j < j1; j++)
                            pw[j] += ca * x[j];
                    else if (dw) {
                        float *dwi = dw + (size_t)i * d;
                        if (g)
                            for (int j = j0; j < j1; j++)
                                dwi[j] += ca * g[j] * x[j];
                        else
                            for (int j = j0; j < j1; j++)
                                dwi[j] += ca * x[j];
                    }
                    if (g && dg)
                        for (int j = j0; j < j1; j++)
                            pg[j] += ca * q[j] * x[j];
                }
            }
        }
    }
    for (int c = 0; c < nch; c++) {
        const float *pw = part + (size_t)c * stride, *pg = pw + d, *pt = pg + d;
        if (shared_w)
            for (int j = 0; j < d; j++)
                dw[j] += pw[j];
        if (g && dg && w && !theta)
            for (int j = 0; j < d; j++)
                dg[j] += pg[j];
        if (theta && dtheta)
            for (int s = 0; s < n; s++)
                dtheta[s] += pt[s];
    }
    free(part);
}
