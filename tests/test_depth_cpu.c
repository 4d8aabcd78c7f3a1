/* The two-phase depth attention (lib/ops.def: depth_fwd_inter,
 * depth_fwd_merge, depth_bwd_intra, depth_bwd_inter) against
 * the simple one-phase reference (depth_attn_ref.h, which test_ops checks
 * against a double reference and finite differences), on random inputs:
 * a chunk of C mixers sharing k sources, each with its own later sources,
 * forward and backward, plus a finite-difference check of the composed
 * two-phase forward, the += convention, independence of the thread count,
 * and at model level the independence of the chunk size.
 *
 * Covers: lib/cpu/depth_cpu.c (the two-phase ops) and the schedule that
 * calls them, lib/residual_depth.c (its chunk size). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/backend.h"
#include "lib/model.h"
#include "lib/residual.h"
#include "depth_attn_ref.h"
#include "testutil.h"

static const ar_backend *be;
static uint64_t seed = 7000;

static void setup(void)
{
    be = ar_backend_cpu();
    be->set_threads(2);
}

TestSuite(depth_cpu, .init = setup);

/* 64-byte aligned, as the backend's buffers are: with d % 16 == 0 phase 1
 * then takes its streaming-store path (the other shapes, the plain one) */
static float *alloc64(size_t n)
{
    size_t b = ((n ? n : 1) * sizeof(float) + 63) / 64 * 64;
    float *x = aligned_alloc(64, b);
    cr_assert(x, "out of memory");
    return x;
}

static float *rnd(size_t n, float lo, float hi)
{
    float *x = alloc64(n);
    tu_fill_uniform(x, n, lo, hi, seed++);
    return x;
}

static float *zeros(size_t n)
{
    float *x = alloc64(n);
    memset(x, 0, (n ? n : 1) * sizeof(float));
    return x;
}

/* A chunk: k shared sources, then mixer c has j[c] sources of its own
 * (taken from the pool of "later" sources, own[0..jmax-1], Full-style: mixer
 * c uses own[0..j[c]-1]). */
typedef struct {
    int C, k, N, d, jmax;
    int j[8], n[8];
    float *src[16];          /* k shared + jmax own */
    float *w[8], *g[8], *dh[8];
} chunk_case;

static void make_case(chunk_case *t, int C, int k, const int *j, int N, int d)
{
    memset(t, 0, sizeof *t);
    t->C = C, t->k = k, t->N = N, t->d = d;
    for (int c = 0; c < C; c++) {
        t->j[c] = j[c];
        t->n[c] = k + j[c];
        t->jmax = j[c] > t->jmax ? j[c] : t->jmax;
    }
    size_t nd = (size_t)N * d;
    for (int s = 0; s < k + t->jmax; s++) {
        t->src[s] = rnd(nd, -1.5f, 1.5f);
        for (size_t i = 0; i < nd; i++)
            t->src[s][i] *= 0.5f + 0.7f * s; /* growing scales, as in a residual stream */
    }
    for (int c = 0; c < C; c++) {
        t->w[c] = rnd(d, -1, 1);
        t->g[c] = rnd(d, 0.5f, 1.5f);
        t->dh[c] = rnd(nd, -1, 1);
    }
}

static void free_case(chunk_case *t)
{
    for (int s = 0; s < t->k + t->jmax; s++)
        free(t->src[s]);
    for (int c = 0; c < t->C; c++)
        free(t->w[c]), free(t->g[c]), free(t->dh[c]);
}

/* The op arguments of the case's chunk (k shared sources) with the
 * weights alpha[c], lse[c] of its mixers and the rstd rs[s] of its sources
 * (softmax scores, key norm on) ... */
static ar_depth_inter inter_args(const chunk_case *t, float **alpha, float **lse, float **rs)
{
    return (ar_depth_inter){.C = t->C, .k = t->k, .n = t->n, .src = (const float *const *)t->src,
                            .rs = rs, .w = (const float *const *)t->w, .g = (const float *const *)t->g,
                            .alpha = alpha, .lse = lse, .N = t->N, .d = t->d};
}

/* ... and of its mixer c's own sources (rs: every source's, from 0) */
static ar_depth_intra intra_args(const chunk_case *t, int c, float *alpha, float *lse, float **rs)
{
    return (ar_depth_intra){.n = t->n[c], .k = t->k, .src = (const float *const *)t->src,
                            .rsi = rs + t->k, .w = t->w[c], .g = t->g[c], .alpha = alpha, .lse = lse,
                            .N = t->N, .d = t->d};
}

/* Two-phase forward of the whole chunk: h[c], alpha[c]; rs[s] per source. */
static void two_phase_fwd(chunk_case *t, float **h, float **alpha, float **lse, float **rs)
{
    ar_depth_inter shared = inter_args(t, alpha, lse, rs);
    be->depth_fwd_inter(&shared, h, NULL);
    for (int c = 0; c < t->C; c++) {
        ar_depth_intra own = intra_args(t, c, alpha[c], lse[c], rs);
        be->depth_fwd_merge(&own, h[c], NULL);
    }
}

static double rel(const float *a, const float *b, size_t n) { return tu_rel_err(a, b, n); }

/* Bounds from the arithmetic (testutil.h), u = 2^-24, as in test_ops.c:
 * fast_expf is within 1.5 u of exp over its whole domain (every float
 * checked), libm's expf within 1 u: U_EXP = 2 u; an rstd from a d-term sum
 * of squares is within RSTD_REL(d) = gamma(d)/2 + 3 u relative. */
#define U TU_U_FLOAT
#define U_EXP (2 * U)
#define RSTD_REL(d) (tu_gamma(d) / 2 + 3 * U)

/* |a_i - b_i| <= bnd_i for every i: two paths' results, bnd the sum of
 * their bounds against exact arithmetic */
static void check_pair(const char *what, int who, const float *a, const float *b, const double *bnd,
                       size_t n)
{
    double worst = 0;
    size_t wi = 0;
    for (size_t i = 0; i < n; i++) {
        double e = fabs((double)a[i] - b[i]);
        double q = e == 0 ? 0 : e <= bnd[i] ? e / bnd[i] : isnan(e) ? INFINITY : 1 + e / bnd[i];
        if (q > worst)
            worst = q, wi = i;
    }
    cr_expect(worst <= 1.0, "%s %d: element %zu of %zu: %.9g vs %.9g: |diff| %.3g > bound %.3g", what,
              who, wi, n, a[wi], b[wi], fabs((double)a[wi] - b[wi]), bnd[wi]);
}

/* One path's bounds against exact arithmetic, for a mixer of n sources
 * src[0..n-1] with query w and key gain g, from the exact weights alpha_s,
 * rstd r_s and P_s = r_s sum_j |w_j g_j x_sj| (the logit's terms'
 * magnitude), Pm = max_s P_s, per token:
 * - the logits (u = w g rounded, a d-term dot, times rstd): within
 *   (gamma(d + 2) + RSTD_REL(d)) P_s, and a softmax moves by at most twice
 *   its logits' largest error; the rest of either path's way to a weight
 *   takes at most 8 roundings of quantities below 2 Pm + log n + 1 (z - max,
 *   lse, LSE and their differences), 4 exps and sums of at most n terms:
 *   eps = 2 (gamma(d + 2) + RSTD_REL(d)) Pm + 8 u (2 Pm + log n + 1) +
 *   4 U_EXP + gamma(n + 4), relative (bal = eps alpha);
 * - h = sum_s alpha_s x_s (o over the shared sources, then merged with the
 *   own ones): bh = (eps + gamma(n + 2)) sum_s alpha_s |x_s|;
 * - backward, with dh given (test_ops.c's da_ref_bwd count, from weights
 *   within eps and rstd within e = RSTD_REL(d)): W_s = sum_j |dh_j x_sj|,
 *   D = sum_s alpha_s W_s; dl_s = alpha_s (dh.x_s - cdot) is within
 *   e_dl = 2 eps + gamma(d + n + 5) of L_s = alpha_s (W_s + D) (cdot =
 *   dh.h in the two-phase ops: h's error adds eps + gamma(n + 2) of D);
 *   dx_s = alpha_s dh + dl r_s u - dl (u.x_s) r_s^3 x_s / d within
 *   e_dl + 3 e + gamma(d + 10) of its terms' magnitudes M_s (added to
 *   mds[s]; the bound to bds[s]); dw_j = g_j sum_(i,s) dl r x_sj within
 *   |g_j| (e_dl + e + gamma(N n + 4)) sum L_s r_s |x_sj|, dg alike with w. */
static void mixer_bound(const float *const *src, int n, const float *w, const float *g, const float *dh,
                        int N, int d, double *bh, double *bal, double **bds, double **mds, double *bdw,
                        double *bdg)
{
    double r[n], al[n], P[n], W[n], e = RSTD_REL(d);
    for (int i = 0; i < N; i++) {
        size_t o = (size_t)i * d;
        double mx = -INFINITY, Pm = 0, sum = 0;
        for (int s = 0; s < n; s++) {
            double ss = 0, z = 0, p = 0;
            for (int q = 0; q < d; q++) {
                double x = src[s][o + q];
                ss += x * x;
                z += (double)w[q] * g[q] * x;
                p += fabs((double)w[q] * g[q] * x);
            }
            r[s] = 1.0 / sqrt(ss / d + (double)AR_RMS_EPS);
            al[s] = z * r[s], P[s] = p * r[s];
            mx = fmax(mx, al[s]), Pm = fmax(Pm, P[s]);
        }
        for (int s = 0; s < n; s++)
            sum += (al[s] = exp(al[s] - mx));
        for (int s = 0; s < n; s++)
            al[s] /= sum;
        double eps = 2 * (tu_gamma(d + 2) + e) * Pm + 8 * U * (2 * Pm + log(n) + 1) + 4 * U_EXP + tu_gamma(n + 4);
        if (bh)
            for (int q = 0; q < d; q++) {
                double m = 0;
                for (int s = 0; s < n; s++)
                    m += al[s] * fabs(src[s][o + q]);
                bh[o + q] = (eps + tu_gamma(n + 2)) * m;
            }
        if (bal)
            for (int s = 0; s < n; s++)
                bal[(size_t)i * n + s] = eps * al[s];
        if (!dh)
            continue;
        double D = 0;
        for (int s = 0; s < n; s++) {
            W[s] = 0;
            for (int q = 0; q < d; q++)
                W[s] += fabs((double)dh[o + q] * src[s][o + q]);
            D += al[s] * W[s];
        }
        double edl = 2 * eps + tu_gamma(d + n + 5), ex = edl + 3 * e + tu_gamma(d + 10);
        double ew = edl + e + tu_gamma((double)N * n + 4);
        for (int s = 0; s < n; s++) {
            double L = al[s] * (W[s] + D);
            for (int q = 0; q < d; q++) {
                double x = fabs(src[s][o + q]);
                double M = al[s] * fabs(dh[o + q]) + L * r[s] * fabs((double)w[q] * g[q]) + L * P[s] * r[s] * x / d;
                bds[s][o + q] += ex * M;
                mds[s][o + q] += M;
                bdw[q] += fabs(g[q]) * ew * L * r[s] * x;
                bdg[q] += fabs(w[q]) * ew * L * r[s] * x;
            }
        }
    }
}

static double *dzeros(size_t n) { return calloc(n ? n : 1, sizeof(double)); }

static void check_chunk(int C, int k, const int *j, int N, int d)
{
    chunk_case t;
    make_case(&t, C, k, j, N, d);
    size_t nd = (size_t)N * d;
    int ns = k + t.jmax;
    float *h[8], *alpha[8], *lse[8], *cdot[8], *rs[16], *rh[8], *ral[8], *rrs[8];
    for (int c = 0; c < C; c++) {
        h[c] = rnd(nd, -9, 9); /* garbage: outputs are (=) */
        alpha[c] = zeros((size_t)N * t.n[c]);
        lse[c] = zeros(N);
        cdot[c] = zeros(N);
        rh[c] = zeros(nd);
        ral[c] = zeros((size_t)N * t.n[c]);
        rrs[c] = zeros((size_t)N * t.n[c]);
    }
    for (int s = 0; s < ns; s++)
        rs[s] = zeros(N);

    /* forward: two-phase vs one-phase per mixer, each within mixer_bound's
     * bounds (rstd within RSTD_REL(d)) */
    two_phase_fwd(&t, h, alpha, lse, rs);
    double *bh = dzeros(nd), *bal = dzeros((size_t)N * ns);
    for (int c = 0; c < C; c++) {
        ref_depth_attn_fwd(rh[c], ral[c], rrs[c], (const float *const *)t.src, t.n[c], t.w[c],
                           t.g[c], N, d);
        size_t na = (size_t)N * t.n[c];
        mixer_bound((const float *const *)t.src, t.n[c], t.w[c], t.g[c], NULL, N, d, bh, bal, NULL, NULL,
                    NULL, NULL);
        for (size_t i = 0; i < nd; i++)
            bh[i] *= 2;
        for (size_t i = 0; i < na; i++)
            bal[i] *= 2;
        check_pair("h differs from the one-phase op's: mixer", c, h[c], rh[c], bh, nd);
        check_pair("alpha differs from the one-phase op's: mixer", c, alpha[c], ral[c], bal, na);
        for (int i = 0; i < N; i++)
            for (int s = 0; s < t.n[c]; s++) {
                float a = rs[s][i], b = rrs[c][(size_t)i * t.n[c] + s];
                cr_expect(fabsf(a - b) <= (2 * RSTD_REL(d) + U) * b, "rstd of source %d: %.9g vs %.9g", s, a, b);
            }
    }
    free(bh), free(bal);

    /* backward: gradients start nonzero (+= convention); the reference
     * accumulates one-phase backwards of every mixer in the same buffers */
    float *dsrc[16], *rdsrc[16], *dw[8], *dg[8], *rdw[8], *rdg[8];
    double *bds[16], *mds[16], *bdw[8], *bdg[8];
    for (int s = 0; s < ns; s++) {
        dsrc[s] = rnd(nd, -1, 1);
        rdsrc[s] = malloc(nd * sizeof(float));
        memcpy(rdsrc[s], dsrc[s], nd * sizeof(float));
        bds[s] = dzeros(nd), mds[s] = dzeros(nd);
    }
    for (int c = 0; c < C; c++) {
        dw[c] = rnd(d, -1, 1), dg[c] = rnd(d, -1, 1);
        rdw[c] = malloc(d * sizeof(float)), rdg[c] = malloc(d * sizeof(float));
        memcpy(rdw[c], dw[c], d * sizeof(float));
        memcpy(rdg[c], dg[c], d * sizeof(float));
        bdw[c] = dzeros(d), bdg[c] = dzeros(d);
        mixer_bound((const float *const *)t.src, t.n[c], t.w[c], t.g[c], t.dh[c], N, d, NULL, NULL, bds, mds,
                    bdw[c], bdg[c]);
    }
    for (int c = C - 1; c >= 0; c--) {
        ar_depth_intra own = intra_args(&t, c, alpha[c], lse[c], rs);
        be->depth_bwd_intra(&own, dsrc + k, dw[c], dg[c], cdot[c], t.dh[c], h[c], NULL);
        ref_depth_attn_bwd(rdsrc, rdw[c], rdg[c], t.dh[c], ral[c], rrs[c],
                           (const float *const *)t.src, t.n[c], t.w[c], t.g[c], N, d);
    }
    ar_depth_inter shared = inter_args(&t, alpha, lse, rs);
    be->depth_bwd_inter(&shared, dsrc, dw, dg, (const float *const *)t.dh, (const float *const *)cdot, 0);
    /* each path within mixer_bound's bounds per mixer; a source's gradient
     * adds up to C mixers' three terms (two in the shared op) onto its
     * initial value, in other orders: gamma(2 C + 3) of their magnitudes;
     * dw, dg a single += */
    for (int s = 0; s < ns; s++) {
        for (size_t i = 0; i < nd; i++)
            bds[s][i] = 2 * bds[s][i] + 2 * tu_gamma(2 * C + 3) * (fabs(rdsrc[s][i]) + mds[s][i]);
        check_pair("dsrc differs from the one-phase backward: source", s, dsrc[s], rdsrc[s], bds[s], nd);
        free(bds[s]), free(mds[s]);
    }
    for (int c = 0; c < C; c++) {
        for (int q = 0; q < d; q++) {
            bdw[c][q] = 2 * bdw[c][q] + 2 * tu_gamma(2) * fabs(rdw[c][q]);
            bdg[c][q] = 2 * bdg[c][q] + 2 * tu_gamma(2) * fabs(rdg[c][q]);
        }
        check_pair("dw differs from the one-phase backward: mixer", c, dw[c], rdw[c], bdw[c], d);
        check_pair("dg differs from the one-phase backward: mixer", c, dg[c], rdg[c], bdg[c], d);
        free(bdw[c]), free(bdg[c]);
    }

    for (int c = 0; c < C; c++) {
        free(h[c]), free(alpha[c]), free(lse[c]), free(cdot[c]), free(rh[c]), free(ral[c]);
        free(rrs[c]), free(dw[c]), free(dg[c]), free(rdw[c]), free(rdg[c]);
    }
    for (int s = 0; s < ns; s++)
        free(rs[s]), free(dsrc[s]), free(rdsrc[s]);
    free_case(&t);
}

/* Full-style chunk: mixer c sees the shared prefix and the c outputs before it. */
Test(depth_cpu, full_chunk_matches_one_phase)
{
    int j[4] = {0, 1, 2, 3};
    check_chunk(4, 5, j, 67, 48);
}

/* Block-style: one own source (the partial sum) from the second mixer on. */
Test(depth_cpu, block_chunk_matches_one_phase)
{
    int j[3] = {0, 1, 1};
    check_chunk(3, 4, j, 50, 36);
}

/* One mixer, everything shared (the final mixer), and a single source. */
Test(depth_cpu, single_mixer_and_single_source)
{
    int j1[1] = {0};
    check_chunk(1, 6, j1, 33, 20);
    check_chunk(1, 1, j1, 9, 12);
    int j2[2] = {2, 2};
    check_chunk(2, 1, j2, 41, 16);
}

/* Rows longer than 128 floats: phase 1 goes over tiles of 16 tokens, not
 * token by token (lib/cpu/depth_cpu.c); N leaves a partial tile. */
Test(depth_cpu, long_rows_tiled)
{
    int j[3] = {0, 1, 2};
    check_chunk(3, 5, j, 45, 160);
}

/* Large enough for the threaded paths (N*d*k*C well above the serial cutoff). */
Test(depth_cpu, large_chunk_threaded)
{
    int j[4] = {0, 1, 2, 3};
    check_chunk(4, 9, j, 1031, 96);
}

/* Finite differences of L = sum_c R_c . h_c through the composed two-phase
 * forward, for every source, query and gain. */
typedef struct {
    chunk_case *t;
    float **h, **alpha, **lse, **rs, **R;
} fd_ctx;

static double fd_loss(fd_ctx *x)
{
    two_phase_fwd(x->t, x->h, x->alpha, x->lse, x->rs);
    double L = 0;
    for (int c = 0; c < x->t->C; c++)
        for (size_t i = 0; i < (size_t)x->t->N * x->t->d; i++)
            L += (double)x->h[c][i] * x->R[c][i];
    return L;
}

static void fd_one(fd_ctx *x, float *p, size_t n, const float *g, const char *what)
{
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        float old = p[i], eps = 1e-2f;
        p[i] = old + eps;
        float hi = p[i];
        double Lp = fd_loss(x);
        p[i] = old - eps;
        float lo = p[i];
        double Lm = fd_loss(x);
        p[i] = old;
        double fd = (Lp - Lm) / ((double)hi - lo);
        num += (g[i] - fd) * (g[i] - fd);
        den += fd * fd;
    }
    /* test_ops.c's FD_TOL: a difference quotient is no rounding bound; its
     * truncation and the losses' rounding stay well below 2e-3, a wrong
     * term of a few percent does not */
    double e = sqrt(num / (den > 1e-30 ? den : 1e-30));
    cr_expect_lt(e, 2e-3, "%s: two-phase gradient vs finite differences: rel err %g", what, e);
}

Test(depth_cpu, two_phase_gradients_match_finite_differences)
{
    int j[3] = {0, 1, 2}, C = 3, k = 2, N = 5, d = 8;
    chunk_case t;
    make_case(&t, C, k, j, N, d);
    size_t nd = (size_t)N * d;
    int ns = k + t.jmax;
    float *h[3], *alpha[3], *lse[3], *cdot[3], *R[3], *rs[8], *dsrc[8], *dw[3], *dg[3];
    for (int c = 0; c < C; c++) {
        h[c] = zeros(nd), alpha[c] = zeros((size_t)N * t.n[c]), lse[c] = zeros(N);
        cdot[c] = zeros(N), R[c] = rnd(nd, -1, 1), dw[c] = zeros(d), dg[c] = zeros(d);
        memcpy(t.dh[c], R[c], nd * sizeof(float)); /* dL/dh_c = R_c */
    }
    for (int s = 0; s < ns; s++)
        rs[s] = zeros(N), dsrc[s] = zeros(nd);
    fd_ctx x = {&t, h, alpha, lse, rs, R};
    fd_loss(&x);
    for (int c = C - 1; c >= 0; c--) {
        ar_depth_intra own = intra_args(&t, c, alpha[c], lse[c], rs);
        be->depth_bwd_intra(&own, dsrc + k, dw[c], dg[c], cdot[c], t.dh[c], h[c], NULL);
    }
    ar_depth_inter shared = inter_args(&t, alpha, lse, rs);
    be->depth_bwd_inter(&shared, dsrc, dw, dg, (const float *const *)t.dh, (const float *const *)cdot, 0);
    char what[64];
    for (int s = 0; s < ns; s++) {
        snprintf(what, sizeof what, "source %d", s);
        fd_one(&x, t.src[s], nd, dsrc[s], what);
    }
    for (int c = 0; c < C; c++) {
        snprintf(what, sizeof what, "query of mixer %d", c);
        fd_one(&x, t.w[c], d, dw[c], what);
        snprintf(what, sizeof what, "gain of mixer %d", c);
        fd_one(&x, t.g[c], d, dg[c], what);
    }
    for (int c = 0; c < C; c++)
        free(h[c]), free(alpha[c]), free(lse[c]), free(cdot[c]), free(R[c]), free(dw[c]), free(dg[c]);
    for (int s = 0; s < ns; s++)
        free(rs[s]), free(dsrc[s]);
    free_case(&t);
}

/* The backward's parameter reductions do not depend on the thread count:
 * bit for bit, since each sums fixed chunks of RED_CHUNK tokens and adds
 * them in order, and every token's row is the same code whoever runs it. */
Test(depth_cpu, backward_bitwise_independent_of_threads)
{
    int j[3] = {0, 1, 1}, C = 3, k = 4, N = 700, d = 64;
    chunk_case t;
    make_case(&t, C, k, j, N, d);
    size_t nd = (size_t)N * d;
    float *out[2][3 * 2 + 6];
    for (int run = 0; run < 2; run++) {
        be->set_threads(run ? 1 : 2);
        float *h[3], *alpha[3], *lse[3], *cdot[3], *rs[6], *dsrc[6], *dw[3], *dg[3];
        for (int c = 0; c < C; c++) {
            h[c] = zeros(nd), alpha[c] = zeros((size_t)N * t.n[c]), lse[c] = zeros(N);
            cdot[c] = zeros(N), dw[c] = zeros(d), dg[c] = zeros(d);
        }
        for (int s = 0; s < k + 1; s++)
            rs[s] = zeros(N), dsrc[s] = zeros(nd);
        two_phase_fwd(&t, h, alpha, lse, rs);
        for (int c = C - 1; c >= 0; c--) {
            ar_depth_intra own = intra_args(&t, c, alpha[c], lse[c], rs);
            be->depth_bwd_intra(&own, dsrc + k, dw[c], dg[c], cdot[c], t.dh[c], h[c], NULL);
        }
        ar_depth_inter shared = inter_args(&t, alpha, lse, rs);
        be->depth_bwd_inter(&shared, dsrc, dw, dg, (const float *const *)t.dh, (const float *const *)cdot,
                            0);
        for (int c = 0; c < C; c++) {
            out[run][2 * c] = dw[c], out[run][2 * c + 1] = dg[c];
            free(h[c]), free(alpha[c]), free(lse[c]), free(cdot[c]);
        }
        for (int s = 0; s < k + 1; s++) {
            out[run][6 + s] = dsrc[s];
            free(rs[s]);
        }
    }
    be->set_threads(2);
    for (int i = 0; i < 6; i++) {
        cr_expect(memcmp(out[0][i], out[1][i], d * sizeof(float)) == 0,
                  "parameter gradient %d differs between 1 and 2 threads", i);
        free(out[0][i]), free(out[1][i]);
    }
    for (int s = 0; s < k + 1; s++) {
        cr_expect(memcmp(out[0][6 + s], out[1][6 + s], nd * sizeof(float)) == 0,
                  "dsrc[%d] differs between 1 and 2 threads", s);
        free(out[0][6 + s]), free(out[1][6 + s]);
    }
    free_case(&t);
}

/* overwrite = 1 gives what += onto zeroed buffers gives, whatever was there:
 * bit for bit, the same code adding the same terms, onto 0 or not at all */
Test(depth_cpu, backward_overwrite_equals_accumulate_onto_zero)
{
    int j[1] = {0}, C = 1, k = 5, N = 300, d = 40;
    chunk_case t;
    make_case(&t, C, k, j, N, d);
    size_t nd = (size_t)N * d;
    float *h[1] = {zeros(nd)}, *alpha[1] = {zeros((size_t)N * k)}, *lse[1] = {zeros(N)};
    float *cdot[1] = {zeros(N)}, *rs[5], *acc[5], *ovw[5];
    float *dw[1] = {zeros(d)}, *dg[1] = {zeros(d)}, *dw2[1] = {zeros(d)}, *dg2[1] = {zeros(d)};
    for (int s = 0; s < k; s++)
        rs[s] = zeros(N), acc[s] = zeros(nd), ovw[s] = rnd(nd, -5, 5);
    two_phase_fwd(&t, h, alpha, lse, rs);
    ar_depth_intra own = intra_args(&t, 0, alpha[0], lse[0], rs);
    own.n = k, own.rsi = NULL; /* every source shared: none of its own */
    be->depth_bwd_intra(&own, NULL, dw[0], dg[0], cdot[0], t.dh[0], h[0], NULL);
    const float *const *cd = (const float *const *)cdot;
    ar_depth_inter shared = inter_args(&t, alpha, lse, rs);
    be->depth_bwd_inter(&shared, acc, dw, dg, (const float *const *)t.dh, cd, 0);
    be->depth_bwd_inter(&shared, ovw, dw2, dg2, (const float *const *)t.dh, cd, 1);
    for (int s = 0; s < k; s++) {
        cr_expect(memcmp(acc[s], ovw[s], nd * sizeof(float)) == 0, "dsrc[%d]: overwrite != accumulate", s);
        free(rs[s]), free(acc[s]), free(ovw[s]);
    }
    cr_expect(memcmp(dw[0], dw2[0], d * sizeof(float)) == 0, "dw differs");
    free(h[0]), free(alpha[0]), free(lse[0]), free(cdot[0]), free(dw[0]), free(dg[0]), free(dw2[0]), free(dg2[0]);
    free_case(&t);
}

/* The two variants of check_fused_norm differ only in xh = h r, the
 * normalised row that the norm's backward starts from: h r rounded, or
 * xn / g rounded from xn = h r g (3 u), or, where g = 0, r sum_s alpha_s x_s
 * from the saved weights, whose way from the same logits (ew: mixer_bound's
 * eps less the logits' error) and sums (gamma(n + 2) each) differ from h's.  From there the same code runs on both, each within its
 * rounding of exact arithmetic on its inputs:
 * - dh_k = r (g_k dxn_k - xh_k m), m = sum_j g_j dxn_j xh_j / d (S its
 *   terms' magnitudes): 2 gamma(d + 6) (r |g_k dxn_k| + r |xh_k| S / d),
 *   plus the change of xh through m and its own term;
 * - cdot = dh.h (d terms; dh.xh / r fused), dng (N rows, +=): their terms'
 *   changes and 2 gamma(length + 2) of their magnitudes;
 * - the intra op from dh and cdot: dl_t = alpha_t (dh.x_t - cdot) moves by
 *   alpha_t (their changes) and 2 gamma(d + 3) of L_t = alpha_t (W_t +
 *   |cdot|), then dintra, dw, dg as in mixer_bound;
 * - every output's final += (or =) adds 2 u of its value. */
static void fused_norm_bound(const chunk_case *t, const float *h, const float *alpha, float *const *rs,
                             const float *ng, const float *nr, const float *dxn, double *bdh, double *bcd,
                             double *bdng, double **bout, double *bdw, double *bdg)
{
    int N = t->N, d = t->d, n = t->n[0], k = t->k, j = n - k;
    const float *w = t->w[0], *g = t->g[0];
    double dxh[d], mdh[d], Pm, ew;
    for (int i = 0; i < N; i++) {
        size_t o = (size_t)i * d;
        const float *al = alpha + (size_t)i * n;
        double r = nr[i], S = 0, Sd = 0, Mc = 0, Bc = 0;
        Pm = 0;
        for (int s = 0; s < n; s++) {
            double p = 0;
            for (int q = 0; q < d; q++)
                p += fabs((double)w[q] * g[q] * t->src[s][o + q]);
            Pm = fmax(Pm, p * rs[s][i]);
        }
        ew = 8 * U * (2 * Pm + log(n) + 1) + 4 * U_EXP + tu_gamma(n + 4);
        for (int q = 0; q < d; q++) {
            double xh = fabs((double)h[o + q]) * r;
            if (ng[q] != 0.0f)
                dxh[q] = 4 * U * xh;
            else {
                double m = 0;
                for (int s = 0; s < n; s++)
                    m += al[s] * fabs(t->src[s][o + q]);
                dxh[q] = r * (2 * ew + 2 * tu_gamma(n + 2) + 2 * U) * m;
            }
            S += fabs((double)ng[q] * dxn[o + q]) * xh;
            Sd += fabs((double)ng[q] * dxn[o + q]) * dxh[q];
        }
        for (int q = 0; q < d; q++) {
            double xh = fabs((double)h[o + q]) * r;
            mdh[q] = r * fabs((double)ng[q] * dxn[o + q]) + r * xh * S / d;
            bdh[o + q] = 2 * tu_gamma(d + 6) * mdh[q] + r * dxh[q] * S / d + r * xh * Sd / d;
            Mc += mdh[q] * fabs(h[o + q]);
            Bc += 2 * tu_gamma(d + 2) * mdh[q] * fabs(h[o + q]) + bdh[o + q] * fabs(h[o + q]) + mdh[q] * dxh[q] / r;
            bdng[q] += 2 * tu_gamma(N + 2) * fabs(dxn[o + q]) * xh + fabs(dxn[o + q]) * dxh[q];
        }
        bcd[i] = Bc;
        for (int s = 0; s < j; s++) {
            const float *x = t->src[k + s] + o;
            double a = al[k + s], rt = rs[k + s][i], W = 0, Bw = 0, Ux = 0;
            for (int q = 0; q < d; q++) {
                W += mdh[q] * fabs(x[q]);
                Bw += bdh[o + q] * fabs(x[q]);
                Ux += fabs((double)w[q] * g[q] * x[q]);
            }
            double L = a * (W + Mc), dL = a * (Bw + Bc) + 2 * tu_gamma(d + 3) * L;
            for (int q = 0; q < d; q++) {
                double tm = rt * fabs((double)w[q] * g[q]) + Ux * rt * rt * rt * fabs(x[q]) / d;
                bout[s][o + q] = a * bdh[o + q] + dL * tm + 2 * tu_gamma(d + 10) * (a * mdh[q] + L * tm);
                double pw = dL * rt * fabs(x[q]) + 2 * tu_gamma((double)N * j + 4) * L * rt * fabs(x[q]);
                bdw[q] += fabs(g[q]) * pw;
                bdg[q] += fabs(w[q]) * pw;
            }
        }
    }
}

/* The intra op with the sublayer norm's backward fused (dxn given, h not:
 * rebuilt from xn, or from the sources where the gain is 0) against
 * rmsnorm_bwd at the true h followed by the plain intra op: dh, cdot,
 * dintra, dw, dg and the norm's gain gradient.  zero: gain columns set to
 * 0; d = 50 also takes the rows' scalar tails and the unstreamed store. */
static void check_fused_norm(int N, int d, int zero)
{
    int j[1] = {2}, C = 1, k = 3;
    chunk_case t;
    make_case(&t, C, k, j, N, d);
    size_t nd = (size_t)N * d;
    float *h = zeros(nd), *alpha = zeros((size_t)N * t.n[0]), *lse = zeros(N), *rs[5];
    for (int s = 0; s < k + 2; s++)
        rs[s] = zeros(N);
    two_phase_fwd(&t, &h, &alpha, &lse, rs);
    float *dxn = rnd(nd, -1, 1), *ng = rnd(d, 0.5f, 1.5f), *xn = zeros(nd), *nr = zeros(N);
    if (zero)
        for (int q = 1; q < d; q += 7)
            ng[q] = 0.0f;
    be->rmsnorm_fwd(xn, nr, h, ng, N, d);
    float *dh[2], *out[2][2], *cd[2], *dw[2], *dg[2], *dng[2];
    uint64_t seed0 = seed;
    for (int v = 0; v < 2; v++) {
        dh[v] = rnd(nd, -9, 9); /* garbage: dh is (=) */
        seed = seed0 + 1; /* the same starting gradients for both */
        cd[v] = zeros(N), dw[v] = rnd(d, -1, 1), dg[v] = rnd(d, -1, 1), dng[v] = rnd(d, -1, 1);
        for (int q = 0; q < 2; q++)
            out[v][q] = rnd(nd, -1, 1);
        if (v == 0)
            be->rmsnorm_bwd(dh[v], dng[v], dxn, h, ng, nr, 1, N, d);
        ar_depth_intra own = intra_args(&t, 0, alpha, lse, rs);
        ar_norm_grad norm = {ng, dng[v], dxn, xn, nr};
        be->depth_bwd_intra(&own, out[v], dw[v], dg[v], cd[v], dh[v], v ? NULL : h, v ? &norm : NULL);
    }
    double *bdh = dzeros(nd), *bcd = dzeros(N), *bdng = dzeros(d), *bdw = dzeros(d), *bdg = dzeros(d);
    double *bout[2] = {dzeros(nd), dzeros(nd)};
    fused_norm_bound(&t, h, alpha, rs, ng, nr, dxn, bdh, bcd, bdng, bout, bdw, bdg);
    for (int q = 0; q < d; q++) {
        bdng[q] += 2 * U * fabs(dng[0][q]);
        bdw[q] += 2 * U * fabs(dw[0][q]);
        bdg[q] += 2 * U * fabs(dg[0][q]);
    }
    for (size_t i = 0; i < nd; i++)
        bout[0][i] += 2 * U * fabs(out[0][0][i]), bout[1][i] += 2 * U * fabs(out[0][1][i]);
    check_pair("fused dh differs: d", d, dh[1], dh[0], bdh, nd);
    check_pair("fused dw differs: d", d, dw[1], dw[0], bdw, d);
    check_pair("fused dg differs: d", d, dg[1], dg[0], bdg, d);
    check_pair("fused norm gain gradient differs: d", d, dng[1], dng[0], bdng, d);
    check_pair("fused dintra[0] differs: d", d, out[1][0], out[0][0], bout[0], nd);
    check_pair("fused dintra[1] differs: d", d, out[1][1], out[0][1], bout[1], nd);
    /* dh.h is nearly 0 (dh is orthogonal to h but for eps): held to the
     * rounding of the sums behind it */
    check_pair("fused cdot differs: d", d, cd[1], cd[0], bcd, N);
    free(bdh), free(bcd), free(bdng), free(bdw), free(bdg), free(bout[0]), free(bout[1]);
    for (int v = 0; v < 2; v++) {
        free(dh[v]), free(cd[v]), free(dw[v]), free(dg[v]), free(dng[v]);
        for (int q = 0; q < 2; q++)
            free(out[v][q]);
    }
    for (int s = 0; s < k + 2; s++)
        free(rs[s]);
    free(h), free(alpha), free(lse), free(dxn), free(ng), free(xn), free(nr);
    free_case(&t);
}

Test(depth_cpu, intra_fused_norm_backward)
{
    check_fused_norm(301, 48, 0);
    check_fused_norm(133, 50, 0);
    check_fused_norm(129, 64, 1);
    check_fused_norm(65, 50, 1);
}

/* A mixer of one source has no logit gradient: h = x, so dh.x - dh.h is 0
 * in exact arithmetic, and the ops make it 0 exactly (with the fused norm,
 * h rebuilt from xn is x only to rounding): dw and dg stay as they were
 * and the source gets dh itself. */
Test(depth_cpu, one_source_no_logit_gradient)
{
    int N = 67, d = 32;
    size_t nd = (size_t)N * d;
    float *x = rnd(nd, -2, 2), *al = zeros(N), *lse = zeros(N), *rsx = zeros(N), *cd = zeros(N);
    float *w = rnd(d, -1, 1), *g = rnd(d, 0.5f, 1.5f), *ng = rnd(d, 0.5f, 1.5f);
    float *xn = zeros(nd), *nr = zeros(N), *dxn = rnd(nd, -1, 1), *dng = zeros(d);
    float *dh = zeros(nd), *dx = rnd(nd, -1, 1), *dx0 = alloc64(nd);
    float *dw = rnd(d, -1, 1), *dg = rnd(d, -1, 1), *dw0 = alloc64(d), *dg0 = alloc64(d);
    memcpy(dx0, dx, nd * sizeof(float)), memcpy(dw0, dw, d * sizeof(float)), memcpy(dg0, dg, d * sizeof(float));
    be->rmsnorm_fwd(xn, nr, x, ng, N, d);
    for (int i = 0; i < N; i++) {
        al[i] = 1.0f;
        double ss = 0, ux = 0;
        for (int q = 0; q < d; q++)
            ss += (double)x[(size_t)i * d + q] * x[(size_t)i * d + q],
                ux += (double)w[q] * g[q] * x[(size_t)i * d + q];
        rsx[i] = (float)(1.0 / sqrt(ss / d + AR_RMS_EPS));
        lse[i] = (float)(rsx[i] * ux); /* the one logit */
    }
    const float *src[1] = {x};
    float *dsrc[1] = {dx};
    /* own source (k = 0): the intra op */
    float *rsm[1] = {rsx};
    ar_depth_intra own = {.n = 1, .k = 0, .src = src, .rsi = rsm, .w = w, .g = g, .alpha = al, .lse = lse,
                          .N = N, .d = d};
    ar_norm_grad norm = {ng, dng, dxn, xn, nr};
    be->depth_bwd_intra(&own, dsrc, dw, dg, cd, dh, NULL, &norm);
    cr_expect(memcmp(dw, dw0, d * sizeof(float)) == 0, "intra: dw changed");
    cr_expect(memcmp(dg, dg0, d * sizeof(float)) == 0, "intra: dg changed");
    for (size_t i = 0; i < nd; i++)
        cr_assert(dx[i] == dx0[i] + dh[i], "intra: dx[%zu] is not dx + dh", i);
    /* shared source (k = 1): the deferred op, with the cdot just taken */
    memcpy(dx, dx0, nd * sizeof(float));
    const float *dhl[1] = {dh}, *cdl[1] = {cd}, *wl[1] = {w}, *gl[1] = {g};
    float *dwl[1] = {dw}, *dgl[1] = {dg}, *all[1] = {al}, *lsel[1] = {lse};
    int n1 = 1;
    ar_depth_inter shared = {.C = 1, .k = 1, .n = &n1, .src = src, .rs = rsm, .w = wl, .g = gl,
                             .alpha = all, .lse = lsel, .N = N, .d = d};
    be->depth_bwd_inter(&shared, dsrc, dwl, dgl, dhl, cdl, 0);
    cr_expect(memcmp(dw, dw0, d * sizeof(float)) == 0, "inter: dw changed");
    cr_expect(memcmp(dg, dg0, d * sizeof(float)) == 0, "inter: dg changed");
    for (size_t i = 0; i < nd; i++)
        cr_assert(dx[i] == dx0[i] + dh[i], "inter: dx[%zu] is not dx + dh", i);
    float *fr[] = {x, al, lse, rsx, cd, w, g, ng, xn, nr, dxn, dng, dh, dx, dx0, dw, dg, dw0, dg0};
    for (size_t i = 0; i < sizeof fr / sizeof *fr; i++)
        free(fr[i]);
}

/* Phase 2 fused with the sublayer's RMSNorm equals phase 2, then
 * rmsnorm_fwd of its h; h itself is left as phase 1 wrote it. */
Test(depth_cpu, merge_fused_with_rmsnorm_equals_merge_then_norm)
{
    int j[1] = {2}, C = 1, k = 3, N = 301, d = 56;
    chunk_case t;
    make_case(&t, C, k, j, N, d);
    size_t nd = (size_t)N * d;
    float *o[1] = {zeros(nd)}, *alpha[2], *lse[2], *rs[5];
    for (int s = 0; s < k + 2; s++)
        rs[s] = zeros(N);
    for (int v = 0; v < 2; v++)
        alpha[v] = zeros((size_t)N * t.n[0]), lse[v] = zeros(N);
    ar_depth_inter shared = inter_args(&t, alpha, lse, rs);
    be->depth_fwd_inter(&shared, o, NULL);
    memcpy(alpha[1], alpha[0], (size_t)N * t.n[0] * sizeof(float));
    memcpy(lse[1], lse[0], N * sizeof(float));
    float *h = malloc(nd * sizeof(float)), *ho = malloc(nd * sizeof(float));
    memcpy(h, o[0], nd * sizeof(float));
    memcpy(ho, o[0], nd * sizeof(float));
    float *ng = rnd(d, 0.5f, 1.5f), *xa = zeros(nd), *xb = rnd(nd, -9, 9), *ra = zeros(N), *rb = zeros(N);
    ar_depth_intra own[2] = {intra_args(&t, 0, alpha[0], lse[0], rs), intra_args(&t, 0, alpha[1], lse[1], rs)};
    be->depth_fwd_merge(&own[0], h, NULL);
    be->rmsnorm_fwd(xa, ra, h, ng, N, d);
    ar_norm_out norm = {ng, xb, rb};
    be->depth_fwd_merge(&own[1], o[0], &norm);
    /* the same bits: phase 2 builds the row by the same mix into its own
     * buffer, and normalises it by the row function rmsnorm_fwd runs
     * (rmsnorm_row.h) */
    cr_expect(memcmp(xb, xa, nd * sizeof(float)) == 0, "fused xn differs from merge + rmsnorm_fwd");
    cr_expect(memcmp(rb, ra, N * sizeof(float)) == 0, "fused rstd differs");
    cr_expect(memcmp(alpha[0], alpha[1], (size_t)N * t.n[0] * sizeof(float)) == 0, "weights differ");
    cr_expect(memcmp(lse[0], lse[1], N * sizeof(float)) == 0, "lse differs");
    cr_expect(memcmp(o[0], ho, nd * sizeof(float)) == 0, "fused merge wrote h");
    cr_expect_gt(rel(h, ho, nd), 1e-3, "the intra sources did not change h (degenerate case)");
    for (int s = 0; s < k + 2; s++)
        free(rs[s]);
    for (int v = 0; v < 2; v++)
        free(alpha[v]), free(lse[v]);
    free(o[0]), free(h), free(ho), free(ng), free(xa), free(xb), free(ra), free(rb);
    free_case(&t);
}

/* Phase 1 fused with mixer 0's RMSNorm (a mixer with no sources of its
 * own): its RMSNorm equals rmsnorm_fwd of the unfused o[0], o[0] is not
 * written, and the other mixers' outputs are unchanged. */
Test(depth_cpu, inter_fused_with_rmsnorm_equals_inter_then_norm)
{
    int j[3] = {0, 1, 2}, C = 3, k = 4, N = 263, d = 40;
    chunk_case t;
    make_case(&t, C, k, j, N, d);
    size_t nd = (size_t)N * d;
    float *o[2][3], *alpha[2][3], *lse[2][3], *rs[2][6];
    for (int v = 0; v < 2; v++) {
        for (int c = 0; c < C; c++)
            o[v][c] = rnd(nd, -3, 3), alpha[v][c] = zeros((size_t)N * t.n[c]), lse[v][c] = zeros(N);
        for (int s = 0; s < k + 2; s++)
            rs[v][s] = zeros(N);
    }
    float *o0 = malloc(nd * sizeof(float));
    memcpy(o0, o[1][0], nd * sizeof(float));
    float *ng = rnd(d, 0.5f, 1.5f), *xa = zeros(nd), *xb = zeros(nd), *ra = zeros(N), *rb = zeros(N);
    ar_norm_out norm = {ng, xb, rb};
    for (int v = 0; v < 2; v++) {
        ar_depth_inter shared = inter_args(&t, alpha[v], lse[v], rs[v]);
        be->depth_fwd_inter(&shared, o[v], v ? &norm : NULL);
    }
    be->rmsnorm_fwd(xa, ra, o[0][0], ng, N, d);
    /* the same bits: mixer 0's row is the same mix (each output's sums
     * in its own registers, whatever the others), normalised by the row
     * function rmsnorm_fwd runs (rmsnorm_row.h) */
    cr_expect(memcmp(xb, xa, nd * sizeof(float)) == 0, "fused xn differs from phase 1 + rmsnorm_fwd");
    cr_expect(memcmp(rb, ra, N * sizeof(float)) == 0, "fused rstd differs");
    cr_expect(memcmp(o[1][0], o0, nd * sizeof(float)) == 0, "fused phase 1 wrote o[0]");
    for (int c = 1; c < C; c++)
        cr_expect(memcmp(o[0][c], o[1][c], nd * sizeof(float)) == 0, "o[%d] differs", c);
    for (int c = 0; c < C; c++) {
        cr_expect(memcmp(alpha[0][c], alpha[1][c], (size_t)N * t.n[c] * sizeof(float)) == 0,
                  "logits of mixer %d differ", c);
        cr_expect(memcmp(lse[0][c], lse[1][c], N * sizeof(float)) == 0, "lse of mixer %d differs", c);
    }
    for (int v = 0; v < 2; v++) {
        for (int c = 0; c < C; c++)
            free(o[v][c]), free(alpha[v][c]), free(lse[v][c]);
        for (int s = 0; s < k + 2; s++)
            free(rs[v][s]);
    }
    free(o0), free(ng), free(xa), free(xb), free(ra), free(rb);
    free_case(&t);
}

/* Phase 1 with some o[c] NULL writes the others, the logits, lse and rstd
 * bit for bit as with every o given; and with one shared source every o is
 * that source exactly (the schedule then merges from the source instead).
 * The run with every o given has them one float off 64-byte alignment, so
 * it stores them plainly, the other by streaming stores: the same bits. */
Test(depth_cpu, inter_skips_null_outputs)
{
    for (int k = 3; k >= 1; k -= 2) {
        int j[4] = {1, 1, 2, 3}, C = 4, N = 157, d = 48;
        chunk_case t;
        make_case(&t, C, k, j, N, d);
        size_t nd = (size_t)N * d;
        float *o[2][4], *alpha[2][4], *lse[2][4], *rs[2][3], *keep[4];
        float *obase[4];
        for (int v = 0; v < 2; v++) {
            for (int c = 0; c < C; c++) {
                o[v][c] = v ? rnd(nd, -3, 3) : (obase[c] = rnd(nd + 1, -3, 3)) + 1;
                alpha[v][c] = zeros((size_t)N * t.n[c]), lse[v][c] = zeros(N);
            }
            for (int s = 0; s < k; s++)
                rs[v][s] = zeros(N);
        }
        float *on[4] = {o[1][0], NULL, o[1][2], NULL};
        for (int c = 0; c < C; c++) {
            keep[c] = malloc(nd * sizeof(float));
            memcpy(keep[c], o[1][c], nd * sizeof(float));
        }
        for (int v = 0; v < 2; v++) {
            ar_depth_inter shared = inter_args(&t, alpha[v], lse[v], rs[v]);
            be->depth_fwd_inter(&shared, v ? on : o[0], NULL);
        }
        for (int c = 0; c < C; c++) {
            if (on[c])
                cr_expect(memcmp(o[0][c], o[1][c], nd * sizeof(float)) == 0, "k %d: o[%d] differs", k, c);
            else
                cr_expect(memcmp(o[1][c], keep[c], nd * sizeof(float)) == 0,
                          "k %d: o[%d] was written though NULL", k, c);
            cr_expect(memcmp(alpha[0][c], alpha[1][c], (size_t)N * t.n[c] * sizeof(float)) == 0,
                      "k %d: logits of mixer %d differ", k, c);
            cr_expect(memcmp(lse[0][c], lse[1][c], N * sizeof(float)) == 0, "k %d: lse[%d] differs", k, c);
            if (k == 1)
                cr_expect(memcmp(o[0][c], t.src[0], nd * sizeof(float)) == 0,
                          "one shared source: o[%d] is not the source exactly", c);
        }
        for (int s = 0; s < k; s++)
            cr_expect(memcmp(rs[0][s], rs[1][s], N * sizeof(float)) == 0, "k %d: rs[%d] differs", k, s);
        for (int v = 0; v < 2; v++) {
            for (int c = 0; c < C; c++)
                free(v ? o[v][c] : obase[c]), free(alpha[v][c]), free(lse[v][c]);
            for (int s = 0; s < k; s++)
                free(rs[v][s]);
        }
        for (int c = 0; c < C; c++)
            free(keep[c]);
        free_case(&t);
    }
}

/* weights_unread: both phases leave alpha as it was (NaN here), and h,
 * lse and the rstds are those of the pass that writes alpha, bit for bit
 * (the same code on the same values); softmax and sigmoid scores, a tile
 * and a ragged last one, intra sources 0-3. */
Test(depth_cpu, unread_weights_are_left_alone)
{
    for (int sig = 0; sig < 2; sig++) {
        int j[4] = {0, 1, 2, 3}, C = 4, k = 3, N = 37, d = 40;
        chunk_case t;
        make_case(&t, C, k, j, N, d);
        size_t nd = (size_t)N * d;
        float *h[2][4], *alpha[2][4], *lse[2][4], *rs[2][6];
        for (int v = 0; v < 2; v++) {
            for (int c = 0; c < C; c++) {
                h[v][c] = zeros(nd), alpha[v][c] = zeros((size_t)N * t.n[c]), lse[v][c] = zeros(N);
                for (size_t i = 0; i < (size_t)N * t.n[c]; i++)
                    alpha[v][c][i] = NAN;
            }
            for (int s = 0; s < k + t.jmax; s++)
                rs[v][s] = zeros(N);
            ar_depth_inter shared = inter_args(&t, alpha[v], lse[v], rs[v]);
            shared.sigmoid = sig, shared.weights_unread = v;
            be->depth_fwd_inter(&shared, h[v], NULL);
            for (int c = 0; c < C; c++) {
                ar_depth_intra own = intra_args(&t, c, alpha[v][c], lse[v][c], rs[v]);
                own.sigmoid = sig, own.weights_unread = v;
                be->depth_fwd_merge(&own, h[v][c], NULL);
            }
        }
        for (int c = 0; c < C; c++) {
            cr_expect(memcmp(h[0][c], h[1][c], nd * sizeof(float)) == 0, "sigmoid %d: h[%d] differs", sig, c);
            cr_expect(memcmp(lse[0][c], lse[1][c], N * sizeof(float)) == 0, "sigmoid %d: lse[%d] differs", sig,
                      c);
            size_t written = 0, na = (size_t)N * t.n[c];
            for (size_t i = 0; i < na; i++)
                written += !isnan(alpha[1][c][i]);
            cr_expect_eq(written, 0, "sigmoid %d: %zu of mixer %d's %zu weights written", sig, written, c, na);
            for (size_t i = 0; i < na; i++)
                cr_assert(isfinite(alpha[0][c][i]), "sigmoid %d: mixer %d's weight %zu not written", sig, c, i);
        }
        for (int s = 0; s < k + t.jmax; s++)
            cr_expect(memcmp(rs[0][s], rs[1][s], N * sizeof(float)) == 0, "sigmoid %d: rs[%d] differs", sig, s);
        for (int v = 0; v < 2; v++) {
            for (int c = 0; c < C; c++)
                free(h[v][c]), free(alpha[v][c]), free(lse[v][c]);
            for (int s = 0; s < k + t.jmax; s++)
                free(rs[v][s]);
        }
        free_case(&t);
    }
}

/* ---- model level: the chunk size changes the schedule, not the result ---- */

/* A 4-layer model (L = 8, vocabulary 32, T = 16, up to 3 sequences) of the
 * given kind and width, with ar_depth_chunk = chunk at its creation, and
 * nonzero queries drawn from seed, so the weights are not uniform. */
static ar_model *tiny_depth_model(ar_res_kind kind, int block_size, int d, int chunk, uint64_t seed)
{
    ar_depth_chunk = chunk;
    ar_model_cfg c = {0};
    c.vocab = 32, c.vocab_bytes = 0, c.d_model = d, c.n_layer = 4, c.n_head = 2, c.d_ff = 40;
    c.seq_len = 16;
    c.residual.kind = kind;
    c.residual.block_size = block_size;
    ar_model *m;
    ar_err e;
    cr_assert_eq(ar_model_create(&m, &c, be, 3, &e), 0, "%s", e.msg);
    ar_model_init(m, seed);
    for (int i = 0; i < m->pt.n; i++)
        if (strstr(m->pt.p[i].name, "_res.query"))
            tu_fill_uniform(ar_model_param(m, i), m->pt.p[i].numel, -0.5f, 0.5f, seed * 9 + i);
    return m;
}

/* The largest logit's magnitude bound of m's depth mixers:
 * |z| = rstd |sum_j w_j g_j x_j| <= sqrt(d) sum_j |w_j g_j|, since
 * |x_j| rstd <= sqrt(d) for every j of a row. */
static double logit_bound(ar_model *m)
{
    double zm = 0;
    for (int i = 0; i < m->pt.n; i++) {
        const char *nm = m->pt.p[i].name, *q = strstr(nm, "_res.query");
        if (!q)
            continue;
        char gn[128];
        snprintf(gn, sizeof gn, "%.*s_res.norm.weight", (int)(q - nm), nm);
        int gi = ar_params_find(&m->pt, gn);
        const float *w = ar_model_param(m, i), *g = gi >= 0 ? ar_model_param(m, gi) : NULL;
        double s = 0;
        for (int j = 0; j < m->d; j++)
            s += fabs((double)w[j] * (g ? g[j] : 1.0f));
        zm = fmax(zm, sqrt((double)m->d) * s);
    }
    return zm;
}

static void model_run(ar_res_kind kind, int block_size, int chunk, double *loss, float **grads,
                      size_t *ng, double *zm, int *L, int *N)
{
    ar_model *m = tiny_depth_model(kind, block_size, 24, chunk, 11);
    *N = 3 * m->T, *L = m->L, *zm = logit_bound(m);
    int32_t in[48], tg[48];
    for (int i = 0; i < *N; i++)
        in[i] = (i * 7 + 3) % 32, tg[i] = (i * 5 + 1) % 32;
    ar_model_zero_grad(m);
    *loss = ar_model_forward(m, in, tg, 3, NULL);
    ar_model_backward(m, 1.0f / *N);
    *ng = m->pt.total;
    *grads = malloc(*ng * sizeof(float));
    memcpy(*grads, m->grads, *ng * sizeof(float));
    ar_model_free(m);
    ar_depth_chunk = 4;
}

/* Chunk c against chunk 1.  The chunk size regroups each mixer's softmax
 * (phase 1 over the shared sources, phase 2 merging its own) and its sums,
 * not its logits: each is the same dot product in both (dots_n keeps every
 * mixer's sum in a register of its own, in the same order).  So in either
 * schedule a mixer's weights are within eps = 8 u (2 zm + log n + 1) +
 * 4 U_EXP + gamma(n + 4) of the softmax of those logits (mixer_bound's
 * count, with the logits' magnitude zm in place of their terms'), its h
 * within eps + gamma(n + 2) of sum_s alpha_s |x_s|: the two differ by at
 * most delta = 2 (eps + gamma(n + 2)) of it, n <= L + 1 sources.  The
 * backward regroups its sums over a mixer's N tokens and n sources too:
 * 2 gamma(N n + 4) more.  These reach the loss and the gradients through
 * the L RMSNorm'd sublayers (a change of scale stops at each norm); we let
 * each of the L + 1 mixers pass its change on in full, a gain of L + 1.  A
 * misrouted source or gradient moves them by 1e-3 and more. */
static void chunk_invariance(ar_res_kind kind, int S)
{
    double l1, l, zm;
    float *g1, *g;
    size_t n;
    int L, N;
    model_run(kind, S, 1, &l1, &g1, &n, &zm, &L, &N);
    double eps = 8 * U * (2 * zm + log(L + 1) + 1) + 4 * U_EXP + tu_gamma(L + 5);
    double delta = 2 * (eps + tu_gamma(L + 3)), dg = 2 * tu_gamma((double)N * (L + 1) + 4);
    double tl = (L + 1) * delta * fabs(l1), tg = (L + 1) * (delta + dg);
    int chunks[] = {2, 3, 4, 5, 9};
    for (size_t i = 0; i < sizeof chunks / sizeof *chunks; i++) {
        model_run(kind, S, chunks[i], &l, &g, &n, &zm, &L, &N);
        cr_expect(fabs(l - l1) <= tl, "chunk %d: loss %.9g vs %.9g (bound %.3g)", chunks[i], l, l1, tl);
        double e = tu_rel_err(g, g1, n);
        cr_expect(e <= tg, "chunk %d: gradients differ from chunk 1 by %g (bound %.3g)", chunks[i], e, tg);
        free(g);
    }
    free(g1);
}

Test(depth_cpu, full_result_independent_of_chunk_size) { chunk_invariance(AR_RES_FULL, 0); }
Test(depth_cpu, block2_result_independent_of_chunk_size) { chunk_invariance(AR_RES_BLOCK, 2); }
Test(depth_cpu, block3_result_independent_of_chunk_size) { chunk_invariance(AR_RES_BLOCK, 3); }

/* A scheme asked for h_l itself (no norm to fuse) gives what the fused
 * forward normalised: for every sublayer, RMSNorm(input_fwd(l, NULL))
 * equals the xn the model's forward got.  Re-run after that forward (the
 * P buffers then hold every source), it covers the unfused phase 1 and
 * phase 2 and, in each kind's first chunk (one shared source, no o
 * written), the copy of that source into h. */
static void unfused_inputs(ar_res_kind kind, int S)
{
    ar_model *m = tiny_depth_model(kind, S, 32, 4, 5);
    int N = 3 * m->T, d = m->d;
    int32_t in[48], tg[48];
    for (int i = 0; i < N; i++)
        in[i] = (i * 11 + 5) % 32, tg[i] = (i * 3 + 2) % 32;
    ar_model_forward(m, in, tg, 3, NULL);
    float *xn = zeros((size_t)N * d), *rstd = zeros(N);
    for (int l = 1; l <= m->L; l++) {
        const ar_block_idx *b = &m->blk[(l - 1) / 2];
        const ar_block_act *a = &m->act[(l - 1) / 2];
        const float *h = m->res->vt->input_fwd(m->res, l, N, NULL);
        cr_assert_not_null(h, "sublayer %d: no h without a norm to fuse", l);
        be->rmsnorm_fwd(xn, rstd, h, ar_model_param(m, l % 2 ? b->attn_norm : b->mlp_norm), N, d);
        /* the same bits: the same ops on the same sources and weights,
         * the row built by the same mix, normalised by the same row function */
        cr_expect(memcmp(xn, l % 2 ? a->xn : a->mxn, (size_t)N * d * sizeof(float)) == 0,
                  "sublayer %d: RMSNorm(h) differs from the fused forward's", l);
    }
    free(xn), free(rstd);
    ar_model_free(m);
}

Test(depth_cpu, full_unfused_inputs_match_the_fused_forward) { unfused_inputs(AR_RES_FULL, 0); }
Test(depth_cpu, block2_unfused_inputs_match_the_fused_forward) { unfused_inputs(AR_RES_BLOCK, 2); }
