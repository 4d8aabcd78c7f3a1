/* attnres ablate: the variant table, the plan's fairness (one config per
 * variant, only model.residual differs, the same seed per seed index), the
 * Welch and paired t-tests against hand-computed values, and a tiny
 * ablation end to end through the binary: CSV with each run's final
 * evaluation, Markdown table, PNGs, reuse on a rerun (final evaluations
 * included), and the unknown-variant error; the comparison with the
 * report's Table 4 (signs, Spearman's rho against hand computations), in
 * results.md and --json. */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "formats/config.h"
#include "formats/csv.h"
#include "experiments/ablate.h"
#include "experiments/table4.h"
#include "formats/json.h"
#include "run/train.h"
#include "testutil.h"

Test(ablate, welch_matches_a_reference)
{
    /* Welch's example 1 (Wikipedia): t = -2.4554, df = 24.99.  The exact p
     * of these doubles, from the regularised incomplete beta function
     * I_{df/(df+t^2)}(df/2, 1/2) in 40-digit arithmetic, is
     * 0.021378001462867.  In double, t and df (sums of 15 terms, a few
     * divisions and a square root) are within 1e-14 relative, which moves p
     * by at most 2 f(t) |t| 1e-14 < 1e-15 (f, the t density, is below
     * 0.03 there), and GSL's tail adds about 1e-15 relative: 1e-12 leaves
     * 1e3 of room, while a wrong df (24 or 28) moves p by 3e-4 or more. */
    double a[] = {27.5, 21.0, 19.0, 23.6, 17.0, 17.9, 16.9, 20.1, 21.9, 22.6, 23.1, 19.6, 19.0, 21.7, 21.4};
    double b[] = {27.1, 22.0, 20.8, 23.4, 23.4, 23.5, 25.8, 22.0, 24.8, 20.2, 21.9, 22.1, 22.9, 20.5, 24.4};
    double p = ar_welch_p(a, 15, b, 15);
    cr_expect(fabs(p - 0.021378001462867) < 1e-12, "p = %.17g", p);
    cr_expect(isnan(ar_welch_p(a, 1, b, 15)), "one value gives no test");
    double c[] = {1, 1, 1};
    cr_expect(isnan(ar_welch_p(c, 3, c, 3)), "zero variance gives no test");
}

/* The paired t-test by hand.  Two-sided p has a closed form for small df:
 * df 1 (Cauchy): p = 1 - 2 atan(|t|) / pi; df 2: p = 1 - |t| / sqrt(t^2 + 2);
 * df 4: p = 1 - x (3 - x^2) / 2 with x = |t| / sqrt(t^2 + 4).
 * Bounds: closed forms in double.  mean, sd and se are at most a dozen
 * operations (sums of at most 5 terms, a square root, a division) on values
 * below 0.04, each within 2^-53 relative with or without FMA contraction:
 * within 1e-17 of the written value, which is itself the exact value to 17
 * digits, so 1e-15 leaves 100 times that.  t (below 4) divides two such
 * values: within a few 1e-16, against 1e-12 (1e-11 where the written t has
 * 14 digits).  p comes from GSL's t tail (an incomplete beta function,
 * continued fraction converged to about 1e-15 relative) against the closed
 * form (a few operations): both within 1e-14 of the exact p, 1e-12 leaves
 * 100 times that.  The 7-digit values above are rounded: 1e-7. */
Test(ablate, paired_t_matches_hand_computation)
{
    ar_paired p;
    /* {0.01, 0.03, 0.02}: mean 0.02; deviations -0.01, 0.01, 0: sd =
     * sqrt(0.0002 / 2) = 0.01; se = 0.01 / sqrt(3) = 0.0057735; t = 0.02 / se
     * = 2 sqrt(3) = 3.4641016; df 2; p = 1 - 3.4641016 / sqrt(14) = 1 -
     * sqrt(6/7) = 0.0741799 */
    double d3[] = {0.01, 0.03, 0.02};
    ar_paired_t(d3, 3, &p);
    cr_expect_eq(p.pairs, 3);
    cr_expect(fabs(p.mean - 0.02) < 1e-15, "mean %.17g", p.mean);
    cr_expect(fabs(p.sd - 0.01) < 1e-15, "sd %.17g", p.sd);
    cr_expect(fabs(p.se - 0.0057735026918963) < 1e-15, "se %.17g", p.se);
    cr_expect(fabs(p.t - 3.4641016151377544) < 1e-12, "t %.17g", p.t);
    cr_expect(p.df == 2, "df %g", p.df);
    cr_expect(fabs(p.p - (1 - sqrt(6.0 / 7.0))) < 1e-12 && fabs(p.p - 0.0741799) < 1e-7, "p %.17g", p.p);

    /* {-0.01, -0.03}: mean -0.02; sd = sqrt((0.0001 + 0.0001) / 1) =
     * 0.0141421; se = 0.0141421 / sqrt(2) = 0.01; t = -2; df 1;
     * p = 1 - 2 atan(2) / pi = 0.2951672 (the sign does not matter) */
    double d2[] = {-0.01, -0.03};
    ar_paired_t(d2, 2, &p);
    cr_expect(fabs(p.mean + 0.02) < 1e-15 && fabs(p.sd - 0.014142135623730951) < 1e-15, "%g %g", p.mean, p.sd);
    cr_expect(fabs(p.se - 0.01) < 1e-15 && fabs(p.t + 2) < 1e-12 && p.df == 1, "se %g t %g", p.se, p.t);
    cr_expect(fabs(p.p - (1 - 2 * atan(2.0) / M_PI)) < 1e-12 && fabs(p.p - 0.2951672) < 1e-7, "p %.17g", p.p);

    /* {0.012, 0.025, -0.004, 0.018, 0.031}: mean 0.082 / 5 = 0.0164;
     * deviations -0.0044, 0.0086, -0.0204, 0.0016, 0.0146, squares summing
     * to 0.0007252: sd = sqrt(0.0007252 / 4) = 0.0134648; se = sd / sqrt(5)
     * = 0.00602163; t = 2.7235161; df 4; x = t / sqrt(t^2 + 4) = 0.806047;
     * p = 1 - x (3 - x^2) / 2 = 0.0527949 */
    double d5[] = {0.012, 0.025, -0.004, 0.018, 0.031};
    ar_paired_t(d5, 5, &p);
    cr_expect(fabs(p.mean - 0.0164) < 1e-15 && fabs(p.sd - sqrt(0.0007252 / 4)) < 1e-15, "%g %g", p.mean, p.sd);
    cr_expect(fabs(p.se - 0.0060216276869298) < 1e-15 && fabs(p.t - 2.7235161077123) < 1e-11 && p.df == 4,
              "se %.17g t %.17g", p.se, p.t);
    double x = p.t / sqrt(p.t * p.t + 4);
    cr_expect(fabs(p.p - (1 - x * (3 - x * x) / 2)) < 1e-12 && fabs(p.p - 0.0527949) < 1e-7, "p %.17g", p.p);

    /* fewer than 2 pairs: no spread, no test; identical differences: no test */
    ar_paired_t(d3, 1, &p);
    cr_expect(p.pairs == 1 && fabs(p.mean - 0.01) < 1e-15 && isnan(p.sd) && isnan(p.se) && isnan(p.p));
    ar_paired_t(d3, 0, &p);
    cr_expect(p.pairs == 0 && isnan(p.mean) && isnan(p.p));
    double same[] = {0.02, 0.02, 0.02};
    ar_paired_t(same, 3, &p);
    cr_expect(p.pairs == 3 && p.se == 0 && isnan(p.t) && isnan(p.p), "se %g t %g p %g", p.se, p.t, p.p);
}

/* The table's statistics: Welch over every finished seed, the paired test
 * over the seeds finished on both sides only. */
/* Spearman's rho against hand computations: ranks 1..5 against
 * 1, 2, 3.5, 5, 3.5 (a tie of two 7s at ranks 3 and 4):
 * sum dx dy = 4 + 1 + 0 + 2 + 1 = 8, sum dx^2 = 10, sum dy^2 = 9.5,
 * rho = 8 / sqrt(95). */
Test(ablate, spearman_matches_hand_computation)
{
    /* every step is exact in double but the final division and square
     * root, each correctly rounded on any IEEE machine: within 1e-15 */
    double x[] = {1, 2, 3, 4, 5}, y[] = {5, 6, 7, 8, 7};
    cr_expect(fabs(ar_spearman(x, y, 5) - 8 / sqrt(95.0)) < 1e-15, "%.17g", ar_spearman(x, y, 5));
    double rev[] = {50, 40, 30, 20, 10};
    cr_expect_eq(ar_spearman(x, rev, 5), -1.0);
    cr_expect_eq(ar_spearman(rev, rev, 5), 1.0);
    double flat[] = {2, 2, 2, 2, 2};
    cr_expect(isnan(ar_spearman(x, flat, 5)), "a constant side has no rank correlation");
    cr_expect(isnan(ar_spearman(x, y, 1)), "one pair has no rank correlation");
}

/* The comparison with the report on hand-made results: full -0.01 (report
 * -0.029: same sign), swa +0.14 (report -0.002: not), rescaled (not in the
 * report), denseformer -0.02 (report +0.001: not), input-query without
 * results.  Over the three compared, report -0.029, -0.002, +0.001 (ranks
 * 1, 2, 3) against measured -0.01, +0.14, -0.02 (ranks 2, 3, 1):
 * sum dx dy = 0 + 0 - 1, sum dx^2 = sum dy^2 = 2, rho = -0.5.  The measured
 * delta is the paired mean where there are pairs, else the difference of
 * means (swa here). */
Test(ablate, table4_comparison_on_hand_made_results)
{
    char names[6][AR_SWEEP_NAME_MAX] = {"baseline", "full", "swa", "rescaled", "denseformer", "input-query"};
    ar_ablate_stat st[6] = {{0}};
    st[0].n = 2, st[0].mean = 1.5;
    st[1].n = 2, st[1].paired.pairs = 2, st[1].paired.mean = -0.01, st[1].diff = -0.5;
    st[2].n = 1, st[2].diff = 0.14; /* no pairs: the difference of means */
    st[3].n = 2, st[3].paired.pairs = 2, st[3].paired.mean = 0.3;
    st[4].n = 2, st[4].paired.pairs = 2, st[4].paired.mean = -0.02;
    ar_table4_cmp cmp[6];
    int nboth = -1;
    double rho = ar_table4_compare(names, st, 6, cmp, &nboth);
    cr_expect_eq(nboth, 3);
    cr_expect(fabs(rho + 0.5) < 1e-15, "rho %.17g, expected -0.5", rho);
    cr_expect(cmp[0].pub == NULL && cmp[3].pub == NULL, "baseline and rescaled are not rows of Table 4");
    cr_expect(cmp[1].pub && cmp[1].pub->delta == -0.029 && cmp[1].measured == -0.01 && cmp[1].same_sign == 1);
    cr_expect(cmp[2].pub && cmp[2].pub->delta == -0.002 && cmp[2].measured == 0.14 && cmp[2].same_sign == 0);
    cr_expect(cmp[4].pub && cmp[4].pub->delta == 0.001 && cmp[4].same_sign == 0);
    cr_expect(cmp[5].pub && isnan(cmp[5].measured) && cmp[5].same_sign == -1, "no results: no sign");
    /* every published row names a variant ablate knows */
    int n;
    const ar_table4_row *rows = ar_table4_rows(&n);
    cr_expect_eq(n, 11);
    for (int i = 0; i < n; i++) {
        int known = 0;
        for (int v = 0; v < ar_ablate_nvariants(); v++)
            known |= strcmp(ar_ablate_variant_name(v), rows[i].variant) == 0;
        cr_expect(known, "Table 4's '%s' is not an ablate variant", rows[i].variant);
    }
}

Test(ablate, stats_pair_matched_seeds_only)
{
    /* 3 variants x 4 seeds; NaN: not finished */
    double loss[] = {
        1.00, 1.10, 1.20, NAN,  /* baseline */
        0.99, 1.07, NAN,  1.50, /* v1: pairs at seeds 1, 2: {-0.01, -0.03} */
        NAN,  NAN,  1.18, 1.19, /* v2: one pair (seed 3) */
    };
    ar_ablate_stat st[3];
    ar_ablate_stats(loss, 3, 4, st);
    /* Closed forms in double as above (sums of 3 terms below 1.5, a square
     * root, divisions): within 1e-15 of the exact values; 1e-12 leaves 1e3
     * of room, 1e-9 for t and p (GSL's tail) more. */
    /* baseline: n 3, mean 1.10, sd 0.1; no test against itself */
    cr_expect(st[0].n == 3 && fabs(st[0].mean - 1.10) < 1e-12 && fabs(st[0].sd - 0.1) < 1e-12);
    cr_expect(isnan(st[0].p) && st[0].paired.pairs == 0 && isnan(st[0].paired.p));
    /* v1: Welch on all three of its seeds (0.99, 1.07, 1.50: mean 1.18667)
     * against the baseline's three */
    double a[] = {0.99, 1.07, 1.50}, b[] = {1.00, 1.10, 1.20};
    cr_expect(st[1].n == 3 && fabs(st[1].mean - 3.56 / 3) < 1e-12 && fabs(st[1].diff - (3.56 / 3 - 1.10)) < 1e-12);
    /* the same function on the same values in the same order: the same bits */
    cr_expect(st[1].p == ar_welch_p(a, 3, b, 3) && st[1].p > 0.5, "Welch p %g", st[1].p);
    /* paired: the two matched seeds, as in the hand computation above:
     * mean -0.02, se 0.01, t -2, df 1, p = 1 - 2 atan(2) / pi */
    const ar_paired *p = &st[1].paired;
    cr_expect_eq(p->pairs, 2);
    cr_expect(fabs(p->mean + 0.02) < 1e-12 && fabs(p->se - 0.01) < 1e-12 && fabs(p->t + 2) < 1e-9, "%g %g %g",
              p->mean, p->se, p->t);
    cr_expect(fabs(p->p - (1 - 2 * atan(2.0) / M_PI)) < 1e-9, "p %g", p->p);
    /* v2: one pair: no paired test; Welch on its two seeds */
    cr_expect(st[2].n == 2 && st[2].paired.pairs == 1 && isnan(st[2].paired.p) && isfinite(st[2].p));
}

Test(ablate, every_variant_differs_only_in_the_residual)
{
    ar_config base;
    ar_config_defaults(&base);
    base.model.n_layer = 8; /* L = 16: room for the report's window 8 */
    base.model.d_model = 128;
    base.model.n_head = 4;
    ar_ablation a;
    ar_err e;
    int bs[] = {2, 8};
    cr_assert_eq(ar_ablate_plan(&a, &base, "all", 2, bs, 2, &e), 0, "%s", e.msg);
    cr_assert_eq(a.nvariants, ar_ablate_nvariants() + 2);
    cr_expect_str_eq(a.variant[0], "baseline");
    cr_assert_eq(a.sweep.nruns, a.nvariants * 2);
    for (int i = 0; i < a.sweep.nruns; i++) {
        const ar_sweep_run *r = &a.sweep.runs[i];
        ar_config x = r->cfg, y = base;
        cr_expect_eq(x.train.seed, base.train.seed + (uint64_t)(i % 2), "%s: seed %llu", r->name,
                     (unsigned long long)x.train.seed);
        x.train.seed = y.train.seed;
        x.model.residual = y.model.residual;
        char buf[256];
        cr_expect_eq(ar_config_diff(&x, &y, buf, sizeof buf), 0, "%s differs in more than the residual: %s",
                     r->name, buf);
        cr_expect_eq(r->tokens, a.sweep.runs[0].tokens);
    }
    /* a few of the table's settings */
    int found = 0;
    for (int v = 0; v < a.nvariants; v++) {
        const ar_residual_cfg *r = &a.sweep.runs[v * 2].cfg.model.residual;
        if (!strcmp(a.variant[v], "heads"))
            found += r->kind == AR_RES_BLOCK && r->heads == 16 && r->block_size == 4;
        if (!strcmp(a.variant[v], "swa"))
            found += r->kind == AR_RES_SWA && r->window == 8;
        if (!strcmp(a.variant[v], "no-key-norm"))
            found += r->kind == AR_RES_FULL && r->key_norm == AR_KEY_NORM_OFF;
        if (!strcmp(a.variant[v], "block-s8"))
            found += r->kind == AR_RES_BLOCK && r->block_size == 8;
        if (!strcmp(a.variant[v], "mhc"))
            found += r->kind == AR_RES_MHC && r->streams == 4;
    }
    cr_expect_eq(found, 5);
    ar_ablate_free(&a);
}

Test(ablate, unknown_variant_lists_the_valid_ones)
{
    ar_config base;
    ar_config_defaults(&base);
    ar_ablation a;
    ar_err e;
    cr_assert_neq(ar_ablate_plan(&a, &base, "sigmoid,nope", 1, NULL, 0, &e), 0);
    cr_expect(strstr(e.msg, "'nope'") && strstr(e.msg, "sigmoid") && strstr(e.msg, "denseformer"), "%s", e.msg);
}

/* ---- end to end through the binary ---- */

static const char *TINY = "model: {vocab: bytes, d_model: 16, n_layer: 1, n_head: 2, d_ff: 32, seq_len: 16,\n"
                          "        residual: {kind: baseline}}\n"
                          "data: {train: corpus.txt}\n"
                          "train: {steps: 4, batch_size: 4, lr: 1.0e-2, min_lr: 1.0e-3, warmup: 1, eval_every: 0,\n"
                          "        eval_windows: 4, save_every: 2, log_every: 1, threads: 1}\n";

static int count(const char *s, const char *needle)
{
    int n = 0;
    for (const char *p = strstr(s, needle); p; p = strstr(p + 1, needle))
        n++;
    return n;
}

/* results.csv: its header, a row per run of 15 fields with a finite loss,
 * and one token budget for all. */
static void expect_results_csv(const char *cdir)
{
    size_t n;
    char *csv = tu_read_file(tu_path(cdir, "ab/results.csv"), &n);
    cr_assert(csv);
    cr_expect(strncmp(csv, AR_ABLATE_COLUMNS "\n", strlen(AR_ABLATE_COLUMNS) + 1) == 0, "%s", csv);
    cr_expect_eq(count(csv, "\n"), 11, "%s", csv);
    cr_expect(strstr(csv, "\nbaseline,1,") && strstr(csv, "\nbaseline,2,") && strstr(csv, "\nsigmoid,2,"), "%s", csv);
    /* every row has 15 fields and a finite loss; all runs share the token budget */
    for (char *line = strchr(csv, '\n') + 1; *line; line = strchr(line, '\n') + 1) {
        cr_expect_eq(count(line, ",") - count(strchr(line, '\n'), ","), 14);
        char variant[64];
        int seed;
        long params, tokens;
        double flops, loss;
        cr_assert_eq(sscanf(line, "%63[^,],%d,%ld,%ld,%lf,%lf", variant, &seed, &params, &tokens, &flops, &loss), 6,
                     "%s", line);
        cr_expect_eq(tokens, 4L * 4 * 16);
        cr_expect(isfinite(loss) && loss > 0 && loss < 10, "%s", line);
        cr_expect_gt(params, 0);
    }
    free(csv);
}

/* The final evaluations: the whole validation split (the last 5% of the
 * corpus: (floor(0.05 n) - 1) / 16 windows of 16), not the 4 windows of
 * the evaluations during training; each as recorded in its run.  Returns
 * that number of windows. */
static long expect_final_evals(const char *cdir)
{
    struct stat cs;
    cr_assert_eq(stat(tu_path(cdir, "corpus.txt"), &cs), 0);
    long nval = (long)floor((double)cs.st_size * 0.05), want_windows = (nval - 1) / 16;
    ar_csv *c;
    ar_err ce;
    cr_assert_eq(ar_csv_read(&c, tu_path(cdir, "ab/results.csv"), &ce), 0, "%s", ce.msg);
    int kf = ar_csv_col(c, "final_val_loss"), kw = ar_csv_col(c, "final_eval_windows"),
        kt = ar_csv_col(c, "final_eval_tokens"), kr = ar_csv_col(c, "run");
    cr_assert(kf >= 0 && kw >= 0 && kt >= 0 && kr >= 0);
    for (int i = 0; i < c->nrows; i++) {
        double fl, w, t;
        cr_assert_eq(ar_csv_num(c, i, kf, &fl, &ce), 0, "%s", ce.msg);
        cr_assert_eq(ar_csv_num(c, i, kw, &w, &ce), 0, "%s", ce.msg);
        cr_assert_eq(ar_csv_num(c, i, kt, &t, &ce), 0, "%s", ce.msg);
        cr_expect(w == (double)want_windows && t == 16.0 * want_windows, "windows %g tokens %g, want %ld", w, t,
                  want_windows);
        char rd[4400];
        snprintf(rd, sizeof rd, "%s/ab/runs/%s", cdir, ar_csv_cell(c, i, kr));
        ar_final_eval fe;
        cr_assert_eq(ar_final_eval_read(rd, 4, 0, &fe, &ce), 1, "%s: %s", rd, ce.msg);
        /* results.csv writes %.6f: half a unit of the 6th decimal (the
         * decimal read back to the nearest double adds 1e-16) */
        cr_expect(fabs(fe.loss - fl) <= 5e-7 + 1e-15 && fe.windows == want_windows, "%s: %.9f vs %.6f", rd, fe.loss,
                  fl);
        /* the shape of TINY, for plot-sweep and depth studies */
        double nl, dm, nh;
        cr_assert_eq(ar_csv_num(c, i, ar_csv_require_col(c, "n_layer", &ce), &nl, &ce), 0, "%s", ce.msg);
        cr_assert_eq(ar_csv_num(c, i, ar_csv_require_col(c, "d_model", &ce), &dm, &ce), 0, "%s", ce.msg);
        cr_assert_eq(ar_csv_num(c, i, ar_csv_require_col(c, "n_head", &ce), &nh, &ce), 0, "%s", ce.msg);
        cr_expect(nl == 1 && dm == 16 && nh == 2, "shape %g %g %g", nl, dm, nh);
    }
    ar_csv_free(c);
    return want_windows;
}

/* results.md: its columns, the split it evaluated on, sigmoid's tests and
 * baseline's dashes. */
static void expect_results_md(const char *cdir, long want_windows)
{
    size_t n;
    char *md = tu_read_file(tu_path(cdir, "ab/results.md"), &n);
    cr_assert(md);
    cr_expect(strstr(md, "| variant | seeds | val loss (mean) | std | diff vs baseline | p (Welch) "
                         "| pairs | paired diff | se | t | p (paired) |"),
              "%s", md);
    char whole[128];
    snprintf(whole, sizeof whole, "the whole validation split, %ld windows of 16 tokens", want_windows);
    cr_expect(strstr(md, whole), "%s", md);
    /* sigmoid has 2 seeds: a numeric p-value, not a dash */
    const char *row = strstr(md, "| sigmoid | 2 | ");
    cr_assert(row, "%s", md);
    char rowbuf[256];
    snprintf(rowbuf, sizeof rowbuf, "%.*s", (int)strcspn(row, "\n"), row);
    double mean, sd, diff, p, pdiff, se, t, pp;
    int pairs;
    cr_expect_eq(sscanf(rowbuf, "| sigmoid | 2 | %lf | %lf | %lf | %lf | %d | %lf | %lf | %lf | %lf |", &mean, &sd,
                        &diff, &p, &pairs, &pdiff, &se, &t, &pp),
                 9, "%s", rowbuf);
    cr_expect(p >= 0 && p <= 1, "%s", rowbuf);
    /* matched seeds: the paired mean difference is the difference of the
     * means (the two agree to a few 1e-16 in double); the table writes each
     * with %+.4f, half a unit of the 4th decimal apiece: 1e-4 */
    cr_expect(pairs == 2 && fabs(pdiff - diff) <= 1e-4 + 1e-12 && se > 0 && pp >= 0 && pp <= 1, "%s", rowbuf);
    cr_expect(strstr(md, "| baseline | 2 | ") && strstr(md, "- | - | - | - | - |\n"), "%s", md);
    /* the report's Table 4 beside it: sigmoid's row, its measured delta
     * the paired one above, its sign against the report's -0.025 */
    cr_expect(strstr(md, "## Against the report's Table 4"), "%s", md);
    const char *t4 = strstr(md, "| sigmoid | Full, sigmoid scores | -0.025 | ");
    cr_assert(t4, "%s", md);
    double meas;
    char same[8];
    cr_assert_eq(sscanf(t4, "| sigmoid | Full, sigmoid scores | -0.025 | %lf | %7[a-z*] |", &meas, same), 2, "%s", t4);
    cr_expect(fabs(meas - pdiff) <= 1e-4 + 1e-12, "measured %g, paired %g", meas, pdiff);
    cr_expect_str_eq(same, meas < 0 ? "yes" : "**no**");
    cr_expect(strstr(md, "| full | Full AttnRes | -0.029 | "), "%s", md);
    cr_expect(strstr(md, "over the 2 variants"), "%s", md);
    cr_expect(strstr(md, "block-s1 |") == NULL || strstr(strstr(md, "## Against"), "block-s1") == NULL,
              "block-s1 is not a row of Table 4:\n%s", md);
    free(md);
}

/* --json on the finished ablation: stdout is one JSON object (the reuse
 * messages on stderr) with every variant's statistics and the comparison:
 * full and sigmoid compared, rho +1 or -1 as their measured order agrees
 * with the report's (full -0.029 below sigmoid -0.025). */
static void expect_json(const char *cmd)
{
    int st;
    char cmd2[9300];
    snprintf(cmd2, sizeof cmd2, "{ %s --json 2>/dev/null; }", cmd); /* tu_run adds 2>&1 after */
    char *out = tu_run(cmd2, &st);
    cr_assert_eq(st, 0, "%s", out);
    ar_err e;
    ar_json *j = ar_json_parse(out, strlen(out), &e);
    cr_assert(j, "ablate --json printed no JSON (%s):\n%s", e.msg, out);
    const ar_json *vs = ar_json_get(j, "variants");
    cr_assert(vs && vs->type == AR_JSON_ARR && vs->n == 5, "%s", out);
    double m[2] = {NAN, NAN};
    for (int i = 0; i < vs->n; i++) {
        const ar_json *v = &vs->items[i];
        const char *name = ar_json_get(v, "variant")->str;
        const ar_json *rd = ar_json_get(v, "report_delta"), *md = ar_json_get(v, "measured_delta");
        const ar_json *ss = ar_json_get(v, "same_sign"), *pm = ar_json_get(v, "paired_mean");
        cr_assert(rd && md && ss && pm, "%s", out);
        int in_report = !strcmp(name, "full") || !strcmp(name, "sigmoid");
        cr_expect_eq(rd->type, in_report ? AR_JSON_NUM : AR_JSON_NULL, "%s: report_delta", name);
        if (!in_report)
            continue;
        cr_expect(md->type == AR_JSON_NUM && pm->type == AR_JSON_NUM && md->num == pm->num, "%s", name);
        cr_expect(ss->type == AR_JSON_BOOL && ss->boolean == ((md->num < 0) == (rd->num < 0)), "%s", name);
        m[!strcmp(name, "sigmoid")] = md->num;
    }
    const ar_json *t4 = ar_json_get(j, "table4");
    cr_assert(t4, "%s", out);
    cr_expect_eq(ar_json_get(t4, "variants_compared")->num, 2);
    cr_expect_eq(ar_json_get(t4, "report_baseline_loss")->num, 1.766);
    const ar_json *rho = ar_json_get(t4, "spearman");
    if (m[0] == m[1])
        cr_expect_eq(rho->type, AR_JSON_NULL);
    else
        cr_expect(rho->type == AR_JSON_NUM && rho->num == (m[0] < m[1] ? 1.0 : -1.0), "rho %g", rho->num);
    ar_json_free(j);
    free(out);
}

static void expect_pngs(const char *cdir)
{
    size_t n;
    const char *pngs[] = {"ab/ablation.png", "ab/block_sizes.png"};
    for (int i = 0; i < 2; i++) {
        char *png = tu_read_file(tu_path(cdir, pngs[i]), &n);
        cr_assert(png, "%s missing", pngs[i]);
        cr_expect(n > 1000 && memcmp(png, "\x89PNG", 4) == 0, "%s is not a PNG", pngs[i]);
        cr_expect(memmem(png, n, "tEXt", 4) != NULL, "%s has no tEXt metadata", pngs[i]);
        free(png);
    }
}

/* A rerun of cmd reuses every finished run and its final evaluation:
 * nothing is trained or evaluated again, and results.csv stays csv0. */
static void expect_rerun_reuses(const char *cdir, const char *cmd, const char *csv0)
{
    int st;
    struct stat s0, s1, f0, f1;
    cr_assert_eq(stat(tu_path(cdir, "ab/runs/sigmoid-seed2/model.safetensors"), &s0), 0);
    cr_assert_eq(stat(tu_path(cdir, "ab/runs/sigmoid-seed2/final_eval.json"), &f0), 0);
    char *out = tu_run(cmd, &st);
    cr_assert_eq(st, 0, "%s", out);
    cr_expect_eq(count(out, "reused"), 10 + 1, "%s", out);
    cr_expect_eq(count(out, "training"), 0, "%s", out);
    free(out);
    cr_assert_eq(stat(tu_path(cdir, "ab/runs/sigmoid-seed2/model.safetensors"), &s1), 0);
    cr_expect(s0.st_mtim.tv_sec == s1.st_mtim.tv_sec && s0.st_mtim.tv_nsec == s1.st_mtim.tv_nsec);
    cr_assert_eq(stat(tu_path(cdir, "ab/runs/sigmoid-seed2/final_eval.json"), &f1), 0);
    cr_expect(f0.st_mtim.tv_sec == f1.st_mtim.tv_sec && f0.st_mtim.tv_nsec == f1.st_mtim.tv_nsec,
              "the final evaluation was made again");
    char *csv1 = tu_read_file(tu_path(cdir, "ab/results.csv"), NULL);
    cr_expect_str_eq(csv0, csv1);
    free(csv1);
}

/* A lost final evaluation is made again, the run not trained again, and
 * gives the same number. */
static void expect_lost_final_eval_redone(const char *cdir, const char *cmd, const char *csv0)
{
    int st;
    char *fe0 = tu_read_file(tu_path(cdir, "ab/runs/baseline-seed1/final_eval.json"), NULL);
    cr_assert_eq(unlink(tu_path(cdir, "ab/runs/baseline-seed1/final_eval.json")), 0);
    char *out = tu_run(cmd, &st);
    cr_assert_eq(st, 0, "%s", out);
    cr_expect_eq(count(out, "training"), 0, "%s", out);
    cr_expect(strstr(out, "(10 reused, 0 trained)"), "%s", out);
    free(out);
    char *fe1 = tu_read_file(tu_path(cdir, "ab/runs/baseline-seed1/final_eval.json"), NULL);
    cr_assert(fe1);
    cr_expect_str_eq(fe0, fe1);
    free(fe1);
    char *csv1 = tu_read_file(tu_path(cdir, "ab/results.csv"), NULL);
    cr_expect_str_eq(csv0, csv1);
    free(csv1);
    free(fe0);
}

/* Another train.final_eval_windows evaluates the finished runs again (and
 * only evaluates them). */
static void expect_other_windows_reevaluate(const char *cdir, const char *cmd)
{
    int st;
    char cmd2[9200];
    snprintf(cmd2, sizeof cmd2, "%s --set train.final_eval_windows=3", cmd);
    char *out = tu_run(cmd2, &st);
    cr_assert_eq(st, 0, "%s", out);
    cr_expect_eq(count(out, "training"), 0, "%s", out);
    free(out);
    ar_csv *c;
    ar_err ce;
    cr_assert_eq(ar_csv_read(&c, tu_path(cdir, "ab/results.csv"), &ce), 0, "%s", ce.msg);
    for (int i = 0; i < c->nrows; i++)
        cr_expect_str_eq(ar_csv_cell(c, i, ar_csv_col(c, "final_eval_windows")), "3");
    ar_csv_free(c);
    char *md = tu_read_file(tu_path(cdir, "ab/results.md"), NULL);
    cr_expect(strstr(md, "the first 3 windows (train.final_eval_windows) of the validation split, 3 windows"), "%s",
              md);
    free(md);
}

/* A damaged record is an error that names it. */
static void expect_damaged_record_named(const char *cdir, const char *cmd)
{
    int st;
    char cmd2[9200];
    tu_write_file(tu_path(cdir, "ab/runs/baseline-seed1/final_eval.json"), "{\"step\": 4,", 11);
    snprintf(cmd2, sizeof cmd2, "%s --set train.final_eval_windows=3 2>&1", cmd);
    char *out = tu_run(cmd2, &st);
    cr_expect_eq(st, 1, "%s", out);
    cr_expect(strstr(out, "attnres: error: '") && strstr(out, "ab/runs/baseline-seed1/final_eval.json': ") &&
                  strstr(out, "remove it to evaluate the run again"),
              "%s", out);
    free(out);
}

/* One ablation (it trains 10 runs), then each of its outputs in turn, and
 * reruns of it that reuse, redo or refuse. */
Test(ablate, tiny_ablation_end_to_end, .timeout = 120)
{
    const char *bin = tu_bin();
    if (!bin)
        cr_skip_test("AR_BIN not set");
    const char *dir = tu_tmpdir();
    char cdir[4200];
    snprintf(cdir, sizeof cdir, "%s", dir);
    tu_write_corpus_text(tu_path(cdir, "corpus.txt"));
    tu_write_file(tu_path(cdir, "tiny.yaml"), TINY, strlen(TINY));
    char cmd[9000];
    snprintf(cmd, sizeof cmd, "cd '%s' && '%s' ablate --variant sigmoid tiny.yaml --seeds 2 --out ab --block-sizes 1,2",
             cdir, bin);
    int st;
    char *out = tu_run(cmd, &st);
    cr_assert_eq(st, 0, "%s", out);
    /* baseline, full (reference for the block sizes), sigmoid, block-s1, block-s2 */
    cr_expect_eq(count(out, ": done, val_loss"), 10, "%s", out);
    free(out);

    expect_results_csv(cdir);
    long want_windows = expect_final_evals(cdir);
    expect_results_md(cdir, want_windows);
    expect_pngs(cdir);
    char *csv0 = tu_read_file(tu_path(cdir, "ab/results.csv"), NULL);
    expect_rerun_reuses(cdir, cmd, csv0);
    expect_json(cmd);
    expect_lost_final_eval_redone(cdir, cmd, csv0);
    free(csv0);
    expect_other_windows_reevaluate(cdir, cmd);
    expect_damaged_record_named(cdir, cmd);
}

Test(ablate, cli_unknown_variant_exits_2)
{
    const char *bin = tu_bin();
    if (!bin)
        cr_skip_test("AR_BIN not set");
    const char *dir = tu_tmpdir();
    char cdir[4200], cmd[9000];
    snprintf(cdir, sizeof cdir, "%s", dir);
    tu_write_corpus_text(tu_path(cdir, "corpus.txt"));
    tu_write_file(tu_path(cdir, "tiny.yaml"), TINY, strlen(TINY));
    snprintf(cmd, sizeof cmd, "cd '%s' && '%s' ablate --variant nope tiny.yaml 2>&1", cdir, bin);
    int st;
    char *out = tu_run(cmd, &st);
    cr_expect_eq(st, 2, "%s", out);
    cr_expect(strstr(out, "attnres: error: unknown variant 'nope'"), "%s", out);
    cr_expect(strstr(out, "baseline, full, block, sigmoid"), "%s", out);
    free(out);
    /* the run directory was not created */
    struct stat sb;
    cr_expect_neq(stat(tu_path(cdir, "runs"), &sb), 0);
}

/* ---- a killed ablation resumes ---- */

typedef struct {
    int started, resumed, skipped, finished;
    char resumed_at[64];
} events;

static void on_event(const ar_sweep_run *r, ar_sweep_event ev, const char *detail, void *ud)
{
    (void)r;
    events *x = ud;
    x->started += ev == AR_SWEEP_STARTED;
    x->skipped += ev == AR_SWEEP_SKIPPED;
    x->finished += ev == AR_SWEEP_FINISHED;
    if (ev == AR_SWEEP_RESUMED) {
        x->resumed++;
        snprintf(x->resumed_at, sizeof x->resumed_at, "%s", detail ? detail : "");
    }
}

Test(ablate, interrupted_run_resumes_and_finished_ones_are_reused, .timeout = 120)
{
    const char *dir = tu_tmpdir();
    char cdir[4200], yaml[512];
    snprintf(cdir, sizeof cdir, "%s", dir);
    tu_write_corpus_text(tu_path(cdir, "corpus.txt"));
    snprintf(yaml, sizeof yaml, "%s", TINY);
    ar_config base;
    ar_err e = {{0}};
    ar_config_defaults(&base);
    cr_assert_eq(ar_config_parse(&base, yaml, strlen(yaml), "tiny.yaml", &e), 0, "%s", e.msg);
    snprintf(base.data.train, sizeof base.data.train, "%s", tu_path(cdir, "corpus.txt"));
    ar_ablation a;
    cr_assert_eq(ar_ablate_plan(&a, &base, "static", 1, NULL, 0, &e), 0, "%s", e.msg);
    cr_assert_eq(a.sweep.nruns, 2);
    char runs[4300], rd[4400];
    snprintf(runs, sizeof runs, "%s/runs", cdir);
    snprintf(rd, sizeof rd, "%s/static-seed1", runs);
    /* "kill" static-seed1 after its first step: an interrupt pending from the start */
    volatile sig_atomic_t stop = 1;
    ar_train_opts to = {.out_dir = rd, .interrupt = &stop};
    ar_train_result tr;
    cr_assert_eq(ar_train(&a.sweep.runs[1].cfg, &to, &tr, &e), 0, "%s", e.msg);
    cr_assert(tr.interrupted && tr.step < a.sweep.runs[1].cfg.train.steps, "step %ld", tr.step);

    events ev = {0};
    ar_sweep_opts o = {.out_dir = runs, .jobs = 1, .event = on_event, .ud = &ev};
    ar_sweep_result res;
    cr_assert_eq(ar_sweep_run_all(&a.sweep, &o, &res, &e), 0, "%s", e.msg);
    cr_expect_eq(ev.started, 1);
    cr_expect_eq(ev.resumed, 1);
    char want[32];
    snprintf(want, sizeof want, "step %ld", tr.step);
    cr_expect_str_eq(ev.resumed_at, want);
    cr_expect_eq(ev.finished, 2);
    ar_ablate_stat st[2];
    cr_assert_eq(ar_ablate_report(&a, cdir, st, &e), 0, "%s", e.msg);
    cr_expect(st[0].n == 1 && st[1].n == 1);
    cr_expect(isfinite(st[1].mean) && isnan(st[1].p));

    /* again: everything reused */
    memset(&ev, 0, sizeof ev);
    cr_assert_eq(ar_sweep_run_all(&a.sweep, &o, &res, &e), 0, "%s", e.msg);
    cr_expect_eq(ev.skipped, 2);
    cr_expect_eq(ev.started + ev.resumed + ev.finished, 0);
    ar_ablate_free(&a);
}

/* ---- --block-layouts: Block AttnRes with blocks of different sizes ---- */

Test(ablate, block_layouts_add_one_block_variant_each)
{
    ar_config base;
    ar_config_defaults(&base); /* n_layer 4: L = 8 */
    ar_ablation a;
    ar_err e = {{0}};
    cr_assert_eq(ar_ablate_plan(&a, &base, "full", 2, NULL, 0, &e), 0, "%s", e.msg);
    cr_assert_eq(ar_ablate_add_layouts(&a, &base, "2,2,4;1,3,2,2;2,2,4", &e), 0, "%s", e.msg);
    cr_assert_eq(a.nvariants, 4, "baseline, full and two layouts (the repeated one once)");
    cr_expect_str_eq(a.variant[0], "baseline");
    cr_expect_str_eq(a.variant[2], "block-l2-2-4");
    cr_expect_str_eq(a.variant[3], "block-l1-3-2-2");
    cr_assert_eq(a.sweep.nruns, 8);
    cr_assert_eq(a.sweep.nvariants, 4);
    int want[][4] = {{2, 2, 4}, {1, 3, 2, 2}}, nwant[] = {3, 4};
    for (int v = 2; v < 4; v++)
        for (int k = 0; k < 2; k++) {
            const ar_sweep_run *r = &a.sweep.runs[v * 2 + k];
            const ar_residual_cfg *rc = &r->cfg.model.residual;
            cr_expect_str_eq(r->variant, a.variant[v]);
            char name[96];
            snprintf(name, sizeof name, "%s-seed%d", a.variant[v], k + 1);
            cr_expect_str_eq(r->name, name);
            cr_expect_eq(r->cfg.train.seed, base.train.seed + (uint64_t)k);
            cr_expect(rc->kind == AR_RES_BLOCK && rc->block_size == 0 && rc->num_blocks == 0);
            cr_assert_eq(rc->block_sizes.n, nwant[v - 2]);
            for (int i = 0; i < nwant[v - 2]; i++)
                cr_expect_eq(rc->block_sizes.v[i], want[v - 2][i]);
            /* only the residual differs from the base */
            ar_config x = r->cfg, y = base;
            x.train.seed = y.train.seed;
            x.model.residual = y.model.residual;
            char buf[256];
            cr_expect_eq(ar_config_diff(&x, &y, buf, sizeof buf), 0, "%s: %s", r->name, buf);
            cr_expect_eq(r->tokens, a.sweep.runs[0].tokens);
        }
    /* the earlier variants' runs are where they were */
    cr_expect_str_eq(a.sweep.runs[2].name, "full-seed1");
    cr_expect_eq(a.sweep.runs[3].cfg.model.residual.kind, AR_RES_FULL);
    ar_ablate_free(&a);

    /* a layout's name is a variant name of its own */
    ar_model_cfg m;
    cr_assert_eq(ar_ablate_apply(&m, &base.model, "block-l5-3", &e), 0, "%s", e.msg);
    cr_expect(m.residual.kind == AR_RES_BLOCK && m.residual.block_sizes.n == 2 && m.residual.block_sizes.v[0] == 5 &&
              m.residual.block_sizes.v[1] == 3 && m.residual.block_size == 0);
    const char *bad[] = {"block-l", "block-l1--2", "block-l0-8", "block-l2-", "block-lx"};
    for (int i = 0; i < 5; i++) {
        cr_expect_neq(ar_ablate_apply(&m, &base.model, bad[i], &e), 0, "%s accepted", bad[i]);
        cr_expect(strstr(e.msg, "unknown variant") && strstr(e.msg, "block-l<S1>-<S2>-..."), "%s", e.msg);
    }
}

Test(ablate, block_layouts_errors_name_the_option)
{
    ar_config base;
    ar_config_defaults(&base); /* L = 8 */
    struct {
        const char *arg, *want;
    } cases[] = {
        {"2,2,4,9", "'--block-layouts': layout '2,2,4,9' sums to 17 sublayers, expected L = 2*'model.n_layer' = 8"},
        {"4,4;4", "'--block-layouts': layout '4' sums to 4 sublayers, expected L = 2*'model.n_layer' = 8"},
        {"4,0,4", "'--block-layouts': layout '4,0,4' is not a comma-separated list of positive integers"},
        {"4,-4,8", "layout '4,-4,8' is not a comma-separated list of positive integers"},
        {"4,,4", "layout '4,,4' is not a comma-separated list"},
        {"4,4,", "layout '4,4,' is not a comma-separated list"},
        {"4.5,3.5", "layout '4.5,3.5' is not a comma-separated list"},
        {"4,4;;8", "layout '' is not a comma-separated list"},
        {"", "'--block-layouts' is empty"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        ar_ablation a;
        ar_err e = {{0}};
        cr_assert_eq(ar_ablate_plan(&a, &base, "baseline", 1, NULL, 0, &e), 0, "%s", e.msg);
        cr_expect_neq(ar_ablate_add_layouts(&a, &base, cases[i].arg, &e), 0, "'%s' accepted", cases[i].arg);
        cr_expect(strstr(e.msg, cases[i].want), "'%s': %s", cases[i].arg, e.msg);
        ar_ablate_free(&a);
    }
}

/* A base config with block_sizes lends its blocks to the variants built on
 * block; the others do not carry them (and validate). */
Test(ablate, block_variants_take_the_base_layout)
{
    ar_config base;
    ar_config_defaults(&base);
    ar_err e = {{0}};
    cr_assert_eq(ar_config_set(&base, "model.residual.block_sizes=[1,3,2,2]", &e), 0, "%s", e.msg);
    ar_ablation a;
    cr_assert_eq(ar_ablate_plan(&a, &base, "all", 1, NULL, 0, &e), 0, "%s", e.msg);
    int seen = 0;
    for (int v = 0; v < a.nvariants; v++) {
        const ar_residual_cfg *rc = &a.sweep.runs[v].cfg.model.residual;
        int on_block = !strcmp(a.variant[v], "block") || !strcmp(a.variant[v], "heads") ||
                       !strcmp(a.variant[v], "block-no-key-norm");
        if (on_block) {
            seen++;
            cr_expect(rc->kind == AR_RES_BLOCK && rc->block_sizes.n == 4 && rc->block_sizes.v[1] == 3 &&
                          rc->block_size == 0,
                      "%s does not take the base's blocks", a.variant[v]);
        } else {
            cr_expect_eq(rc->block_sizes.n, 0, "%s carries block_sizes", a.variant[v]);
        }
    }
    cr_expect_eq(seen, 3);
    ar_ablate_free(&a);
}

Test(ablate, cli_block_layouts_end_to_end, .timeout = 120)
{
    const char *bin = tu_bin();
    if (!bin)
        cr_skip_test("AR_BIN not set");
    const char *dir = tu_tmpdir();
    char cdir[4200], cmd[9000];
    snprintf(cdir, sizeof cdir, "%s", dir);
    tu_write_corpus_text(tu_path(cdir, "corpus.txt"));
    /* n_layer 2: L = 4 */
    char *two = strdup(TINY);
    memcpy(strstr(two, "n_layer: 1"), "n_layer: 2", 10);
    tu_write_file(tu_path(cdir, "tiny.yaml"), two, strlen(two));
    free(two);
    snprintf(cmd, sizeof cmd, "cd '%s' && '%s' ablate tiny.yaml --block-layouts '1,3;2,2' --out ab 2>&1", cdir, bin);
    int st;
    char *out = tu_run(cmd, &st);
    cr_assert_eq(st, 0, "%s", out);
    cr_expect(strstr(out, "baseline, block-l1-3, block-l2-2"), "%s", out);
    cr_expect_eq(count(out, ": done, val_loss"), 3, "%s", out);
    free(out);
    size_t n;
    char *csv = tu_read_file(tu_path(cdir, "ab/results.csv"), &n);
    cr_assert(csv);
    cr_expect(strstr(csv, "\nbaseline,1,") && strstr(csv, "\nblock-l1-3,1,") && strstr(csv, "\nblock-l2-2,1,"), "%s",
              csv);
    free(csv);
    char *md = tu_read_file(tu_path(cdir, "ab/results.md"), &n);
    cr_assert(md);
    cr_expect(strstr(md, "| block-l1-3 | 1 | ") && strstr(md, "| block-l2-2 | 1 | "), "%s", md);
    free(md);
    char *yaml = tu_read_file(tu_path(cdir, "ab/runs/block-l1-3-seed1/config.yaml"), &n);
    cr_assert(yaml);
    cr_expect(strstr(yaml, "    kind: block\n    block_sizes: [1, 3]\n"), "%s", yaml);
    free(yaml);

    /* a layout that does not fit the model, and one that is not a list */
    snprintf(cmd, sizeof cmd, "cd '%s' && '%s' ablate tiny.yaml --block-layouts '1,2' --out ab2 2>&1", cdir, bin);
    out = tu_run(cmd, &st);
    cr_expect_eq(st, 1, "%s", out);
    cr_expect(strstr(out, "attnres: error: '--block-layouts': layout '1,2' sums to 3 sublayers, expected L = "
                          "2*'model.n_layer' = 4"),
              "%s", out);
    free(out);
    snprintf(cmd, sizeof cmd, "cd '%s' && '%s' ablate tiny.yaml --block-layouts '1,x' --out ab2 2>&1", cdir, bin);
    out = tu_run(cmd, &st);
    cr_expect_eq(st, 2, "%s", out);
    cr_expect(strstr(out, "attnres: error: '--block-layouts': layout '1,x' is not a comma-separated list"), "%s", out);
    free(out);
    struct stat sb;
    cr_expect_neq(stat(tu_path(cdir, "ab2"), &sb), 0, "a refused command created its directory");
}

/* ---- error kinds: a wrong command line (exit status 2) or a failure (1) ---- */

static ar_err_kind plan_kind(const ar_config *base, const char *variants)
{
    ar_ablation a;
    ar_err e = {{0}};
    cr_assert_neq(ar_ablate_plan(&a, base, variants, 1, NULL, 0, &e), 0, "'%s' planned", variants);
    return e.kind;
}

static ar_err_kind layouts_kind(const ar_config *base, const char *layouts)
{
    ar_ablation a;
    ar_err e = {{0}};
    cr_assert_eq(ar_ablate_plan(&a, base, "baseline", 1, NULL, 0, &e), 0, "%s", e.msg);
    cr_assert_neq(ar_ablate_add_layouts(&a, base, layouts, &e), 0, "'%s' accepted", layouts);
    ar_ablate_free(&a);
    return e.kind;
}

Test(ablate, error_kinds)
{
    ar_config base;
    ar_config_defaults(&base); /* L = 8 */
    /* a wrong name or list: BAD_VALUE */
    cr_expect_eq(plan_kind(&base, "sigmoid,nope"), AR_ERR_BAD_VALUE);
    cr_expect_eq(plan_kind(&base, "full,,block"), AR_ERR_BAD_VALUE);
    cr_expect_eq(layouts_kind(&base, "4,0,4"), AR_ERR_BAD_VALUE);
    cr_expect_eq(layouts_kind(&base, ""), AR_ERR_BAD_VALUE);
    /* well-formed, but not for this model: OTHER */
    cr_expect_eq(layouts_kind(&base, "2,2,4,9"), AR_ERR_OTHER);
    base.model.d_model = 24; /* heads (16) do not divide it */
    base.model.n_head = 2;
    cr_expect_eq(plan_kind(&base, "heads"), AR_ERR_OTHER);
}

Test(ablate, cli_exit_status_by_error_kind, .timeout = 60)
{
    const char *bin = tu_bin();
    if (!bin)
        cr_skip_test("AR_BIN not set");
    const char *dir = tu_tmpdir();
    char cdir[4200], cmd[9000];
    snprintf(cdir, sizeof cdir, "%s", dir);
    tu_write_corpus_text(tu_path(cdir, "corpus.txt"));
    tu_write_file(tu_path(cdir, "tiny.yaml"), TINY, strlen(TINY));
    struct {
        int status;
        const char *args, *want;
    } cases[] = {
        {2, "--variant nope", "attnres: error: unknown variant 'nope'"},
        {2, "--variant full,,block", "attnres: error: variant list 'full,,block' has an empty or overlong name"},
        {1, "--variant heads --set model.d_model=24", "attnres: error: variant 'heads': 'model.d_model' (24)"},
        {1, "--variant full --set data.train=missing.txt", "attnres: error: training data 'missing.txt' not found"},
        {2, "--variant full --depths 1,1", "attnres: error: depth 1 appears twice in '--depths'"},
        {2, "--variant nope --depths 1,2", "attnres: error: depth 1: unknown variant 'nope'"},
        {1, "--variant heads --depths 1 --set model.d_model=24", "attnres: error: depth 1: variant 'heads': "},
        {1, "--variant full --depths 1 --set data.train=missing.txt",
         "attnres: error: training data 'missing.txt' not found"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        snprintf(cmd, sizeof cmd, "cd '%s' && '%s' ablate tiny.yaml %s --out out 2>&1", cdir, bin, cases[i].args);
        int st;
        char *out = tu_run(cmd, &st);
        cr_expect_eq(st, cases[i].status, "%s: %s", cases[i].args, out);
        cr_expect(strstr(out, cases[i].want), "%s: %s", cases[i].args, out);
        free(out);
        struct stat sb;
        cr_expect_neq(stat(tu_path(cdir, "out"), &sb), 0, "%s: created its directory", cases[i].args);
    }
}
