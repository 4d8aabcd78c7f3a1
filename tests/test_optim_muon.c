/* Muon (train.optimizer: muon, lib/optim.h): the Newton-Schulz step against
 * a double-precision reference, which parameters it takes, one update on a
 * tiny model against a hand-computed one, the optimizer file, exact resume,
 * and the config errors. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/config.h"
#include "formats/safetensors.h"
#include "lib/optim.h"
#include "run/train.h"
#include "resumeutil.h"
#include "testutil.h"

/* ---------- the Newton-Schulz iteration ---------- */

/* The reference, in double: X = g / (||g||_F + 1e-7), transposed to r x c
 * (r <= c) when m > n; steps of A = X X^T, B = b A + c A A, X = a X + B X;
 * out (m x n) = X, transposed back. */
static void ns_ref(const double *g, int m, int n, int steps, double *out)
{
    int tall = m > n, r = tall ? n : m, c = tall ? m : n;
    double *X = calloc((size_t)r * c, sizeof(double)), *Y = calloc((size_t)r * c, sizeof(double));
    double *A = calloc((size_t)r * r, sizeof(double)), *B = calloc((size_t)r * r, sizeof(double));
    double ss = 0;
    for (int i = 0; i < m * n; i++)
        ss += g[i] * g[i];
    double s = 1.0 / (sqrt(ss) + 1e-7);
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++)
            X[tall ? j * c + i : i * c + j] = g[i * n + j] * s;
    for (int it = 0; it < steps; it++) {
        for (int i = 0; i < r; i++)
            for (int j = 0; j < r; j++) {
                double a = 0;
                for (int k = 0; k < c; k++)
                    a += X[i * c + k] * X[j * c + k];
                A[i * r + j] = a;
            }
        for (int i = 0; i < r; i++)
            for (int j = 0; j < r; j++) {
                double aa = 0;
                for (int k = 0; k < r; k++)
                    aa += A[i * r + k] * A[k * r + j];
                B[i * r + j] = AR_NS_B * A[i * r + j] + AR_NS_C * aa;
            }
        for (int i = 0; i < r; i++)
            for (int j = 0; j < c; j++) {
                double bx = 0;
                for (int k = 0; k < r; k++)
                    bx += B[i * r + k] * X[k * c + j];
                Y[i * c + j] = AR_NS_A * X[i * c + j] + bx;
            }
        double *t = X;
        X = Y;
        Y = t;
    }
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++)
            out[i * n + j] = X[tall ? j * c + i : i * c + j];
    free(X);
    free(Y);
    free(A);
    free(B);
}

/* C (p x s) = op(A) op(B), op(A) p x q (ta: A is stored q x p), all of
 * them |.| entrywise when abs is set. */
static void mmul(double *C, const double *A, int ta, const double *B, int tb, int p, int q, int s, int abs)
{
    for (int i = 0; i < p; i++)
        for (int j = 0; j < s; j++) {
            double acc = 0;
            for (int k = 0; k < q; k++) {
                double x = ta ? A[k * p + i] : A[i * q + k], y = tb ? B[j * q + k] : B[k * s + j];
                acc += abs ? fabs(x) * fabs(y) : x * y;
            }
            C[i * s + j] = acc;
        }
}

/* A bound, entry by entry, on |ar_muon_ns(x) - ns_ref(g)| where the float x
 * is within eg (entrywise, absolute) of g: a first-order running error
 * analysis of ar_muon_ns's float arithmetic (u = 2^-24), on the magnitudes
 * of ns_ref's own iterates.
 * - Normalisation: the norm is summed in double; 1 / (norm + 1e-7) rounded
 *   to float and the product x s round twice: 2u |X|, plus s eg and
 *   |X| ||eg|| / ||x|| from the input's error.
 * - A step, with E the error of X: A = X X^T is c-term sums:
 *   E_A = gamma(c) |X||X|^T + E |X|^T + |X| E^T.  AA = A A, r terms:
 *   E_AA = gamma(r) |A||A| + E_A |A| + |A| E_A.  B = fl(b_f A) + fl(c_f AA)
 *   with the coefficients rounded to float: E_B = |b| E_A + |c| E_AA +
 *   2u (|b||A| + |c||AA|) + u |B|.  Y = a X + B X, an r-term product added
 *   to the scaled X (in one sgemm or by an add): E_Y = gamma(r + 1) (|B||X|
 *   + |a||X|) + E_B |X| + |B| E + |a| E + 2u |a||X| + u |Y|.
 * Absolute values ignore cancellation, so the bound grows about tenfold a
 * step: it is sharp enough for one or two steps.  (Terms of order u^2 are
 * left out: below 1e-5 of these.) */
static void ns_bound(const double *g, const double *eg, int m, int n, int steps, double *out)
{
    const double u = TU_U_FLOAT, ca = AR_NS_A, cb = AR_NS_B, cc = AR_NS_C;
    int tall = m > n, r = tall ? n : m, c = tall ? m : n;
    size_t rc = (size_t)r * c, rr = (size_t)r * r;
    double *X = calloc(rc, sizeof(double)), *E = calloc(rc, sizeof(double)), *aX = calloc(rc, sizeof(double));
    double *A = calloc(rr, sizeof(double)), *aA = calloc(rr, sizeof(double)), *AA = calloc(rr, sizeof(double));
    double *EA = calloc(rr, sizeof(double)), *EAA = calloc(rr, sizeof(double)), *B = calloc(rr, sizeof(double));
    double *aB = calloc(rr, sizeof(double)), *EB = calloc(rr, sizeof(double)), *t1 = calloc(rc, sizeof(double));
    double *t2 = calloc(rc, sizeof(double)), *Y = calloc(rc, sizeof(double)), *EY = calloc(rc, sizeof(double));
    double *s1 = calloc(rr, sizeof(double)), *s2 = calloc(rr, sizeof(double));
    double ss = 0, es = 0;
    for (int i = 0; i < m * n; i++)
        ss += g[i] * g[i], es += eg[i] * eg[i];
    double sc = 1.0 / (sqrt(ss) + 1e-7), rel = ss > 0 ? sqrt(es / ss) : 0;
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            size_t k = tall ? (size_t)j * c + i : (size_t)i * c + j;
            X[k] = g[i * n + j] * sc;
            E[k] = (2 * u + rel) * fabs(X[k]) + sc * eg[i * n + j];
        }
    for (int it = 0; it < steps; it++) {
        for (size_t i = 0; i < rc; i++)
            aX[i] = fabs(X[i]);
        mmul(A, X, 0, X, 1, r, c, r, 0);
        mmul(EA, aX, 0, aX, 1, r, c, r, 0);
        mmul(s1, E, 0, aX, 1, r, c, r, 0);
        mmul(s2, aX, 0, E, 1, r, c, r, 0);
        for (size_t i = 0; i < rr; i++)
            EA[i] = tu_gamma(c) * EA[i] + s1[i] + s2[i], aA[i] = fabs(A[i]);
        mmul(AA, A, 0, A, 0, r, r, r, 0);
        mmul(EAA, aA, 0, aA, 0, r, r, r, 0);
        mmul(s1, EA, 0, aA, 0, r, r, r, 0);
        mmul(s2, aA, 0, EA, 0, r, r, r, 0);
        for (size_t i = 0; i < rr; i++) {
            EAA[i] = tu_gamma(r) * EAA[i] + s1[i] + s2[i];
            B[i] = cb * A[i] + cc * AA[i];
            aB[i] = fabs(B[i]);
            EB[i] = fabs(cb) * EA[i] + fabs(cc) * EAA[i] + 2 * u * (fabs(cb) * aA[i] + fabs(cc) * fabs(AA[i])) +
                    u * aB[i];
        }
        mmul(Y, B, 0, X, 0, r, r, c, 0);
        mmul(EY, aB, 0, aX, 0, r, r, c, 0);
        mmul(t1, EB, 0, aX, 0, r, r, c, 0);
        mmul(t2, aB, 0, E, 0, r, r, c, 0);
        for (size_t i = 0; i < rc; i++) {
            Y[i] += ca * X[i];
            EY[i] = tu_gamma(r + 1) * (EY[i] + fabs(ca) * aX[i]) + t1[i] + t2[i] + fabs(ca) * E[i] +
                    2 * u * fabs(ca) * aX[i] + u * fabs(Y[i]);
        }
        memcpy(X, Y, rc * sizeof(double));
        memcpy(E, EY, rc * sizeof(double));
    }
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++)
            out[i * n + j] = E[tall ? (size_t)j * c + i : (size_t)i * c + j];
    free(X), free(E), free(aX), free(A), free(aA), free(AA), free(EA), free(EAA), free(B), free(aB), free(EB);
    free(t1), free(t2), free(Y), free(EY), free(s1), free(s2);
}

/* ar_muon_ns on the CPU backend (fp32, sgemm) against ns_ref: the largest
 * |error| / ns_bound's bound over the entries (<= 1 passes), and in *rel
 * the largest |error| / max |reference entry|. */
static double ns_err(int m, int n, int steps, uint64_t seed, double *rel)
{
    const ar_backend *be = ar_backend_cpu();
    size_t mn = (size_t)m * n, r = (size_t)(m < n ? m : n);
    float *x = be->alloc(mn * sizeof(float));
    float *s[3] = {be->alloc(mn * sizeof(float)), be->alloc(r * r * sizeof(float)), be->alloc(r * r * sizeof(float))};
    tu_fill_uniform(x, mn, -1.0f, 1.0f, seed);
    double *g = malloc(mn * sizeof(double)), *ref = malloc(mn * sizeof(double));
    double *eg = calloc(mn, sizeof(double)), *bound = malloc(mn * sizeof(double));
    for (size_t i = 0; i < mn; i++)
        g[i] = x[i];
    ns_ref(g, m, n, steps, ref);
    ns_bound(g, eg, m, n, steps, bound);
    ar_muon_ns(be, x, m, n, steps, s);
    double err = 0, big = 0, worst = 0;
    for (size_t i = 0; i < mn; i++) {
        err = fmax(err, fabs(x[i] - ref[i]));
        big = fmax(big, fabs(ref[i]));
        worst = fmax(worst, fabs(x[i] - ref[i]) / bound[i]);
    }
    cr_assert(big > 0.05, "%dx%d: reference is degenerate", m, n);
    *rel = err / big;
    free(g);
    free(ref);
    free(eg);
    free(bound);
    be->free(x);
    for (int k = 0; k < 3; k++)
        be->free(s[k]);
    return worst;
}

/* Every entry within ns_bound's bound: for one step that is a few 1e-6 of
 * the largest entry, for two a few 1e-4 (the running bound ignores
 * cancellation; see ns_bound), while a wrong coefficient, transposition or
 * a missing normalisation errs by O(0.1), and a coefficient off by 1e-4
 * by 3e-4 after one step.  Two steps also run the loop's buffer swap both
 * ways (an odd count copies back, an even one ends in place); later steps
 * repeat them. */
Test(optim_muon, newton_schulz_matches_double_reference)
{
    const int shapes[][2] = {{4, 7}, {7, 4}, {16, 16}, {24, 40}, {40, 24}, {1, 9}, {9, 1}, {64, 24}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        for (int steps = 1; steps <= 2; steps++) {
            int m = shapes[i][0], n = shapes[i][1];
            double rel, w = ns_err(m, n, steps, 11 + i, &rel);
            cr_expect_leq(w, 1, "%dx%d, %d steps: an error %.3g times its bound (max error %.3g of the largest entry)",
                          m, n, steps, w, rel);
        }
}

/* Five steps make a random matrix nearly orthogonal: its singular values
 * land in about [0.7, 1.2] (what Muon wants; not exactly 1). */
Test(optim_muon, newton_schulz_orthogonalises)
{
    int m = 8, n = 20;
    double g[160], o[160];
    float x[160];
    tu_fill_uniform(x, 160, -1.0f, 1.0f, 5);
    for (int i = 0; i < 160; i++)
        g[i] = x[i];
    ns_ref(g, m, n, 5, o);
    for (int i = 0; i < m; i++) {
        double d = 0;
        for (int k = 0; k < n; k++)
            d += o[i * n + k] * o[i * n + k];
        cr_expect(d > 0.4 && d < 1.5, "row %d of O O^T has diagonal %g", i, d);
    }
}

/* ---------- which parameters Muon takes ---------- */

static ar_model *tiny_model(ar_res_kind kind, int query_input, int d, int F)
{
    ar_config c;
    ar_config_defaults(&c);
    c.model.d_model = d;
    c.model.n_layer = 1;
    c.model.n_head = 1;
    c.model.d_ff = F;
    c.model.seq_len = 4;
    c.model.residual.kind = kind;
    c.model.residual.block_size = kind == AR_RES_BLOCK ? 2 : 0;
    c.model.residual.query = query_input ? AR_QUERY_INPUT : AR_QUERY_LEARNED;
    ar_model *m;
    ar_err e = {{0}};
    cr_assert_eq(ar_model_create(&m, &c.model, ar_backend_cpu(), 1, &e), 0, "%s", e.msg);
    return m;
}

/* The whole classification of two tiny models, listed. */
Test(optim_muon, parameter_split)
{
    ar_model *m = tiny_model(AR_RES_BLOCK, 0, 8, 16);
    char got[2048] = "";
    for (int i = 0; i < m->pt.n; i++)
        if (ar_muon_param(m, i))
            snprintf(got + strlen(got), sizeof got - strlen(got), "%s ", m->pt.p[i].name);
    cr_expect_str_eq(got, "blocks.0.attn.q.weight blocks.0.attn.k.weight blocks.0.attn.v.weight "
                          "blocks.0.attn.o.weight blocks.0.mlp.gate.weight blocks.0.mlp.up.weight "
                          "blocks.0.mlp.down.weight ");
    char adam[2048] = "";
    for (int i = 0; i < m->pt.n; i++)
        if (!ar_muon_param(m, i))
            snprintf(adam + strlen(adam), sizeof adam - strlen(adam), "%s ", m->pt.p[i].name);
    cr_expect_str_eq(adam, "embed.weight blocks.0.attn_norm.weight blocks.0.mlp_norm.weight final_norm.weight "
                           "lm_head.weight blocks.0.attn_res.query blocks.0.attn_res.norm.weight "
                           "blocks.0.mlp_res.query blocks.0.mlp_res.norm.weight final_res.query "
                           "final_res.norm.weight ");
    ar_model_free(m);
    /* query: input's 2-D query.weight matrices stay with AdamW too */
    m = tiny_model(AR_RES_FULL, 1, 8, 16);
    int nmuon = 0;
    for (int i = 0; i < m->pt.n; i++) {
        nmuon += ar_muon_param(m, i);
        if (strstr(m->pt.p[i].name, "_res."))
            cr_expect(!ar_muon_param(m, i), "'%s' went to Muon", m->pt.p[i].name);
    }
    cr_expect_eq(nmuon, 7);
    ar_model_free(m);
}

/* ---------- one update, by hand ---------- */

static double *dvec(const float *x, size_t n)
{
    double *d = malloc(n * sizeof(double));
    for (size_t i = 0; i < n; i++)
        d[i] = x[i];
    return d;
}

/* Two Muon steps on a d = 2, d_ff = 3 model: mlp.down is 2 x 3 (wide),
 * mlp.gate 3 x 2 (tall).  With B_0 = 0, mu, lr_m = muon_lr * lr / train.lr,
 * wd = muon_weight_decay:
 *   B_1 = g_1, B_2 = mu g_1 + g_2, X_t = g_t + mu B_t (Nesterov),
 *   W_t = W_{t-1} (1 - lr_m wd) - lr_m s NS(X_t),  s = max(1, m/n)^0.5
 * computed here in double, with one Newton-Schulz step (muon_ns_steps 1:
 * the step count is passed through, and one step keeps ns_bound sharp); a
 * norm gain takes AdamW's first step, p - lr g / (|g| + eps).
 * Bounds, entrywise, u = 2^-24: the momentum B = fl(fl(mu_f B) + g) with
 * mu_f = (float)mu carries mu E_B + 2u mu |B| + u |B_t|; X = fl(g +
 * fl(mu_f B)) mu E_B + 2u mu |B| + u |X|; NS(X) ns_bound's error from that;
 * W = fl(fl(W (1 - lr_m wd)_f) + fl((-lr_m s)_f NS)) adds 2u |W (1 - lr_m
 * wd)| + lr_m s (E_NS + 2u |NS|) + u |W_t| to (1 - lr_m wd) E_W. */
Test(optim_muon, two_steps_by_hand)
{
    ar_model *m = tiny_model(AR_RES_BASELINE, 0, 2, 3);
    ar_model_init(m, 3);
    ar_config c;
    ar_config_defaults(&c);
    ar_train_cfg tc = c.train;
    tc.optimizer = AR_OPT_MUON;
    tc.lr = 3e-3;
    tc.muon_lr = 0.02;
    tc.muon_momentum = 0.9;
    tc.muon_weight_decay = 0.1;
    tc.muon_ns_steps = 1;
    tc.grad_clip = 0;
    double lr = tc.lr * 0.5, lr_m = 0.01; /* the schedule's factor 0.5 applies to both */
    const ar_param *dn = &m->pt.p[m->blk[0].down], *gt = &m->pt.p[m->blk[0].gate];
    const ar_param *nm = &m->pt.p[m->blk[0].mlp_norm];
    const ar_param *mats[2] = {dn, gt};
    double *w[2], *B[2], EW[2][6] = {{0}}, EB[2][6] = {{0}};
    const double u = TU_U_FLOAT;
    for (int k = 0; k < 2; k++) {
        w[k] = dvec(m->params + mats[k]->offset, 6);
        B[k] = calloc(6, sizeof(double));
    }
    double gain0 = m->params[nm->offset];
    ar_adamw o;
    ar_adamw_init(&o, m);
    o.muon = 1;
    for (int step = 1; step <= 2; step++) {
        ar_model_zero_grad(m);
        for (int k = 0; k < 2; k++)
            for (int j = 0; j < 6; j++)
                m->grads[mats[k]->offset + j] = (float)(0.25 * (j + 1) * (step == 1 ? 1 : -1) + 0.1 * k * j * j -
                                                        0.3 * (step == 2) * (j == 4));
        m->grads[nm->offset] = 0.5f;
        ar_adamw_step(&o, m, &tc, lr, 0.0);
        for (int k = 0; k < 2; k++) {
            int rows = (int)mats[k]->shape[0], cols = (int)mats[k]->shape[1];
            double X[6], EX[6], O[6], EO[6], s = sqrt(rows > cols ? (double)rows / cols : 1.0);
            for (int j = 0; j < 6; j++) {
                double g = m->grads[mats[k]->offset + j];
                B[k][j] = 0.9 * B[k][j] + g;
                EB[k][j] = 0.9 * EB[k][j] + 2 * u * fabs(B[k][j] - g) + u * fabs(B[k][j]);
                X[j] = g + 0.9 * B[k][j];
                EX[j] = 0.9 * EB[k][j] + 2 * u * 0.9 * fabs(B[k][j]) + u * fabs(X[j]);
            }
            ns_ref(X, rows, cols, 1, O);
            ns_bound(X, EX, rows, cols, 1, EO);
            for (int j = 0; j < 6; j++) {
                double kept = w[k][j] * (1 - lr_m * 0.1);
                w[k][j] = kept - lr_m * s * O[j];
                EW[k][j] = (1 - lr_m * 0.1) * EW[k][j] + 2 * u * fabs(kept) + lr_m * s * (EO[j] + 2 * u * fabs(O[j])) +
                           u * fabs(w[k][j]);
                cr_expect(fabs(m->params[mats[k]->offset + j] - w[k][j]) <= EW[k][j],
                          "step %d '%s'[%d]: %.9g, by hand %.9g (bound %.3g)", step, mats[k]->name, j,
                          m->params[mats[k]->offset + j], w[k][j], EW[k][j]);
                cr_expect(fabs(o.m[mats[k]->offset + j] - B[k][j]) <= EB[k][j], "momentum of '%s'[%d]", mats[k]->name,
                          j);
                cr_expect_eq(o.v[mats[k]->offset + j], 0.0f);
            }
        }
        /* AdamW's first step on a gain: lr g / (|g| + eps).  In float the
         * bias corrections cancel (m / (1 - b1) and v / (1 - b2) of g), so
         * the update is lr (1 +- 8u) and the subtraction rounds once: u
         * |gain|; eps moves the quotient by 2e-8 relative. */
        if (step == 1)
            cr_expect(fabs(m->params[nm->offset] - (gain0 - lr * 0.5 / (0.5 + 1e-8))) <=
                          u * (fabs(gain0) + 8 * lr) + 4e-8 * lr,
                      "gain %.9g", m->params[nm->offset]);
    }
    ar_adamw_free(&o);
    for (int k = 0; k < 2; k++) {
        free(w[k]);
        free(B[k]);
    }
    ar_model_free(m);
}

/* Moonlight's scale 0.2 sqrt(max(m, n)), no Nesterov (X = B), no decay;
 * one Newton-Schulz step, bounds as in two_steps_by_hand (B = g exactly). */
Test(optim_muon, moonlight_scale_without_nesterov)
{
    ar_model *m = tiny_model(AR_RES_BASELINE, 0, 2, 3);
    ar_model_init(m, 4);
    ar_config c;
    ar_config_defaults(&c);
    ar_train_cfg tc = c.train;
    tc.optimizer = AR_OPT_MUON;
    tc.muon_scale = AR_MUON_SCALE_MOONLIGHT;
    tc.muon_nesterov = 0;
    tc.muon_lr = 0.05;
    tc.muon_ns_steps = 1;
    const ar_param *gt = &m->pt.p[m->blk[0].gate];
    double *w = dvec(m->params + gt->offset, 6), X[6], O[6], EO[6], zero[6] = {0};
    ar_model_zero_grad(m);
    for (int j = 0; j < 6; j++)
        X[j] = m->grads[gt->offset + j] = (float)(j % 2 ? 0.5 * j : -0.2 * j - 0.1);
    ar_adamw o;
    ar_adamw_init(&o, m);
    o.muon = 1;
    ar_adamw_step(&o, m, &tc, tc.lr, 0.0); /* lr_m = muon_lr */
    ns_ref(X, 3, 2, 1, O);
    ns_bound(X, zero, 3, 2, 1, EO);
    for (int j = 0; j < 6; j++) {
        double ls = 0.05 * 0.2 * sqrt(3.0), want = w[j] - ls * O[j];
        double tol = ls * (EO[j] + 2 * TU_U_FLOAT * fabs(O[j])) + TU_U_FLOAT * fabs(want) + 1e-15 * ls * fabs(O[j]);
        cr_expect(fabs(m->params[gt->offset + j] - want) <= tol, "[%d]: %.9g, by hand %.9g (bound %.3g)", j,
                  m->params[gt->offset + j], want, tol);
    }
    ar_adamw_free(&o);
    free(w);
    ar_model_free(m);
}

/* ---------- checkpoints and resume ---------- */

static ar_config tiny_run(const char *corpus)
{
    ar_config c;
    ar_config_defaults(&c);
    c.model.d_model = 32;
    c.model.n_layer = 2;
    c.model.n_head = 2;
    c.model.d_ff = 64;
    c.model.seq_len = 32;
    c.model.residual.block_size = 2;
    snprintf(c.data.train, sizeof c.data.train, "%s", corpus);
    c.data.val_fraction = 0.1;
    c.train.steps = 20;
    c.train.batch_size = 8;
    c.train.grad_accum = 2;
    c.train.warmup = 5;
    c.train.lr = 1e-2;
    c.train.min_lr = 1e-3;
    c.train.schedule = AR_SCHED_WSD;
    c.train.eval_every = 10;
    c.train.eval_windows = 8;
    c.train.save_every = 0;
    c.train.log_every = 5;
    c.train.threads = 2;
    c.train.optimizer = AR_OPT_MUON;
    return c;
}

/* Bit for bit by construction: both runs are this process, the same code,
 * shapes and thread count (train.threads 2), and the checkpoint holds every
 * float the next step reads (weights, Muon's momentum, AdamW's moments). */
Test(optim_muon, resume_is_bit_exact, .timeout = 180)
{
    tu_resume x;
    tu_resume_init(&x);
    ar_config c = tiny_run(x.corpus);
    ar_train_result r;
    ar_err e = {{0}};
    c.train.log_every = 1;
    tu_resume_straight(&x, &c, &r);
    cr_expect_lt(r.final_val_loss, log(256.0) - 1.0, "Muon did not learn: val loss %g", r.final_val_loss);

    c.train.log_every = 1; /* progress (and the stop) comes at logged steps */
    tu_resume_stop(&x, &c, 9, &r);
    cr_assert_eq(r.step, 10, "interrupted run stopped at step %ld", r.step);

    /* the optimizer file: Muon's momentum under muon.<name>, AdamW's
     * moments for the rest, and the optimizer in the metadata */
    ar_st_file f;
    cr_assert_eq(ar_st_read(&f, tu_path(x.b, "optimizer.safetensors"), &e), 0, "%s", e.msg);
    cr_expect_str_eq(ar_st_meta(&f, "optimizer"), "muon");
    int muon = 0, adam = 0;
    for (int i = 0; i < f.n; i++) {
        muon += strncmp(f.t[i].name, "muon.", 5) == 0;
        adam += strncmp(f.t[i].name, "m.", 2) == 0;
        cr_expect(strcmp(f.t[i].name, "m.blocks.0.attn.q.weight") != 0, "a Muon matrix has AdamW moments");
    }
    cr_expect_eq(muon, 14, "%d muon. tensors", muon);
    cr_expect_gt(adam, 0);
    ar_st_free(&f);

    /* the other optimizer is refused, naming the key */
    ar_config other = c;
    other.train.optimizer = AR_OPT_ADAMW;
    cr_assert_eq(tu_resume_continue(&x, &other, &r, &e), -1);
    cr_expect(strstr(e.msg, "'train.optimizer' muon") && strstr(e.msg, "adamw"), "%s", e.msg);

    cr_assert_eq(tu_resume_continue(&x, &c, &r, &e), 0, "%s", e.msg);
    cr_assert_eq(r.step, 20);
    tu_resume_expect_same_weights(&x);
}

/* An AdamW checkpoint resumed with Muon: refused by the config check and,
 * if the config were bypassed, by the optimizer file's metadata. */
Test(optim_muon, adamw_checkpoint_refuses_muon, .timeout = 120)
{
    const char *dir = tu_tmpdir();
    char corpus[2048], a[4200];
    snprintf(corpus, sizeof corpus, "%s/corpus.txt", dir);
    snprintf(a, sizeof a, "%s/a", dir);
    tu_write_corpus_lines(corpus, 200, 2);
    ar_config c = tiny_run(corpus);
    c.train.optimizer = AR_OPT_ADAMW;
    c.train.steps = 2;
    ar_train_result r;
    ar_err e = {{0}};
    ar_train_opts o = {.out_dir = a};
    cr_assert_eq(ar_train(&c, &o, &r, &e), 0, "%s", e.msg);
    c.train.optimizer = AR_OPT_MUON;
    c.train.steps = 4;
    o.resume = 1;
    cr_assert_eq(ar_train(&c, &o, &r, &e), -1);
    cr_expect(strstr(e.msg, "'train.optimizer' adamw and resumes with muon"), "%s", e.msg);
}

/* ---------- config ---------- */

static void set_fails(const char *assign, const char *want)
{
    ar_config c;
    ar_config_defaults(&c);
    ar_err e = {{0}};
    int rc = ar_config_set(&c, assign, &e);
    if (rc == 0)
        rc = ar_config_validate(&c, &e);
    cr_expect_eq(rc, -1, "--set %s was accepted", assign);
    cr_expect(strstr(e.msg, want), "--set %s: '%s' lacks \"%s\"", assign, e.msg, want);
}

Test(optim_muon, config_errors_name_the_key)
{
    set_fails("train.optimizer=foo", "'train.optimizer'");
    set_fails("train.optimizer=foo", "adamw|muon");
    set_fails("train.muon_lr=-0.02", "'train.muon_lr'");
    set_fails("train.muon_lr=0", "'train.muon_lr'");
    set_fails("train.muon_momentum=1", "'train.muon_momentum'");
    set_fails("train.muon_nesterov=maybe", "'train.muon_nesterov'");
    set_fails("train.muon_ns_steps=0", "'train.muon_ns_steps'");
    set_fails("train.muon_ns_steps=1000", "'train.muon_ns_steps'");
    set_fails("train.muon_scale=pytorch", "keller|moonlight");
    set_fails("train.muon_weight_decay=-1", "'train.muon_weight_decay'");

    ar_config c;
    ar_config_defaults(&c);
    ar_err e = {{0}};
    cr_assert_eq(ar_config_set(&c, "train.optimizer=muon", &e), 0, "%s", e.msg);
    cr_assert_eq(ar_config_set(&c, "parallel.shard_optimizer=true", &e), 0, "%s", e.msg);
    cr_expect_eq(ar_config_validate(&c, &e), -1);
    cr_expect(strstr(e.msg, "'train.optimizer' muon") && strstr(e.msg, "'parallel.shard_optimizer'"), "%s", e.msg);
    c.parallel.shard_optimizer = 0;
    c.parallel.pipeline = 2;
    cr_expect_eq(ar_config_validate(&c, &e), -1);
    cr_expect(strstr(e.msg, "'train.optimizer' muon") && strstr(e.msg, "'parallel.pipeline'"), "%s", e.msg);
}

/* Muon's keys are written (and read back) for a Muon run only: an AdamW
 * run's config.yaml is what it was before Muon existed. */
Test(optim_muon, config_round_trip)
{
    ar_config c, d;
    ar_config_defaults(&c);
    char *y = ar_config_to_yaml(&c);
    cr_expect_null(strstr(y, "muon"), "%s", y);
    cr_expect_null(strstr(y, "optimizer"), "%s", y);
    free(y);
    ar_err e = {{0}};
    const char *sets[] = {"train.optimizer=muon", "train.muon_lr=0.03", "train.muon_momentum=0.9",
                          "train.muon_nesterov=false", "train.muon_ns_steps=6", "train.muon_scale=moonlight",
                          "train.muon_weight_decay=0.05"};
    for (size_t i = 0; i < sizeof sets / sizeof sets[0]; i++)
        cr_assert_eq(ar_config_set(&c, sets[i], &e), 0, "%s", e.msg);
    cr_assert_eq(ar_config_validate(&c, &e), 0, "%s", e.msg);
    y = ar_config_to_yaml(&c);
    cr_expect(strstr(y, "  optimizer: muon\n  muon_lr: 0.03\n  muon_momentum: 0.9\n  muon_nesterov: false\n"
                        "  muon_ns_steps: 6\n  muon_scale: moonlight\n  muon_weight_decay: 0.05\n"),
              "%s", y);
    ar_config_defaults(&d);
    cr_assert_eq(ar_config_parse(&d, y, strlen(y), "round trip", &e), 0, "%s", e.msg);
    char diff[512];
    cr_expect_eq(ar_config_diff(&c, &d, diff, sizeof diff), 0, "%s", diff);
    free(y);
}

/* Every key of a Muon run's resolved YAML has its attnres-config(5)
 * paragraph (config's man_page_documents_every_key sees AdamW's). */
Test(optim_muon, man_page_documents_the_keys)
{
    const char *src = tu_source_dir();
    if (!src)
        cr_skip_test("AR_SOURCE_DIR not set");
    char *man = tu_read_file(tu_path(src, "man/attnres-config.5"), NULL);
    cr_assert(man != NULL);
    const char *keys[] = {"optimizer", "muon_lr", "muon_momentum", "muon_nesterov", "muon_ns_steps", "muon_scale",
                          "muon_weight_decay"};
    ar_config c;
    ar_config_defaults(&c);
    c.train.optimizer = AR_OPT_MUON;
    char *y = ar_config_to_yaml(&c);
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        char want[128], line[128];
        snprintf(line, sizeof line, "\n  %s: ", keys[i]);
        cr_expect(strstr(y, line), "'%s' not written for a Muon run", keys[i]);
        snprintf(want, sizeof want, "\n.BR %s \"", keys[i]);
        cr_expect(strstr(man, want), "attnres-config(5) does not document '%s'", keys[i]);
    }
    free(y);
    free(man);
}
