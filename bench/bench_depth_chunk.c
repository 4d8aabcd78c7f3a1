/* Time one chunk of two-phase depth attention on the CPU backend (BENCHMARKS.md,
 * "Kernels"): phase 1 (depth_fwd_inter) for C mixers over k shared sources,
 * then phase 2 (depth_fwd_merge, fused with the sublayer's RMSNorm as the
 * model runs it) with 1 and 2 intra sources, then the backward's intra part
 * of one mixer (depth_bwd_intra with the sublayer norm's backward fused,
 * the last of its k sources its own) and its shared part (depth_bwd_inter,
 * adding into the k source gradients), on random rows.
 *
 * usage: bench_depth_chunk K C N COLD [D]
 *   COLD 1: every timed call first sweeps a 256 MiB buffer, so the rows come
 *   from DRAM (as in training, where a sublayer's work evicts them); COLD 0:
 *   the same rows every time (they stay in cache if small enough).
 * Prints the best and mean of 15 calls, and phase 1's largest difference from
 * the one-phase reference (tests/depth_attn_ref.h) on the same sources. */
#include "lib/backend.h"
#include "tests/depth_attn_ref.h"
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define REPS 15

static const ar_backend *be;
static float *big;
static const size_t big_floats = (256u << 20) / sizeof(float);

static void evict(void)
{
#pragma omp parallel for
    for (size_t i = 0; i < big_floats; i++)
        big[i] += 1.0f;
}

static float *rows(size_t n, unsigned seed)
{
    float *p = be->alloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++)
        p[i] = (float)((i * 2654435761u + seed * 97u) % 1000u) / 1000.0f - 0.5f;
    return p;
}

/* One chunk's mixers over shared sources: the sizes and the rows. */
typedef struct {
    int k, C, N, d, cold;
    size_t nd; /* N d */
    float *src[16], *rs[16];                   /* k + 2 sources and their inverse norms */
    float *o[8], *lse[8], *al[8], *w[8], *g[8]; /* C mixers */
    int n[8];
    float *xn; /* the sublayer norm's output (phase 2, then the backward) */
} chunk;

static void setup(chunk *b)
{
    int k = b->k, C = b->C, N = b->N, d = b->d;
    b->nd = (size_t)N * d;
    for (int s = 0; s < k + 2; s++) {
        b->src[s] = rows(b->nd, (unsigned)s);
        b->rs[s] = be->alloc((size_t)N * sizeof(float));
    }
    for (int c = 0; c < C; c++) {
        b->n[c] = k + 2;
        b->o[c] = be->alloc(b->nd * sizeof(float));
        b->lse[c] = be->alloc((size_t)N * sizeof(float));
        b->al[c] = be->alloc((size_t)N * b->n[c] * sizeof(float));
        b->w[c] = be->alloc((size_t)d * sizeof(float));
        b->g[c] = be->alloc((size_t)d * sizeof(float));
        for (int j = 0; j < d; j++) {
            b->w[c][j] = 0.3f * (float)((j * 7 + c) % 11 - 5) * (float)(c + 1);
            b->g[c][j] = 1.0f + 0.01f * (float)(j % 5);
        }
    }
}

/* Phase 1 for the C mixers, then its largest difference from the
 * one-phase reference. */
static void bench_phase1(chunk *b)
{
    int k = b->k, C = b->C, N = b->N, d = b->d;
    size_t nd = b->nd;
    double best = 1e30, tot = 0;
    for (int r = 0; r < REPS; r++) {
        if (b->cold)
            evict();
        double t = omp_get_wtime();
        ar_depth_inter shared = {.C = C, .k = k, .n = b->n, .src = (const float *const *)b->src, .rs = b->rs,
                                 .w = (const float *const *)b->w, .g = (const float *const *)b->g, .alpha = b->al,
                                 .lse = b->lse, .N = N, .d = d};
        be->depth_fwd_inter(&shared, b->o, NULL);
        t = omp_get_wtime() - t;
        tot += t;
        best = t < best ? t : best;
    }
    printf("phase 1, k %d C %d N %d d %d %s: best %.3f ms, mean %.3f ms", k, C, N, d,
           b->cold ? "cold" : "warm", 1e3 * best, 1e3 * tot / REPS);
    float *h = be->alloc(nd * sizeof(float)), *a2 = be->alloc((size_t)N * k * sizeof(float));
    float *r2 = be->alloc((size_t)N * k * sizeof(float));
    double err = 0;
    for (int c = 0; c < C; c++) {
        ref_depth_attn_fwd(h, a2, r2, (const float *const *)b->src, k, b->w[c], b->g[c], N, d);
        for (size_t i = 0; i < nd; i++)
            err = fmax(err, fabs((double)h[i] - b->o[c][i]));
    }
    printf(" (max |o - one-phase| %.1e)\n", err);
}

/* Phase 2 of mixer 0 with j intra sources; its inputs are restored before
 * each call (the op turns phase 1's logits into weights and its
 * log-sum-exp into the total). */
static void bench_phase2(chunk *b)
{
    int k = b->k, C = b->C, N = b->N, d = b->d;
    size_t nd = b->nd, na = (size_t)N * b->n[0];
    float *lse0 = be->alloc((size_t)N * sizeof(float)), *hb = be->alloc(nd * sizeof(float));
    float *al0 = be->alloc(na * sizeof(float));
    b->xn = be->alloc(nd * sizeof(float));
    memcpy(lse0, b->lse[0], (size_t)N * sizeof(float));
    memcpy(al0, b->al[0], na * sizeof(float));
    for (int j = 1; j <= 2; j++) {
        double best = 1e30, tot = 0;
        for (int r = 0; r < REPS; r++) {
            memcpy(b->lse[0], lse0, (size_t)N * sizeof(float));
            memcpy(b->al[0], al0, na * sizeof(float));
            memcpy(hb, b->o[0], nd * sizeof(float));
            if (b->cold)
                evict();
            double t = omp_get_wtime();
            ar_depth_intra own = {.n = k + j, .k = k, .src = (const float *const *)b->src, .rsi = b->rs + k,
                                  .w = b->w[0], .g = b->g[0], .alpha = b->al[0], .lse = b->lse[0], .N = N, .d = d};
            be->depth_fwd_merge(&own, hb, &(ar_norm_out){b->g[1 % C], b->xn, b->lse[1 % C]});
            t = omp_get_wtime() - t;
            tot += t;
            best = t < best ? t : best;
        }
        printf("phase 2, %d intra source%s: best %.3f ms, mean %.3f ms\n", j, j > 1 ? "s" : "",
               1e3 * best, 1e3 * tot / REPS);
    }
}

/* The backward over the k shared sources only (n = k), uniform weights
 * (alpha = 1/k, lse = 0: any positive weights cost the same): the intra
 * part of one mixer, then the shared part. */
static void bench_backward(chunk *b)
{
    int k = b->k, C = b->C, N = b->N, d = b->d;
    size_t nd = b->nd;
    float *dh[8], *cd[8], *dw[8], *dg[8], *dsrc[16];
    float *dxn = rows(nd, 400u), *nr = rows((size_t)N, 401u);
    int nk[8];
    for (size_t i = 0; i < (size_t)N; i++)
        nr[i] += 1.5f;
    for (int c = 0; c < C; c++) {
        nk[c] = k;
        dh[c] = rows(nd, 100u + c);
        cd[c] = rows((size_t)N, 200u + c);
        dw[c] = be->alloc((size_t)d * sizeof(float));
        dg[c] = be->alloc((size_t)d * sizeof(float));
        for (size_t i = 0; i < (size_t)N * k; i++)
            b->al[c][i] = 1.0f / k;
        memset(b->lse[c], 0, (size_t)N * sizeof(float));
    }
    for (int s = 0; s < k; s++)
        dsrc[s] = rows(nd, 300u + s);
    for (int part = 0; part < 2; part++) {
        double best = 1e30, tot = 0;
        for (int r = 0; r < REPS; r++) {
            if (b->cold)
                evict();
            double t = omp_get_wtime();
            if (part == 0) {
                ar_depth_intra own = {.n = k, .k = k - 1, .src = (const float *const *)b->src,
                                      .rsi = b->rs + k - 1, .w = b->w[0], .g = b->g[0], .alpha = b->al[0],
                                      .lse = b->lse[0], .N = N, .d = d};
                ar_norm_grad norm = {b->g[0], dw[1 % C], dxn, b->xn, nr};
                be->depth_bwd_intra(&own, dsrc + k - 1, dw[0], dg[0], cd[0], dh[0], NULL, &norm);
            } else {
                ar_depth_inter shared = {.C = C, .k = k, .n = nk, .src = (const float *const *)b->src,
                                         .rs = b->rs, .w = (const float *const *)b->w,
                                         .g = (const float *const *)b->g, .alpha = b->al, .lse = b->lse, .N = N,
                                         .d = d};
                be->depth_bwd_inter(&shared, dsrc, dw, dg, (const float *const *)dh, (const float *const *)cd, 0);
            }
            t = omp_get_wtime() - t;
            tot += t;
            best = t < best ? t : best;
        }
        printf("%s: best %.3f ms, mean %.3f ms\n",
               part == 0 ? "backward, intra part of one mixer (norm fused)" : "backward, shared part",
               1e3 * best,
               1e3 * tot / REPS);
    }
}

int main(int argc, char **argv)
{
    if (argc < 5) {
        fprintf(stderr, "usage: bench_depth_chunk K C N COLD [D]\n");
        return 2;
    }
    chunk b = {.k = atoi(argv[1]), .C = atoi(argv[2]), .N = atoi(argv[3]), .cold = atoi(argv[4])};
    b.d = argc > 5 ? atoi(argv[5]) : 512;
    if (b.k < 1 || b.k > 14 || b.C < 1 || b.C > 8 || b.N < 1 || b.d < 1) {
        fprintf(stderr, "bench_depth_chunk: need 1 <= K <= 14, 1 <= C <= 8, N >= 1, D >= 1\n");
        return 2;
    }
    be = ar_backend_cpu();
    be->set_threads(0);
    big = be->alloc(big_floats * sizeof(float));
    setup(&b);
    bench_phase1(&b);
    bench_phase2(&b);
    bench_backward(&b);
    return 0;
}
