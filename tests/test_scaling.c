/* Scaling-law fits: exact recovery from noise-free points, coverage of the
 * 95% intervals under seeded noise, the compute-equivalence ratio against
 * its closed form and its delta-method uncertainty against a Monte Carlo
 * spread, table errors with file and line, JSON, the figure and the CLI. */
#include <criterion/criterion.h>
#include <gsl/gsl_randist.h>
#include <gsl/gsl_rng.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "formats/json.h"
#include "experiments/scaling.h"
#include "experiments/scaling_plot.h"
#include "testutil.h"

/* n compute values spread evenly in log space over [lo, hi]. */
static void logspace(double *x, int n, double lo, double hi)
{
    for (int i = 0; i < n; i++)
        x[i] = exp(log(lo) + (log(hi) - log(lo)) * i / (n - 1));
}

static double law(double A, double alpha, double E, double x)
{
    return E + A * pow(x, -alpha);
}

static void rel_close(double got, double want, double tol, const char *what)
{
    cr_assert(fabs(got - want) <= tol * fabs(want), "%s: got %.17g, want %.17g (relative error %.3g > %g)", what,
              got, want, fabs(got - want) / fabs(want), tol);
}

/* ---- noise-free recovery ----
 *
 * Bounds.  The points lie on the law to 2^-53 relative (exp and log of
 * logspace, pow of law), and the fit (Levenberg-Marquardt on (a, alpha[,
 * E]), stopped at steps of 1e-14 relative) solves a least-squares problem
 * whose Jacobian has condition number below 50 (2.5 for the power form, 41
 * for the offset form on these points): its parameters are the truth to
 * within about 50 x 1e-14, and A = exp(a + alpha ln x0) with |ln x0| < 35
 * multiplies alpha's error by 35.  1e-6 is a wide margin over that on any
 * machine, while a wrong derivative or a fit stuck at its log-linear start
 * misses by 1e-3 and more.  R^2 = 1 - rss / sst with rss of order
 * (1e-15)^2 n: 1 - 1e-12 leaves room.  Two points fit exactly: alpha =
 * ln(3 / 2.5) / ln 10, a few operations in double, within 1e-15; 1e-9. */

static void recover_power(double A, double alpha, double lo, double hi)
{
    double x[6], y[6];
    logspace(x, 6, lo, hi);
    for (int i = 0; i < 6; i++)
        y[i] = law(A, alpha, 0, x[i]);
    ar_fit f;
    ar_err e;
    cr_assert_eq(ar_fit_curve(x, y, 6, AR_FIT_POWER, &f, &e), 0, "%s", e.msg);
    rel_close(f.p[AR_FIT_A], A, 1e-6, "A");
    rel_close(f.p[AR_FIT_ALPHA], alpha, 1e-6, "alpha");
    cr_assert_eq(f.np, 2);
    cr_assert_eq(f.dof, 4);
    cr_assert(f.r2 > 1 - 1e-12, "R^2 %.17g", f.r2);
}

Test(scaling, power_noise_free_recovered_in_pflops_days)
{
    recover_power(0.93, 0.057, 1e-8, 1e-5); /* PFLOP/s-days */
}

Test(scaling, power_noise_free_recovered_in_flops)
{
    recover_power(28.5, 0.071, 1e12, 1e15); /* FLOPs: the same fit, other units */
}

Test(scaling, offset_noise_free_recovered)
{
    const double A = 0.02, alpha = 0.25, E = 1.2;
    double x[8], y[8];
    logspace(x, 8, 1e-8, 1e-5);
    for (int i = 0; i < 8; i++)
        y[i] = law(A, alpha, E, x[i]);
    ar_fit f;
    ar_err e;
    cr_assert_eq(ar_fit_curve(x, y, 8, AR_FIT_OFFSET, &f, &e), 0, "%s", e.msg);
    rel_close(f.p[AR_FIT_A], A, 1e-6, "A");
    rel_close(f.p[AR_FIT_ALPHA], alpha, 1e-6, "alpha");
    rel_close(f.p[AR_FIT_E], E, 1e-6, "E");
    cr_assert_eq(f.np, 3);
}

Test(scaling, exact_fit_has_no_uncertainty)
{
    double x[2] = {1e-7, 1e-6}, y[2] = {3.0, 2.5};
    ar_fit f;
    ar_err e;
    cr_assert_eq(ar_fit_curve(x, y, 2, AR_FIT_POWER, &f, &e), 0, "%s", e.msg);
    cr_assert(isnan(f.se[AR_FIT_A]) && isnan(f.se[AR_FIT_ALPHA]) && isnan(f.t95));
    rel_close(f.p[AR_FIT_ALPHA], log(3.0 / 2.5) / log(10), 1e-9, "alpha");
}

Test(scaling, curve_argument_errors)
{
    double x[3] = {1, 2, 3}, y[3] = {3, 2, 1}, same[3] = {2, 2, 2};
    ar_fit f;
    ar_err e;
    cr_assert_eq(ar_fit_curve(x, y, 2, AR_FIT_OFFSET, &f, &e), -1);
    cr_assert(strstr(e.msg, "fewer than the 3 parameters"), "%s", e.msg);
    cr_assert_eq(ar_fit_curve(same, y, 3, AR_FIT_POWER, &f, &e), -1);
    cr_assert(strstr(e.msg, "same compute"), "%s", e.msg);
    double bad[3] = {1, -2, 3};
    cr_assert_eq(ar_fit_curve(bad, y, 3, AR_FIT_POWER, &f, &e), -1);
    cr_assert(strstr(e.msg, "positive"), "%s", e.msg);
}

/* ---- coverage of the 95% intervals ---- */

/* TRIALS fits of N points with Gaussian noise of sd SIGMA on L; counts the
 * trials whose 95% interval holds the true value of each parameter. */
static void coverage(ar_fit_form form, const double *truth, int N, double sigma, int trials, int *hits)
{
    gsl_rng *r = gsl_rng_alloc(gsl_rng_mt19937);
    gsl_rng_set(r, 20240520);
    double x[16], y[16];
    logspace(x, N, 1e-8, 1e-5);
    hits[0] = hits[1] = hits[2] = 0;
    for (int t = 0; t < trials; t++) {
        for (int i = 0; i < N; i++)
            y[i] = law(truth[0], truth[1], truth[2], x[i]) + gsl_ran_gaussian(r, sigma);
        ar_fit f;
        ar_err e;
        cr_assert_eq(ar_fit_curve(x, y, N, form, &f, &e), 0, "trial %d: %s", t, e.msg);
        for (int k = 0; k < f.np; k++)
            hits[k] += f.ci[k][0] <= truth[k] && truth[k] <= f.ci[k][1];
    }
    gsl_rng_free(r);
}

Test(scaling, power_intervals_cover_the_truth)
{
    /* 400 trials: a correct 95% interval misses about 20 times (binomial sd
     * 4.4); at least 360 hits (90%) are required for A and for alpha. */
    const double truth[3] = {0.9, 0.06, 0};
    int hits[3];
    coverage(AR_FIT_POWER, truth, 8, 0.01, 400, hits);
    cr_assert_geq(hits[0], 360, "A inside its 95%% interval in %d of 400 trials", hits[0]);
    cr_assert_geq(hits[1], 360, "alpha inside its 95%% interval in %d of 400 trials", hits[1]);
    cr_assert_leq(hits[0], 398, "A's interval is far too wide: %d of 400", hits[0]);
}

Test(scaling, offset_intervals_cover_the_truth)
{
    /* The same requirement for the three parameters of the offset form. */
    const double truth[3] = {0.02, 0.25, 1.2};
    int hits[3];
    coverage(AR_FIT_OFFSET, truth, 10, 0.005, 400, hits);
    for (int k = 0; k < 3; k++)
        cr_assert_geq(hits[k], 360, "parameter %d inside its 95%% interval in %d of 400 trials", k, hits[k]);
}

/* ---- compute-equivalence ratio ---- */

static void fit_exact(ar_fit_form form, double A, double alpha, double E, ar_fit *f)
{
    double x[6], y[6];
    logspace(x, 6, 1e-8, 1e-5);
    for (int i = 0; i < 6; i++)
        y[i] = law(A, alpha, E, x[i]);
    ar_err e;
    cr_assert_eq(ar_fit_curve(x, y, 6, form, f, &e), 0, "%s", e.msg);
}

Test(scaling, ratio_matches_closed_form)
{
    ar_fit b, v;
    fit_exact(AR_FIT_POWER, 0.90, 0.060, 0, &b);
    fit_exact(AR_FIT_POWER, 0.87, 0.061, 0, &v);
    const double Cs[] = {1e-8, 3e-7, 1e-5, 4e-4};
    for (int i = 0; i < 4; i++) {
        double C = Cs[i];
        ar_ratio r;
        ar_fit_ratio(&b, &v, C, &r);
        /* The closed form with the fitted parameters: both sides are a
         * few logarithms, a power and an exponential in double.  The
         * exponent g / alpha_b - ln C (magnitudes below 40) is within
         * 40 x 4 x 2^-53 = 2e-14 absolute, so either side is within 2e-14
         * relative (the power, (A_b / L_v)^(1 / alpha_b), amplifies its
         * base's 2 x 2^-53 by 1 / alpha_b < 17): 1e-12 leaves 50 times
         * that.  With the true parameters the fit's own error (see the
         * recovery tests) enters, amplified by |d ln r / d alpha_b| =
         * |ln C'| / alpha_b < 400: 1e-6. */
        double Lv = v.p[AR_FIT_A] * pow(C, -v.p[AR_FIT_ALPHA]);
        double closed = pow(b.p[AR_FIT_A] / Lv, 1 / b.p[AR_FIT_ALPHA]) / C;
        rel_close(r.ratio, closed, 1e-12, "ratio vs closed form (fitted parameters)");
        /* and with the true ones */
        double truth = pow(0.90 / (0.87 * pow(C, -0.061)), 1 / 0.060) / C;
        rel_close(r.ratio, truth, 1e-6, "ratio vs closed form (true parameters)");
        rel_close(r.c_base, closed * C, 1e-12, "C'");
        /* the baseline at C' has the group's loss at C */
        rel_close(ar_fit_eval(&b, r.c_base), Lv, 1e-12, "L_b(C') = L_v(C)");
    }
    /* a group against itself: exp(0 - ln C) / C, as above: 1e-12 */
    ar_ratio self;
    ar_fit_ratio(&b, &b, 1e-6, &self);
    rel_close(self.ratio, 1.0, 1e-12, "self ratio");
}

Test(scaling, offset_ratio_matches_closed_form)
{
    ar_fit b, v;
    fit_exact(AR_FIT_OFFSET, 0.020, 0.25, 1.20, &b);
    fit_exact(AR_FIT_OFFSET, 0.018, 0.25, 1.19, &v);
    double C = 2e-6, Lv = law(0.018, 0.25, 1.19, C);
    ar_ratio r;
    ar_fit_ratio(&b, &v, C, &r);
    double closed = pow(0.020 / (Lv - 1.20), 1 / 0.25) / C;
    /* the fit's error (recovery tests) amplified by |ln C'| / alpha_b < 60
     * and 1 / (alpha_b (L_v - E_b)) < 10: well within 1e-5 */
    rel_close(r.ratio, closed, 1e-5, "offset ratio");
    /* a loss the baseline never reaches */
    ar_fit low = v;
    low.p[AR_FIT_E] = 1.0;
    low.p[AR_FIT_A] = 1e-9;
    ar_fit_ratio(&b, &low, C, &r);
    cr_assert(isnan(r.ratio), "ratio %g for a loss below the baseline's E", r.ratio);
}

Test(scaling, ratio_uncertainty_matches_monte_carlo)
{
    /* The delta-method standard error against the spread of the ratio over
     * 300 noisy replications: the mean reported se must be within 25% of
     * the empirical standard deviation. */
    gsl_rng *rng = gsl_rng_alloc(gsl_rng_mt19937);
    gsl_rng_set(rng, 7);
    double x[8], yb[8], yv[8], C = 1e-5;
    logspace(x, 8, 1e-8, 1e-5);
    int T = 300;
    double sum = 0, sum2 = 0, se_sum = 0;
    for (int t = 0; t < T; t++) {
        for (int i = 0; i < 8; i++) {
            yb[i] = law(0.90, 0.060, 0, x[i]) + gsl_ran_gaussian(rng, 0.004);
            yv[i] = law(0.87, 0.061, 0, x[i]) + gsl_ran_gaussian(rng, 0.004);
        }
        ar_fit b, v;
        ar_err e;
        cr_assert_eq(ar_fit_curve(x, yb, 8, AR_FIT_POWER, &b, &e), 0, "%s", e.msg);
        cr_assert_eq(ar_fit_curve(x, yv, 8, AR_FIT_POWER, &v, &e), 0, "%s", e.msg);
        ar_ratio r;
        ar_fit_ratio(&b, &v, C, &r);
        sum += r.ratio;
        sum2 += r.ratio * r.ratio;
        se_sum += r.se;
        cr_assert(r.ci[0] < r.ratio && r.ratio < r.ci[1]);
    }
    gsl_rng_free(rng);
    double mean = sum / T, sd = sqrt(sum2 / T - mean * mean), se = se_sum / T;
    if (getenv("AR_TEST_VERBOSE"))
        fprintf(stderr, "ratio: mean %.5g, Monte Carlo sd %.4g, mean delta-method se %.4g\n", mean, sd, se);
    cr_assert(fabs(se - sd) <= 0.25 * sd, "delta-method se %.4g vs Monte Carlo sd %.4g", se, sd);
}

/* ---- tables ---- */

static const char *write_table(const char *dir, const char *name, const char *text)
{
    const char *p = tu_path(dir, name);
    tu_write_file(p, text, strlen(text));
    return p;
}

/* Loads and fits one table; returns -1 with the message in e on error. */
static int load_fit(const char *path, ar_fit_form form, ar_scaling *s, ar_err *e)
{
    const char *in[1] = {path};
    if (ar_scaling_load(s, in, 1, "variant", "pflops_days", "val_loss", e) != 0)
        return -1;
    int rc = ar_scaling_fit(s, form, NULL, NAN, e);
    if (rc != 0)
        ar_scaling_free(s);
    return rc;
}

static void expect_table_error(const char *text, ar_fit_form form, const char *fmt, ...)
{
    const char *dir = tu_tmpdir();
    char path[4096], want[4400], tail[256];
    snprintf(path, sizeof path, "%s", write_table(dir, "results.csv", text));
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(tail, sizeof tail, fmt, ap);
    va_end(ap);
    snprintf(want, sizeof want, "%s:%s", path, tail);
    ar_scaling s;
    ar_err e = {{0}};
    cr_assert_eq(load_fit(path, form, &s, &e), -1, "accepted:\n%s", text);
    cr_assert(strncmp(e.msg, want, strlen(want)) == 0, "expected a message starting\n  %s\ngot\n  %s", want, e.msg);
}

Test(scaling, table_missing_column)
{
    expect_table_error("variant,pflops_days,loss\nbaseline,1e-7,3\n", AR_FIT_POWER,
                       "1: no column 'val_loss' (columns: variant, pflops_days, loss)");
}

Test(scaling, table_non_numeric_cell)
{
    expect_table_error("variant,pflops_days,val_loss\nbaseline,1e-7,3\nbaseline,1e-6,abc\n", AR_FIT_POWER,
                       "3: column 'val_loss' expects a number, got 'abc'");
}

Test(scaling, table_non_positive_compute_or_loss)
{
    expect_table_error("variant,pflops_days,val_loss\nbaseline,1e-7,3\nbaseline,0,2.5\n", AR_FIT_POWER,
                       "3: column 'pflops_days' must be positive, got '0'");
    expect_table_error("variant,pflops_days,val_loss\nbaseline,1e-7,3\nbaseline,1e-6,2.5\nblock,1e-5,-1\n",
                       AR_FIT_POWER, "4: column 'val_loss' must be positive, got '-1'");
}

Test(scaling, table_fewer_points_than_parameters)
{
    const char *t = "variant,pflops_days,val_loss\nbaseline,1e-7,3\nbaseline,1e-6,2.5\nblock,1e-6,2.4\n";
    expect_table_error(t, AR_FIT_POWER, "4: group 'block' has 1 point, fewer than the 2 parameters of the power form");
    expect_table_error("variant,pflops_days,val_loss\nbaseline,1e-7,3\nbaseline,1e-6,2.5\n", AR_FIT_OFFSET,
                       "2: group 'baseline' has 2 points, fewer than the 3 parameters of the offset form");
}

Test(scaling, table_malformed_csv)
{
    expect_table_error("variant,pflops_days,val_loss\nbaseline,1e-7\n", AR_FIT_POWER, "2: 2 fields, expected 3");
}

/* A synthetic sweep table: three groups on exact power laws. */
static const char *synthetic(const char *dir)
{
    char text[4096];
    size_t k = (size_t)snprintf(text, sizeof text, "variant,size,pflops_days,val_loss\n");
    const char *g[3] = {"baseline", "block", "full"};
    const double A[3] = {0.90, 0.87, 0.875}, al[3] = {0.060, 0.061, 0.0605};
    double x[5];
    logspace(x, 5, 1.6e-8, 1.8e-6);
    for (int j = 0; j < 3; j++)
        for (int i = 0; i < 5; i++)
            k += (size_t)snprintf(text + k, sizeof text - k, "%s,s%d,%.9e,%.9f\n", g[j], i + 1, x[i],
                                  law(A[j], al[j], 0, x[i]) * (1 + 0.002 * ((i * 7 + j * 3) % 5 - 2)));
    const char *sub = tu_path(dir, "sweep");
    mkdir(sub, 0777);
    char path[4200];
    snprintf(path, sizeof path, "%s/results.csv", sub);
    tu_write_file(path, text, strlen(text));
    return tu_path(dir, "sweep");
}

Test(scaling, run_dir_json_and_baseline)
{
    const char *dir = tu_tmpdir();
    char sweep[4096];
    snprintf(sweep, sizeof sweep, "%s", synthetic(dir));
    const char *in[1] = {sweep};
    ar_scaling s;
    ar_err e;
    cr_assert_eq(ar_scaling_load(&s, in, 1, "variant", "pflops_days", "val_loss", &e), 0, "%s", e.msg);
    cr_assert_eq(s.ng, 3);
    cr_assert_eq(ar_scaling_fit(&s, AR_FIT_POWER, NULL, NAN, &e), 0, "%s", e.msg);
    cr_assert_str_eq(s.g[s.baseline].name, "baseline");
    /* the table holds x with %.9e: 10 digits, 5e-10 relative */
    rel_close(s.at, 1.8e-6, 1e-9, "default --at is the largest compute");
    char *j = ar_scaling_json(&s);
    ar_json *doc = ar_json_parse(j, strlen(j), &e);
    cr_assert_not_null(doc, "%s\n%s", e.msg, j);
    const ar_json *groups = ar_json_get(doc, "groups");
    cr_assert(groups && groups->type == AR_JSON_ARR && groups->n == 3);
    for (int k = 0; k < 3; k++) {
        const ar_json *g = &groups->items[k];
        const char *need[] = {"A", "alpha", "A_se", "alpha_se", "A_ci95", "alpha_ci95", "r2", "points"};
        for (size_t q = 0; q < sizeof need / sizeof *need; q++)
            cr_assert_not_null(ar_json_get(g, need[q]), "group %d lacks '%s'", k, need[q]);
        int base = k == 0;
        cr_assert_eq(ar_json_get(g, "ratio") != NULL, !base, "'ratio' only for non-baseline groups");
        if (!base) {
            cr_assert_eq(ar_json_get(g, "ratio")->type, AR_JSON_NUM);
            cr_assert_eq(ar_json_get(g, "ratio_se")->type, AR_JSON_NUM);
            cr_assert_eq(ar_json_get(g, "ratio_ci95")->n, 2);
        }
        cr_assert_null(ar_json_get(g, "E"), "the power form has no E");
    }
    ar_json_free(doc);
    free(j);
    /* a chosen baseline, and one that does not exist */
    cr_assert_eq(ar_scaling_fit(&s, AR_FIT_POWER, "full", 1e-6, &e), 0, "%s", e.msg);
    cr_assert_str_eq(s.g[s.baseline].name, "full");
    cr_assert_eq(ar_scaling_fit(&s, AR_FIT_POWER, "nope", 1e-6, &e), -1);
    cr_assert(strstr(e.msg, "no group 'nope'") && strstr(e.msg, "baseline, block, full"), "%s", e.msg);
    ar_scaling_free(&s);
}

Test(scaling, figure_is_written)
{
    const char *dir = tu_tmpdir();
    char sweep[4096], png[4200];
    snprintf(sweep, sizeof sweep, "%s", synthetic(dir));
    snprintf(png, sizeof png, "%s/scaling.png", dir);
    const char *in[1] = {sweep};
    ar_scaling s;
    ar_err e;
    cr_assert_eq(ar_scaling_load(&s, in, 1, "variant", "pflops_days", "val_loss", &e), 0, "%s", e.msg);
    cr_assert_eq(ar_scaling_fit(&s, AR_FIT_OFFSET, NULL, NAN, &e), 0, "%s", e.msg);
    cr_assert_eq(ar_scaling_plot(png, &s, &e), 0, "%s", e.msg);
    size_t n;
    char *raw = tu_read_file(png, &n);
    cr_assert(raw && n > 1000 && memcmp(raw, "\x89PNG", 4) == 0);
    free(raw);
    ar_scaling_free(&s);
}

/* ---- the command ---- */

static char *run_cli(int *st, const char *fmt, ...)
{
    const char *bin = tu_bin();
    if (!bin)
        cr_skip_test("AR_BIN is not set");
    char args[8192], cmd[9000];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    snprintf(cmd, sizeof cmd, "'%s' %s", bin, args);
    return tu_run(cmd, st);
}

Test(scaling, cli_table_json_and_png)
{
    const char *dir = tu_tmpdir();
    char sweep[4096];
    snprintf(sweep, sizeof sweep, "%s", synthetic(dir));
    int st;
    char *out = run_cli(&st, "fit-scaling '%s' --out '%s/fig.png' 2>&1", sweep, dir);
    cr_assert_eq(st, 0, "%s", out);
    cr_assert(strstr(out, "compute-equivalence ratio against 'baseline'") && strstr(out, "block") &&
                  strstr(out, "R^2") && strstr(out, "residuals"),
              "%s", out);
    free(out);
    struct stat sb;
    cr_assert_eq(stat(tu_path(dir, "fig.png"), &sb), 0);
    /* a directory without a finished sweep: the error names DIR/results.csv */
    out = run_cli(&st, "fit-scaling '%s' 2>&1", dir);
    cr_assert_eq(st, 1, "%s", out);
    cr_assert(strstr(out, "attnres: error: '") && strstr(out, "/results.csv' not found") &&
                  strstr(out, "is not the output directory of an 'attnres sweep'"),
              "%s", out);
    free(out);
    out = run_cli(&st, "fit-scaling '%s/results.csv' --form offset --at 1e-6 --json 2>/dev/null", sweep);
    cr_assert_eq(st, 0, "%s", out);
    ar_err e;
    ar_json *j = ar_json_parse(out, strlen(out), &e);
    cr_assert_not_null(j, "stdout is not one JSON object: %s\n%s", e.msg, out);
    cr_assert_str_eq(ar_json_get(j, "form")->str, "offset");
    /* strtod of "1e-6", written back in JSON with enough digits to read
     * back the same double */
    cr_assert_eq(ar_json_get(j, "at")->num, 1e-6);
    cr_assert_not_null(ar_json_get(&ar_json_get(j, "groups")->items[1], "E_ci95"));
    ar_json_free(j);
    free(out);
}

Test(scaling, cli_errors)
{
    const char *dir = tu_tmpdir();
    char p[4096];
    snprintf(p, sizeof p, "%s", write_table(dir, "r.csv", "variant,pflops_days,val_loss\nbaseline,1e-7,x\n"));
    int st;
    char *out = run_cli(&st, "fit-scaling '%s' 2>&1", p);
    cr_assert_eq(st, 1, "%s", out);
    char want[4400];
    snprintf(want, sizeof want, "attnres: error: %s:2: column 'val_loss' expects a number, got 'x'\n", p);
    cr_assert_str_eq(out, want);
    free(out);
    out = run_cli(&st, "fit-scaling '%s' --form cubic 2>&1", p);
    cr_assert_eq(st, 2, "%s", out);
    cr_assert(strstr(out, "'--form' expects power or offset") && strstr(out, "usage: attnres fit-scaling"), "%s", out);
    free(out);
    out = run_cli(&st, "fit-scaling '%s' --at -1 2>&1", p);
    cr_assert_eq(st, 2, "%s", out);
    free(out);
    out = run_cli(&st, "fit-scaling 2>&1");
    cr_assert_eq(st, 2, "%s", out);
    free(out);
}

/* Without --y: final_val_loss (the sweep's final evaluations) where the
 * tables have it, else val_loss; tables that disagree are an error. */
Test(scaling, default_loss_column_is_the_final_evaluation)
{
    const char *dir = tu_tmpdir();
    char a[4096], b[4096];
    snprintf(a, sizeof a, "%s",
             write_table(dir, "a.csv",
                         "variant,pflops_days,val_loss,final_val_loss\n"
                         "baseline,1e-7,9,3\nbaseline,1e-6,9,2.5\nbaseline,1e-5,9,2.1\n"));
    snprintf(b, sizeof b, "%s",
             write_table(dir, "b.csv", "variant,pflops_days,val_loss\nbaseline,1e-7,3\nbaseline,1e-6,2.5\n"));
    ar_scaling s;
    ar_err e;
    const char *in[2] = {a, b};
    cr_assert_eq(ar_scaling_load(&s, in, 1, "variant", "pflops_days", NULL, &e), 0, "%s", e.msg);
    cr_assert_str_eq(s.ycol, "final_val_loss");
    cr_assert_eq(s.ng, 1);
    cr_assert_eq(s.g[0].n, 3);
    cr_assert_float_eq(s.g[0].y[1], 2.5, 0);
    ar_scaling_free(&s);
    cr_assert_eq(ar_scaling_load(&s, in + 1, 1, "variant", "pflops_days", NULL, &e), 0, "%s", e.msg);
    cr_assert_str_eq(s.ycol, "val_loss");
    ar_scaling_free(&s);
    cr_assert_eq(ar_scaling_load(&s, in, 2, "variant", "pflops_days", NULL, &e), -1);
    cr_assert(strstr(e.msg, "a.csv' has a column 'final_val_loss' and '") && strstr(e.msg, "b.csv' has not") &&
                  strstr(e.msg, "--y"),
              "%s", e.msg);
    /* an explicit --y is taken as given */
    cr_assert_eq(ar_scaling_load(&s, in, 2, "variant", "pflops_days", "val_loss", &e), 0, "%s", e.msg);
    cr_assert_eq(s.g[0].n, 5);
    ar_scaling_free(&s);
}

/* fit-scaling reads results.csv as sweeps wrote it before the shape columns
 * (n_layer, d_model, n_head) and after: the same points either way, and the
 * default loss column is final_val_loss in both. */
Test(scaling, table_old_and_new_sweep_columns)
{
    const char *dir = tu_tmpdir();
    const char *old_t = "variant,size,nonembed_params,tokens,flops,pflops_days,val_loss,wall_s,steps,run,"
                        "final_val_loss,final_eval_windows,final_eval_tokens\n"
                        "baseline,a,100,1000,8.64e13,1e-6,3.9,1.0,10,a-baseline,3.8,10,160\n"
                        "baseline,b,400,2000,3.456e14,4e-6,3.5,1.0,20,b-baseline,3.4,10,160\n";
    const char *new_t = "variant,size,nonembed_params,tokens,flops,pflops_days,val_loss,wall_s,steps,run,"
                        "final_val_loss,final_eval_windows,final_eval_tokens,n_layer,d_model,n_head\n"
                        "baseline,a,100,1000,8.64e13,1e-6,3.9,1.0,10,a-baseline,3.8,10,160,4,64,2\n"
                        "baseline,b,400,2000,3.456e14,4e-6,3.5,1.0,20,b-baseline,3.4,10,160,8,96,4\n";
    const char *paths[2];
    char p0[4096], p1[4096];
    snprintf(p0, sizeof p0, "%s", write_table(dir, "old.csv", old_t));
    snprintf(p1, sizeof p1, "%s", write_table(dir, "new.csv", new_t));
    paths[0] = p0;
    paths[1] = p1;
    for (int k = 0; k < 2; k++) {
        ar_scaling s;
        ar_err e = {{0}};
        cr_assert_eq(ar_scaling_load(&s, &paths[k], 1, "variant", "pflops_days", NULL, &e), 0, "%s", e.msg);
        cr_assert_str_eq(s.ycol, "final_val_loss");
        cr_assert_eq(s.ng, 1);
        cr_assert_eq(s.g[0].n, 2);
        /* the cells' text read by strtod: the doubles nearest 4e-6 and 3.4 */
        cr_assert_eq(s.g[0].x[1], 4e-6);
        cr_assert_eq(s.g[0].y[1], 3.4);
        ar_scaling_free(&s);
    }
    /* both at once: one table of each kind */
    ar_scaling s;
    ar_err e = {{0}};
    cr_assert_eq(ar_scaling_load(&s, paths, 2, "variant", "pflops_days", NULL, &e), 0, "%s", e.msg);
    cr_assert_eq(s.g[0].n, 4);
    ar_scaling_free(&s);
}
