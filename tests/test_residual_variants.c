/* The ablation variants (docs/reference.md §2.5-2.11): their ops against
 * double-precision references, finite differences through the whole model
 * for every variant, and the identities between variants.
 *
 * Covers: lib/residual_mixer.c, lib/residual_denseformer.c,
 * lib/residual_mhc.c, their CPU ops lib/cpu/mixer_cpu.c and
 * lib/cpu/wsum_cpu.c (suite variant_ops), and their config keys
 * (formats/config.c). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/config.h"
#include "lib/cpu/mixer_cpu.h"
#include "lib/mixing.h"
#include "lib/model.h"
#include "lib/residual.h"
#include "lib/residual_mhc.h"
#include "depth_attn_ref.h"
#include "modelutil.h"
#include "testutil.h"

static const ar_backend *cpu(void)
{
    const ar_backend *be = ar_backend_cpu();
    be->set_threads(1); /* the FD loops are many tiny ops: threads only add overhead */
    return be;
}

/* ---------- ops ---------- */

/* depth_mix_fwd in double, straight from the formula in lib/ops.def: h
 * (N x d) and, where not NULL, the weights a (N x n x H, source-major as
 * lib/op_args.h lays alpha out) and rstd r (N x n, 1 without a gain), with the rounding bounds bh,
 * ba, br of one float evaluation, element by element (e = d / H, u the
 * unit roundoff):
 * - rstd 1/sqrt(x.x/d + eps): a d-term sum of squares (gamma(d)), the mean,
 *   eps, sqrt and reciprocal, rho = gamma(d + 6) / 2 of it;
 * - a logit r (q g).x: e terms of two products each, then r: within
 *   ez = (gamma(e + 2) + rho) A, A = r sum |q g x| (0 for theta or no query);
 * - softmax: exp(z - m) off by 4 u (fast_expf: a couple of ulp), u |z - m|
 *   (the subtraction) and ez + max ez (z and m, one of the logits), then an
 *   n-term sum and a division: within a (eta + max eta + gamma(n) + 2 u),
 *   eta = ez + max ez + u |z - m| + 4 u.  Sigmoid: a (1 - a) (ez + 4 u) + 2 u a;
 *   and either way EXP_FLOOR absolutely: fast_expf takes arguments below
 *   -87.3 as -87.3 (exp = 1.25e-38, over a sum of at least 1), where libm's
 *   expf underflows (logits this far apart: rows of 256 without a key norm);
 * - h = sum_s a_s x_s: sum_s ba_s |x_s| + gamma(n) sum_s a_s |x_s|.
 * Two float evaluations (fused and simple, two-phase and one-phase) differ
 * by at most twice these. */
#define EXP_FLOOR 1.3e-38
static void ref_mix_b(double *h, double *al, double *r, double *bh, double *ba, double *br,
                      const float *const *src, int n, const float *w, int wstride, const float *g,
                      const float *theta, int sigmoid, int H, int N, int d)
{
    int e = d / H, Hn = H * n;
    double u = TU_U_FLOAT, rho = tu_gamma(d + 6) / 2;
    double *a = malloc((size_t)Hn * sizeof(double)), *z = malloc((size_t)Hn * sizeof(double)),
           *ez = malloc((size_t)Hn * sizeof(double)), *b = malloc((size_t)Hn * sizeof(double)),
           *rs = malloc((size_t)n * sizeof(double));
    for (int i = 0; i < N; i++) {
        for (int s = 0; s < n; s++) {
            const float *x = src[s] + (size_t)i * d;
            double rr = 1;
            if (g) {
                double ss = 0;
                for (int j = 0; j < d; j++)
                    ss += (double)x[j] * x[j];
                rr = 1 / sqrt(ss / d + AR_RMS_EPS);
            }
            rs[s] = rr;
            for (int hh = 0; hh < H; hh++) {
                double zz = 0, A = 0;
                for (int j = hh * e; j < (hh + 1) * e && w && !theta; j++) {
                    double t = (double)w[(size_t)i * wstride + j] * (g ? g[j] : 1) * x[j];
                    zz += t;
                    A += fabs(t);
                }
                z[hh * n + s] = theta ? theta[s] : zz * rr;
                ez[hh * n + s] = theta ? 0 : (tu_gamma(e + 2) + (g ? rho : 0)) * A * rr;
            }
        }
        for (int hh = 0; hh < H; hh++) {
            double *zh = z + hh * n, *ah = a + hh * n, *eh = ez + hh * n, *bb = b + hh * n;
            double mx = -1e300, sum = 0, mez = 0, meta = 0;
            for (int s = 0; s < n; s++) {
                mx = fmax(mx, zh[s]);
                mez = fmax(mez, eh[s]);
            }
            for (int s = 0; s < n; s++)
                sum += exp(zh[s] - mx);
            for (int s = 0; s < n; s++) {
                ah[s] = sigmoid ? 1 / (1 + exp(-zh[s])) : exp(zh[s] - mx) / sum;
                meta = fmax(meta, eh[s] + mez + u * (mx - zh[s]) + 4 * u);
            }
            for (int s = 0; s < n; s++)
                bb[s] = EXP_FLOOR + (sigmoid ? ah[s] * (1 - ah[s]) * (eh[s] + 4 * u) + 2 * u * ah[s]
                                             : ah[s] * (eh[s] + mez + u * (mx - zh[s]) + 4 * u + meta +
                                                        tu_gamma(n) + 2 * u));
        }
        for (int k = 0; k < Hn; k++) { /* k = hh n + s here, s H + hh there */
            size_t o = (size_t)i * Hn + (size_t)(k % n) * H + (size_t)(k / n);
            if (al)
                al[o] = a[k];
            if (ba)
                ba[o] = b[k];
        }
        for (int s = 0; s < n; s++) {
            if (r)
                r[(size_t)i * n + s] = rs[s];
            if (br)
                br[(size_t)i * n + s] = g ? rho * rs[s] : 0;
        }
        for (int j = 0; j < d; j++) {
            double y = 0, by = 0, ay = 0;
            for (int s = 0; s < n; s++) {
                double x = src[s][(size_t)i * d + j];
                y += a[j / e * n + s] * x;
                by += b[j / e * n + s] * fabs(x);
                ay += a[j / e * n + s] * fabs(x);
            }
            h[(size_t)i * d + j] = y;
            if (bh)
                bh[(size_t)i * d + j] = by + tu_gamma(n) * ay;
        }
    }
    free(a), free(z), free(ez), free(b), free(rs);
}

static void ref_mix(double *h, const float *const *src, int n, const float *w, int wstride, const float *g,
                    const float *theta, int sigmoid, int H, int N, int d)
{
    ref_mix_b(h, NULL, NULL, NULL, NULL, NULL, src, n, w, wstride, g, theta, sigmoid, H, N, d);
}

/* max_k |a_k - b_k| / (f bound_k): at most 1 where a and b are within f
 * times the bound of each other (0 / 0 counts as 0) */
static double past(const float *a, const float *b, const double *bound, double f, size_t n)
{
    double worst = 0;
    for (size_t k = 0; k < n; k++) {
        double dd = fabs((double)a[k] - b[k]);
        if (dd > 0)
            worst = fmax(worst, dd / (f * bound[k]));
    }
    return worst;
}

/* the same against the exact values */
static double past_d(const float *a, const double *x, const double *bound, size_t n)
{
    double worst = 0;
    for (size_t k = 0; k < n; k++) {
        double dd = fabs(a[k] - x[k]);
        if (dd > 0)
            worst = fmax(worst, dd / bound[k]);
    }
    return worst;
}

/* The magnitudes of the depth_mix backward's terms (lib/ops.def): the
 * same sums in double with every input replaced by its absolute value and
 * every difference by a sum, from the saved alpha and rstd that the float
 * paths read, added into adx[s] (NULL: none for that source), adw, adg, adt
 * (NULL: not wanted).  Each gradient a float evaluation forms is a
 * polynomial in those inputs, each of whose terms is rounded at most K
 * times, so it lies within gamma(K) of this magnitude of the exact one
 * (Higham, 2nd ed., 3.1 and 3.4), whatever the order of the sums or FMA. */
static void mix_bwd_abs(double *const *adx, double *adw, double *adg, double *adt, const float *dh,
                        const float *alpha, const float *rstd, const float *const *src, int n, const float *w,
                        int wstride, const float *g, const float *theta, int sigmoid, int H, int N, int d)
{
    int e = d / H, Hn = H * n, hasq = w && !theta;
    double *da = malloc((size_t)Hn * sizeof(double)), *dt = malloc((size_t)Hn * sizeof(double)),
           *dl = malloc((size_t)Hn * sizeof(double));
    float *a = malloc((size_t)Hn * sizeof(float)); /* token i's weights head-major, a[hh n + s] */
    for (int i = 0; i < N; i++) {
        const float *gy = dh + (size_t)i * d;
        for (int s = 0; s < n; s++)
            for (int hh = 0; hh < H; hh++)
                a[hh * n + s] = alpha[(size_t)i * Hn + (size_t)s * H + hh];
        const float *q = hasq ? w + (size_t)i * wstride : NULL;
        for (int s = 0; s < n; s++) {
            const float *x = src[s] + (size_t)i * d;
            for (int hh = 0; hh < H; hh++) {
                double p = 0, t = 0;
                for (int j = hh * e; j < (hh + 1) * e; j++) {
                    p += fabs((double)gy[j] * x[j]);
                    t += q ? fabs((double)q[j] * (g ? g[j] : 1) * x[j]) : 0;
                }
                da[hh * n + s] = p;
                dt[hh * n + s] = t;
            }
        }
        for (int hh = 0; hh < H; hh++) {
            const float *ah = a + hh * n;
            double cd = 0;
            for (int s = 0; s < n; s++)
                cd += fabs(ah[s]) * da[hh * n + s];
            for (int s = 0; s < n; s++)
                dl[hh * n + s] = sigmoid ? da[hh * n + s] * fabs(ah[s] * (1 - ah[s]))
                                         : fabs(ah[s]) * (da[hh * n + s] + cd);
        }
        for (int s = 0; s < n; s++) {
            const float *x = src[s] + (size_t)i * d;
            double r = g ? rstd[(size_t)i * n + s] : 1, cross = 0;
            for (int hh = 0; hh < H; hh++) {
                cross += dl[hh * n + s] * dt[hh * n + s];
                if (theta && adt)
                    adt[s] += dl[hh * n + s];
            }
            double c3 = g && q ? cross * r * r * r / d : 0;
            for (int j = 0; j < d; j++) {
                int hh = j / e;
                double ca = dl[hh * n + s] * r, gj = g ? fabs(g[j]) : 1;
                if (adx && adx[s])
                    adx[s][(size_t)i * d + j] += fabs((double)a[hh * n + s] * gy[j]) +
                                                 (q ? ca * fabs(q[j]) * gj + c3 * fabs(x[j]) : 0);
                if (q && adw)
                    adw[(size_t)i * wstride + j] += ca * gj * fabs(x[j]);
                if (q && g && adg)
                    adg[j] += ca * fabs((double)q[j] * x[j]);
            }
        }
    }
    free(da), free(dt), free(dl), free(a);
}

/* The longest chain of roundings in one gradient of the backward above
 * (C mixers adding into the same sources): ca = alpha (da - cd) r takes
 * e + n + 3 (da: e terms; cd: n more; the difference, alpha, r); dx adds
 * cross = sum_h dl u.x (H + 1), r^3 / d (4), x (1), its three terms and the
 * value it accumulates onto (3), and one more for each other mixer (C - 1);
 * dw and dg take g x (2) and their sum over tokens and sources (N n terms,
 * or n for dw of a per-token query) with the value they accumulate onto;
 * dtheta its sum over heads and tokens (N H) and its value. */
typedef struct {
    int x, w, g, t; /* dsrc, dw, dg, dtheta */
} bwd_chain;

static bwd_chain mix_bwd_chain(int n, int N, int d, int H, int per_token, int C)
{
    int ca = d / H + n + 3;
    return (bwd_chain){.x = ca + H + 8 + C - 1, .w = ca + 2 + (per_token ? n : N * n) + 1 + C - 1,
                       .g = ca + 2 + N * n + 1 + C - 1, .t = ca + N * H + 1 + C - 1};
}

static void mix_case(int n, int wstride, int use_g, int use_theta, int sigmoid, int H)
{
    const ar_backend *be = cpu();
    int N = 37, d = 16;
    float *src[8], *w = malloc((size_t)N * d * sizeof(float)), g[16], th[8];
    for (int s = 0; s < n; s++) {
        src[s] = malloc((size_t)N * d * sizeof(float));
        tu_fill_uniform(src[s], (size_t)N * d, -2, 2, 10 + (uint64_t)s);
    }
    tu_fill_uniform(w, (size_t)N * d, -1, 1, 3);
    tu_fill_uniform(g, 16, 0.5f, 1.5f, 4);
    tu_fill_uniform(th, 8, -1, 1, 5);
    float *h = malloc((size_t)N * d * sizeof(float)), *alpha = malloc((size_t)N * H * n * sizeof(float)),
          *rstd = malloc((size_t)N * n * sizeof(float));
    size_t nd = (size_t)N * d, na = (size_t)N * H * n;
    double *ref = malloc(nd * sizeof(double)), *bh = malloc(nd * sizeof(double)),
           *ra = malloc(na * sizeof(double)), *ba = malloc(na * sizeof(double));
    const float *const *sp = (const float *const *)src;
    ar_depth_mix mix = {.n = n, .src = sp, .w = w, .wstride = wstride, .g = use_g ? g : NULL,
                        .theta = use_theta ? th : NULL, .alpha = alpha, .rstd = rstd, .sigmoid = sigmoid,
                        .H = H, .N = N, .d = d};
    be->depth_mix_fwd(&mix, h);
    /* one float evaluation against the exact values: within ref_mix_b's bounds */
    ref_mix_b(ref, ra, NULL, bh, ba, NULL, sp, n, w, wstride, use_g ? g : NULL, use_theta ? th : NULL, sigmoid,
              H, N, d);
    double eh = past_d(h, ref, bh, nd), ea = past_d(alpha, ra, ba, na);
    cr_expect_leq(eh, 1, "n %d wstride %d g %d theta %d sigmoid %d H %d: h off by %g of its bound", n, wstride,
                  use_g, use_theta, sigmoid, H, eh);
    cr_expect_leq(ea, 1, "n %d wstride %d g %d theta %d sigmoid %d H %d: alpha off by %g of its bound", n,
                  wstride, use_g, use_theta, sigmoid, H, ea);
    free(bh), free(ra), free(ba);

    /* backward: directional finite difference of L = sum(h * c) in every
     * input (sources, query, gain, logits) */
    float *c = malloc((size_t)N * d * sizeof(float));
    tu_fill_uniform(c, (size_t)N * d, -1, 1, 6);
    float *ds[8], *dw = calloc((size_t)N * d, sizeof(float)), dg[16] = {0}, dth[8] = {0};
    for (int s = 0; s < n; s++)
        ds[s] = calloc((size_t)N * d, sizeof(float));
    be->depth_mix_bwd(&mix, ds, dw, use_g ? dg : NULL, use_theta ? dth : NULL, c);
    struct { float *x, *gx; size_t len; } ins[12];
    int ni = 0;
    for (int s = 0; s < n; s++)
        ins[ni++] = (typeof(ins[0])){src[s], ds[s], (size_t)N * d};
    if (!use_theta)
        ins[ni++] = (typeof(ins[0])){w, dw, wstride ? (size_t)N * d : (size_t)d};
    if (use_g)
        ins[ni++] = (typeof(ins[0])){g, dg, 16};
    if (use_theta)
        ins[ni++] = (typeof(ins[0])){th, dth, (size_t)n};
    for (int k = 0; k < ni; k++) {
        float *u = malloc(ins[k].len * sizeof(float)), *x0 = malloc(ins[k].len * sizeof(float));
        tu_fill_uniform(u, ins[k].len, -1, 1, 50 + (uint64_t)k);
        memcpy(x0, ins[k].x, ins[k].len * sizeof(float));
        double gu = 0, lp = 0, lm = 0, eps = 1e-3;
        for (size_t j = 0; j < ins[k].len; j++)
            gu += (double)ins[k].gx[j] * u[j];
        for (int sgn = -1; sgn <= 1; sgn += 2) {
            for (size_t j = 0; j < ins[k].len; j++)
                ins[k].x[j] = (float)(x0[j] + sgn * eps * u[j]);
            ref_mix(ref, sp, n, w, wstride, use_g ? g : NULL, use_theta ? th : NULL, sigmoid, H, N, d);
            double l = 0;
            for (size_t j = 0; j < (size_t)N * d; j++)
                l += ref[j] * c[j];
            *(sgn < 0 ? &lm : &lp) = l;
        }
        memcpy(ins[k].x, x0, ins[k].len * sizeof(float));
        double fd = (lp - lm) / (2 * eps);
        /* the central difference of the double reference is off by eps^2/6
         * times the third directional derivative (truncation) and by
         * 1e-16 |L| / eps (rounding); the float gradient by gamma(K) of its
         * terms' magnitudes (mix_bwd_abs, K about 200 here: 1.2e-5 relative).
         * 1e-3 (|g.u| + 1) admits third derivatives up to 6000 (|g.u| + 1) */
        cr_expect(fabs(fd - gu) <= 1e-3 * fabs(gu) + 1e-3, "input %d: fd %.8g vs analytic %.8g", k, fd, gu);
        free(u);
        free(x0);
    }
    for (int s = 0; s < n; s++) {
        free(src[s]);
        free(ds[s]);
    }
    free(w);
    free(dw);
    free(h);
    free(alpha);
    free(rstd);
    free(ref);
    free(c);
}

Test(variant_ops, depth_mix_softmax_key_norm) { mix_case(4, 0, 1, 0, 0, 1); }
Test(variant_ops, depth_mix_sigmoid) { mix_case(3, 0, 1, 0, 1, 1); }
Test(variant_ops, depth_mix_no_key_norm) { mix_case(5, 0, 0, 0, 0, 1); }
Test(variant_ops, depth_mix_per_token_query) { mix_case(3, 16, 1, 0, 0, 1); }
Test(variant_ops, depth_mix_static_logits) { mix_case(4, 0, 0, 1, 0, 1); }
Test(variant_ops, depth_mix_heads) { mix_case(4, 0, 1, 0, 0, 4); }
Test(variant_ops, depth_mix_heads_sigmoid_no_norm) { mix_case(3, 16, 0, 0, 1, 2); }

Test(variant_ops, depth_mix_equals_depth_attn)
{
    /* one head, softmax, key norm: the same math as the reference op */
    const ar_backend *be = cpu();
    int N = 40, d = 24, n = 5;
    float *src[5], w[24], g[24];
    for (int s = 0; s < n; s++) {
        src[s] = malloc((size_t)N * d * sizeof(float));
        tu_fill_uniform(src[s], (size_t)N * d, -1, 1, 70 + (uint64_t)s);
    }
    tu_fill_uniform(w, 24, -1, 1, 1);
    tu_fill_uniform(g, 24, 0.5f, 1.5f, 2);
    float *h1 = malloc((size_t)N * d * 4), *h2 = malloc((size_t)N * d * 4), *a1 = malloc((size_t)N * n * 4),
          *a2 = malloc((size_t)N * n * 4), *r1 = malloc((size_t)N * n * 4), *r2 = malloc((size_t)N * n * 4);
    const float *const *sp = (const float *const *)src;
    ar_depth_mix mix = {.n = n, .src = sp, .w = w, .g = g, .alpha = a1, .rstd = r1, .H = 1, .N = N, .d = d};
    be->depth_mix_fwd(&mix, h1);
    ref_depth_attn_fwd(h2, a2, r2, sp, n, w, g, N, d);
    /* two float evaluations of the same sums: within twice ref_mix_b's bounds */
    size_t nd = (size_t)N * d, na = (size_t)N * n;
    double *rh = malloc(nd * 8), *bh = malloc(nd * 8), *ba = malloc(na * 8), *br = malloc(na * 8);
    ref_mix_b(rh, NULL, NULL, bh, ba, br, sp, n, w, 0, g, NULL, 0, 1, N, d);
    cr_expect_leq(past(h1, h2, bh, 2, nd), 1, "h: %g of the bound", past(h1, h2, bh, 2, nd));
    cr_expect_leq(past(a1, a2, ba, 2, na), 1, "alpha: %g of the bound", past(a1, a2, ba, 2, na));
    cr_expect_leq(past(r1, r2, br, 2, na), 1, "rstd: %g of the bound", past(r1, r2, br, 2, na));
    for (int s = 0; s < n; s++)
        free(src[s]);
    free(h1), free(h2), free(a1), free(a2), free(r1), free(r2), free(rh), free(bh), free(ba), free(br);
}

/* The fast depth_mix ops (what the CPU table holds) against the simple
 * one-phase ops they replace (cpu_depth_mix_*_simple), on random non-zero
 * inputs: every flag combination the general mixer uses, one to many heads
 * (head widths of 1 to 64 channels, packed or not: the shapes' comment), token counts not a multiple
 * of the reduction chunk, and NULL gradients.  Forward h, alpha, rstd and
 * every gradient must agree to float rounding: element by element, within
 * twice the bound of one float evaluation (ref_mix_b, mix_bwd_abs). */
static void mix_fast_case(int n, int N, int d, int H, int per_token, int use_w, int use_g,
                          int use_theta, int sigmoid, int nullmask)
{
    size_t nd = (size_t)N * d;
    float *src[16], *ds1[16], *ds2[16];
    for (int s = 0; s < n; s++) {
        src[s] = malloc(nd * 4);
        tu_fill_uniform(src[s], nd, -2, 2, 200 + (uint64_t)s);
        ds1[s] = malloc(nd * 4);
        ds2[s] = malloc(nd * 4);
        tu_fill_uniform(ds1[s], nd, -1, 1, 300 + (uint64_t)s); /* += onto non-zero */
        memcpy(ds2[s], ds1[s], nd * 4);
    }
    int ws = per_token ? d : 0;
    size_t wl = per_token ? nd : (size_t)d;
    float *w = malloc(wl * 4), *g = malloc((size_t)d * 4), th[16], *dh = malloc(nd * 4);
    tu_fill_uniform(w, wl, -1.5f, 1.5f, 7);
    tu_fill_uniform(g, (size_t)d, 0.5f, 1.5f, 8);
    tu_fill_uniform(th, 16, -1, 1, 9);
    tu_fill_uniform(dh, nd, -1, 1, 10);
    const float *W = use_w ? w : NULL, *G = use_g ? g : NULL, *TH = use_theta ? th : NULL;
    float *h1 = malloc(nd * 4), *h2 = malloc(nd * 4);
    size_t na = (size_t)N * H * n, nr = (size_t)N * n;
    float *a1 = malloc(na * 4), *a2 = malloc(na * 4), *r1 = calloc(nr, 4), *r2 = calloc(nr, 4);
    const float *const *sp = (const float *const *)src;
    ar_depth_mix m1 = {.n = n, .src = sp, .w = W, .wstride = ws, .g = G, .theta = TH, .alpha = a1, .rstd = r1,
                       .sigmoid = sigmoid, .H = H, .N = N, .d = d};
    ar_depth_mix m2 = m1;
    m2.alpha = a2, m2.rstd = r2;
    cpu_depth_mix_fwd_simple(&m1, h1);
    ar_backend_cpu()->depth_mix_fwd(&m2, h2);
    char what[160];
    snprintf(what, sizeof what, "n %d N %d d %d H %d per-token %d w %d g %d theta %d sigmoid %d null %d", n,
             N, d, H, per_token, use_w, use_g, use_theta, sigmoid, nullmask);
    /* two float evaluations of the same sums: within twice ref_mix_b's bounds */
    double *rh = malloc(nd * 8), *bh = malloc(nd * 8), *ba = malloc(na * 8), *br = malloc(nr * 8);
    ref_mix_b(rh, NULL, NULL, bh, ba, br, sp, n, W, ws, G, TH, sigmoid, H, N, d);
    double eh = past(h2, h1, bh, 2, nd), ea = past(a2, a1, ba, 2, na), er = past(r2, r1, br, 2, nr);
    cr_expect_leq(eh, 1, "%s: h %g of the bound", what, eh);
    cr_expect_leq(ea, 1, "%s: alpha %g of the bound", what, ea);
    cr_expect_leq(er, 1, "%s: rstd %g of the bound", what, er);
    free(rh), free(bh), free(ba), free(br);
    /* weights_unread: the same h and rstd, the weights left as they were */
    float *h3 = malloc(nd * 4), *a3 = malloc(na * 4), *r3 = calloc(nr, 4);
    for (size_t t = 0; t < na; t++)
        a3[t] = NAN;
    ar_depth_mix m3 = m2;
    m3.alpha = a3, m3.rstd = r3, m3.weights_unread = 1;
    ar_backend_cpu()->depth_mix_fwd(&m3, h3);
    cr_expect(memcmp(h3, h2, nd * 4) == 0, "%s: h differs with the weights unread", what);
    cr_expect(!G || memcmp(r3, r2, nr * 4) == 0, "%s: rstd differs with the weights unread", what);
    size_t written = 0;
    for (size_t t = 0; t < na; t++)
        written += !isnan(a3[t]);
    /* every shape here is the fast op's own at any vector width (d a
     * multiple of 16, head widths dividing it or multiples of it) */
    cr_expect(written == 0, "%s: %zu of %zu weights written", what, written, na);
    free(h3), free(a3), free(r3);
    /* backward from the same saved alpha/rstd (the simple forward's) */
    float *dw1 = malloc(wl * 4), *dw2 = malloc(wl * 4), *dg1 = malloc((size_t)d * 4), *dg2 = malloc((size_t)d * 4);
    float dt1[16], dt2[16];
    tu_fill_uniform(dw1, wl, -1, 1, 11);
    memcpy(dw2, dw1, wl * 4);
    tu_fill_uniform(dg1, (size_t)d, -1, 1, 12);
    memcpy(dg2, dg1, (size_t)d * 4);
    tu_fill_uniform(dt1, 16, -1, 1, 13);
    memcpy(dt2, dt1, sizeof dt1);
    float *d1[16], *d2[16];
    for (int s = 0; s < n; s++) {
        int null = (nullmask & 1) && s % 3 == 1;
        d1[s] = null ? NULL : ds1[s];
        d2[s] = null ? NULL : ds2[s];
    }
    int nullp = nullmask & 2;
    /* the magnitudes of their terms, from the values they accumulate onto */
    double *adx[16], *adw = malloc(wl * 8), *adg = malloc((size_t)d * 8), adt[16];
    for (int s = 0; s < n; s++) {
        adx[s] = malloc(nd * 8);
        for (size_t k = 0; k < nd; k++)
            adx[s][k] = fabs(ds1[s][k]);
    }
    for (size_t k = 0; k < wl; k++)
        adw[k] = fabs(dw1[k]);
    for (int j = 0; j < d; j++)
        adg[j] = fabs(dg1[j]);
    for (int k = 0; k < 16; k++)
        adt[k] = fabs(dt1[k]);
    mix_bwd_abs(adx, adw, adg, adt, dh, a1, r1, sp, n, W, ws, G, TH, sigmoid, H, N, d);
    cpu_depth_mix_bwd_simple(&m1, d1, nullp ? NULL : dw1, nullp ? NULL : dg1, nullp ? NULL : dt1, dh);
    ar_backend_cpu()->depth_mix_bwd(&m1, d2, nullp ? NULL : dw2, nullp ? NULL : dg2, nullp ? NULL : dt2, dh);
    /* two float evaluations: within 2 gamma(K) of those magnitudes */
    bwd_chain K = mix_bwd_chain(n, N, d, H, per_token, 1);
    for (int s = 0; s < n; s++) {
        double e = past(ds2[s], ds1[s], adx[s], 2 * tu_gamma(K.x), nd);
        cr_expect_leq(e, 1, "%s: dsrc[%d] %g of the bound", what, s, e);
    }
    double ew = past(dw2, dw1, adw, 2 * tu_gamma(K.w), wl), eg = past(dg2, dg1, adg, 2 * tu_gamma(K.g), (size_t)d),
           et = past(dt2, dt1, adt, 2 * tu_gamma(K.t), 16);
    cr_expect_leq(ew, 1, "%s: dw %g of the bound", what, ew);
    cr_expect_leq(eg, 1, "%s: dg %g of the bound", what, eg);
    cr_expect_leq(et, 1, "%s: dtheta %g of the bound", what, et);
    for (int s = 0; s < n; s++) {
        free(src[s]);
        free(ds1[s]);
        free(ds2[s]);
        free(adx[s]);
    }
    free(adw), free(adg);
    free(w), free(g), free(dh), free(h1), free(h2), free(a1), free(a2), free(r1), free(r2);
    free(dw1), free(dw2), free(dg1), free(dg2);
}

Test(variant_ops, depth_mix_fast_equals_simple)
{
    ar_backend_cpu()->set_threads(1); /* many small ops: threads only add overhead */
    /* head widths 256 down to 1: the packed heads of 1, 2, 4 and 8 channels
     * (VL heads a vector where H is a multiple of VL), 12 heads of 4 (not
     * a multiple of 8 or 16) and widths of whole vectors; one head in
     * tiles of tokens (rows of up to 128 floats) and token by token (256) */
    int shapes[][3] = {{64, 1, 0},  {64, 16, 0}, {64, 2, 0},  {256, 16, 0}, {48, 3, 0},  {32, 8, 0},
                       {64, 32, 0}, {128, 16, 0}, {16, 16, 0}, {48, 12, 0},  {256, 1, 0}, {128, 1, 0}};
    for (size_t k = 0; k < sizeof shapes / sizeof *shapes; k++) {
        int d = shapes[k][0], H = shapes[k][1];
        for (int v = 0; v < 6; v++) {
            int n = v % 3 == 0 ? 1 : v % 3 == 1 ? 5 : 13, N = v < 3 ? 37 : 70;
            /* softmax + key norm; sigmoid; no key norm; per-token query */
            mix_fast_case(n, N, d, H, 0, 1, 1, 0, 0, v % 4);
            mix_fast_case(n, N, d, H, 0, 1, 1, 0, 1, (v + 1) % 4);
            mix_fast_case(n, N, d, H, 0, 1, 0, 0, v & 1, (v + 2) % 4);
            mix_fast_case(n, N, d, H, 1, 1, v & 1, 0, v >> 2 & 1, (v + 3) % 4);
            /* static logits, uniform weights, and logits with a key norm
             * (the op takes them with heads too, though no config does) */
            mix_fast_case(n, N, d, H, 0, 0, 0, 1, 0, v % 4);
            mix_fast_case(n, N, d, H, 0, 0, 0, 0, 0, v % 4);
            mix_fast_case(n, N, d, H, 0, 1, 1, 1, v & 1, v % 4);
        }
    }
}

/* The backward in pieces (depth_mix_cdot, depth_mix_bwd_chunk) against the
 * whole one-phase backward of each mixer (cpu_depth_mix_bwd_simple), on
 * random non-zero inputs: C mixers, mixer c listing the k shared sources,
 * then c + 1 of its own; with shift, c more own sources before the shared
 * ones (its list [c own, k shared, c + 1 own], as swa's windows shift),
 * so that the chunk op takes the shared ones at places s + c (off).  Each
 * mixer has its own query, gain, static logits, weights (from its
 * forward) and dL/dh.  The pieces: cdot from dh and h, each mixer's own
 * sources with C = 1 (one run, or two with shift), then the shared ones
 * for all C at once; the fast op and its scalar version both.  Every
 * gradient element by element within twice the bound of one float
 * evaluation (mix_bwd_abs, mix_bwd_chain).  Kept whole: its setup, the
 * two references, the pieces and the checks share two dozen per-mixer
 * arrays that helpers would only pass along. */
static void mix_chunk_case(int k, int C, int N, int d, int H, int use_w, int use_g, int use_theta,
                           int sigmoid, int shift, int fast)
{
    enum { MAXC = 4, MAXS = 24 };
    size_t nd = (size_t)N * d;
    /* the pool: k shared, C own after them, C - 1 own before (shift) */
    int ns = k + C + (shift ? C - 1 : 0), n[MAXC], off[MAXC];
    float *src[MAXS], *dref[MAXS], *dgot[MAXS];
    for (int s = 0; s < ns; s++) {
        src[s] = malloc(nd * 4);
        tu_fill_uniform(src[s], nd, -2, 2, 400 + (uint64_t)s);
        dref[s] = malloc(nd * 4);
        dgot[s] = malloc(nd * 4);
        tu_fill_uniform(dref[s], nd, -1, 1, 500 + (uint64_t)s);
        memcpy(dgot[s], dref[s], nd * 4);
    }
    /* mixer c's lists: pool indices lst[c][p] of its places p */
    int lst[MAXC][MAXS];
    const float *sp[MAXC][MAXS];
    float *dsp_ref[MAXC][MAXS], *dsp_got[MAXC][MAXS];
    for (int c = 0; c < C; c++) {
        off[c] = shift ? c : 0;
        n[c] = off[c] + k + c + 1;
        for (int p = 0; p < n[c]; p++) {
            int j = p < off[c] ? k + C + p : p - off[c];
            lst[c][p] = j;
            sp[c][p] = src[j], dsp_ref[c][p] = dref[j], dsp_got[c][p] = dgot[j];
        }
    }
    float *w[MAXC], *g[MAXC], *th[MAXC], *dh[MAXC], *h[MAXC], *al[MAXC], *rs[MAXC], *cd[MAXC];
    float *dw1[MAXC], *dw2[MAXC], *dg1[MAXC], *dg2[MAXC], *dt1[MAXC], *dt2[MAXC];
    for (int c = 0; c < C; c++) {
        w[c] = malloc((size_t)d * 4), g[c] = malloc((size_t)d * 4), th[c] = malloc(MAXS * 4);
        dh[c] = malloc(nd * 4), h[c] = malloc(nd * 4), cd[c] = malloc((size_t)N * H * 4);
        al[c] = malloc((size_t)N * H * n[c] * 4), rs[c] = calloc((size_t)N * n[c], 4);
        dw1[c] = malloc((size_t)d * 4), dw2[c] = malloc((size_t)d * 4);
        dg1[c] = malloc((size_t)d * 4), dg2[c] = malloc((size_t)d * 4);
        dt1[c] = malloc(MAXS * 4), dt2[c] = malloc(MAXS * 4);
        tu_fill_uniform(w[c], (size_t)d, -1.5f, 1.5f, 20 + (uint64_t)c);
        tu_fill_uniform(g[c], (size_t)d, 0.5f, 1.5f, 30 + (uint64_t)c);
        tu_fill_uniform(th[c], MAXS, -1, 1, 40 + (uint64_t)c);
        tu_fill_uniform(dh[c], nd, -1, 1, 50 + (uint64_t)c);
        tu_fill_uniform(dw1[c], (size_t)d, -1, 1, 60 + (uint64_t)c);
        tu_fill_uniform(dg1[c], (size_t)d, -1, 1, 70 + (uint64_t)c);
        tu_fill_uniform(dt1[c], MAXS, -1, 1, 80 + (uint64_t)c);
        memcpy(dw2[c], dw1[c], (size_t)d * 4);
        memcpy(dg2[c], dg1[c], (size_t)d * 4);
        memcpy(dt2[c], dt1[c], MAXS * 4);
    }
    const float *W[MAXC], *G[MAXC], *TH[MAXC];
    for (int c = 0; c < C; c++) {
        W[c] = use_w ? w[c] : NULL, G[c] = use_g ? g[c] : NULL, TH[c] = use_theta ? th[c] : NULL;
        ar_depth_mix mix = {.n = n[c], .src = sp[c], .w = W[c], .g = G[c], .theta = TH[c], .alpha = al[c],
                            .rstd = rs[c], .sigmoid = sigmoid, .H = H, .N = N, .d = d};
        cpu_depth_mix_fwd_simple(&mix, h[c]);
        cpu_depth_mix_bwd_simple(&mix, dsp_ref[c], dw1[c], dg1[c], dt1[c], dh[c]);
    }
    /* the magnitudes of the terms, from the values the gradients accumulate
     * onto (dgot, dw2, dg2, dt2 still hold them) */
    double *adx[MAXS], *adw[MAXC], *adg[MAXC], *adt[MAXC];
    for (int s = 0; s < ns; s++) {
        adx[s] = malloc(nd * 8);
        for (size_t q = 0; q < nd; q++)
            adx[s][q] = fabs(dgot[s][q]);
    }
    for (int c = 0; c < C; c++) {
        adw[c] = malloc((size_t)d * 8), adg[c] = malloc((size_t)d * 8), adt[c] = malloc(MAXS * 8);
        for (int j = 0; j < d; j++)
            adw[c][j] = fabs(dw2[c][j]), adg[c][j] = fabs(dg2[c][j]);
        for (int t = 0; t < MAXS; t++)
            adt[c][t] = fabs(dt2[c][t]);
        double *ax[MAXS];
        for (int p = 0; p < n[c]; p++)
            ax[p] = adx[lst[c][p]];
        mix_bwd_abs(ax, adw[c], adg[c], adt[c], dh[c], al[c], rs[c], sp[c], n[c], W[c], 0, G[c], TH[c], sigmoid,
                    H, N, d);
    }
    void (*op)(const ar_depth_mix_chunk *, float *const *, float *const *, float *const *, float *const *,
               const float *const *, const float *const *) =
        fast ? ar_backend_cpu()->depth_mix_bwd_chunk : cpu_depth_mix_bwd_chunk_simple;
    for (int c = 0; c < C; c++) {
        ar_backend_cpu()->depth_mix_cdot(cd[c], dh[c], h[c], H, N, d);
        ar_depth_mix_chunk own = {.C = 1, .src = sp[c], .n = &n[c], .w = &W[c], .g = &G[c], .theta = &TH[c],
                                  .alpha = (const float *const *)&al[c], .rstd = (const float *const *)&rs[c],
                                  .sigmoid = sigmoid, .H = H, .N = N, .d = d};
        int runs[2][2] = {{0, off[c]}, {off[c] + k, n[c]}};
        for (int r = 0; r < 2; r++) {
            own.s0 = runs[r][0], own.s1 = runs[r][1];
            op(&own, dsp_got[c], &dw2[c], &dg2[c], &dt2[c], (const float *const *)&dh[c],
               (const float *const *)&cd[c]);
        }
    }
    /* mixer 0 holds the shared sources at places 0..k-1, mixer c at c on */
    ar_depth_mix_chunk shared = {.C = C, .s0 = 0, .s1 = k, .src = sp[0], .n = n, .off = shift ? off : NULL,
                                 .w = W, .g = G, .theta = TH, .alpha = (const float *const *)al,
                                 .rstd = (const float *const *)rs, .sigmoid = sigmoid, .H = H, .N = N, .d = d};
    op(&shared, dsp_got[0], dw2, dg2, dt2, (const float *const *)dh, (const float *const *)cd);
    char what[160];
    snprintf(what, sizeof what, "k %d C %d N %d d %d H %d w %d g %d theta %d sigmoid %d shift %d fast %d", k, C, N,
             d, H, use_w, use_g, use_theta, sigmoid, shift, fast);
    /* two float evaluations, each within gamma(K) of the magnitudes; cdot
     * = dh.h (h the forward's n-term mix) in place of sum_s alpha_s da_s
     * is the same polynomial, its chain of e + n counted in K */
    bwd_chain K = mix_bwd_chain(n[C - 1], N, d, H, 0, C);
    for (int s = 0; s < ns; s++) {
        double e = past(dgot[s], dref[s], adx[s], 2 * tu_gamma(K.x), nd);
        cr_expect_leq(e, 1, "%s: dsrc[%d] %g of the bound", what, s, e);
    }
    for (int c = 0; c < C; c++) {
        double ew = past(dw2[c], dw1[c], adw[c], 2 * tu_gamma(K.w), (size_t)d),
               eg = past(dg2[c], dg1[c], adg[c], 2 * tu_gamma(K.g), (size_t)d),
               et = past(dt2[c], dt1[c], adt[c], 2 * tu_gamma(K.t), MAXS);
        cr_expect_leq(ew, 1, "%s: dw[%d] %g of the bound", what, c, ew);
        cr_expect_leq(eg, 1, "%s: dg[%d] %g of the bound", what, c, eg);
        cr_expect_leq(et, 1, "%s: dtheta[%d] %g of the bound", what, c, et);
        free(w[c]), free(g[c]), free(th[c]), free(dh[c]), free(h[c]), free(cd[c]), free(al[c]), free(rs[c]);
        free(dw1[c]), free(dw2[c]), free(dg1[c]), free(dg2[c]), free(dt1[c]), free(dt2[c]);
        free(adw[c]), free(adg[c]), free(adt[c]);
    }
    for (int s = 0; s < ns; s++)
        free(src[s]), free(dref[s]), free(dgot[s]), free(adx[s]);
}

Test(variant_ops, depth_mix_chunk_equals_whole_backward)
{
    ar_backend_cpu()->set_threads(2);
    /* packed heads (e < VL) in one group of VL heads and in several
     * ((128, 32) and (256, 32) at VL 16), heads of whole vectors, one
     * head, and shapes the fast path does not take */
    int shapes[][2] = {{64, 1},  {64, 4},   {64, 16}, {48, 3},  {32, 1},   {64, 32},
                       {128, 16}, {16, 16}, {48, 12}, {48, 16}, {128, 32}, {256, 32}};
    for (size_t q = 0; q < sizeof shapes / sizeof *shapes; q++) {
        int d = shapes[q][0], H = shapes[q][1];
        for (int fast = 0; fast < 2; fast++)
            for (int v = 0; v < 3; v++) {
                int k = v == 0 ? 1 : v == 1 ? 4 : 9, C = v == 0 ? 1 : v == 1 ? 4 : 3, N = v == 2 ? 70 : 37;
                int shift = v == 1 && (q % 2 == 0); /* shifted windows, on every other shape */
                mix_chunk_case(k, C, N, d, H, 1, 1, 0, 0, shift, fast); /* softmax, key norm */
                mix_chunk_case(k, C, N, d, H, 1, 1, 0, 1, shift, fast); /* sigmoid */
                mix_chunk_case(k, C, N, d, H, 1, 0, 0, 0, shift, fast); /* no key norm */
                mix_chunk_case(k, C, N, d, H, 0, 0, 1, 0, shift, fast); /* static logits */
                mix_chunk_case(k, C, N, d, H, 0, 0, 0, 0, shift, fast); /* uniform weights */
            }
    }
}

/* A mixer of one source: h = 1 x exactly, so its logit's gradient is
 * exactly 0 and, through the pieces of the backward (depth_mix_cdot, then
 * depth_mix_bwd_chunk over the source), dsrc gets dh alone and the query
 * and gain nothing: cdot = dh.h must be summed in the chunk op's own order
 * of dh.x for the difference to cancel.  One head, packed heads (in one
 * group of VL and, at d 128, in more) and heads of whole vectors; softmax
 * with key norm, on random rows; one such mixer, and eight in one chunk
 * (the fast op's two forms for packed heads). */
/* The key-norm rstd cache (ar_depth_mix: rsc, rsc_ok) on random rows: a
 * forward that fills it writes the bits of one without it and marks every
 * source; one that reads it (all sources, or some) writes the same bits
 * again; a cached value is really read (a source's cache scaled by 2 moves
 * h and that source's rstd); and a shape the fast ops do not take leaves
 * the cache unmarked, with the same bits as without it. */
static void rstd_cache_case(int n, int N, int d, int H, int per_token, int use_w, int unread, int fast)
{
    const ar_backend *be = ar_backend_cpu();
    size_t nd = (size_t)N * d, na = (size_t)N * H * n, nr = (size_t)N * n;
    float *src[8], *rsc[8];
    int ok[8];
    for (int s = 0; s < n; s++) {
        src[s] = malloc(nd * 4);
        tu_fill_uniform(src[s], nd, -2, 2, 500 + (uint64_t)s);
        rsc[s] = malloc((size_t)N * 4);
    }
    size_t wl = per_token ? nd : (size_t)d;
    float *w = malloc(wl * 4), *g = malloc((size_t)d * 4);
    tu_fill_uniform(w, wl, -1.5f, 1.5f, 17);
    tu_fill_uniform(g, (size_t)d, 0.5f, 1.5f, 18);
    float *h0 = malloc(nd * 4), *h1 = malloc(nd * 4), *a0 = malloc(na * 4), *a1 = malloc(na * 4);
    float *r0 = malloc(nr * 4), *r1 = malloc(nr * 4);
    ar_depth_mix m0 = {.n = n, .src = (const float *const *)src, .w = use_w ? w : NULL, .wstride = per_token ? d : 0,
                       .g = g, .alpha = a0, .rstd = r0, .H = H, .weights_unread = unread, .N = N, .d = d};
    be->depth_mix_fwd(&m0, h0);
    ar_depth_mix m1 = m0;
    m1.alpha = a1, m1.rstd = r1, m1.rsc = rsc, m1.rsc_ok = ok;
    char what[96];
    snprintf(what, sizeof what, "n %d N %d d %d H %d per-token %d w %d unread %d", n, N, d, H, per_token, use_w,
             unread);
#define SAME(tag)                                                                                    \
    do {                                                                                           \
        cr_expect(memcmp(h1, h0, nd * 4) == 0, "%s, %s: h differs", what, tag);                    \
        cr_expect(memcmp(r1, r0, nr * 4) == 0, "%s, %s: rstd differs", what, tag);                 \
        cr_expect(unread || memcmp(a1, a0, na * 4) == 0, "%s, %s: alpha differs", what, tag);      \
    } while (0)
    /* filling */
    for (int s = 0; s < n; s++) {
        ok[s] = 0;
        for (int i = 0; i < N; i++)
            rsc[s][i] = NAN;
    }
    be->depth_mix_fwd(&m1, h1);
    SAME("filling the cache");
    for (int s = 0; s < n; s++) {
        cr_expect_eq(ok[s], fast, "%s: source %d marked %d", what, s, ok[s]);
        for (int i = 0; fast && i < N; i++)
            cr_expect(rsc[s][i] == r0[(size_t)i * n + s], "%s: cache of source %d token %d", what, s, i);
    }
    if (!fast)
        goto done;
    /* reading it, then reading some and filling the others */
    be->depth_mix_fwd(&m1, h1);
    SAME("reading the cache");
    for (int s = 0; s < n; s += 2) {
        ok[s] = 0;
        for (int i = 0; i < N; i++)
            rsc[s][i] = NAN;
    }
    be->depth_mix_fwd(&m1, h1);
    SAME("reading half the cache");
    for (int s = 0; s < n; s++)
        cr_expect_eq(ok[s], 1, "%s: source %d unmarked after a partly cached call", what, s);
    /* a cached value is the one used (without a query the weights do not
     * depend on it: only rstd, for the backward) */
    int q = n - 1;
    for (int i = 0; i < N; i++)
        rsc[q][i] *= 2.0f;
    be->depth_mix_fwd(&m1, h1);
    cr_expect(!use_w || memcmp(h1, h0, nd * 4) != 0, "%s: h unmoved by a changed cache", what);
    for (int i = 0; i < N; i++)
        cr_expect(r1[(size_t)i * n + q] == 2.0f * r0[(size_t)i * n + q], "%s: rstd not the cached one", what);
done:
#undef SAME
    for (int s = 0; s < n; s++)
        free(src[s]), free(rsc[s]);
    free(w), free(g), free(h0), free(h1), free(a0), free(a1), free(r0), free(r1);
}

Test(variant_ops, depth_mix_rstd_cache)
{
    ar_backend_cpu()->set_threads(2);
    /* one head in tiles (N 40: a last tile of 8), per-token queries, the
     * general path past the tiles' width (d 256), heads packed (16 of 2
     * channels) and summed (4 of 8), no query: the fast ops' shapes at
     * every vector width (4, 8 or 16 floats); d 6, which none takes */
    rstd_cache_case(5, 40, 64, 1, 0, 1, 0, 1);
    rstd_cache_case(5, 40, 64, 1, 0, 1, 1, 1);
    rstd_cache_case(4, 33, 32, 1, 1, 1, 0, 1);
    rstd_cache_case(3, 20, 256, 1, 0, 1, 0, 1);
    rstd_cache_case(6, 24, 32, 16, 0, 1, 0, 1);
    rstd_cache_case(6, 24, 32, 16, 0, 1, 1, 1);
    rstd_cache_case(4, 24, 32, 4, 0, 1, 0, 1);
    rstd_cache_case(3, 17, 32, 1, 0, 0, 0, 1);
    rstd_cache_case(3, 10, 6, 1, 0, 1, 0, 0);
}

Test(variant_ops, depth_mix_one_source_cancels_exactly)
{
    int shapes[][2] = {{64, 1}, {64, 16}, {64, 2}, {48, 3}, {32, 1}, {128, 32}};
    for (size_t k = 0; k < sizeof shapes / sizeof *shapes; k++) {
        int d = shapes[k][0], H = shapes[k][1], N = 37, n = 1;
        size_t nd = (size_t)N * d;
        float *x = malloc(nd * 4), *h = malloc(nd * 4), *dh = malloc(nd * 4), *dx = calloc(nd, 4);
        float *alpha = malloc((size_t)N * H * 4), *rstd = malloc((size_t)N * 4), *cd = malloc((size_t)N * H * 4);
        float *w = malloc((size_t)d * 4), *g = malloc((size_t)d * 4), *dw = calloc((size_t)d, 4),
              *dg = calloc((size_t)d, 4);
        tu_fill_uniform(x, nd, -2, 2, 21 + k);
        tu_fill_uniform(dh, nd, -1, 1, 22 + k);
        tu_fill_uniform(w, (size_t)d, -1, 1, 23 + k);
        tu_fill_uniform(g, (size_t)d, 0.5f, 1.5f, 24 + k);
        const float *src[1] = {x}, *W[1] = {w}, *G[1] = {g}, *TH[1] = {NULL};
        ar_depth_mix mix = {.n = n, .src = src, .w = w, .g = g, .alpha = alpha, .rstd = rstd, .H = H, .N = N, .d = d};
        const ar_backend *be = ar_backend_cpu();
        be->depth_mix_fwd(&mix, h);
        cr_expect(memcmp(h, x, nd * 4) == 0, "d %d H %d: h is not x exactly", d, H);
        be->depth_mix_cdot(cd, dh, h, H, N, d);
        const float *al[1] = {alpha}, *rs[1] = {rstd};
        ar_depth_mix_chunk own = {.C = 1, .s0 = 0, .s1 = 1, .src = src, .n = &n, .w = W, .g = G, .theta = TH,
                                  .alpha = al, .rstd = rs, .H = H, .N = N, .d = d};
        float *dsrc[1] = {dx}, *dwl[1] = {dw}, *dgl[1] = {dg}, *dtl[1] = {NULL};
        const float *dhl[1] = {dh}, *cdl[1] = {cd};
        be->depth_mix_bwd_chunk(&own, dsrc, dwl, dgl, dtl, dhl, cdl);
        cr_expect(memcmp(dx, dh, nd * 4) == 0, "d %d H %d: dsrc is not dh exactly", d, H);
        size_t nz = 0;
        for (int j = 0; j < d; j++)
            nz += dw[j] != 0.0f || dg[j] != 0.0f;
        cr_expect(nz == 0, "d %d H %d: %zu query or gain gradients not exactly 0", d, H, nz);
        /* eight such mixers of the same source in one chunk (packed heads:
         * the head-lane form, where the one mixer above went pair by
         * pair): each cancels, so dsrc is the sum of their dh in mixer
         * order exactly */
        enum { C8 = 8 };
        float *dh8[C8], *cd8[C8], *w8[C8], *g8[C8], *dw8[C8], *dg8[C8], *a8[C8], *r8[C8], *dt8[C8];
        const float *W8[C8], *G8[C8], *TH8[C8], *al8[C8], *rs8[C8], *dhl8[C8], *cdl8[C8];
        int n8[C8];
        float *sum = calloc(nd, 4);
        memset(dx, 0, nd * 4);
        for (int c = 0; c < C8; c++) {
            dh8[c] = malloc(nd * 4), cd8[c] = malloc((size_t)N * H * 4), w8[c] = malloc((size_t)d * 4);
            g8[c] = malloc((size_t)d * 4), dw8[c] = calloc((size_t)d, 4), dg8[c] = calloc((size_t)d, 4);
            a8[c] = malloc((size_t)N * H * 4), r8[c] = malloc((size_t)N * 4), dt8[c] = NULL;
            tu_fill_uniform(dh8[c], nd, -1, 1, 40 + 8 * k + (uint64_t)c);
            tu_fill_uniform(w8[c], (size_t)d, -1, 1, 140 + 8 * k + (uint64_t)c);
            tu_fill_uniform(g8[c], (size_t)d, 0.5f, 1.5f, 240 + 8 * k + (uint64_t)c);
            ar_depth_mix m8 = {.n = n, .src = src, .w = w8[c], .g = g8[c], .alpha = a8[c], .rstd = r8[c],
                               .H = H, .N = N, .d = d};
            be->depth_mix_fwd(&m8, h);
            be->depth_mix_cdot(cd8[c], dh8[c], h, H, N, d);
            W8[c] = w8[c], G8[c] = g8[c], TH8[c] = NULL, al8[c] = a8[c], rs8[c] = r8[c];
            dhl8[c] = dh8[c], cdl8[c] = cd8[c], n8[c] = n;
            for (size_t q = 0; q < nd; q++)
                sum[q] += dh8[c][q];
        }
        ar_depth_mix_chunk eight = {.C = C8, .s0 = 0, .s1 = 1, .src = src, .n = n8, .w = W8, .g = G8,
                                    .theta = TH8, .alpha = al8, .rstd = rs8, .H = H, .N = N, .d = d};
        be->depth_mix_bwd_chunk(&eight, dsrc, dw8, dg8, dt8, dhl8, cdl8);
        cr_expect(memcmp(dx, sum, nd * 4) == 0, "d %d H %d, 8 mixers: dsrc is not their dh summed exactly", d,
                  H);
        nz = 0;
        for (int c = 0; c < C8; c++)
            for (int j = 0; j < d; j++)
                nz += dw8[c][j] != 0.0f || dg8[c][j] != 0.0f;
        cr_expect(nz == 0, "d %d H %d, 8 mixers: %zu query or gain gradients not exactly 0", d, H, nz);
        for (int c = 0; c < C8; c++)
            free(dh8[c]), free(cd8[c]), free(w8[c]), free(g8[c]), free(dw8[c]), free(dg8[c]), free(a8[c]),
                free(r8[c]);
        free(sum);
        free(x), free(h), free(dh), free(dx), free(alpha), free(rstd), free(cd), free(w), free(g), free(dw),
            free(dg);
    }
}

Test(variant_ops, wsum_forward_and_backward)
{
    const ar_backend *be = cpu();
    size_t len = 40000; /* more than one reduction chunk */
    int n = 3;
    float *x[3], *dx[3], c[3] = {0.5f, -1.25f, 2.0f}, dc[3] = {0};
    float *y = malloc(len * 4), *dy = malloc(len * 4);
    for (int s = 0; s < n; s++) {
        x[s] = malloc(len * 4);
        dx[s] = calloc(len, 4);
        tu_fill_uniform(x[s], len, -1, 1, 90 + (uint64_t)s);
    }
    tu_fill_uniform(dy, len, -1, 1, 99);
    be->wsum_fwd(y, (const float *const *)x, c, n, 0, len);
    /* against the exact sums: y, n products and n - 1 additions, within
     * gamma(n) sum_s |c_s x_s|; with 0.5 x0 added, gamma(n + 2) (one more
     * product and addition) */
    double err = 0;
    for (size_t k = 0; k < len; k++) {
        double want = 0.5 * x[0][k] - 1.25 * x[1][k] + 2.0 * x[2][k];
        err = fmax(err, fabs(y[k] - want) / (tu_gamma(n) * (0.5 * fabs(x[0][k]) + 1.25 * fabs(x[1][k]) +
                                                            2.0 * fabs(x[2][k]))));
    }
    cr_expect_leq(err, 1, "wsum_fwd off by %g of its bound", err);
    be->wsum_fwd(y, (const float *const *)x, c, 1, 1, len); /* += 0.5 x0 */
    double want7 = 1.0 * x[0][7] - 1.25 * x[1][7] + 2.0 * x[2][7],
           tol7 = tu_gamma(n + 2) * (fabs(x[0][7]) + 1.25 * fabs(x[1][7]) + 2.0 * fabs(x[2][7]));
    cr_expect_leq(fabs(y[7] - want7), tol7, "wsum_fwd += : %.9g vs %.9g", y[7], want7);
    be->wsum_bwd(dx, dc, dy, (const float *const *)x, c, n, len);
    for (int s = 0; s < n; s++) {
        double dot = 0, mag = 0;
        for (size_t k = 0; k < len; k++) {
            dot += (double)dy[k] * x[s][k];
            mag += fabs((double)dy[k] * x[s][k]);
        }
        /* dc (cpu_wsum_bwd): float vectors over blocks of 2048 elements, 64
         * products in each of 32 lanes, then the lanes (5 additions), then
         * double over blocks and chunks (gamma_d(len)), rounded to float
         * once and added to 0: (gamma(69) + gamma_d(len)) sum |dy x| + u |dc| */
        double tol = (tu_gamma(69) + tu_gamma_d((double)len)) * mag + TU_U_FLOAT * fabs(dot);
        cr_expect(fabs(dc[s] - dot) <= tol, "dc[%d] %.9g vs %.9g (bound %.3g)", s, dc[s], dot, tol);
        /* dx starts at 0: dx = c dy rounded once, as the float product here */
        cr_expect_eq(dx[s][123], c[s] * dy[123], "dx[%d] %.9g vs %.9g", s, dx[s][123], c[s] * dy[123]);
        free(x[s]);
        free(dx[s]);
    }
    free(y);
    free(dy);
}

/* wmix against the plain double sums of its definition (lib/ops.def), on
 * random inputs, strided C, lengths with a tail past whole vectors and more
 * than one reduction chunk, both dx modes, dC accumulating onto random
 * values. */
static void wmix_case(int p, int n, int ldc, size_t len, int accumulate, uint64_t seed)
{
    const ar_backend *be = cpu();
    float *x[AR_WMIX_MAX_IN], *y[AR_WMIX_MAX], *dy[AR_WMIX_MAX], *dx[AR_WMIX_MAX_IN], *dx0[AR_WMIX_MAX_IN];
    size_t nc = (size_t)(p - 1) * ldc + n;
    float *C = malloc(nc * 4), *dC = malloc(nc * 4), *dC0 = malloc(nc * 4);
    tu_fill_uniform(C, nc, -1, 1, seed);
    tu_fill_uniform(dC, nc, -1, 1, seed + 1);
    memcpy(dC0, dC, nc * 4);
    for (int j = 0; j < n; j++) {
        x[j] = malloc(len * 4);
        dx[j] = malloc(len * 4);
        dx0[j] = malloc(len * 4);
        tu_fill_uniform(x[j], len, -1, 1, seed + 10 + (uint64_t)j);
        tu_fill_uniform(dx[j], len, -1, 1, seed + 20 + (uint64_t)j);
        memcpy(dx0[j], dx[j], len * 4);
    }
    for (int i = 0; i < p; i++) {
        y[i] = malloc(len * 4);
        dy[i] = malloc(len * 4);
        tu_fill_uniform(y[i], len, -5, 5, seed + 30 + (uint64_t)i); /* garbage: y is written */
        tu_fill_uniform(dy[i], len, -1, 1, seed + 40 + (uint64_t)i);
    }
    ar_wmix mix = {.p = p, .n = n, .C = C, .ldc = ldc, .len = len};
    be->wmix_fwd(&mix, y, (const float *const *)x);
    be->wmix_bwd(&mix, dx, accumulate, dC, (const float *const *)dy, (const float *const *)x);
    /* y: n products and n - 1 additions, within gamma(n) sum_j |C x_j|; dx:
     * p more terms onto dx0, gamma(p + 1) (|dx0| + sum_i |C dy_i|) */
    double ey = 0, edx = 0;
    for (size_t k = 0; k < len; k++) {
        for (int i = 0; i < p; i++) {
            double v = 0, a = 0;
            for (int j = 0; j < n; j++) {
                v += (double)C[(size_t)i * ldc + j] * x[j][k];
                a += fabs((double)C[(size_t)i * ldc + j] * x[j][k]);
            }
            ey = fmax(ey, fabs(y[i][k] - v) / (tu_gamma(n) * a));
        }
        for (int j = 0; j < n; j++) {
            double v = accumulate ? dx0[j][k] : 0, a = fabs(v);
            for (int i = 0; i < p; i++) {
                v += (double)C[(size_t)i * ldc + j] * dy[i][k];
                a += fabs((double)C[(size_t)i * ldc + j] * dy[i][k]);
            }
            edx = fmax(edx, fabs(dx[j][k] - v) / (tu_gamma(p + 1) * a));
        }
    }
    cr_expect_leq(ey, 1, "wmix_fwd p %d n %d len %zu: y off by %g of its bound", p, n, len, ey);
    cr_expect_leq(edx, 1, "wmix_bwd p %d n %d len %zu acc %d: dx off by %g of its bound", p, n, len, accumulate,
                  edx);
    /* dC (cpu_wmix_bwd): float vectors over blocks of 512 elements, 512 /
     * VL products in each of VL lanes (VL 4, 8 or 16 by the build: at most
     * 128), then the lanes (at most 4 additions), then double over blocks
     * and chunks (gamma_d(len)), rounded to float once and added to dC0:
     * (gamma(132) + gamma_d(len)) sum |dy x| + 2 u (|dC0| + |dy.x|) */
    for (int i = 0; i < p; i++)
        for (int j = 0; j < n; j++) {
            double dot = 0, mag = 0;
            for (size_t k = 0; k < len; k++) {
                dot += (double)dy[i][k] * x[j][k];
                mag += fabs((double)dy[i][k] * x[j][k]);
            }
            size_t t = (size_t)i * ldc + j;
            double want = dC0[t] + dot,
                   tol = (tu_gamma(132) + tu_gamma_d((double)len)) * mag + 2 * TU_U_FLOAT * (fabs(dC0[t]) + fabs(dot));
            cr_expect(fabs(dC[t] - want) <= tol, "wmix_bwd p %d n %d len %zu: dC[%d,%d] %.9g, want %.9g (bound %.3g)",
                      p, n, len, i, j, dC[t], want, tol);
        }
    /* entries between the rows (ldc > n) are not C's: untouched */
    for (int i = 0; i + 1 < p; i++)
        for (int t = n; t < ldc; t++)
            cr_expect_eq(dC[(size_t)i * ldc + t], dC0[(size_t)i * ldc + t], "dC[%d, %d] outside the matrix", i, t);
    /* no dx: dC alone, the same sums in the same blocks and chunks (the dx
     * sweep writes only dx), so the same bits */
    float *dC2 = malloc(nc * 4);
    memcpy(dC2, dC0, nc * 4);
    be->wmix_bwd(&mix, NULL, 0, dC2, (const float *const *)dy, (const float *const *)x);
    for (size_t t = 0; t < nc; t++)
        cr_expect_eq(dC2[t], dC[t], "dC with and without dx differ at %zu", t);
    free(dC2);
    for (int j = 0; j < n; j++) {
        free(x[j]);
        free(dx[j]);
        free(dx0[j]);
    }
    for (int i = 0; i < p; i++) {
        free(y[i]);
        free(dy[i]);
    }
    free(C);
    free(dC);
    free(dC0);
}

Test(variant_ops, wmix_forward_and_backward)
{
    wmix_case(4, 5, 5, 40000 + 7, 0, 500); /* mHC m = 4 forward shape; > 2 chunks, a tail */
    wmix_case(5, 4, 5, 37 * 72, 0, 510);   /* mHC's input_bwd shape */
    wmix_case(4, 1, 5, 1000 + 3, 1, 520);  /* mHC's dv_l shape (a column), accumulating */
    wmix_case(3, 3, 3, 5, 1, 530);         /* shorter than one vector */
    wmix_case(AR_WMIX_MAX, AR_WMIX_MAX, AR_WMIX_MAX + 2, 16384, 0, 540);
    wmix_case(4, 33, 33, 64 * 64 + 3, 1, 550); /* static's chunk: a tail of 3 */
    wmix_case(2, AR_WMIX_MAX_IN, AR_WMIX_MAX_IN + 1, 100, 0, 560);
}

/* ---------- tiny models ---------- */

static ar_model_cfg tiny(ar_res_kind kind)
{
    ar_config c;
    ar_config_defaults(&c);
    ar_model_cfg m = c.model;
    m.d_model = 12;
    m.n_layer = 2;
    m.n_head = 2;
    m.d_ff = 20;
    m.seq_len = 6;
    m.residual.kind = kind;
    m.residual.block_size = kind == AR_RES_BLOCK ? 2 : 0;
    return m;
}

/* The config must pass validation: every case here is a config a user can write. */
static void valid(const ar_model_cfg *mc)
{
    ar_config c;
    ar_config_defaults(&c);
    c.model = *mc;
    ar_err e;
    cr_assert_eq(ar_config_validate(&c, &e), 0, "%s", e.msg);
}

/* As tests/test_model.c: directional finite differences per tensor. */
static void fd_check(ar_model_cfg mc, const char *what, const char *must_have)
{
    valid(&mc);
    tu_model_fd_check(mc, what, must_have);
}

Test(variants_fd, sigmoid)
{
    ar_model_cfg c = tiny(AR_RES_FULL);
    c.residual.score = AR_SCORE_SIGMOID;
    fd_check(c, "full sigmoid", "blocks.1.mlp_res.query");
}
Test(variants_fd, no_key_norm)
{
    ar_model_cfg c = tiny(AR_RES_FULL);
    c.residual.key_norm = AR_KEY_NORM_OFF;
    fd_check(c, "full key_norm false", "final_res.query");
}
Test(variants_fd, block_no_key_norm)
{
    ar_model_cfg c = tiny(AR_RES_BLOCK);
    c.residual.key_norm = AR_KEY_NORM_OFF;
    fd_check(c, "block key_norm false", "final_res.query");
}
/* the plain form (no scale); the stabilised ones in test_query_stabilisers.c */
Test(variants_fd, input_query)
{
    ar_model_cfg c = tiny(AR_RES_FULL);
    c.residual.query = AR_QUERY_INPUT;
    c.residual.query_scale = AR_QUERY_SCALE_NONE;
    c.residual.query_gate = 0;
    fd_check(c, "full query input", "blocks.0.mlp_res.query.weight");
}
Test(variants_fd, block_input_query_sigmoid)
{
    ar_model_cfg c = tiny(AR_RES_BLOCK);
    c.residual.query = AR_QUERY_INPUT;
    c.residual.score = AR_SCORE_SIGMOID;
    fd_check(c, "block query input sigmoid", "final_res.query.weight");
}
Test(variants_fd, static_) { fd_check(tiny(AR_RES_STATIC), "static", "blocks.1.attn_res.logits"); }
Test(variants_fd, rescaled) { fd_check(tiny(AR_RES_RESCALED), "rescaled", "lm_head.weight"); }
Test(variants_fd, denseformer) { fd_check(tiny(AR_RES_DENSEFORMER), "denseformer", "blocks.1.dwa.prev"); }
Test(variants_fd, swa)
{
    ar_model_cfg c = tiny(AR_RES_SWA);
    c.residual.window = 2;
    fd_check(c, "swa 2", "blocks.1.attn_res.query");
}
Test(variants_fd, heads)
{
    ar_model_cfg c = tiny(AR_RES_FULL);
    c.residual.heads = 3;
    fd_check(c, "full heads 3", "final_res.norm.weight");
}
Test(variants_fd, block_heads)
{
    ar_model_cfg c = tiny(AR_RES_BLOCK);
    c.residual.heads = 2;
    fd_check(c, "block heads 2", "final_res.norm.weight");
}
Test(variants_fd, mhc)
{
    ar_model_cfg c = tiny(AR_RES_MHC);
    c.residual.streams = 3;
    fd_check(c, "mhc 3", "blocks.0.attn_hc.res");
}
Test(variants_fd, mhc4)
{
    ar_model_cfg c = tiny(AR_RES_MHC);
    fd_check(c, "mhc 4", "blocks.1.mlp_hc.post");
}

/* ---------- identities ---------- */

/* Forward + backward of two configs; a's weights random, b's copied by name
 * (tensors only b has are zeroed).  Returns tu_model_diff, relative to
 * the model's magnitudes; *bound (or NULL) gets tu_model_mixing_bound of
 * model a: the rounding two schedules of the same depth mixing may differ
 * by.  Two different models differ by 1e-1 and more on this measure, so
 * the checks that a variant really changes the model ask for 1e-2, far
 * above any rounding bound here (below 1e-3). */
static double compare(ar_model_cfg a, ar_model_cfg b, int gen_a, int gen_b, int init, double *bound)
{
    ar_model *ma, *mb;
    ar_err e;
    int B = 2;
    ar_depth_general = gen_a;
    cr_assert_eq(ar_model_create(&ma, &a, cpu(), B, &e), 0, "%s", e.msg);
    ar_depth_general = gen_b;
    cr_assert_eq(ar_model_create(&mb, &b, cpu(), B, &e), 0, "%s", e.msg);
    ar_depth_general = 0;
    if (init)
        ar_model_init(ma, 3);
    else
        tu_model_randomize(ma, 11);
    ar_model_zero_grad(mb);
    for (int j = 0; j < mb->pt.n; j++) {
        int i = ar_params_find(&ma->pt, mb->pt.p[j].name);
        if (i >= 0)
            memcpy(ar_model_param(mb, j), ar_model_param(ma, i), mb->pt.p[j].numel * sizeof(float));
        else
            memset(ar_model_param(mb, j), 0, mb->pt.p[j].numel * sizeof(float));
    }
    double d = tu_model_diff(ma, mb, B);
    if (bound)
        *bound = tu_model_mixing_bound(ma, B);
    ar_model_free(ma);
    ar_model_free(mb);
    return d;
}

/* The general mixer's backward in chunks (lib/residual_mixer.c) against
 * one mixer at a time (ar_depth_chunk 1), on random weights and tokens:
 * every kind and flag it serves, L = 8 sublayers so that chunks of 3 and 4
 * leave a shorter last chunk, block kinds with blocks of 3 that chunks
 * cross.  Loss, logits and every gradient agree to float rounding. */
/* Models a and b of config c, built with the given ar_depth_chunk and
 * ar_depth_general, the same random weights (seed): their difference in
 * loss, logits and gradients (tu_model_diff) over the rounding two
 * schedules of the same mixing may differ by (tu_model_mixing_bound), so
 * below 1 passes.  The two parameter lists must match name for name. */
static double compare_builds(ar_model_cfg c, int chunk_a, int general_a, int chunk_b, int general_b,
                             uint64_t seed)
{
    ar_model *ma, *mb;
    ar_err e;
    int B = 2, saved = ar_depth_chunk, saved_general = ar_depth_general;
    ar_depth_chunk = chunk_a, ar_depth_general = general_a;
    cr_assert_eq(ar_model_create(&ma, &c, cpu(), B, &e), 0, "%s", e.msg);
    ar_depth_chunk = chunk_b, ar_depth_general = general_b;
    cr_assert_eq(ar_model_create(&mb, &c, cpu(), B, &e), 0, "%s", e.msg);
    ar_depth_chunk = saved, ar_depth_general = saved_general;
    cr_assert_eq(ma->pt.n, mb->pt.n);
    for (int j = 0; j < ma->pt.n; j++)
        cr_assert_str_eq(ma->pt.p[j].name, mb->pt.p[j].name);
    tu_model_randomize(ma, seed);
    /* at widths past tiny()'s 12, matrices and queries scaled by sqrt(12/d):
     * weights of scale 1/sqrt(d), activations and logits of the size they
     * have at d 12, as tu_model_mixing_bound assumes */
    float sc = sqrtf(12.0f / (float)c.d_model);
    for (int j = 0; j < ma->pt.n && c.d_model > 12; j++)
        if (ma->pt.p[j].init != AR_INIT_ONES)
            for (size_t q = 0; q < ma->pt.p[j].numel; q++)
                ar_model_param(ma, j)[q] *= sc;
    ar_model_zero_grad(mb);
    for (int j = 0; j < mb->pt.n; j++)
        memcpy(ar_model_param(mb, j), ar_model_param(ma, j), mb->pt.p[j].numel * sizeof(float));
    double d = tu_model_diff(ma, mb, B) / tu_model_mixing_bound(ma, B);
    ar_model_free(ma);
    ar_model_free(mb);
    return d;
}

static double compare_chunks(ar_model_cfg c, int ca, int cb)
{
    return compare_builds(c, ca, ar_depth_general, cb, ar_depth_general, 17);
}

Test(variants, mixer_backward_in_chunks_equals_one_at_a_time)
{
    struct {
        const char *what;
        ar_res_kind kind;
        int sigmoid, no_key_norm, heads, block, window;
    } cases[] = {
        {"sigmoid", AR_RES_FULL, 1, 0, 1, 0, 0},
        {"no-key-norm", AR_RES_FULL, 0, 1, 1, 0, 0},
        {"full heads 2", AR_RES_FULL, 0, 0, 2, 0, 0},
        {"static", AR_RES_STATIC, 0, 0, 1, 0, 0},
        {"rescaled", AR_RES_RESCALED, 0, 0, 1, 0, 0},
        {"block heads 3 S=3", AR_RES_BLOCK, 0, 0, 3, 3, 0},
        {"block no-key-norm S=3", AR_RES_BLOCK, 0, 1, 1, 3, 0},
        {"block sigmoid S=2", AR_RES_BLOCK, 1, 0, 1, 2, 0},
        /* windows that shift by a place a mixer: shared runs with offsets,
         * own sources before and after them; window 2 shares only v_0
         * across chunks of 3 and 4 */
        {"swa window 2", AR_RES_SWA, 0, 0, 1, 0, 2},
        {"swa window 3 heads 2", AR_RES_SWA, 0, 0, 2, 0, 3},
        {"swa window 5 sigmoid", AR_RES_SWA, 1, 0, 1, 0, 5},
        {"swa window 4 no-key-norm", AR_RES_SWA, 0, 1, 1, 0, 4},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        ar_model_cfg c = tiny(cases[i].kind);
        c.n_layer = 4;
        if (cases[i].sigmoid)
            c.residual.score = AR_SCORE_SIGMOID;
        if (cases[i].no_key_norm)
            c.residual.key_norm = AR_KEY_NORM_OFF;
        c.residual.heads = cases[i].heads;
        if (cases[i].block)
            c.residual.block_size = cases[i].block;
        if (cases[i].window)
            c.residual.window = cases[i].window;
        valid(&c);
        /* chunks of 2 to 4, then the kind's own choice (0: swa's 2 or 3
         * here, static's 8) */
        for (int cb = 2; cb <= 5; cb++) {
            double d = compare_chunks(c, 1, cb % 5);
            cr_expect_lt(d, 1, "%s: chunks of %d differ from one mixer at a time by %g of the bound", cases[i].what,
                         cb % 5, d);
        }
    }
}

/* static mixes by weighted sums of whole buffers (wmix over a chunk's
 * shared sources, wsum over each mixer's own; lib/residual_mixer.c) where
 * the general mixer forms every token's weights and sums: against it on
 * random logits, weights and tokens, chunks of 1 to 4 and 8 mixers (and
 * the default) and a depth whose chunks leave a remainder.  Loss, logits and every gradient agree
 * within the mixing bound. */
Test(variants, static_weighted_sums_equal_general_mixer)
{
    for (int layers = 3; layers <= 4; layers++) {
        ar_model_cfg c = tiny(AR_RES_STATIC);
        c.n_layer = layers;
        valid(&c);
        /* chunks of 1 to 4 and 8, and each build's own choice (0: 8 for
         * the weighted sums, 4 for the per-token mixer) */
        int chunks[] = {1, 2, 3, 4, 8, 0};
        for (size_t k = 0; k < sizeof chunks / sizeof *chunks; k++) {
            int chunk = chunks[k];
            double d = compare_builds(c, chunk, 0, chunk, 1, 29);
            cr_expect_lt(d, 1, "%d layers, chunks of %d: weighted sums differ from the general mixer by %g of the bound",
                         layers, chunk, d);
        }
    }
}

/* A step's gradients are those of a fresh model: nothing a scheme keeps
 * from the backward before (a gradient buffer that is cleared, or written
 * first, rather than added into) leaks into the next one.  Model a runs
 * one batch, clears its gradients and runs another; model b, with the
 * same weights, only the second: the same code on the same values, so the
 * same bits.  Random weights and tokens; every scheme, the general
 * mixer's block and full paths too (heads, ar_depth_general). */
static void no_leak_case(ar_model_cfg c, int general, const char *what)
{
    int32_t in1[64], tg1[64], in2[64], tg2[64];
    int saved = ar_depth_general;
    ar_depth_general = general;
    ar_model *a = tu_model_random(c, 2, 41, 6, in1, tg1, 64);
    ar_model *b = tu_model_random(c, 2, 41, 7, in2, tg2, 64);
    ar_depth_general = saved;
    ar_model_forward_backward(a, in1, tg1, 2, 1.0f, NULL);
    ar_model_zero_grad(a);
    double la = ar_model_forward_backward(a, in2, tg2, 2, 1.0f, NULL);
    double lb = ar_model_forward_backward(b, in2, tg2, 2, 1.0f, NULL);
    cr_expect(la == lb, "%s: loss %.17g after another step, %.17g fresh", what, la, lb);
    size_t bad = 0, first = 0;
    for (size_t j = a->pt.total; j-- > 0;)
        if (a->grads[j] != b->grads[j])
            bad++, first = j;
    cr_expect(bad == 0, "%s: %zu of %zu gradients differ from a fresh model's (first at %zu: %.9g, %.9g)", what,
              bad, a->pt.total, first, a->grads[first], b->grads[first]);
    ar_model_free(a);
    ar_model_free(b);
}

Test(variants, a_step_leaves_nothing_to_the_next)
{
    ar_model_cfg c;
    no_leak_case(tiny(AR_RES_BASELINE), 0, "baseline");
    no_leak_case(tiny(AR_RES_FULL), 0, "full");
    no_leak_case(tiny(AR_RES_BLOCK), 0, "block");
    no_leak_case(tiny(AR_RES_FULL), 1, "full, general mixer");
    no_leak_case(tiny(AR_RES_BLOCK), 1, "block, general mixer");
    c = tiny(AR_RES_BLOCK);
    c.residual.heads = 2;
    no_leak_case(c, 0, "block, 2 heads");
    c = tiny(AR_RES_BLOCK);
    c.residual.query = AR_QUERY_INPUT;
    no_leak_case(c, 0, "block, input query");
    c = tiny(AR_RES_SWA);
    c.residual.window = 2;
    no_leak_case(c, 0, "swa");
    no_leak_case(tiny(AR_RES_STATIC), 0, "static");
    no_leak_case(tiny(AR_RES_RESCALED), 0, "rescaled");
    no_leak_case(tiny(AR_RES_DENSEFORMER), 0, "denseformer");
    no_leak_case(tiny(AR_RES_MHC), 0, "mhc");
}

/* With heads, the two diagnostics read alpha's (token, head) rows alike:
 * mean_weights is the mean of token_weights' N H rows (rows of n that sum
 * to 1, each a softmax, so a weight read from another head or source
 * would show), within the float rounding of the two means' sums. */
Test(variants, heads_mean_weights_are_the_mean_of_their_rows)
{
    ar_model_cfg c = tiny(AR_RES_FULL);
    c.residual.heads = 3;
    int32_t in[64], tg[64];
    ar_model *m = tu_model_random(c, 2, 37, 5, in, tg, 64);
    ar_model_forward(m, in, tg, 2, NULL);
    int N = 2 * m->T, H = 3;
    for (int l = 1; l <= m->L + 1; l++) {
        int n = m->res->vt->n_sources(m->res, l);
        float mean[64], *rows = malloc((size_t)N * H * n * sizeof(float));
        m->res->vt->mean_weights(m->res, l, N, mean);
        cr_assert_eq(m->res->vt->token_weights(m->res, l, N, rows), (long)N * H);
        for (long t = 0; t < (long)N * H; t++) {
            double sum = 0;
            for (int i = 0; i < n; i++)
                sum += rows[(size_t)t * n + i];
            cr_expect(fabs(sum - 1) <= tu_gamma(n + 2), "mixer %d row %ld sums to %.9g", l, t, sum);
        }
        for (int i = 0; i < n; i++) {
            double want = 0;
            for (long t = 0; t < (long)N * H; t++)
                want += rows[(size_t)t * n + i];
            want /= (double)N * H;
            cr_expect(fabs(mean[i] - want) <= 2 * TU_U_FLOAT * want, "mixer %d source %d: %.9g, want %.9g", l, i,
                      mean[i], want);
        }
        free(rows);
    }
    ar_model_free(m);
}

/* static's weights as the diagnostics read them: softmax(theta) of each
 * mixer, the same row for every token (the exps in double, rounded once:
 * within 2 u) */
Test(variants, static_weights_are_the_softmax_of_the_logits)
{
    int32_t in[64], tg[64];
    ar_model *m = tu_model_random(tiny(AR_RES_STATIC), 2, 31, 5, in, tg, 64);
    ar_model_forward(m, in, tg, 2, NULL);
    int N = 2 * m->T;
    for (int l = 1; l <= m->L + 1; l++) {
        char nm[64];
        if (l == m->L + 1)
            snprintf(nm, sizeof nm, "final_res.logits");
        else
            snprintf(nm, sizeof nm, "blocks.%d.%s.logits", (l - 1) / 2, l % 2 ? "attn_res" : "mlp_res");
        int j = ar_params_find(&m->pt, nm);
        cr_assert_geq(j, 0, "no parameter %s", nm);
        const float *th = ar_model_param(m, j);
        int n = m->res->vt->n_sources(m->res, l);
        cr_assert_eq((size_t)n, m->pt.p[j].numel);
        double mx = th[0], sum = 0;
        for (int i = 1; i < n; i++)
            mx = fmax(mx, th[i]);
        for (int i = 0; i < n; i++)
            sum += exp(th[i] - mx);
        float mean[64], *rows = malloc((size_t)N * n * sizeof(float));
        m->res->vt->mean_weights(m->res, l, N, mean);
        cr_assert_eq(m->res->vt->token_weights(m->res, l, N, rows), N);
        for (int i = 0; i < n; i++) {
            double want = exp(th[i] - mx) / sum;
            cr_expect(fabs(mean[i] - want) <= 2 * TU_U_FLOAT * want, "mixer %d source %d: %.9g, want %.9g", l, i,
                      mean[i], want);
            for (int t = 0; t < N; t++)
                cr_expect_eq(rows[(size_t)t * n + i], mean[i], "mixer %d token %d source %d", l, t, i);
        }
        free(rows);
    }
    ar_model_free(m);
}

/* key_norm: false (rstd 1, no gain) and score: sigmoid run on the two-phase
 * mixer of plain AttnRes: against the general one-phase mixer on random
 * weights and tokens, Full and Block (blocks of 2 and 3 that chunks cross),
 * chunks of 1 to 4 mixers, each flag alone and both.
 * Loss, logits and every gradient agree to float rounding; the parameter
 * lists (names, order) are the same, so checkpoints move between them. */
static double compare_mixers(ar_model_cfg c, int chunk) { return compare_builds(c, chunk, 0, chunk, 1, 23); }

Test(variants, two_phase_flags_equal_general_mixer)
{
    int blocks[] = {1, 3, 2};
    const char *flag[] = {"key_norm false", "sigmoid", "sigmoid, key_norm false"};
    for (int f = 0; f < 3; f++)
        for (size_t i = 0; i < sizeof blocks / sizeof *blocks; i++) {
            ar_model_cfg c = tiny(blocks[i] == 1 ? AR_RES_FULL : AR_RES_BLOCK);
            c.n_layer = 4;
            if (f != 1)
                c.residual.key_norm = AR_KEY_NORM_OFF;
            if (f != 0)
                c.residual.score = AR_SCORE_SIGMOID;
            if (blocks[i] > 1)
                c.residual.block_size = blocks[i];
            valid(&c);
            for (int chunk = 1; chunk <= 4; chunk++) {
                double d = compare_mixers(c, chunk);
                cr_expect_lt(d, 1, "%s, S = %d, chunks of %d: two-phase differs from the general mixer by %g of the bound",
                             flag[f], blocks[i], chunk, d);
            }
        }
}

/* Rows of the widths where the CPU kernels change course (lib/cpu/
 * depth_cpu.c): d 144 (phase 1 in tiles; u.x in the backward by a dot
 * product, with a tail of the vector width) and d 272 (u.x from the saved
 * weight by logs), softmax and sigmoid with key norm, Full and Block.  The
 * bound grows with the width: the logits and key norms are d-term sums
 * (tu_model_mixing_bound). */
Test(variants, two_phase_wide_rows_equal_general_mixer)
{
    int widths[] = {144, 272};
    for (int wi = 0; wi < 2; wi++)
        for (int f = 0; f < 2; f++)
            for (int S = 1; S <= 2; S++) {
                ar_model_cfg c = tiny(S == 1 ? AR_RES_FULL : AR_RES_BLOCK);
                c.d_model = widths[wi];
                c.d_ff = 64;
                c.n_layer = 3;
                if (f)
                    c.residual.score = AR_SCORE_SIGMOID;
                valid(&c);
                for (int chunk = 2; chunk <= 4; chunk += 2) {
                    double d = compare_mixers(c, chunk);
                    cr_expect_lt(d, 1, "d %d, %s, S = %d, chunks of %d: two-phase differs from the general mixer by %g of the bound",
                                 widths[wi], f ? "sigmoid" : "softmax", S, chunk, d);
                }
            }
}

Test(variants, rescaled_gives_uniform_weights)
{
    int32_t in[64], tg[64];
    ar_model *m = tu_model_random(tiny(AR_RES_RESCALED), 2, 2, 9, in, tg, 64);
    cr_expect_eq(ar_model_nonembed_params(m) > 0, 1);
    ar_model_forward(m, in, tg, 2, NULL);
    for (int l = 1; l <= m->L + 1; l++) {
        int n = m->res->vt->n_sources(m->res, l);
        cr_expect_eq(n, l == m->L + 1 ? m->L + 1 : l, "mixer %d has %d sources", l, n);
        float w[64];
        m->res->vt->mean_weights(m->res, l, 2 * m->T, w);
        /* every weight is 1/n rounded once (the softmax of n zeros), and
         * the mean over 2T tokens adds 2T equal floats and divides: within
         * gamma(2T + 1) of 1/n */
        for (int i = 0; i < n; i++)
            cr_expect_float_eq(w[i], 1.0f / n, tu_gamma(2 * m->T + 1) / n, "mixer %d source %d: %g", l, i, w[i]);
        /* h_l = (v_0 + ... + v_{l-1}) / n: with the weight 1/n rounded
         * once, n products and n - 1 additions, within gamma(n + 1) of
         * sum |v_i| / n */
        if (l <= m->L && m->res_in[l]) {
            int N = 2 * m->T, d = m->d;
            double err = 0;
            for (int t = 0; t < N * d; t++) {
                double want = 0, mag = 0;
                for (int i = 0; i < n; i++) {
                    want += m->res->vt->source(m->res, l, i)[t];
                    mag += fabs(m->res->vt->source(m->res, l, i)[t]);
                }
                err = fmax(err, fabs(m->res_in[l][t] - want / n) / (tu_gamma(n + 1) * mag / n));
            }
            cr_expect_leq(err, 1, "mixer %d: h differs from the mean of its sources by %g of the bound", l, err);
        }
    }
    ar_model_free(m);
}

/* Static's weights are the softmax of its zero logits, 1/n, rescaled's
 * 1/n too; static mixes its sources with them (a weighted sum), rescaled
 * keeps a running sum and scales it (lib/residual_mixer.c), and in the
 * backward static adds alpha dh into each source where rescaled keeps one
 * running gradient: the same mixing in two orders of rounding, within the
 * bound two schedules of one mixing may differ by. */
Test(variants, static_with_zero_logits_equals_rescaled)
{
    ar_model_cfg s = tiny(AR_RES_STATIC), r = tiny(AR_RES_RESCALED);
    /* r's weights random, static's logits (only static has them) zero */
    double tol, d = compare(r, s, 0, 0, 0, &tol);
    cr_expect_lt(d, tol, "static with zero logits differs from rescaled by %g (bound %g)", d, tol);
    /* s's weights random, its logits too */
    cr_expect_gt(compare(s, r, 0, 0, 0, NULL), 1e-2, "static with random logits should differ from rescaled");
}

Test(variants, swa_covering_all_layers_equals_full)
{
    ar_model_cfg s = tiny(AR_RES_SWA), f = tiny(AR_RES_FULL);
    s.residual.window = 4; /* L = 4 */
    double tol, d = compare(f, s, 0, 0, 0, &tol);
    cr_expect_lt(d, tol, "swa window L differs from full by %g (bound %g)", d, tol);
    s.residual.window = 2;
    cr_expect_gt(compare(f, s, 0, 0, 0, NULL), 1e-2, "swa window 2 should differ from full");
}

Test(variants, one_head_equals_single_head)
{
    /* full through the general mixer (heads: 1) against the two-phase one */
    ar_model_cfg f = tiny(AR_RES_FULL), b = tiny(AR_RES_BLOCK);
    double tol, d = compare(f, f, 1, 0, 0, &tol);
    cr_expect_lt(d, tol, "general full differs from two-phase full by %g (bound %g)", d, tol);
    d = compare(b, b, 1, 0, 0, &tol);
    cr_expect_lt(d, tol, "general block differs from two-phase block by %g (bound %g)", d, tol);
    ar_model_cfg h = f;
    h.residual.heads = 2;
    cr_expect_gt(compare(f, h, 0, 0, 0, NULL), 1e-2, "2 heads should differ from 1");
}

/* At initialisation DWA's weights are 1 on the block's own output and 0 on
 * every earlier one: x * 1 and + 0 * y are exact in floating point, and
 * everything else is the baseline's code on the same shapes and threads,
 * so the two agree bit for bit. */
Test(variants, denseformer_at_init_equals_baseline)
{
    double d = compare(tiny(AR_RES_DENSEFORMER), tiny(AR_RES_BASELINE), 0, 0, 1, NULL);
    cr_expect_eq(d, 0.0, "denseformer at initialisation differs from baseline by %g", d);
    cr_expect_gt(compare(tiny(AR_RES_DENSEFORMER), tiny(AR_RES_BASELINE), 0, 0, 0, NULL), 1e-2,
                 "random DWA weights should differ from baseline");
}

Test(variants, mhc_hres_is_doubly_stochastic)
{
    for (int m = 1; m <= 5; m++) {
        int np = ar_mhc_perms(m, NULL);
        int want = 1;
        for (int k = 2; k <= m; k++)
            want *= k;
        cr_expect_eq(np, want, "%d! = %d permutations, got %d", m, want, np);
        float r[120];
        tu_fill_uniform(r, (size_t)np, -4, 4, 40 + (uint64_t)m);
        double R[25];
        ar_mhc_hres(r, m, R);
        for (int i = 0; i < m; i++) {
            double rs = 0, cs = 0;
            for (int j = 0; j < m; j++) {
                rs += R[i * m + j];
                cs += R[j * m + i];
                cr_expect_geq(R[i * m + j], 0.0);
            }
            /* R (in double) holds each weight pi_k = exp(r_k - max) / sum
             * once per row and column: exp within 1 ulp (2 u), its np-term
             * sum and the division put sum_k pi_k within gamma_d(np + 5) of 1,
             * and R's entries and this sum add the np weights in another
             * order: gamma_d(2 np + 5) */
            double tol = tu_gamma_d(2.0 * np + 5);
            cr_expect(fabs(rs - 1) <= tol && fabs(cs - 1) <= tol, "m %d row/col %d sums %.17g %.17g", m, i, rs,
                      cs);
        }
    }
}

Test(variants, parameters_are_counted)
{
    /* the variants' tensors count as non-embedding parameters (FLOPs 6N) */
    ar_model_cfg b = tiny(AR_RES_BASELINE), s = tiny(AR_RES_STATIC), q = tiny(AR_RES_FULL),
                 h = tiny(AR_RES_MHC);
    q.residual.query = AR_QUERY_INPUT;
    q.residual.query_gate = 0; /* the gate adds q_m [d] and g_m [1]: test_query_stabilisers.c */
    ar_model *mb, *ms, *mq, *mh;
    ar_err e;
    cr_assert_eq(ar_model_create(&mb, &b, cpu(), 1, &e), 0);
    cr_assert_eq(ar_model_create(&ms, &s, cpu(), 1, &e), 0);
    cr_assert_eq(ar_model_create(&mq, &q, cpu(), 1, &e), 0);
    cr_assert_eq(ar_model_create(&mh, &h, cpu(), 1, &e), 0);
    /* static: mixer l has l sources (l = 1..4), final 5: 1+2+3+4+5 = 15 logits */
    cr_expect_eq(ar_model_nonembed_params(ms) - ar_model_nonembed_params(mb), 15);
    /* query input: 5 mixers x (d x d + d gain) */
    cr_expect_eq(ar_model_nonembed_params(mq) - ar_model_nonembed_params(mb), 5 * (144 + 12));
    /* mhc 4 streams: 4 sublayers x (4 + 4 + 24) */
    cr_expect_eq(ar_model_nonembed_params(mh) - ar_model_nonembed_params(mb), 4 * 32);
    ar_model_free(mb), ar_model_free(ms), ar_model_free(mq), ar_model_free(mh);
}

/* ---------- config ---------- */

Test(variants, config_keys_parse_and_round_trip)
{
    const char *y = "model:\n  residual:\n    kind: block\n    block_size: 2\n    key_norm: false\n"
                    "    heads: 4\n    score: sigmoid\n    query: input\n";
    ar_config c, d;
    ar_err e;
    ar_config_defaults(&c);
    cr_assert_eq(ar_config_parse(&c, y, strlen(y), "t.yaml", &e), 0, "%s", e.msg);
    cr_expect_eq(c.model.residual.key_norm, AR_KEY_NORM_OFF);
    cr_expect_eq(c.model.residual.heads, 4);
    cr_expect_eq(c.model.residual.score, AR_SCORE_SIGMOID);
    cr_expect_eq(c.model.residual.query, AR_QUERY_INPUT);
    char *out = ar_config_to_yaml(&c);
    ar_config_defaults(&d);
    cr_assert_eq(ar_config_parse(&d, out, strlen(out), "resolved", &e), 0, "%s", e.msg);
    char buf[256];
    cr_expect_eq(ar_config_diff(&c, &d, buf, sizeof buf), 0, "%s", buf);
    free(out);
    /* the plain config writes none of the new keys */
    ar_config_defaults(&c);
    out = ar_config_to_yaml(&c);
    cr_expect_null(strstr(out, "heads"));
    cr_expect_null(strstr(out, "streams"));
    free(out);
}

Test(variants, config_rejects_misplaced_flags)
{
    ar_config c;
    ar_err e;
    ar_config_defaults(&c);
    cr_assert_eq(ar_config_set(&c, "model.residual.kind=swa", &e), 0, "%s", e.msg);
    cr_expect_neq(ar_config_validate(&c, &e), 0);
    cr_expect(strstr(e.msg, "window"), "%s", e.msg);
    ar_config_defaults(&c);
    cr_assert_eq(ar_config_set(&c, "model.residual.kind=mhc", &e), 0);
    cr_assert_eq(ar_config_set(&c, "model.residual.key_norm=false", &e), 0);
    cr_expect_neq(ar_config_validate(&c, &e), 0);
    cr_expect(strstr(e.msg, "key_norm"), "%s", e.msg);
    ar_config_defaults(&c);
    cr_assert_eq(ar_config_set(&c, "model.residual.heads=5", &e), 0);
    cr_expect_neq(ar_config_validate(&c, &e), 0); /* 192 % 5 */
    cr_expect(strstr(e.msg, "heads"), "%s", e.msg);
    ar_config_defaults(&c);
    cr_expect_neq(ar_config_set(&c, "model.residual.score=tanh", &e), 0);
    cr_expect(strstr(e.msg, "softmax|sigmoid"), "%s", e.msg);
}

/* ---------- the mixing matrix of the parameterised schemes ---------- */

/* h_l (as the model formed it) = sum_i M[l][i] v_i with M from the
 * parameters (lib/mixing.c), for every sublayer and h_out.  The float
 * forward builds h_l through at most L + 1 mixes, each a sum of at most
 * L + 1 (DenseFormer's DWA, plus the block's two residual additions) or
 * m + 1 (mHC's streams, with coefficients rounded from double) terms, so
 * each product of coefficients and v_i in its expansion is rounded at most
 * K = (L + 1)(L + m + 3) times: h_l is within gamma(K) sum_i |M|[l][i] |v_i|
 * of M v, |M| the matrix of the coefficients' absolute values.  mHC's are
 * non-negative (sigmoid, 2 sigmoid, a convex combination of permutations),
 * so |M| = M; DenseFormer's are the DWA weights themselves, of either sign:
 * |M| is M of their absolute values. */
static void mixing_matches_forward(ar_model_cfg c)
{
    int32_t in[64], tg[64];
    ar_model *m = tu_model_random(c, 1, 21, 4, in, tg, 64);
    ar_err e;
    ar_model_forward(m, in, tg, 1, NULL);
    int L = m->L, N = m->T, d = m->d, streams = c.residual.kind == AR_RES_MHC ? c.residual.streams : 0;
    size_t nm = (size_t)(L + 1) * (L + 1);
    double *M = calloc(nm, sizeof *M), *Ma = calloc(nm, sizeof *Ma);
    cr_assert_eq(ar_mixing_matrix(&c, m, NULL, M, &e), 0, "%s", e.msg);
    if (c.residual.kind == AR_RES_DENSEFORMER) {
        for (int i = 0; i < m->pt.n; i++)
            if (strstr(m->pt.p[i].name, ".dwa."))
                for (size_t j = 0; j < m->pt.p[i].numel; j++)
                    ar_model_param(m, i)[j] = fabsf(ar_model_param(m, i)[j]);
        cr_assert_eq(ar_mixing_matrix(&c, m, NULL, Ma, &e), 0, "%s", e.msg);
    } else {
        for (size_t k = 0; k < nm; k++)
            Ma[k] = fabs(M[k]);
    }
    double K = (double)(L + 1) * (L + streams + 3);
    const ar_residual_vt *v = m->res->vt;
    for (int l = 1; l <= L + 1; l++) {
        const float *h = l <= L ? m->res_in[l] : m->res_hout;
        cr_assert(h);
        double err = 0;
        for (int t = 0; t < N * d; t++) {
            double want = 0, mag = 0;
            for (int i = 0; i < l; i++) {
                float vi = (i == 0 ? v->embed_out(m->res) : v->output_buf(m->res, i))[t];
                want += M[(size_t)(l - 1) * (L + 1) + i] * vi;
                mag += Ma[(size_t)(l - 1) * (L + 1) + i] * fabs(vi);
            }
            err = fmax(err, fabs(h[t] - want) / (tu_gamma(K) * mag));
        }
        cr_expect_leq(err, 1, "%s mixer %d: h differs from M v by %g of the bound", ar_res_kind_name(c.residual.kind),
                      l, err);
    }
    free(M);
    free(Ma);
    ar_model_free(m);
}

Test(variants, mhc_mixing_matrix_matches_forward) { mixing_matches_forward(tiny(AR_RES_MHC)); }
Test(variants, denseformer_mixing_matrix_matches_forward) { mixing_matches_forward(tiny(AR_RES_DENSEFORMER)); }

/* A second backward of the same batch gives the same gradients, bit for
 * bit (the same code on the same values and threads): no scheme carries
 * state from one backward into the next (a running gradient that the
 * first mixer should overwrite, a buffer left unzeroed). */
Test(variants, second_backward_equals_first)
{
    ar_res_kind kinds[] = {AR_RES_BASELINE, AR_RES_FULL,        AR_RES_BLOCK, AR_RES_STATIC,
                           AR_RES_DENSEFORMER, AR_RES_SWA, AR_RES_MHC, AR_RES_RESCALED};
    for (size_t k = 0; k < sizeof kinds / sizeof *kinds; k++) {
        ar_model_cfg c = tiny(kinds[k]);
        if (kinds[k] == AR_RES_SWA)
            c.residual.window = 2;
        valid(&c);
        int32_t in[64], tg[64];
        ar_model *m = tu_model_random(c, 2, 5, 13, in, tg, 64);
        size_t n = m->pt.total;
        float *g1 = malloc(n * sizeof(float));
        ar_model_zero_grad(m);
        double l1 = ar_model_forward_backward(m, in, tg, 2, 1.0f, NULL);
        memcpy(g1, m->grads, n * sizeof(float));
        ar_model_zero_grad(m);
        double l2 = ar_model_forward_backward(m, in, tg, 2, 1.0f, NULL);
        cr_expect(l1 == l2, "%s: loss %.9g then %.9g", ar_res_kind_name(kinds[k]), l1, l2);
        cr_expect(memcmp(g1, m->grads, n * sizeof(float)) == 0, "%s: the second backward's gradients differ",
                  ar_res_kind_name(kinds[k]));
        free(g1);
        ar_model_free(m);
    }
}

/* The general mixer's rstd cache (lib/residual_mixer.c) against none, on
 * random weights: forward and backward on one batch, then on another (a
 * cache left from the first batch would move the second's loss), then a
 * forward-only pass with the weights unread.  The same code and threads
 * on both sides, so loss, logits and every gradient agree bit for bit. */
static void rstd_cache_model_case(ar_model_cfg c, const char *what)
{
    valid(&c);
    ar_model *m[2];
    ar_err e;
    int B = 2, saved = ar_depth_rstd_cache;
    for (int k = 0; k < 2; k++) {
        ar_depth_rstd_cache = k;
        cr_assert_eq(ar_model_create(&m[k], &c, cpu(), B, &e), 0, "%s", e.msg);
    }
    ar_depth_rstd_cache = saved;
    tu_model_randomize(m[0], 41);
    for (int j = 0; j < m[1]->pt.n; j++)
        memcpy(ar_model_param(m[1], j), ar_model_param(m[0], j), m[1]->pt.p[j].numel * sizeof(float));
    int N = B * c.seq_len;
    int32_t in[64], tg[64];
    float *lg[2];
    for (int k = 0; k < 2; k++)
        lg[k] = malloc((size_t)N * m[k]->V * sizeof(float));
    for (int pass = 0; pass < 3; pass++) {
        tu_tokens(in, tg, N, 60 + (uint64_t)pass);
        double loss[2];
        for (int k = 0; k < 2; k++) {
            ar_model_zero_grad(m[k]);
            if (pass < 2) {
                loss[k] = ar_model_forward(m[k], in, tg, B, NULL);
                ar_model_backward(m[k], 1.0f / N);
            } else {
                loss[k] = ar_model_forward_unread(m[k], in, tg, B, NULL);
            }
            ar_model_logits(m[k], 0, N, lg[k]);
        }
        cr_expect(loss[0] == loss[1], "%s, pass %d: loss %.9g without the cache, %.9g with", what, pass, loss[0],
                  loss[1]);
        cr_expect(memcmp(lg[0], lg[1], (size_t)N * m[0]->V * sizeof(float)) == 0, "%s, pass %d: logits differ",
                  what, pass);
        for (int j = 0; pass < 2 && j < m[0]->pt.n; j++)
            cr_expect(memcmp(ar_model_grad(m[0], j), ar_model_grad(m[1], j),
                             m[0]->pt.p[j].numel * sizeof(float)) == 0,
                      "%s, pass %d: gradient of %s differs", what, pass, m[0]->pt.p[j].name);
    }
    for (int k = 0; k < 2; k++) {
        free(lg[k]);
        ar_model_free(m[k]);
    }
}

Test(variants, rstd_cache_equals_none)
{
    /* d 32: the fast ops' shapes at every vector width */
    ar_model_cfg c = tiny(AR_RES_SWA);
    c.d_model = 32, c.n_layer = 3, c.n_head = 2, c.d_ff = 48, c.seq_len = 8;
    c.residual.window = 2;
    rstd_cache_model_case(c, "swa 2");
    c.residual.kind = AR_RES_BLOCK, c.residual.window = 0, c.residual.block_size = 2, c.residual.heads = 16;
    rstd_cache_model_case(c, "block 2, 16 heads");
    c.residual.kind = AR_RES_FULL, c.residual.block_size = 0, c.residual.heads = 4;
    rstd_cache_model_case(c, "full, 4 heads");
    c.residual.heads = 1, c.residual.query = AR_QUERY_INPUT;
    rstd_cache_model_case(c, "full, query input");
}
