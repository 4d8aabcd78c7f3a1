/* Depth studies (experiments/depth_study.h, `attnres ablate --depths`): the paired
 * statistics against values worked out by hand, the plan, and a tiny study
 * end to end through the binary (tables that agree with each depth's own
 * results, matched seeds, the figure, reuse on a rerun). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/config.h"
#include "formats/csv.h"
#include "run/checkpoint.h"
#include "experiments/depth_study.h"
#include "testutil.h"

/* d = (0.1, 0.3, 0.2): mean 0.2, sd 0.1, se 0.1/sqrt(3), t = 2 sqrt(3),
 * df 2.  With 2 degrees of freedom Student's t has the closed forms
 * P(T > t) = (1 - t / sqrt(t^2 + 2)) / 2 and, for the quantile q at 0.975,
 * q / sqrt(q^2 + 2) = 0.95, so q^2 = 2 x 0.9025 / 0.0975 and q = 4.302653;
 * p = 1 - 2 sqrt(3) / sqrt(14) = 0.0741799.
 * Bounds: closed forms in double.  mean, sd and se are a dozen operations
 * (sums of 3 terms, a square root, divisions) on values below 0.3, each
 * within 2^-53 relative with or without FMA contraction: within 1e-16 of
 * the exact values, against 1e-12.  t, p and the interval add a division,
 * GSL's t tail (continued fraction, about 1e-15 relative) and its quantile
 * (closed forms for df 1 and 2): within 1e-14 on values below 13, against
 * 1e-9.  q's 7 digits are rounded: 1e-6. */
Test(depth_study, paired_difference_by_hand)
{
    const double d[] = {0.1, 0.3, 0.2};
    ar_depth_diff r;
    ar_depth_diff_of(d, 3, &r);
    double q = sqrt(2 * 0.9025 / 0.0975), se = 0.1 / sqrt(3);
    cr_assert_eq(r.t.pairs, 3);
    cr_assert_float_eq(r.t.mean, 0.2, 1e-12);
    cr_assert_float_eq(r.t.sd, 0.1, 1e-12);
    cr_assert_float_eq(r.t.se, se, 1e-12);
    cr_assert_float_eq(r.t.t, 2 * sqrt(3), 1e-9);
    cr_assert_float_eq(r.t.df, 2, 0);
    cr_assert_float_eq(r.t.p, 1 - 2 * sqrt(3) / sqrt(14), 1e-9);
    cr_assert_float_eq(r.ci_lo, 0.2 - q * se, 1e-9);
    cr_assert_float_eq(r.ci_hi, 0.2 + q * se, 1e-9);
    cr_assert_float_eq(q, 4.302653, 1e-6);

    /* d = (-0.02, -0.04): mean -0.03, sd 0.01 sqrt(2), se 0.01, df 1:
     * the Cauchy distribution, q = tan(0.475 pi) = 12.7062, p = 1 - 2
     * atan(3) / pi (t = -3) */
    const double d2[] = {-0.02, -0.04};
    ar_depth_diff_of(d2, 2, &r);
    cr_assert_float_eq(r.t.se, 0.01, 1e-12);
    cr_assert_float_eq(r.t.p, 1 - 2 * atan(3) / M_PI, 1e-9);
    cr_assert_float_eq(r.ci_lo, -0.03 - tan(0.475 * M_PI) * 0.01, 1e-9);
    cr_assert_float_eq(r.ci_hi, -0.03 + tan(0.475 * M_PI) * 0.01, 1e-9);
    cr_assert(r.ci_hi > 0, "two seeds at +-12.7 se: the interval holds zero");

    /* one pair: only the mean */
    ar_depth_diff_of(d, 1, &r);
    cr_assert_float_eq(r.t.mean, 0.1, 1e-15);
    cr_assert(isnan(r.t.se) && isnan(r.ci_lo) && isnan(r.ci_hi) && isnan(r.t.p));
    /* identical differences: the interval is the point, no test */
    const double same[] = {0.25, 0.25, 0.25}; /* exact in binary: sd = 0 */
    ar_depth_diff_of(same, 3, &r);
    cr_assert_float_eq(r.ci_lo, 0.25, 0);
    cr_assert_float_eq(r.ci_hi, 0.25, 0);
    cr_assert(isnan(r.t.p));
}

/* Where it pays, on hand-made differences at depths given out of order
 * (4, 16, 8, 12): the smallest depth from which the mean stays below zero
 * at every deeper one, and whether every interval there excludes zero. */
Test(depth_study, onset_of_a_lower_loss)
{
    int depth[4] = {4, 16, 8, 12};
    ar_ablation ab[4];
    memset(ab, 0, sizeof ab);
    for (int i = 0; i < 4; i++)
        ab[i].nvariants = 3; /* baseline, and two variants */
    ar_depth_study s = {.ndepths = 4, .depth = depth, .ab = ab};
    ar_depth_diff d[12];
    memset(d, 0, sizeof d);
    /* variant 1: +0.02 at 4, -0.01 at 8 (CI across zero), -0.03 at 12, -0.04 at 16 (CIs below zero) */
    const double m1[4] = {0.02, -0.04, -0.01, -0.03}, hi1[4] = {0.05, -0.01, 0.01, -0.005};
    /* variant 2: below zero at 4 and 8, above at 12, below at 16: pays from 16 on */
    const double m2[4] = {-0.01, -0.02, -0.01, 0.01};
    for (int i = 0; i < 4; i++) {
        d[i * 3 + 1].t.pairs = d[i * 3 + 2].t.pairs = 2;
        d[i * 3 + 1].t.mean = m1[i];
        d[i * 3 + 1].ci_hi = hi1[i];
        d[i * 3 + 2].t.mean = m2[i];
        d[i * 3 + 2].ci_hi = -0.001;
    }
    int ci;
    cr_assert_eq(ar_depth_study_onset(&s, d, 1, &ci), 8);
    cr_assert_eq(ci, 0, "the interval at n_layer 8 holds zero");
    cr_assert_eq(ar_depth_study_onset(&s, d, 2, &ci), 16);
    cr_assert_eq(ci, 1);
    /* behind at the deepest: never */
    d[1 * 3 + 1].t.mean = 0.001;
    cr_assert_eq(ar_depth_study_onset(&s, d, 1, &ci), -1);
    cr_assert_eq(ci, 0);
    /* a depth without finished pairs stops the run of depths */
    d[1 * 3 + 1].t.mean = -0.04;
    d[3 * 3 + 1].t.pairs = 0;
    cr_assert_eq(ar_depth_study_onset(&s, d, 1, &ci), 16);
}

Test(depth_study, plan)
{
    ar_config c;
    ar_config_defaults(&c);
    c.model.d_model = 16;
    c.model.n_head = 2;
    c.model.d_ff = 32;
    c.model.seq_len = 16;
    ar_depth_study s;
    ar_err e;
    const int depths[] = {2, 4, 6};
    cr_assert_eq(ar_depth_study_plan(&s, &c, depths, 3, "block,full", 2, &e), 0, "%s", e.msg);
    cr_assert_eq(s.ndepths, 3);
    for (int i = 0; i < 3; i++) {
        const ar_ablation *a = &s.ab[i];
        cr_assert_eq(a->nvariants, 3); /* baseline first */
        cr_assert_str_eq(a->variant[0], "baseline");
        cr_assert_eq(a->sweep.nruns, 6);
        for (int k = 0; k < a->sweep.nruns; k++) {
            const ar_config *r = &a->sweep.runs[k].cfg;
            cr_assert_eq(r->model.n_layer, depths[i]);
            cr_assert_eq(r->model.d_model, 16, "only the depth differs");
            /* seed index k % 2: the same seed for every variant and depth */
            cr_assert_eq(r->train.seed, c.train.seed + (uint64_t)(k % 2));
        }
    }
    char buf[256];
    ar_depth_study_dir(&s, 1, "out", buf, sizeof buf);
    cr_assert_str_eq(buf, "out/L4");
    ar_depth_study_free(&s);

    const int twice[] = {2, 4, 2};
    cr_assert_eq(ar_depth_study_plan(&s, &c, twice, 3, "block", 2, &e), -1);
    cr_assert(strstr(e.msg, "depth 2 appears twice in '--depths'"), "%s", e.msg);
    cr_assert_eq(ar_depth_study_plan(&s, &c, depths, 3, "blocky", 2, &e), -1);
    cr_assert(strstr(e.msg, "unknown variant 'blocky'"), "%s", e.msg);
}

Test(depth_study, error_kinds)
{
    ar_config c;
    ar_config_defaults(&c);
    c.model.d_model = 24;
    c.model.n_head = 2;
    ar_depth_study s;
    ar_err e = {{0}};
    const int twice[] = {2, 2}, zero[] = {0}, two[] = {2};
    /* a wrong '--depths' list or variant name: BAD_VALUE, kept through
     * the "depth N" context */
    cr_assert_eq(ar_depth_study_plan(&s, &c, twice, 2, "block", 1, &e), -1);
    cr_expect_eq(e.kind, AR_ERR_BAD_VALUE, "%s", e.msg);
    cr_assert_eq(ar_depth_study_plan(&s, &c, zero, 1, "block", 1, &e), -1);
    cr_expect_eq(e.kind, AR_ERR_BAD_VALUE, "%s", e.msg);
    cr_assert_eq(ar_depth_study_plan(&s, &c, two, 0, "block", 1, &e), -1);
    cr_expect_eq(e.kind, AR_ERR_BAD_VALUE, "%s", e.msg);
    cr_assert_eq(ar_depth_study_plan(&s, &c, two, 1, "blocky", 1, &e), -1);
    cr_expect(strstr(e.msg, "depth 2: unknown variant 'blocky'"), "%s", e.msg);
    cr_expect_eq(e.kind, AR_ERR_BAD_VALUE);
    /* a variant whose config does not validate at that depth: OTHER */
    cr_assert_eq(ar_depth_study_plan(&s, &c, two, 1, "heads", 1, &e), -1);
    cr_expect(strstr(e.msg, "depth 2: variant 'heads': "), "%s", e.msg);
    cr_expect_eq(e.kind, AR_ERR_OTHER);
}

static const char *TINY = "model: {vocab: bytes, d_model: 16, n_layer: 1, n_head: 2, d_ff: 32, seq_len: 16,\n"
                          "        residual: {kind: baseline}}\n"
                          "data: {train: corpus.txt}\n"
                          "train: {steps: 4, batch_size: 4, lr: 1.0e-2, min_lr: 1.0e-3, warmup: 1, eval_every: 0,\n"
                          "        eval_windows: 4, save_every: 2, log_every: 1, threads: 1}\n";

static double cell(const ar_csv *c, int r, const char *col)
{
    ar_err e;
    int k = ar_csv_col(c, col);
    cr_assert(k >= 0, "no column %s", col);
    const char *s = ar_csv_cell(c, r, k);
    if (!strcmp(s, "nan"))
        return NAN;
    double v;
    cr_assert_eq(ar_csv_num(c, r, k, &v, &e), 0, "%s", e.msg);
    return v;
}

/* Depth L's block-minus-baseline differences of final_val_loss, seed by
 * seed, from that depth's own results.csv. */
static void diffs_of_depth(const char *cdir, int L, double d[3])
{
    ar_err e;
    char rp[4400];
    snprintf(rp, sizeof rp, "%s/ds/L%d/results.csv", cdir, L);
    ar_csv *r;
    cr_assert_eq(ar_csv_read(&r, rp, &e), 0, "%s", e.msg);
    cr_assert_eq(r->nrows, 6);
    double base[3] = {NAN, NAN, NAN}, blk[3] = {NAN, NAN, NAN};
    for (int k = 0; k < r->nrows; k++) {
        int seed = (int)cell(r, k, "seed");
        cr_assert_float_eq(cell(r, k, "n_layer"), L, 0);
        cr_assert(seed >= 1 && seed <= 3);
        const char *v = ar_csv_cell(r, k, ar_csv_col(r, "variant"));
        if (strcmp(v, "baseline") == 0)
            base[seed - 1] = cell(r, k, "final_val_loss");
        else
            blk[seed - 1] = cell(r, k, "final_val_loss");
    }
    ar_csv_free(r);
    for (int k = 0; k < 3; k++)
        d[k] = blk[k] - base[k];
}

/* Seed k of block and of the baseline at depth L start from the same
 * transformer weights and batches: the checkpoints record the same seed. */
static void expect_paired_seeds(const char *cdir, int L)
{
    ar_err e;
    for (int k = 1; k <= 3; k++) {
        char a[4400], b[4400];
        ar_config ca, cb;
        long sa, sb;
        snprintf(a, sizeof a, "%s/ds/L%d/runs/baseline-seed%d", cdir, L, k);
        snprintf(b, sizeof b, "%s/ds/L%d/runs/block-seed%d", cdir, L, k);
        cr_assert_eq(ar_ckpt_read_config(a, &ca, &sa, &e), 0, "%s", e.msg);
        cr_assert_eq(ar_ckpt_read_config(b, &cb, &sb, &e), 0, "%s", e.msg);
        cr_assert_eq(ca.train.seed, cb.train.seed);
        cr_assert_eq(ca.model.n_layer, L);
    }
}

/* Row i of depth_study.csv (n_layer i + 1) against the differences
 * recomputed from that depth's results.csv. */
static void expect_depth_row(const char *cdir, const ar_csv *c, int i)
{
    int L = i + 1;
    cr_assert_float_eq(cell(c, i, "n_layer"), L, 0);
    cr_assert_str_eq(ar_csv_cell(c, i, ar_csv_col(c, "variant")), "block");
    cr_assert_float_eq(cell(c, i, "pairs"), 3, 0);
    double d[3];
    diffs_of_depth(cdir, L, d);
    ar_depth_diff want;
    ar_depth_diff_of(d, 3, &want);
    /* The study's statistics come from the unrounded losses, want from
     * results.csv's, which writes them with %.6f: each loss is off by at
     * most r = 5e-7, each difference by 2r, so the mean by 2r.  The
     * sample sd is ||d - mean|| / sqrt(n - 1), which moves by at most
     * ||delta d||_2 / sqrt(n - 1) <= sqrt(3 / 2) 2r (centring does not
     * lengthen a vector), se = sd / sqrt(3) by that over sqrt(3), the
     * interval by 2r + q_{0.975, 2} times se's (q = 4.302653).
     * depth_study.csv writes each with %.6f too: + r.  (1e-12 covers
     * the double arithmetic on both sides, below 1e-15.) */
    double r6 = 5e-7, d_se = sqrt(1.5) * 2 * r6 / sqrt(3.0);
    double b_mean = 3 * r6 + 1e-12, b_se = d_se + r6 + 1e-12, b_ci = 2 * r6 + 4.302653 * d_se + r6 + 1e-12;
    cr_expect(fabs(cell(c, i, "mean_diff") - want.t.mean) <= b_mean, "mean %g vs %g", cell(c, i, "mean_diff"),
              want.t.mean);
    cr_expect(fabs(cell(c, i, "se") - want.t.se) <= b_se, "se");
    cr_expect(fabs(cell(c, i, "ci95_lo") - want.ci_lo) <= b_ci && fabs(cell(c, i, "ci95_hi") - want.ci_hi) <= b_ci,
              "ci");
    cr_expect(cell(c, i, "ci95_lo") < cell(c, i, "mean_diff") && cell(c, i, "mean_diff") < cell(c, i, "ci95_hi"));
    cr_assert_float_eq(cell(c, i, "df"), 2, 0);
    double p = cell(c, i, "p");
    cr_expect(p >= 0 && p <= 1, "p %g", p);
    expect_paired_seeds(cdir, L);
}

Test(depth_study, tiny_study_end_to_end, .timeout = 240)
{
    const char *bin = tu_bin();
    if (!bin)
        cr_skip_test("AR_BIN not set");
    const char *dir = tu_tmpdir();
    char cdir[4200], cmd[9000];
    snprintf(cdir, sizeof cdir, "%s", dir);
    tu_write_corpus_text(tu_path(cdir, "corpus.txt"));
    tu_write_file(tu_path(cdir, "tiny.yaml"), TINY, strlen(TINY));
    snprintf(cmd, sizeof cmd, "cd '%s' && '%s' ablate tiny.yaml --depths 1,2 --variant block --seeds 3 --out ds",
             cdir, bin);
    int st;
    char *out = tu_run(cmd, &st);
    cr_assert_eq(st, 0, "%s", out);
    cr_assert(strstr(out, "depth study done: 12 runs (0 reused, 12 trained)"), "%s", out);
    free(out);

    ar_csv *c;
    ar_err e;
    char path[4400];
    snprintf(path, sizeof path, "%s/ds/depth_study.csv", cdir);
    char *text = tu_read_file(path, NULL);
    cr_assert(text && strncmp(text, AR_DEPTH_STUDY_COLUMNS "\n", strlen(AR_DEPTH_STUDY_COLUMNS) + 1) == 0, "%s",
              text ? text : "(missing)");
    free(text);
    cr_assert_eq(ar_csv_read(&c, path, &e), 0, "%s", e.msg);
    cr_assert_eq(c->nrows, 2);
    for (int i = 0; i < 2; i++)
        expect_depth_row(cdir, c, i);
    ar_csv_free(c);
    snprintf(path, sizeof path, "%s/ds/depth_study.md", cdir);
    char *md = tu_read_file(path, NULL);
    cr_assert(md && strstr(md, "| n_layer | variant | pairs |") && strstr(md, "| 2 | block | 3 |"), "%s",
              md ? md : "");
    cr_assert(strstr(md, "Where it pays:") && strstr(md, "- block: "), "%s", md);
    free(md);
    size_t n;
    snprintf(path, sizeof path, "%s/ds/depth_study.png", cdir);
    char *png = tu_read_file(path, &n);
    cr_assert(png && n > 1000 && memcmp(png, "\x89PNG", 4) == 0);
    free(png);

    /* a rerun trains nothing */
    out = tu_run(cmd, &st);
    cr_assert_eq(st, 0, "%s", out);
    cr_assert(strstr(out, "depth study done: 12 runs (12 reused, 0 trained)"), "%s", out);
    free(out);

    /* usage errors */
    snprintf(cmd, sizeof cmd, "cd '%s' && '%s' ablate tiny.yaml --depths 1,x --variant block", cdir, bin);
    out = tu_run(cmd, &st);
    cr_assert_eq(st, 2, "%s", out);
    cr_assert(strstr(out, "'--depths' expects a comma-separated list of positive integers"), "%s", out);
    free(out);
    snprintf(cmd, sizeof cmd, "cd '%s' && '%s' ablate tiny.yaml --depths 1,2 --variant block --block-sizes 1", cdir,
             bin);
    out = tu_run(cmd, &st);
    cr_assert_eq(st, 2, "%s", out);
    cr_assert(strstr(out, "'--depths' and '--block-sizes' do not go together"), "%s", out);
    free(out);
}
