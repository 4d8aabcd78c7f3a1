/* The general depth mixer's per-token ops with H heads against one head
 * on the same rows (BENCHMARKS.md, "Heads: where the time goes"): the
 * forward (depth_mix_fwd, weights written as training does, and left
 * unwritten as a forward-only pass does) and the backward of a chunk's
 * shared sources (depth_mix_bwd_chunk), for C mixers with learned queries
 * and key norm over k shared sources (mixer c lists k + c + 1), at width
 * d.  Prints each op's best of 5 rounds, per call and per (token, mixer,
 * source): with N small every row stays in L1/L2, so the difference
 * between H and 1 is the heads' arithmetic, not memory.
 *
 * usage: bench_mix_heads H [N] [THREADS] [D] [C] [K] [CACHED]
 *   defaults N 1024, THREADS 1, D 64, C 4, K 5 (the ablation shape's
 *   Block mixers: heads is 16 heads of 4 channels there); CACHED 1: the
 *   forward reads every source's rstd from the cache the model keeps
 *   (ar_depth_mix: rsc), as every mixer but the first to list a row does;
 *   0 (the default): it sums each row's squares itself */
#include "core/clock.h"
#include "lib/backend.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#define MAXC 8
#define ROUNDS 5

static const ar_backend *be;

static float *rows(size_t n, unsigned seed, float scale)
{
    float *p = be->alloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        p[i] = scale * ((float)(seed >> 8) / 16777216.0f - 0.5f);
    }
    return p;
}

typedef struct {
    int H, C, k, N, d;
    int n[MAXC];
    const float *src[64];
    float *dsrc[64];
    const float *w[MAXC], *g[MAXC], *theta[MAXC], *alpha[MAXC], *rstd[MAXC], *dh[MAXC], *cdot[MAXC];
    float *dw[MAXC], *dg[MAXC], *dtheta[MAXC], *h[MAXC];
} setup;

/* C mixers' forwards (their weights and statistics for the backward),
 * then their cdot: the inputs the chunk backward reads, as training
 * leaves them */
static void make(setup *b)
{
    size_t nd = (size_t)b->N * b->d;
    for (int s = 0; s < b->k + b->C; s++) {
        b->src[s] = rows(nd, 10u + (unsigned)s, 2.0f);
        b->dsrc[s] = rows(nd, 100u + (unsigned)s, 1.0f);
    }
    for (int c = 0; c < b->C; c++) {
        b->n[c] = b->k + c + 1;
        b->w[c] = rows((size_t)b->d, 200u + (unsigned)c, 1.0f);
        float *g = rows((size_t)b->d, 300u + (unsigned)c, 0.2f);
        for (int j = 0; j < b->d; j++)
            g[j] += 1.0f;
        b->g[c] = g;
        b->theta[c] = NULL;
        b->dtheta[c] = NULL;
        float *alpha = be->alloc((size_t)b->N * b->H * b->n[c] * sizeof(float));
        float *rstd = be->alloc((size_t)b->N * b->n[c] * sizeof(float));
        b->h[c] = be->alloc(nd * sizeof(float));
        ar_depth_mix m = {.n = b->n[c], .src = b->src, .w = b->w[c], .g = b->g[c], .alpha = alpha, .rstd = rstd,
                          .H = b->H, .N = b->N, .d = b->d};
        be->depth_mix_fwd(&m, b->h[c]);
        b->alpha[c] = alpha;
        b->rstd[c] = rstd;
        b->dh[c] = rows(nd, 400u + (unsigned)c, 1.0f);
        float *cdot = be->alloc((size_t)b->N * b->H * sizeof(float));
        be->depth_mix_cdot(cdot, b->dh[c], b->h[c], b->H, b->N, b->d);
        b->cdot[c] = cdot;
        b->dw[c] = rows((size_t)b->d, 500u + (unsigned)c, 0.0f);
        b->dg[c] = rows((size_t)b->d, 600u + (unsigned)c, 0.0f);
    }
}

/* best seconds per call of the forward of mixer C-1 (its k + C sources) */
static double time_fwd(setup *b, int unread, int cached, int reps)
{
    int c = b->C - 1;
    ar_depth_mix m = {.n = b->n[c], .src = b->src, .w = b->w[c], .g = b->g[c], .alpha = (float *)b->alpha[c],
                      .rstd = (float *)b->rstd[c], .H = b->H, .weights_unread = unread, .N = b->N, .d = b->d};
    float *rsc[64];
    int ok[64] = {0};
    for (int s = 0; cached && s < m.n; s++)
        rsc[s] = be->alloc((size_t)b->N * sizeof(float));
    if (cached) { /* a first call fills the cache */
        m.rsc = rsc, m.rsc_ok = ok;
        be->depth_mix_fwd(&m, b->h[c]);
    }
    double best = INFINITY;
    for (int r = 0; r < ROUNDS; r++) {
        double t0 = ar_now_s();
        for (int i = 0; i < reps; i++)
            be->depth_mix_fwd(&m, b->h[c]);
        double t = (ar_now_s() - t0) / reps;
        best = t < best ? t : best;
    }
    for (int s = 0; cached && s < m.n; s++)
        be->free(rsc[s]);
    return best;
}

/* best seconds per call of the chunk backward over the k shared sources */
static double time_bwd(setup *b, int reps)
{
    ar_depth_mix_chunk ch = {.C = b->C, .s0 = 0, .s1 = b->k, .src = b->src, .n = b->n, .w = b->w, .g = b->g,
                             .theta = b->theta, .alpha = b->alpha, .rstd = b->rstd, .H = b->H, .N = b->N,
                             .d = b->d};
    double best = INFINITY;
    for (int r = 0; r < ROUNDS; r++) {
        double t0 = ar_now_s();
        for (int i = 0; i < reps; i++)
            be->depth_mix_bwd_chunk(&ch, b->dsrc, b->dw, b->dg, b->dtheta, b->dh, b->cdot);
        double t = (ar_now_s() - t0) / reps;
        best = t < best ? t : best;
    }
    return best;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: bench_mix_heads H [N] [THREADS] [D] [C] [K] [CACHED]\n");
        return 2;
    }
    int H = atoi(argv[1]), N = argc > 2 ? atoi(argv[2]) : 1024, threads = argc > 3 ? atoi(argv[3]) : 1;
    int d = argc > 4 ? atoi(argv[4]) : 64, C = argc > 5 ? atoi(argv[5]) : 4, k = argc > 6 ? atoi(argv[6]) : 5;
    int cached = argc > 7 ? atoi(argv[7]) : 0;
    if (H < 1 || N < 1 || threads < 1 || d < 1 || d % H != 0 || C < 1 || C > MAXC || k < 1 || k + C > 64) {
        fprintf(stderr, "bench_mix_heads: need H >= 1 dividing D, N >= 1, THREADS >= 1, 1 <= C <= %d, "
                        "K >= 1, K + C <= 64\n",
                MAXC);
        return 2;
    }
    be = ar_backend_cpu();
    be->set_threads(threads);
    /* about 0.2 s a round whatever N */
    int reps = (int)fmax(3.0, 2e6 / ((double)N * d * (k + C)));
    printf("N %d, d %d, C %d mixers, k %d shared sources (mixer c lists k + c + 1), %d thread%s, rstd %s\n", N, d,
           C, k, threads, threads > 1 ? "s" : "", cached ? "cached" : "summed");
    printf("%-34s %12s %12s %16s\n", "op", "H", "us a call", "ns a (i, m, s)");
    int hs[2] = {1, H};
    for (int q = 0; q < (H > 1 ? 2 : 1); q++) {
        setup b = {.H = hs[q], .C = C, .k = k, .N = N, .d = d};
        make(&b);
        double per_f = (double)N * b.n[C - 1], per_b = (double)N * C * k;
        double f = time_fwd(&b, 0, cached, reps), fu = time_fwd(&b, 1, cached, reps), bw = time_bwd(&b, reps);
        printf("%-34s %12d %12.1f %16.2f\n", "depth_mix_fwd (weights written)", b.H, f * 1e6, f * 1e9 / per_f);
        printf("%-34s %12d %12.1f %16.2f\n", "depth_mix_fwd (forward-only)", b.H, fu * 1e6, fu * 1e9 / per_f);
        printf("%-34s %12d %12.1f %16.2f\n", "depth_mix_bwd_chunk (shared)", b.H, bw * 1e6, bw * 1e9 / per_b);
    }
    return 0;
}
