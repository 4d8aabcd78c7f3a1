/* Studies along depth and token budget (experiments/axis_study.h, `attnres
 * ablate --depths`, `--tokens`): the paired statistics against values
 * worked out by hand, onsets and trends on hand-made differences, the
 * plans, and tiny studies end to end through the binary (tables that agree
 * with each point's own results, matched seeds, the figure, reuse on a
 * rerun). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/config.h"
#include "formats/csv.h"
#include "run/checkpoint.h"
#include "experiments/axis_study.h"
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
Test(axis_study, paired_difference_by_hand)
{
    const double d[] = {0.1, 0.3, 0.2};
    ar_study_diff r;
    ar_study_diff_of(d, 3, &r);
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
    ar_study_diff_of(d2, 2, &r);
    cr_assert_float_eq(r.t.se, 0.01, 1e-12);
    cr_assert_float_eq(r.t.p, 1 - 2 * atan(3) / M_PI, 1e-9);
    cr_assert_float_eq(r.ci_lo, -0.03 - tan(0.475 * M_PI) * 0.01, 1e-9);
    cr_assert_float_eq(r.ci_hi, -0.03 + tan(0.475 * M_PI) * 0.01, 1e-9);
    cr_assert(r.ci_hi > 0, "two seeds at +-12.7 se: the interval holds zero");

    /* one pair: only the mean */
    ar_study_diff_of(d, 1, &r);
    cr_assert_float_eq(r.t.mean, 0.1, 1e-15);
    cr_assert(isnan(r.t.se) && isnan(r.ci_lo) && isnan(r.ci_hi) && isnan(r.t.p));
    /* identical differences: the interval is the point, no test */
    const double same[] = {0.25, 0.25, 0.25}; /* exact in binary: sd = 0 */
    ar_study_diff_of(same, 3, &r);
    cr_assert_float_eq(r.ci_lo, 0.25, 0);
    cr_assert_float_eq(r.ci_hi, 0.25, 0);
    cr_assert(isnan(r.t.p));
}

/* Where it pays, on hand-made differences at depths given out of order
 * (4, 16, 8, 12): the smallest depth from which the mean stays below zero
 * at every deeper one, and whether every interval there excludes zero. */
Test(axis_study, onset_of_a_lower_loss)
{
    long depth[4] = {4, 16, 8, 12};
    ar_ablation ab[4];
    memset(ab, 0, sizeof ab);
    for (int i = 0; i < 4; i++)
        ab[i].nvariants = 3; /* baseline, and two variants */
    ar_axis_study s = {.axis = AR_AXIS_DEPTH, .n = 4, .value = depth, .ab = ab};
    ar_study_diff d[12];
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
    /* the onset is returned as the point's index: depth 8 is index 2 */
    cr_assert_eq(depth[ar_axis_study_onset(&s, d, 1, &ci)], 8);
    cr_assert_eq(ci, 0, "the interval at n_layer 8 holds zero");
    cr_assert_eq(depth[ar_axis_study_onset(&s, d, 2, &ci)], 16);
    cr_assert_eq(ci, 1);
    /* behind at the deepest: never */
    d[1 * 3 + 1].t.mean = 0.001;
    cr_assert_eq(ar_axis_study_onset(&s, d, 1, &ci), -1);
    cr_assert_eq(ci, 0);
    /* a depth without finished pairs stops the run of depths */
    d[1 * 3 + 1].t.mean = -0.04;
    d[3 * 3 + 1].t.pairs = 0;
    cr_assert_eq(depth[ar_axis_study_onset(&s, d, 1, &ci)], 16);
}

Test(axis_study, plan)
{
    ar_config c;
    ar_config_defaults(&c);
    c.model.d_model = 16;
    c.model.n_head = 2;
    c.model.d_ff = 32;
    c.model.seq_len = 16;
    ar_axis_study s;
    ar_err e;
    const long depths[] = {2, 4, 6};
    cr_assert_eq(ar_axis_study_plan(&s, AR_AXIS_DEPTH, &c, depths, NULL, 3, "block,full", 2, &e), 0, "%s", e.msg);
    cr_assert_eq(s.n, 3);
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
    ar_axis_study_dir(&s, 1, "out", buf, sizeof buf);
    cr_assert_str_eq(buf, "out/L4");
    ar_axis_study_free(&s);

    const long twice[] = {2, 4, 2};
    cr_assert_eq(ar_axis_study_plan(&s, AR_AXIS_DEPTH, &c, twice, NULL, 3, "block", 2, &e), -1);
    cr_assert(strstr(e.msg, "depth 2 appears twice in '--depths'"), "%s", e.msg);
    cr_assert_eq(ar_axis_study_plan(&s, AR_AXIS_DEPTH, &c, depths, NULL, 3, "blocky", 2, &e), -1);
    cr_assert(strstr(e.msg, "unknown variant 'blocky'"), "%s", e.msg);
}

Test(axis_study, error_kinds)
{
    ar_config c;
    ar_config_defaults(&c);
    c.model.d_model = 24;
    c.model.n_head = 2;
    ar_axis_study s;
    ar_err e = {{0}};
    const long twice[] = {2, 2}, zero[] = {0}, two[] = {2};
    /* a wrong '--depths' list or variant name: BAD_VALUE, kept through
     * the "depth N" context */
    cr_assert_eq(ar_axis_study_plan(&s, AR_AXIS_DEPTH, &c, twice, NULL, 2, "block", 1, &e), -1);
    cr_expect_eq(e.kind, AR_ERR_BAD_VALUE, "%s", e.msg);
    cr_assert_eq(ar_axis_study_plan(&s, AR_AXIS_DEPTH, &c, zero, NULL, 1, "block", 1, &e), -1);
    cr_expect_eq(e.kind, AR_ERR_BAD_VALUE, "%s", e.msg);
    cr_assert_eq(ar_axis_study_plan(&s, AR_AXIS_DEPTH, &c, two, NULL, 0, "block", 1, &e), -1);
    cr_expect_eq(e.kind, AR_ERR_BAD_VALUE, "%s", e.msg);
    cr_assert_eq(ar_axis_study_plan(&s, AR_AXIS_DEPTH, &c, two, NULL, 1, "blocky", 1, &e), -1);
    cr_expect(strstr(e.msg, "depth 2: unknown variant 'blocky'"), "%s", e.msg);
    cr_expect_eq(e.kind, AR_ERR_BAD_VALUE);
    /* a variant whose config does not validate at that depth: OTHER */
    cr_assert_eq(ar_axis_study_plan(&s, AR_AXIS_DEPTH, &c, two, NULL, 1, "heads", 1, &e), -1);
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
    ar_study_diff want;
    ar_study_diff_of(d, 3, &want);
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

/* A fresh directory holding corpus.txt and tiny.yaml (cdir, 4200 bytes). */
static void study_dir(char *cdir)
{
    snprintf(cdir, 4200, "%s", tu_tmpdir());
    tu_write_corpus_text(tu_path(cdir, "corpus.txt"));
    tu_write_file(tu_path(cdir, "tiny.yaml"), TINY, strlen(TINY));
}

/* `attnres ablate tiny.yaml ARGS` run in cdir: its output, the status in st */
static char *ablate_in(const char *cdir, const char *args, int *st)
{
    char cmd[9000];
    snprintf(cmd, sizeof cmd, "cd '%s' && '%s' ablate tiny.yaml %s", cdir, tu_bin(), args);
    return tu_run(cmd, st);
}

Test(axis_study, tiny_study_end_to_end, .timeout = 240)
{
    if (!tu_bin())
        cr_skip_test("AR_BIN not set");
    char cdir[4200];
    study_dir(cdir);
    const char *args = "--depths 1,2 --variant block --seeds 3 --out ds";
    int st;
    char *out = ablate_in(cdir, args, &st);
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
    out = ablate_in(cdir, args, &st);
    cr_assert_eq(st, 0, "%s", out);
    cr_assert(strstr(out, "depth study done: 12 runs (12 reused, 0 trained)"), "%s", out);
    free(out);

    /* usage errors */
    out = ablate_in(cdir, "--depths 1,x --variant block", &st);
    cr_assert_eq(st, 2, "%s", out);
    cr_assert(strstr(out, "'--depths' expects a comma-separated list of positive integers"), "%s", out);
    free(out);
    out = ablate_in(cdir, "--depths 1,2 --variant block --block-sizes 1", &st);
    cr_assert_eq(st, 2, "%s", out);
    cr_assert(strstr(out, "'--depths' and '--block-sizes' do not go together"), "%s", out);
    free(out);
}

/* Token counts as a command line writes them, and the labels of the run
 * directories (decimal units). */
Test(axis_study, token_budgets_parse_and_label)
{
    const struct {
        const char *in;
        long want;
    } ok[] = {{"1M", 1000000},   {"4m", 4000000},     {"500k", 500000},    {"500K", 500000},
              {"2.5M", 2500000}, {"1000000", 1000000}, {"1G", 1000000000L}, {"64", 64}};
    for (size_t i = 0; i < sizeof ok / sizeof *ok; i++) {
        long t = -1;
        cr_assert_eq(ar_tokens_parse(ok[i].in, &t), 0, "%s", ok[i].in);
        cr_assert_eq(t, ok[i].want, "%s: %ld", ok[i].in, t);
    }
    const char *bad[] = {"", "0", "-1M", "1X", "1e6", "M", "1M2", "0.0001", "2000000G"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        long t = 7;
        cr_assert_eq(ar_tokens_parse(bad[i], &t), -1, "'%s' parsed as %ld", bad[i], t);
        cr_assert_eq(t, 7, "a failed parse leaves the value alone");
    }
    const struct {
        long t;
        const char *want;
    } lab[] = {{1000000, "1M"}, {16000000, "16M"}, {1500000, "1500k"}, {1000, "1k"}, {1234, "1234"},
               {2000000000L, "2G"}, {64, "64"}};
    char buf[32];
    for (size_t i = 0; i < sizeof lab / sizeof *lab; i++) {
        ar_tokens_label(lab[i].t, buf, sizeof buf);
        cr_assert_str_eq(buf, lab[i].want);
    }
}

/* Along tokens only train.steps changes: steps = round(T / (batch x accum
 * x seq_len)) with 2 x 2 x 16 = 64 tokens a step here: 1000 / 64 = 15.6
 * -> 16, 6400 / 64 = 100, 100000 / 64 = 1562.5 -> 1563 (half rounds up),
 * 10 / 64 -> at least 1.  A point may name its own seeds. */
Test(axis_study, token_plan)
{
    ar_config c;
    ar_config_defaults(&c);
    c.model.d_model = 16;
    c.model.n_head = 2;
    c.model.d_ff = 32;
    c.model.seq_len = 16;
    c.model.n_layer = 3;
    c.train.batch_size = 2;
    c.train.grad_accum = 2;
    c.train.warmup = 1;
    ar_axis_study s;
    ar_err e;
    const long tok[] = {1000, 6400, 100000, 10};
    const int seeds_at[] = {0, 3, 1, 0};
    const long want_steps[] = {16, 100, 1563, 1};
    const int want_seeds[] = {2, 3, 1, 2};
    cr_assert_eq(ar_axis_study_plan(&s, AR_AXIS_TOKENS, &c, tok, seeds_at, 4, "block,full", 2, &e), 0, "%s", e.msg);
    cr_assert_eq(s.n, 4);
    for (int i = 0; i < 4; i++) {
        const ar_ablation *a = &s.ab[i];
        cr_assert_eq(a->nseeds, want_seeds[i]);
        cr_assert_eq(a->sweep.nruns, 3 * want_seeds[i]);
        for (int k = 0; k < a->sweep.nruns; k++) {
            const ar_sweep_run *r = &a->sweep.runs[k];
            cr_assert_eq(r->cfg.train.steps, want_steps[i], "budget %ld: %ld steps", tok[i], r->cfg.train.steps);
            cr_assert_eq(r->tokens, want_steps[i] * 64);
            cr_assert_eq(r->cfg.model.n_layer, 3, "only the steps differ");
            cr_assert_eq(r->cfg.train.warmup, 1);
            cr_assert_eq(r->cfg.train.seed, c.train.seed + (uint64_t)(k % want_seeds[i]));
        }
    }
    char buf[256];
    ar_axis_study_dir(&s, 0, "out", buf, sizeof buf);
    cr_assert_str_eq(buf, "out/T1k");
    ar_axis_study_dir(&s, 2, "out", buf, sizeof buf);
    cr_assert_str_eq(buf, "out/T100k");
    ar_axis_study_point(&s, 1, buf, sizeof buf);
    cr_assert_str_eq(buf, "6400 tokens");
    ar_axis_study_free(&s);

    const long twice[] = {1000000, 4000000, 1000000};
    cr_assert_eq(ar_axis_study_plan(&s, AR_AXIS_TOKENS, &c, twice, NULL, 3, "block", 2, &e), -1);
    cr_assert(strstr(e.msg, "budget 1M appears twice in '--tokens'"), "%s", e.msg);
    cr_expect_eq(e.kind, AR_ERR_BAD_VALUE);
    const long zero[] = {0};
    cr_assert_eq(ar_axis_study_plan(&s, AR_AXIS_TOKENS, &c, zero, NULL, 1, "block", 2, &e), -1);
    cr_expect(strstr(e.msg, "'--tokens'") && e.kind == AR_ERR_BAD_VALUE, "%s", e.msg);
    cr_assert_eq(ar_axis_study_plan(&s, AR_AXIS_TOKENS, &c, tok, NULL, 1, "blocky", 2, &e), -1);
    cr_expect(strstr(e.msg, "budget 1k: unknown variant 'blocky'"), "%s", e.msg);
}

/* Whether a lead grows, holds or fades, on hand-made differences at
 * budgets given out of order (4M, 1M, 16M):
 *   v1: -0.010 (se 0.002) at 1M, -0.030 (se 0.003) at 16M: change -0.020,
 *       beyond 2 sqrt(0.002^2 + 0.003^2) = 0.00721: grows;
 *   v2: -0.020 (se 0.010) -> -0.015 (se 0.010): +0.005 within 0.0283: holds;
 *   v3: -0.030 (se 0.001) -> +0.010 (se 0.001): +0.040 beyond 0.0028: fades;
 * with one seed at 16M (se NaN) judged from 1M to 4M, the largest budget
 * with a standard error; with one point with an se, the change alone. */
Test(axis_study, trend_of_a_lead)
{
    long tok[3] = {4000000, 1000000, 16000000};
    ar_ablation ab[3];
    memset(ab, 0, sizeof ab);
    for (int i = 0; i < 3; i++)
        ab[i].nvariants = 4;
    ar_axis_study s = {.axis = AR_AXIS_TOKENS, .n = 3, .value = tok, .ab = ab};
    ar_study_diff d[12];
    memset(d, 0, sizeof d);
    /* [point][variant]: points 4M, 1M, 16M */
    const double mean[3][4] = {{0, -0.02, -0.05, 0.0}, {0, -0.010, -0.020, -0.030}, {0, -0.030, -0.015, 0.010}};
    const double se[3][4] = {{0, 0.01, 0.01, 0.01}, {0, 0.002, 0.010, 0.001}, {0, 0.003, 0.010, 0.001}};
    for (int i = 0; i < 3; i++)
        for (int v = 1; v < 4; v++) {
            d[i * 4 + v].t.pairs = 2;
            d[i * 4 + v].t.mean = mean[i][v];
            d[i * 4 + v].t.se = se[i][v];
        }
    int lo, hi;
    double ch;
    cr_assert_eq(ar_axis_study_trend(&s, d, 1, &lo, &hi, &ch), AR_TREND_GROWS);
    cr_assert_eq(lo, 1);
    cr_assert_eq(hi, 2);
    cr_assert_float_eq(ch, -0.020, 1e-12);
    cr_assert_eq(ar_axis_study_trend(&s, d, 2, &lo, &hi, &ch), AR_TREND_HOLDS);
    cr_assert_float_eq(ch, 0.005, 1e-12);
    cr_assert_eq(ar_axis_study_trend(&s, d, 3, &lo, &hi, &ch), AR_TREND_FADES);
    cr_assert_float_eq(ch, 0.040, 1e-12);
    /* one seed at 16M: no standard error there; judged from 1M to 4M
     * (-0.010 -> -0.020, se 0.002 and 0.01): within 2 x 0.0102 */
    d[2 * 4 + 1].t.se = NAN;
    d[2 * 4 + 1].t.pairs = 1;
    cr_assert_eq(ar_axis_study_trend(&s, d, 1, &lo, &hi, &ch), AR_TREND_HOLDS);
    cr_assert_eq(lo, 1);
    cr_assert_eq(hi, 0);
    cr_assert_float_eq(ch, -0.010, 1e-12);
    /* and one seed at 4M too: only 1M has an se, the change to 16M alone */
    d[0 * 4 + 1].t.se = NAN;
    cr_assert_eq(ar_axis_study_trend(&s, d, 1, &lo, &hi, &ch), AR_TREND_UNKNOWN);
    cr_assert_eq(hi, 2);
    cr_assert_float_eq(ch, -0.020, 1e-12, "the change is still given");
    /* 16M not finished, 4M without an se: the change from 1M to 4M alone */
    d[2 * 4 + 1].t.pairs = 0;
    cr_assert_eq(ar_axis_study_trend(&s, d, 1, &lo, &hi, &ch), AR_TREND_UNKNOWN);
    cr_assert_eq(hi, 0);
    cr_assert_float_eq(ch, -0.010, 1e-12);
    /* a single point: nothing to compare */
    d[0 * 4 + 1].t.pairs = 0;
    cr_assert_eq(ar_axis_study_trend(&s, d, 1, &lo, &hi, &ch), AR_TREND_UNKNOWN);
    cr_assert(isnan(ch));
    /* the onset along tokens: v3 is ahead at 1M and 4M only, behind at 16M */
    cr_assert_eq(ar_axis_study_onset(&s, d, 3, NULL), -1);
    cr_assert_eq(tok[ar_axis_study_onset(&s, d, 2, NULL)], 1000000);
}

/* A tiny token-budget study through the binary: 128 tokens (2 steps of
 * 4 x 16) with 2 seeds and 256 (4 steps) with one; the table's rows
 * against the budgets' own results.csv, tokens per parameter against the
 * baseline's non-embedding parameters, a rerun that trains nothing. */
Test(axis_study, tiny_token_study_end_to_end, .timeout = 240)
{
    if (!tu_bin())
        cr_skip_test("AR_BIN not set");
    char cdir[4200];
    study_dir(cdir);
    const char *args = "--tokens 128,256:1 --variant block --seeds 2 --out ts";
    int st;
    char *out = ablate_in(cdir, args, &st);
    cr_assert_eq(st, 0, "%s", out);
    cr_assert(strstr(out, "token-budget study: 2 budgets x 2 variants = 6 runs"), "%s", out);
    cr_assert(strstr(out, "token-budget study done: 6 runs (0 reused, 6 trained)"), "%s", out);
    free(out);

    ar_csv *c;
    ar_err e;
    char path[4400];
    snprintf(path, sizeof path, "%s/ts/token_study.csv", cdir);
    char *text = tu_read_file(path, NULL);
    cr_assert(text && strncmp(text, AR_TOKEN_STUDY_COLUMNS "\n", strlen(AR_TOKEN_STUDY_COLUMNS) + 1) == 0, "%s",
              text ? text : "(missing)");
    free(text);
    cr_assert_eq(ar_csv_read(&c, path, &e), 0, "%s", e.msg);
    cr_assert_eq(c->nrows, 2);
    const long want_tok[2] = {128, 256}, want_steps[2] = {2, 4};
    const int want_pairs[2] = {2, 1};
    for (int i = 0; i < 2; i++) {
        cr_assert_float_eq(cell(c, i, "tokens"), want_tok[i], 0);
        cr_assert_float_eq(cell(c, i, "steps"), want_steps[i], 0);
        cr_assert_float_eq(cell(c, i, "pairs"), want_pairs[i], 0);
        /* the budget's own table: the same differences and the parameters */
        ar_csv *r;
        snprintf(path, sizeof path, "%s/ts/T%ld/results.csv", cdir, want_tok[i]);
        cr_assert_eq(ar_csv_read(&r, path, &e), 0, "%s", e.msg);
        cr_assert_eq(r->nrows, 2 * want_pairs[i]);
        double base = 0, blk = 0, params = 0;
        for (int k = 0; k < r->nrows; k++) {
            const char *v = ar_csv_cell(r, k, ar_csv_col(r, "variant"));
            cr_assert_float_eq(cell(r, k, "tokens"), want_tok[i], 0);
            if (!strcmp(v, "baseline")) {
                base += cell(r, k, "final_val_loss");
                params = cell(r, k, "nonembed_params");
            } else {
                blk += cell(r, k, "final_val_loss");
            }
        }
        ar_csv_free(r);
        /* means of %.6f-rounded losses against unrounded ones: 2 x 5e-7,
         * and the csv's own rounding, 5e-7 */
        double want = (blk - base) / want_pairs[i];
        cr_expect(fabs(cell(c, i, "mean_diff") - want) <= 1.5e-6 + 1e-12, "%g vs %g", cell(c, i, "mean_diff"),
                  want);
        /* tokens_per_param written with %.4f */
        cr_expect(fabs(cell(c, i, "tokens_per_param") - want_tok[i] / params) <= 5e-5 + 1e-12, "%g vs %g",
                  cell(c, i, "tokens_per_param"), want_tok[i] / params);
    }
    cr_assert(isnan(cell(c, 1, "ci95_lo")), "one pair: no interval");
    ar_csv_free(c);
    snprintf(path, sizeof path, "%s/ts/token_study.md", cdir);
    char *md = tu_read_file(path, NULL);
    cr_assert(md && strstr(md, "# Token-budget study") && strstr(md, "| tokens | steps | tokens/param |") &&
                  strstr(md, "| 128 | 2 | "),
              "%s", md ? md : "");
    cr_assert(strstr(md, "From 128 tokens (") && strstr(md, "to 256 tokens ("), "%s", md);
    cr_assert(strstr(md, "cannot be judged"), "one seed at 256: %s", md);
    free(md);
    size_t n;
    snprintf(path, sizeof path, "%s/ts/token_study.png", cdir);
    char *png = tu_read_file(path, &n);
    cr_assert(png && n > 1000 && memcmp(png, "\x89PNG", 4) == 0);
    free(png);

    out = ablate_in(cdir, args, &st);
    cr_assert_eq(st, 0, "%s", out);
    cr_assert(strstr(out, "token-budget study done: 6 runs (6 reused, 0 trained)"), "%s", out);
    free(out);

    const char *bad[] = {"--tokens 1M,x", "--tokens 1M,,4M", "--tokens 1M:0", "--tokens 1M --depths 2",
                         "--tokens 1M --json"};
    const char *msg[] = {"'--tokens' expects a comma-separated list of token budgets", "'--tokens' expects",
                         "'--tokens' expects", "'--depths' and '--tokens' do not go together",
                         "'--tokens' and '--json' do not go together"};
    for (int i = 0; i < 5; i++) {
        char a[100];
        snprintf(a, sizeof a, "--variant block %s", bad[i]);
        out = ablate_in(cdir, a, &st);
        cr_assert_eq(st, 2, "%s: %s", bad[i], out);
        cr_assert(strstr(out, msg[i]), "%s: %s", bad[i], out);
        free(out);
    }
}
