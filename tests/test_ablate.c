/* attnres ablate: the variant table, the plan's fairness (one config per
 * variant, only model.residual differs, the same seed per seed index), the
 * Welch test, and a tiny ablation end to end through the binary: CSV,
 * Markdown table, PNGs, reuse on a rerun, and the unknown-variant error. */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "formats/config.h"
#include "study/ablate.h"
#include "study/train.h"
#include "testutil.h"

Test(ablate, welch_matches_a_reference)
{
    /* Welch's example 1 (Wikipedia): t = -2.4554, df = 24.99; p from an
     * independent numerical integration of the t density: 0.021378 */
    double a[] = {27.5, 21.0, 19.0, 23.6, 17.0, 17.9, 16.9, 20.1, 21.9, 22.6, 23.1, 19.6, 19.0, 21.7, 21.4};
    double b[] = {27.1, 22.0, 20.8, 23.4, 23.4, 23.5, 25.8, 22.0, 24.8, 20.2, 21.9, 22.1, 22.9, 20.5, 24.4};
    double p = ar_welch_p(a, 15, b, 15);
    cr_expect(fabs(p - 0.021378) < 2e-5, "p = %.6f", p);
    cr_expect(isnan(ar_welch_p(a, 1, b, 15)), "one value gives no test");
    double c[] = {1, 1, 1};
    cr_expect(isnan(ar_welch_p(c, 3, c, 3)), "zero variance gives no test");
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

    size_t n;
    char *csv = tu_read_file(tu_path(cdir, "ab/results.csv"), &n);
    cr_assert(csv);
    cr_expect(strncmp(csv, AR_ABLATE_COLUMNS "\n", strlen(AR_ABLATE_COLUMNS) + 1) == 0, "%s", csv);
    cr_expect_eq(count(csv, "\n"), 11, "%s", csv);
    cr_expect(strstr(csv, "\nbaseline,1,") && strstr(csv, "\nbaseline,2,") && strstr(csv, "\nsigmoid,2,"), "%s", csv);
    /* every row has 9 fields and a finite loss; all runs share the token budget */
    for (char *line = strchr(csv, '\n') + 1; *line; line = strchr(line, '\n') + 1) {
        cr_expect_eq(count(line, ",") - count(strchr(line, '\n'), ","), 8);
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

    char *md = tu_read_file(tu_path(cdir, "ab/results.md"), &n);
    cr_assert(md);
    cr_expect(strstr(md, "| variant | seeds | val loss (mean) | std | diff vs baseline | p (Welch) |"), "%s", md);
    /* sigmoid has 2 seeds: a numeric p-value, not a dash */
    const char *row = strstr(md, "| sigmoid | 2 | ");
    cr_assert(row, "%s", md);
    char rowbuf[256];
    snprintf(rowbuf, sizeof rowbuf, "%.*s", (int)strcspn(row, "\n"), row);
    double mean, sd, diff, p;
    cr_expect_eq(sscanf(rowbuf, "| sigmoid | 2 | %lf | %lf | %lf | %lf |", &mean, &sd, &diff, &p), 4, "%s", rowbuf);
    cr_expect(p >= 0 && p <= 1, "%s", rowbuf);
    free(md);

    const char *pngs[] = {"ab/ablation.png", "ab/block_sizes.png"};
    for (int i = 0; i < 2; i++) {
        char *png = tu_read_file(tu_path(cdir, pngs[i]), &n);
        cr_assert(png, "%s missing", pngs[i]);
        cr_expect(n > 1000 && memcmp(png, "\x89PNG", 4) == 0, "%s is not a PNG", pngs[i]);
        cr_expect(memmem(png, n, "tEXt", 4) != NULL, "%s has no tEXt metadata", pngs[i]);
        free(png);
    }

    /* a rerun reuses every finished run: nothing is trained again */
    struct stat s0, s1;
    cr_assert_eq(stat(tu_path(cdir, "ab/runs/sigmoid-seed2/model.safetensors"), &s0), 0);
    out = tu_run(cmd, &st);
    cr_assert_eq(st, 0, "%s", out);
    cr_expect_eq(count(out, "reused"), 10 + 1, "%s", out);
    cr_expect_eq(count(out, "training"), 0, "%s", out);
    free(out);
    cr_assert_eq(stat(tu_path(cdir, "ab/runs/sigmoid-seed2/model.safetensors"), &s1), 0);
    cr_expect(s0.st_mtim.tv_sec == s1.st_mtim.tv_sec && s0.st_mtim.tv_nsec == s1.st_mtim.tv_nsec);
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
