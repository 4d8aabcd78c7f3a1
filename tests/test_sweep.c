/* Sweeps: the grid file (values, token budgets, errors with their place),
 * the built-in grid, and a tiny two-size grid trained end to end: the
 * results table, reuse of finished runs, resuming an interrupted one, each
 * run's final evaluation (equal to `attnres eval` on the validation split,
 * reused on a rerun, made again when lost) and the command with --jobs 2. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "formats/csv.h"
#include "formats/json.h"
#include "formats/sweep.h"
#include "run/checkpoint.h"
#include "experiments/sweep.h"
#include "experiments/sweep_grid.h"
#include "testutil.h"

static void write_text(const char *path, const char *text)
{
    tu_write_file(path, text, strlen(text));
}

/* The tiny grid: two sizes x baseline and block, a few steps each. */
static const char *TINY =
    "base:\n"
    "  model: {vocab: bytes, seq_len: 16}\n"
    "  data: {train: corpus.txt}\n"
    "  train: {batch_size: 4, lr: 1.0e-2, min_lr: 1.0e-3, warmup: 2, eval_every: 0, eval_windows: 4,\n"
    "          save_every: 2, log_every: 1, threads: 1}\n"
    "sizes:\n"
    "  - {name: t1, d_model: 16, n_layer: 1, n_head: 2, d_ff: 32, tokens: 384}\n"
    "  - {name: t2, d_model: 24, n_layer: 2, n_head: 2, d_ff: 48, lr: 5.0e-3, tokens: 512}\n"
    "variants:\n"
    "  - baseline\n"
    "  - {kind: block, block_size: 2}\n";

static int parse(ar_sweep *s, const char *text, ar_err *e)
{
    return ar_sweep_parse(s, text, strlen(text), "g.yaml", NULL, NULL, 0, e);
}

static void expect_error(const char *text, const char *needle)
{
    ar_sweep s;
    ar_err e = {{0}};
    cr_assert_eq(parse(&s, text, &e), -1, "accepted:\n%s", text);
    cr_assert(strstr(e.msg, needle) != NULL, "expected '%s' in:\n%s", needle, e.msg);
}

/* ---- the grid file ---- */

/* --sizes: the named sizes with all their variants, in the grid's order;
 * unknown, repeated or empty names refused with the grid left as it was. */
Test(sweep, keep_sizes)
{
    ar_sweep s;
    ar_err e = {{0}};
    cr_assert_eq(parse(&s, TINY, &e), 0, "%s", e.msg);
    const char *bad[] = {"t3", "t1,t1", "t2,", ""};
    const char *why[] = {"no size 't3' in the grid (its sizes: 't1', 't2')", "size 't1' named twice",
                         "no size '' in the grid", "no size '' in the grid"};
    for (int i = 0; i < 4; i++) {
        cr_assert_eq(ar_sweep_keep_sizes(&s, bad[i], &e), -1, "accepted '%s'", bad[i]);
        cr_assert(strstr(e.msg, why[i]), "'%s': %s", bad[i], e.msg);
        cr_assert_eq(s.nruns, 4);
    }
    cr_assert_eq(ar_sweep_keep_sizes(&s, "t2", &e), 0, "%s", e.msg);
    cr_assert_eq(s.nsizes, 1);
    cr_assert_eq(s.nruns, 2);
    cr_assert_str_eq(s.runs[0].name, "t2-baseline");
    cr_assert_str_eq(s.runs[1].name, "t2-block");
    cr_assert_eq(s.runs[1].cfg.model.d_model, 24);
    ar_sweep_free(&s);
}

/* `flops: C`: each size's steps from its own FLOPs per token, the compute
 * within half a step of C; bad budgets and budgets beside tokens refused. */
Test(sweep, flops_budget_sets_each_sizes_steps)
{
    const char *grid =
        "base:\n"
        "  model: {vocab: bytes, seq_len: 16}\n"
        "  data: {train: corpus.txt}\n"
        "  train: {batch_size: 4, warmup: 0, threads: 1}\n"
        "sizes:\n"
        "  - {name: a, d_model: 16, n_layer: 1, n_head: 2, d_ff: 32, flops: 2.0e9}\n"
        "  - {name: b, d_model: 32, n_layer: 3, n_head: 2, d_ff: 64, flops: 2.0e9}\n"
        "  - {name: c, d_model: 32, n_layer: 3, n_head: 2, d_ff: 64, tokens: 640}\n"
        "variants: [baseline, full]\n";
    ar_sweep s;
    ar_err e = {{0}};
    cr_assert_eq(parse(&s, grid, &e), 0, "%s", e.msg);
    cr_assert_eq(ar_sweep_resolve_budgets(&s, &e), 0, "%s", e.msg);
    long per_step = 4 * 16;
    for (int i = 0; i < s.nruns; i++) {
        const ar_sweep_run *r = &s.runs[i];
        ar_sweep_compute c;
        cr_assert_eq(ar_sweep_compute_of(r, &c, &e), 0, "%s", e.msg);
        if (!strcmp(r->size, "c")) {
            cr_expect_eq(r->cfg.train.steps, 10, "a size with tokens keeps them");
            continue;
        }
        double step_flops = c.flops_per_token * (double)per_step;
        cr_expect_eq(r->tokens, r->cfg.train.steps * per_step);
        cr_expect(fabs(c.flops - 2.0e9) <= 0.5 * step_flops, "%s: %.4g FLOPs for a budget of 2e9 (a step is %.4g)",
                  r->name, c.flops, step_flops);
        cr_expect_gt(r->cfg.train.steps, 10, "%s: %ld steps", r->name, r->cfg.train.steps);
    }
    /* the smaller size trains on more tokens for the same compute */
    cr_expect_gt(s.runs[0].tokens, s.runs[2].tokens);
    ar_sweep_free(&s);

    expect_error("base: {data: {train: x}}\nsizes:\n  - {name: a, d_model: 16, n_layer: 1, n_head: 2, d_ff: 32, "
                 "flops: 1e9, tokens: 640}\nvariants: [baseline]\n",
                 "one of 'steps', 'tokens' or 'flops'");
    expect_error("base: {data: {train: x}}\nsizes:\n  - {name: a, d_model: 16, n_layer: 1, n_head: 2, d_ff: 32, "
                 "flops: -3}\nvariants: [baseline]\n",
                 "'flops' expects a positive number of FLOPs");
    expect_error("base: {data: {train: x}}\nsizes:\n  - {name: a, d_model: 16, n_layer: 1, n_head: 2, d_ff: 32, "
                 "flops: lots}\nvariants: [baseline]\n",
                 "got 'lots'");
}

Test(sweep, grid_resolves_every_run)
{
    ar_sweep s;
    ar_err e;
    cr_assert_eq(parse(&s, TINY, &e), 0, "%s", e.msg);
    cr_assert_eq(s.nruns, 4);
    const char *names[] = {"t1-baseline", "t1-block", "t2-baseline", "t2-block"};
    for (int i = 0; i < 4; i++)
        cr_assert_str_eq(s.runs[i].name, names[i]);
    const ar_config *c = &s.runs[3].cfg;
    cr_assert_eq(c->model.d_model, 24);
    cr_assert_eq(c->model.n_layer, 2);
    cr_assert_eq(c->model.residual.kind, AR_RES_BLOCK);
    cr_assert_eq(c->model.residual.block_size, 2);
    cr_assert_eq(s.runs[2].cfg.model.residual.kind, AR_RES_BASELINE);
    /* tokens / (batch 4 x accum 1 x T 16) */
    cr_assert_eq(s.runs[0].cfg.train.steps, 6);
    cr_assert_eq(s.runs[0].tokens, 384);
    cr_assert_eq(s.runs[2].cfg.train.steps, 8);
    /* a size with its own lr keeps the base's min_lr/lr = 0.1.  lr and the
     * base's min_lr are read by strtod: the literals' doubles, exactly;
     * min_lr = lr (1e-3 / 1e-2) rounds twice: within 3 x 2^-53 relative
     * of 5e-4 (below 2e-19), against 1e-15. */
    cr_assert_eq(c->train.lr, 5e-3);
    cr_assert_float_eq(c->train.min_lr, 5e-4, 1e-15);
    cr_assert_eq(s.runs[0].cfg.train.min_lr, 1e-3);
    ar_sweep_free(&s);
}

/* configs/arch-sweep.yaml: a 4 x 4 grid of (d_model/L_b, n_head/L_b), every
 * cell of both methods trained on the same FLOPs (within half a step), each
 * ratio exact so that the figure's rows and columns are single values. */
Test(sweep, shipped_arch_sweep_config_resolves)
{
    const char *src = tu_source_dir();
    if (!src)
        cr_skip_test("AR_SOURCE_DIR is not set");
    char path[4096];
    snprintf(path, sizeof path, "%s/configs/arch-sweep.yaml", src);
    ar_sweep s;
    ar_err e;
    cr_assert_eq(ar_sweep_load(&s, path, NULL, 0, &e), 0, "%s", e.msg);
    cr_assert_eq(ar_sweep_resolve_budgets(&s, &e), 0, "%s", e.msg);
    cr_assert_eq(s.nvariants, 2);
    cr_assert_eq(s.nsizes, 16);
    double rs[16], hs[16], budget = s.runs[0].flops_budget;
    int nr = 0, nh = 0;
    cr_assert(budget > 0, "the grid is at fixed compute (flops:)");
    for (int i = 0; i < s.nruns; i++) {
        const ar_sweep_run *r = &s.runs[i];
        const ar_model_cfg *m = &r->cfg.model;
        cr_assert_float_eq(r->flops_budget, budget, 0, "%s: another budget", r->name);
        cr_assert(r->cfg.model.residual.kind == (i % 2 ? AR_RES_BLOCK : AR_RES_BASELINE), "%s", r->name);
        ar_sweep_compute c;
        cr_assert_eq(ar_sweep_compute_of(r, &c, &e), 0, "%s", e.msg);
        double step = c.flops_per_token * (double)r->cfg.train.batch_size * r->cfg.model.seq_len;
        cr_expect(fabs(c.flops - budget) <= 0.5 * step, "%s: %.4g FLOPs", r->name, c.flops);
        cr_expect_eq(r->cfg.train.final_eval_windows, 0);
        double rv = (double)m->d_model / m->n_layer, hv = (double)m->n_head / m->n_layer;
        int k;
        for (k = 0; k < nr && rs[k] != rv; k++)
            ;
        if (k == nr)
            rs[nr++] = rv;
        for (k = 0; k < nh && hs[k] != hv; k++)
            ;
        if (k == nh)
            hs[nh++] = hv;
        /* every cell once per method */
        for (int j = i % 2; j < i; j += 2) {
            const ar_model_cfg *o = &s.runs[j].cfg.model;
            cr_assert(!(o->d_model * m->n_layer == m->d_model * o->n_layer &&
                        o->n_head * m->n_layer == m->n_head * o->n_layer),
                      "%s and %s are the same cell", s.runs[j].name, r->name);
        }
    }
    cr_expect_eq(nr, 4, "%d values of d_model/L_b", nr);
    cr_expect_eq(nh, 4, "%d values of n_head/L_b", nh);
    ar_sweep_free(&s);
}

/* configs/scaling-deep.yaml: five sizes of 8 to 16 transformer blocks x
 * baseline, block, full, each evaluated on the whole validation split. */
Test(sweep, shipped_scaling_deep_config_resolves)
{
    const char *src = tu_source_dir();
    if (!src)
        cr_skip_test("AR_SOURCE_DIR is not set");
    char path[4096];
    snprintf(path, sizeof path, "%s/configs/scaling-deep.yaml", src);
    ar_sweep s;
    ar_err e;
    cr_assert_eq(ar_sweep_load(&s, path, NULL, 0, &e), 0, "%s", e.msg);
    cr_assert_eq(ar_sweep_resolve_budgets(&s, &e), 0, "%s", e.msg);
    cr_assert_eq(s.nsizes, 5);
    cr_assert_eq(s.nvariants, 3);
    const ar_res_kind kinds[] = {AR_RES_BASELINE, AR_RES_BLOCK, AR_RES_FULL};
    double prev = 0;
    for (int i = 0; i < s.nruns; i++) {
        const ar_sweep_run *r = &s.runs[i];
        const ar_train_cfg *t = &r->cfg.train;
        cr_assert(r->cfg.model.n_layer >= 8 && r->cfg.model.n_layer <= 16, "%s: n_layer %d", r->name,
                  r->cfg.model.n_layer);
        cr_assert_eq(r->cfg.model.residual.kind, kinds[i % 3], "%s", r->name);
        cr_assert_eq(t->eval_windows, 0);
        cr_assert_eq(t->final_eval_windows, 0);
        cr_assert_eq(r->tokens, t->steps * t->batch_size * t->grad_accum * r->cfg.model.seq_len);
        ar_sweep_compute c;
        cr_assert_eq(ar_sweep_compute_of(r, &c, &e), 0, "%s", e.msg);
        if (i % 3 == 0) { /* the sizes grow in compute */
            cr_expect_gt(c.flops, prev, "%s", r->name);
            prev = c.flops;
        }
    }
    cr_assert_eq(s.runs[0].cfg.model.n_layer, 8);
    cr_assert_eq(s.runs[s.nruns - 1].cfg.model.n_layer, 16);
    ar_sweep_free(&s);
}

Test(sweep, set_overrides_the_base_and_sizes_win)
{
    const char *sets[] = {"data.train=other.txt", "model.d_model=64", "train.eval_windows=9"};
    ar_sweep s;
    ar_err e;
    cr_assert_eq(ar_sweep_parse(&s, TINY, strlen(TINY), "g.yaml", NULL, sets, 3, &e), 0, "%s", e.msg);
    cr_assert_str_eq(s.runs[0].cfg.data.train, "other.txt");
    cr_assert_eq(s.runs[0].cfg.model.d_model, 16, "the size's d_model wins over --set");
    cr_assert_eq(s.runs[0].cfg.train.eval_windows, 9);
    ar_sweep_free(&s);
    const char *bad[] = {"model.bogus=1"};
    cr_assert_eq(ar_sweep_parse(&s, TINY, strlen(TINY), "g.yaml", NULL, bad, 1, &e), -1);
    cr_assert(strstr(e.msg, "--set 'model.bogus=1'"), "%s", e.msg);
}

Test(sweep, dotted_keys_steps_and_base_file)
{
    const char *dir = tu_tmpdir();
    write_text(tu_path(dir, "base.yaml"), "model: {d_model: 32, n_layer: 1, n_head: 2, d_ff: 64, seq_len: 8}\n"
                                          "train: {warmup: 1}\n");
    const char *grid = "base: base.yaml\n"
                       "sizes:\n"
                       "  - {name: a, steps: 5, train.eval_every: 3}\n"
                       "variants: [full]\n";
    char gpath[4096];
    snprintf(gpath, sizeof gpath, "%s", tu_path(dir, "sub-grid.yaml"));
    write_text(gpath, grid);
    ar_sweep s;
    ar_err e;
    cr_assert_eq(ar_sweep_load(&s, gpath, NULL, 0, &e), 0, "%s", e.msg);
    cr_assert_eq(s.nruns, 1);
    cr_assert_str_eq(s.runs[0].name, "a-full");
    cr_assert_eq(s.runs[0].cfg.model.d_model, 32, "base: is read relative to the sweep file");
    cr_assert_eq(s.runs[0].cfg.train.steps, 5);
    cr_assert_eq(s.runs[0].cfg.train.eval_every, 3);
    cr_assert_eq(s.runs[0].tokens, 5L * 16 * 8);
    ar_sweep_free(&s);
}

Test(sweep, grid_errors_have_places)
{
    expect_error("bogus: 1\nsizes: []\n", "g.yaml:1:1: unknown key 'bogus' (expected one of: base, sizes, variants)");
    expect_error("sizes:\n  - {name: a, d_model: abc}\nvariants: [baseline]\n",
                 "g.yaml:2:24: 'model.d_model' expects a positive integer, got 'abc'");
    expect_error("sizes:\n  - {name: a, width: 3}\nvariants: [baseline]\n", "g.yaml:2:15: unknown size key 'width'");
    expect_error("sizes:\n  - {name: a, tokens: 5000}\nvariants: [baseline]\n",
                 "g.yaml:2:23: size 'a': tokens 5000 is not a whole number of steps of 2048 tokens "
                 "(batch_size 16 x grad_accum 1 x seq_len 128); 4096 or 6144 would be");
    expect_error("sizes:\n  - {name: a, tokens: 1000}\nvariants: [baseline]\n", "; 2048 would be");
    expect_error("sizes:\n  - {name: a, tokens: 2.5}\nvariants: [baseline]\n",
                 "g.yaml:2:23: 'tokens' expects a positive whole number of tokens, got '2.5'");
    expect_error("sizes:\n  - {name: a, tokens: 2048, steps: 3}\nvariants: [baseline]\n",
                 "give a size one of 'steps', 'tokens' or 'flops', not several");
    expect_error("sizes:\n  - {name: a}\nvariants: [baseline, {kind: full, name: baseline}]\n",
                 "g.yaml:3:22: duplicate variant 'baseline'");
    expect_error("sizes:\n  - {name: a}\nvariants: [sigmoid]\n",
                 "g.yaml:3:12: 'model.residual.kind' expects one of");
    expect_error("sizes:\n  - {name: a/b}\nvariants: [baseline]\n", "g.yaml:2:12: a size name expects letters");
    expect_error("sizes:\n  - {d_model: 8}\nvariants: [baseline]\n", "g.yaml:2:5: a size needs a 'name'");
    expect_error("sizes: []\nvariants: [baseline]\n", "g.yaml:1:8: 'sizes' expects a non-empty list");
    expect_error("base:\n  model:\n    dmodel: 3\nsizes: [{name: a}]\nvariants: [baseline]\n",
                 "g.yaml:3:5: unknown key 'model.dmodel'");
    expect_error("sizes:\n  - {name: a, n_layer: 1}\nvariants: [{kind: block, block_size: 8}]\n",
                 "g.yaml: size 'a', variant 'block': 'model.residual.block_size' (8) exceeds");
    expect_error("sizes: [{name: a}]\n", "a sweep needs 'variants'");
}

Test(sweep, builtin_grid_is_configs_scaling_yaml)
{
    const char *src = tu_source_dir();
    if (!src)
        cr_skip_test("AR_SOURCE_DIR is not set");
    char path[4096];
    snprintf(path, sizeof path, "%s/configs/scaling.yaml", src);
    char *text = tu_read_file(path, NULL);
    cr_assert_not_null(text);
    cr_assert_str_eq(ar_sweep_builtin_yaml, text, "the built-in grid differs from configs/scaling.yaml");
    free(text);
    ar_sweep s;
    ar_err e;
    cr_assert_eq(ar_sweep_load(&s, path, NULL, 0, &e), 0, "%s", e.msg);
    cr_assert(s.nsizes >= 4 && s.nsizes <= 5 && s.nvariants == 3, "%d sizes x %d variants", s.nsizes, s.nvariants);
    for (int i = 0; i < s.nruns; i++) {
        const ar_train_cfg *t = &s.runs[i].cfg.train;
        cr_assert_eq(s.runs[i].tokens, t->steps * t->batch_size * t->grad_accum * s.runs[i].cfg.model.seq_len);
    }
    ar_sweep_free(&s);
}

/* ---- training a tiny grid ---- */

typedef struct {
    int events[6];
    const char *stop_run; /* interrupt when this run reaches stop_step */
    long stop_step;
    volatile sig_atomic_t *flag;
} watch;

static void on_event(const ar_sweep_run *r, ar_sweep_event ev, const char *detail, void *ud)
{
    (void)r;
    (void)detail;
    ((watch *)ud)->events[ev]++;
}

static void on_progress(const ar_sweep_run *r, const ar_progress *p, void *ud)
{
    watch *w = ud;
    if (w->stop_run && !strcmp(r->name, w->stop_run) && p->step == w->stop_step)
        *w->flag = 1;
}

static int sweep_in(const char *dir, const char *text, watch *w, ar_sweep_result *res, ar_err *e)
{
    static volatile sig_atomic_t flag;
    flag = 0;
    w->flag = &flag;
    ar_sweep s;
    char cwd[4096];
    cr_assert_not_null(getcwd(cwd, sizeof cwd));
    cr_assert_eq(chdir(dir), 0);
    int rc = parse(&s, text, e);
    if (rc == 0) {
        ar_sweep_opts o = {.out_dir = "out", .jobs = 1, .event = on_event, .progress = on_progress, .ud = w,
                           .interrupt = &flag};
        rc = ar_sweep_run_all(&s, &o, res, e);
        ar_sweep_free(&s);
    }
    cr_assert_eq(chdir(cwd), 0);
    return rc;
}

static ar_csv *read_results(const char *dir)
{
    ar_csv *c;
    ar_err e;
    cr_assert_eq(ar_csv_read(&c, tu_path(dir, "out/results.csv"), &e), 0, "%s", e.msg);
    return c;
}

static double cell_num(const ar_csv *c, int row, const char *col)
{
    ar_err e;
    double v;
    int k = ar_csv_require_col(c, col, &e);
    cr_assert_geq(k, 0, "%s", e.msg);
    cr_assert_eq(ar_csv_num(c, row, k, &v, &e), 0, "%s", e.msg);
    return v;
}

Test(sweep, tiny_grid_writes_results_and_reuses_finished_runs)
{
    const char *dir = tu_tmpdir();
    tu_write_corpus_text(tu_path(dir, "corpus.txt"));
    watch w;
    memset(&w, 0, sizeof w);
    ar_sweep_result res;
    ar_err e;
    cr_assert_eq(sweep_in(dir, TINY, &w, &res, &e), 0, "%s", e.msg);
    cr_assert_eq(res.trained, 4);
    cr_assert_eq(res.finished, 4);
    cr_assert_eq(w.events[AR_SWEEP_STARTED], 4);

    char *first = tu_read_file(tu_path(dir, "out/results.csv"), NULL);
    cr_assert(strncmp(first, AR_SWEEP_COLUMNS "\n", strlen(AR_SWEEP_COLUMNS) + 1) == 0, "header:\n%s", first);
    ar_csv *c = read_results(dir);
    cr_assert_eq(c->nrows, 4);
    const char *variants[] = {"baseline", "block", "baseline", "block"}, *sizes[] = {"t1", "t1", "t2", "t2"};
    for (int i = 0; i < 4; i++) {
        cr_assert_str_eq(ar_csv_cell(c, i, ar_csv_col(c, "variant")), variants[i]);
        cr_assert_str_eq(ar_csv_cell(c, i, ar_csv_col(c, "size")), sizes[i]);
        double tokens = cell_num(c, i, "tokens"), flops = cell_num(c, i, "flops");
        double N = cell_num(c, i, "nonembed_params"), pfd = cell_num(c, i, "pflops_days");
        int d = i < 2 ? 16 : 24, nl = i < 2 ? 1 : 2;
        cr_assert_float_eq(tokens, i < 2 ? 384 : 512, 0);
        /* docs/reference.md §6: 6N + 12 n_layer d T per token; PFLOP/s-days = FLOPs / 8.64e19.
         * Both FLOP counts are whole numbers below 2^53, exact in double;
         * the table's %.0f rounds to half a FLOP.  pflops_days is written
         * with %.9e, 10 significant digits: within 5e-10 relative (and
         * 8.64e19 is a double, so the quotients round alike): 1e-9. */
        double want = (6 * N + 12.0 * nl * d * 16) * tokens;
        cr_assert(fabs(flops - want) <= 0.5, "flops %.1f, want %.1f", flops, want);
        cr_assert(fabs(pfd - flops / 8.64e19) <= 1e-9 * pfd, "pflops_days %g vs %g", pfd, flops / 8.64e19);
        double vl = cell_num(c, i, "val_loss");
        cr_assert(vl > 0 && vl < 6, "val_loss %g", vl);
        cr_assert_geq(cell_num(c, i, "wall_s"), 0);
        cr_assert_float_eq(cell_num(c, i, "steps"), i < 2 ? 6 : 8, 0);
        /* the run's shape, for plot-sweep */
        cr_assert_float_eq(cell_num(c, i, "n_layer"), nl, 0);
        cr_assert_float_eq(cell_num(c, i, "d_model"), d, 0);
        cr_assert_float_eq(cell_num(c, i, "n_head"), 2, 0);
        /* the run's train.seed (the config's 1; --set train.seed=K for another) */
        cr_assert_float_eq(cell_num(c, i, "seed"), 1, 0);
    }
    /* N grows with the size and the block variant adds its queries and norms */
    cr_assert(cell_num(c, 1, "nonembed_params") > cell_num(c, 0, "nonembed_params"));
    cr_assert(cell_num(c, 2, "nonembed_params") > cell_num(c, 1, "nonembed_params"));
    ar_csv_free(c);

    /* A rerun trains nothing and writes the same table. */
    struct stat before, after;
    cr_assert_eq(stat(tu_path(dir, "out/t2-block/model.safetensors"), &before), 0);
    memset(&w, 0, sizeof w);
    cr_assert_eq(sweep_in(dir, TINY, &w, &res, &e), 0, "%s", e.msg);
    cr_assert_eq(res.skipped, 4);
    cr_assert_eq(res.trained, 0);
    cr_assert_eq(w.events[AR_SWEEP_SKIPPED], 4);
    cr_assert_eq(w.events[AR_SWEEP_STARTED] + w.events[AR_SWEEP_FINISHED], 0);
    cr_assert_eq(stat(tu_path(dir, "out/t2-block/model.safetensors"), &after), 0);
    cr_assert(before.st_mtim.tv_sec == after.st_mtim.tv_sec && before.st_mtim.tv_nsec == after.st_mtim.tv_nsec,
              "a finished run was trained again");
    char *second = tu_read_file(tu_path(dir, "out/results.csv"), NULL);
    cr_assert_str_eq(first, second);
    free(first);
    free(second);

    /* A changed grid does not silently reuse a run trained otherwise. */
    char *changed = strdup(TINY);
    char *lr = strstr(changed, "lr: 5.0e-3");
    memcpy(lr, "lr: 6.0e-3", 10);
    cr_assert_eq(sweep_in(dir, changed, &w, &res, &e), -1);
    cr_assert(strstr(e.msg, "out/t2-baseline") && strstr(e.msg, "another configuration"), "%s", e.msg);
    cr_assert(strstr(e.msg, "lr"), "the differing key is not shown: %s", e.msg);
    free(changed);
}

Test(sweep, interrupted_run_is_resumed)
{
    const char *dir = tu_tmpdir();
    tu_write_corpus_text(tu_path(dir, "corpus.txt"));
    /* Interrupted after its third step: it finishes the step it is in,
     * saves at step 4 and stops. */
    watch w = {.events = {0}, .stop_run = "t1-block", .stop_step = 3, .flag = NULL};
    ar_sweep_result res;
    ar_err e;
    cr_assert_eq(sweep_in(dir, TINY, &w, &res, &e), 0, "%s", e.msg);
    cr_assert(res.interrupted);
    cr_assert_eq(res.finished, 1, "only t1-baseline finished");
    cr_assert_eq(w.events[AR_SWEEP_INTERRUPTED], 1);
    ar_csv *c = read_results(dir);
    cr_assert_eq(c->nrows, 1);
    ar_csv_free(c);
    ar_config cfg;
    long step;
    cr_assert_eq(ar_ckpt_read_config(tu_path(dir, "out/t1-block"), &cfg, &step, &e), 0, "%s", e.msg);
    cr_assert_eq(step, 4);

    memset(&w, 0, sizeof w);
    cr_assert_eq(sweep_in(dir, TINY, &w, &res, &e), 0, "%s", e.msg);
    cr_assert_eq(w.events[AR_SWEEP_SKIPPED], 1);
    cr_assert_eq(w.events[AR_SWEEP_RESUMED], 1);
    cr_assert_eq(w.events[AR_SWEEP_STARTED], 2);
    cr_assert_eq(res.finished, 4);
    cr_assert_eq(ar_ckpt_read_config(tu_path(dir, "out/t1-block"), &cfg, &step, &e), 0, "%s", e.msg);
    cr_assert_eq(step, 6);
    /* wall time of the resumed run sums its two invocations */
    double wall, vl;
    cr_assert_eq(ar_sweep_run_stats(tu_path(dir, "out/t1-block"), &wall, &vl, &e), 0, "%s", e.msg);
    cr_assert(wall > 0 && isfinite(vl));
}

/* ---- the final evaluation ---- */

/* The grid with a validation file of its own. */
static const char *TINY_VAL =
    "base:\n"
    "  model: {vocab: bytes, seq_len: 16}\n"
    "  data: {train: corpus.txt, val: val.txt}\n"
    "  train: {batch_size: 4, lr: 1.0e-2, min_lr: 1.0e-3, warmup: 2, eval_every: 0, eval_windows: 4,\n"
    "          save_every: 2, log_every: 1, threads: 1}\n"
    "sizes:\n"
    "  - {name: t1, d_model: 16, n_layer: 1, n_head: 2, d_ff: 32, tokens: 384}\n"
    "variants:\n"
    "  - baseline\n"
    "  - {kind: block, block_size: 1}\n";

static char *run_cli(const char *dir, int *st, const char *fmt, ...);

static double json_num(const char *text, const char *key)
{
    ar_err e;
    ar_json *j = ar_json_parse(text, strlen(text), &e);
    cr_assert(j, "%s: %s", e.msg, text);
    const ar_json *v = ar_json_get(j, key);
    cr_assert(v && v->type == AR_JSON_NUM, "no number '%s' in %s", key, text);
    double x = v->num;
    ar_json_free(j);
    return x;
}

Test(sweep, final_evaluation_is_attnres_eval_on_the_whole_split)
{
    const char *dir = tu_tmpdir();
    tu_write_corpus_text(tu_path(dir, "corpus.txt"));
    tu_write_corpus_lines(tu_path(dir, "val.txt"), 40, 7);
    watch w;
    memset(&w, 0, sizeof w);
    ar_sweep_result res;
    ar_err e;
    cr_assert_eq(sweep_in(dir, TINY_VAL, &w, &res, &e), 0, "%s", e.msg);
    cr_assert_eq(res.trained, 2);
    struct stat vs;
    cr_assert_eq(stat(tu_path(dir, "val.txt"), &vs), 0);
    long windows = ((long)vs.st_size - 1) / 16; /* every window of the split, not train.eval_windows' 4 */
    ar_csv *c = read_results(dir);
    cr_assert_eq(c->nrows, 2);
    for (int i = 0; i < 2; i++) {
        const char *run = ar_csv_cell(c, i, ar_csv_col(c, "run"));
        char rd[4400];
        snprintf(rd, sizeof rd, "out/%s", run);
        int st;
        char *out = run_cli(dir, &st, "eval %s --data val.txt --threads 1 --json", rd);
        cr_assert_eq(st, 0, "%s", out);
        double want = json_num(out, "loss");
        cr_assert_eq((long)json_num(out, "windows"), windows, "%s", out);
        free(out);
        char *rec = tu_read_file(tu_path(dir, tu_path(rd, "final_eval.json")), NULL);
        cr_assert(rec);
        /* the same bits by construction: the same protocol and code, the
         * model loaded for batches of 8 windows on both sides, one thread
         * (train.threads 1 with one job; --threads 1) */
        cr_assert(json_num(rec, "loss") == want, "final %.17g, attnres eval %.17g", json_num(rec, "loss"), want);
        cr_assert_eq((long)json_num(rec, "windows"), windows);
        cr_assert_eq((long)json_num(rec, "tokens"), 16 * windows);
        cr_assert_eq((long)json_num(rec, "step"), 6);
        cr_assert_eq((long)json_num(rec, "max_windows"), 0);
        free(rec);
        /* results.csv writes it with %.6f: half a unit of the 6th decimal,
         * and strtod's 2^-53 relative on a loss below 6 */
        cr_assert(fabs(cell_num(c, i, "final_val_loss") - want) <= 5e-7 + 1e-15, "%s: %g vs %.9f", run,
                  cell_num(c, i, "final_val_loss"), want);
        cr_assert_eq(cell_num(c, i, "final_eval_windows"), (double)windows);
        cr_assert_eq(cell_num(c, i, "final_eval_tokens"), 16.0 * windows);
        /* val_loss is the last evaluation of training, on 4 windows */
        double vl = cell_num(c, i, "val_loss");
        cr_assert(isfinite(vl) && vl != cell_num(c, i, "final_val_loss"), "%g", vl);
    }
    ar_csv_free(c);

    /* A finished run whose final evaluation is missing (stopped between the
     * two) is evaluated, not trained, on the rerun: reported as reused. */
    char *rec0 = tu_read_file(tu_path(dir, "out/t1-block/final_eval.json"), NULL);
    cr_assert_eq(unlink(tu_path(dir, "out/t1-block/final_eval.json")), 0);
    struct stat before, after;
    cr_assert_eq(stat(tu_path(dir, "out/t1-block/model.safetensors"), &before), 0);
    memset(&w, 0, sizeof w);
    cr_assert_eq(sweep_in(dir, TINY_VAL, &w, &res, &e), 0, "%s", e.msg);
    cr_assert(res.skipped == 2 && res.trained == 0 && res.finished == 2);
    cr_assert_eq(w.events[AR_SWEEP_SKIPPED], 2);
    cr_assert_eq(stat(tu_path(dir, "out/t1-block/model.safetensors"), &after), 0);
    cr_assert(before.st_mtim.tv_sec == after.st_mtim.tv_sec && before.st_mtim.tv_nsec == after.st_mtim.tv_nsec);
    char *rec1 = tu_read_file(tu_path(dir, "out/t1-block/final_eval.json"), NULL);
    cr_assert(rec1);
    cr_assert_str_eq(rec0, rec1);
    free(rec0);
    free(rec1);

    /* An interrupt before the final evaluation leaves it to the rerun. */
    cr_assert_eq(unlink(tu_path(dir, "out/t1-block/final_eval.json")), 0);
    ar_sweep s;
    cr_assert_eq(parse(&s, TINY_VAL, &e), 0, "%s", e.msg);
    char cwd[4096];
    cr_assert_not_null(getcwd(cwd, sizeof cwd));
    cr_assert_eq(chdir(dir), 0);
    volatile sig_atomic_t stop = 1;
    memset(&w, 0, sizeof w);
    ar_sweep_opts o = {.out_dir = "out", .jobs = 1, .event = on_event, .ud = &w, .interrupt = &stop};
    int rc = ar_sweep_run_all(&s, &o, &res, &e);
    cr_assert_eq(chdir(cwd), 0);
    ar_sweep_free(&s);
    cr_assert_eq(rc, 0, "%s", e.msg);
    cr_assert(res.interrupted);
    struct stat fs;
    cr_assert_neq(stat(tu_path(dir, "out/t1-block/final_eval.json"), &fs), 0);
}

/* ---- the command ---- */

static char *run_cli(const char *dir, int *st, const char *fmt, ...)
{
    const char *bin = tu_bin();
    if (!bin)
        cr_skip_test("AR_BIN is not set");
    char args[4096], cmd[9000];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    snprintf(cmd, sizeof cmd, "cd '%s' && '%s' %s", dir, bin, args);
    return tu_run(cmd, st);
}

Test(sweep, cli_two_jobs_rerun_and_fit)
{
    const char *dir = tu_tmpdir();
    tu_write_corpus_text(tu_path(dir, "corpus.txt"));
    write_text(tu_path(dir, "tiny.yaml"), TINY);
    int st;
    char *out = run_cli(dir, &st, "sweep tiny.yaml --jobs 2");
    cr_assert_eq(st, 0, "%s", out);
    cr_assert(strstr(out, "into 'runs/tiny', 2 at a time") && strstr(out, "sweep done: 4 runs (0 reused, 4 trained)"),
              "%s", out);
    free(out);
    ar_csv *c;
    ar_err e;
    cr_assert_eq(ar_csv_read(&c, tu_path(dir, "runs/tiny/results.csv"), &e), 0, "%s", e.msg);
    cr_assert_eq(c->nrows, 4);
    /* two jobs out of threads: 1 -> one thread each */
    ar_config cfg;
    long step;
    cr_assert_eq(ar_ckpt_read_config(tu_path(dir, "runs/tiny/t2-block"), &cfg, &step, &e), 0, "%s", e.msg);
    cr_assert_eq(cfg.train.threads, 1);
    cr_assert_eq(step, 8);
    ar_csv_free(c);

    out = run_cli(dir, &st, "sweep tiny.yaml");
    cr_assert_eq(st, 0, "%s", out);
    cr_assert(strstr(out, "sweep done: 4 runs (4 reused, 0 trained)"), "%s", out);
    free(out);

    /* lost final evaluations are made again in the job processes */
    cr_assert_eq(unlink(tu_path(dir, "runs/tiny/t1-block/final_eval.json")), 0);
    cr_assert_eq(unlink(tu_path(dir, "runs/tiny/t2-baseline/final_eval.json")), 0);
    out = run_cli(dir, &st, "sweep tiny.yaml --jobs 2");
    cr_assert_eq(st, 0, "%s", out);
    cr_assert(strstr(out, "sweep done: 4 runs (4 reused, 0 trained)"), "%s", out);
    cr_assert(strstr(out, "t1-block: already finished (val_loss ") && strstr(out, "final_val_loss "), "%s", out);
    free(out);

    /* the table's shape columns through plot-sweep: t1 is d/L 16, H/L 2 and
     * t2 d/L 12, H/L 1, one cell each per method */
    out = run_cli(dir, &st, "plot-sweep runs/tiny --x d_model/L_b --y n_head/L_b 2>&1");
    cr_assert_eq(st, 0, "%s", out);
    cr_assert(strstr(out, "wrote 'runs/tiny/arch_sweep.png' (2 methods, 2 x 2 cells)"), "%s", out);
    free(out);
    char *png = tu_read_file(tu_path(dir, "runs/tiny/arch_sweep.png"), NULL);
    cr_assert(png && memcmp(png, "\x89PNG", 4) == 0);
    free(png);

    out = run_cli(dir, &st, "fit-scaling runs/tiny --json 2>&1");
    cr_assert_eq(st, 0, "%s", out);
    cr_assert(strstr(out, "\"baseline\":\"baseline\"") && strstr(out, "\"ratio\""), "%s", out);
    /* fit-scaling fits the final evaluations by default */
    cr_assert(strstr(out, "\"y\":\"final_val_loss\""), "%s", out);
    free(out);
}

Test(sweep, cli_errors)
{
    const char *dir = tu_tmpdir();
    int st;
    char *out = run_cli(dir, &st, "sweep --jobs 0 2>&1");
    cr_assert_eq(st, 2, "%s", out);
    cr_assert(strstr(out, "'--jobs'") && strstr(out, "usage: attnres sweep"), "%s", out);
    free(out);
    out = run_cli(dir, &st, "sweep 2>&1");
    cr_assert_eq(st, 1, "%s", out);
    cr_assert(strstr(out, "tools/get-data.sh"), "the missing default corpus is not explained: %s", out);
    free(out);
    if (tu_source_dir()) {
        out = run_cli(dir, &st, "sweep '%s/configs/arch-sweep.yaml' --dry-run --set data.train=/dev/null 2>&1",
                      tu_source_dir());
        cr_assert_eq(st, 0, "%s", out);
        cr_assert(strstr(out, "sweep of 32 runs (16 sizes x 2 variants)") && strstr(out, "r30-h1-block"), "%s", out);
        free(out);
        /* --sizes: those sizes only, in the file's order */
        out = run_cli(dir, &st,
                      "sweep '%s/configs/arch-sweep.yaml' --dry-run --set data.train=/dev/null --sizes r30-h1,r24-h0.5 "
                      "2>&1",
                      tu_source_dir());
        cr_assert_eq(st, 0, "%s", out);
        cr_assert(strstr(out, "sweep of 4 runs (2 sizes x 2 variants)") && !strstr(out, "r12-h0.25-baseline"), "%s",
                  out);
        char *a = strstr(out, "r24-h0.5-baseline"), *b = strstr(out, "r30-h1-block");
        cr_assert(a && b && a < b, "not in the file's order:\n%s", out);
        free(out);
        out = run_cli(dir, &st, "sweep '%s/configs/arch-sweep.yaml' --dry-run --set data.train=/dev/null --sizes r30-h9 2>&1",
                      tu_source_dir());
        cr_assert_eq(st, 2, "%s", out);
        cr_assert(strstr(out, "attnres: error:") && strstr(out, "'--sizes': no size 'r30-h9' in the grid") &&
                      strstr(out, "'r12-h0.25'"),
                  "%s", out);
        free(out);
    }
    out = run_cli(dir, &st, "sweep --dry-run --set data.train=/dev/null 2>&1");
    cr_assert_eq(st, 0, "%s", out);
    cr_assert(strstr(out, "s1-baseline") && strstr(out, "into 'runs/scaling'"), "%s", out);
    free(out);
    write_text(tu_path(dir, "bad.yaml"), "sizes:\n  - {name: a, d_model: -1}\nvariants: [baseline]\n");
    out = run_cli(dir, &st, "sweep bad.yaml 2>&1");
    cr_assert_eq(st, 1, "%s", out);
    cr_assert(strstr(out, "attnres: error: bad.yaml:2:24: 'model.d_model' expects a positive integer, got '-1'"),
              "%s", out);
    free(out);
}

/* A variant may give its blocks as block_sizes; a base with block_sizes
 * keeps them for block variants, and the other kinds drop them. */
Test(sweep, variants_with_block_sizes)
{
    const char *g = "base:\n  model: {d_model: 16, n_layer: 2, n_head: 2, d_ff: 32, seq_len: 16,\n"
                    "          residual: {kind: block, block_sizes: [3, 1]}}\n"
                    "sizes:\n  - {name: a}\n"
                    "variants:\n  - baseline\n  - block\n  - {name: uneven, kind: block, block_sizes: [1, 3]}\n"
                    "  - {name: s2, kind: block, block_size: 2}\n";
    ar_sweep s;
    ar_err e = {{0}};
    cr_assert_eq(parse(&s, g, &e), 0, "%s", e.msg);
    cr_assert_eq(s.nruns, 4);
    const ar_residual_cfg *r = &s.runs[0].cfg.model.residual;
    cr_expect(r->kind == AR_RES_BASELINE && r->block_sizes.n == 0);
    r = &s.runs[1].cfg.model.residual;
    cr_expect(r->kind == AR_RES_BLOCK && r->block_sizes.n == 2 && r->block_sizes.v[0] == 3 && r->block_sizes.v[1] == 1);
    r = &s.runs[2].cfg.model.residual;
    cr_expect_str_eq(s.runs[2].name, "a-uneven");
    cr_expect(r->kind == AR_RES_BLOCK && r->block_sizes.n == 2 && r->block_sizes.v[0] == 1 && r->block_sizes.v[1] == 3);
    r = &s.runs[3].cfg.model.residual;
    cr_expect(r->block_size == 2 && r->block_sizes.n == 0, "block_size replaces the base's block_sizes");
    ar_sweep_free(&s);
    expect_error("sizes:\n  - {name: a}\nvariants: [{kind: block, block_size: 2, block_sizes: [4, 4]}]\n",
                 "g.yaml:3:54: 'block_size', 'num_blocks' and 'block_sizes' are mutually exclusive");
    expect_error("sizes:\n  - {name: a, n_layer: 2}\nvariants: [{kind: block, block_sizes: [4, 4]}]\n",
                 "g.yaml: size 'a', variant 'block': 'model.residual.block_sizes' [4, 4] sums to 8 sublayers, "
                 "expected L = 2*'model.n_layer' = 4");
    expect_error("sizes:\n  - {name: a}\nvariants: [{kind: block, block_sizes: [4, x]}]\n",
                 "'model.residual.block_sizes' expects a list of positive integers, such as [2, 2, 4], got 'x' at "
                 "entry 2");
}

/* The kinds of the errors of the results table, the axis expressions and
 * the final evaluation's record. */
Test(sweep, error_kinds)
{
    const char *dir = tu_tmpdir();
    ar_err e = {{0}};
    char file[4200];
    cr_assert_eq(ar_sweep_table_file(tu_path(dir, "none"), file, sizeof file, &e), -1);
    cr_expect_eq(e.kind, AR_ERR_NOT_FOUND, "%s", e.msg);
    cr_assert_eq(ar_sweep_table_file(dir, file, sizeof file, &e), -1); /* a directory without results.csv */
    cr_expect_eq(e.kind, AR_ERR_NOT_FOUND, "%s", e.msg);
    ar_axis_expr x;
    cr_assert_eq(ar_axis_expr_parse("d_model*2", &x, &e), -1);
    cr_expect_eq(e.kind, AR_ERR_BAD_VALUE, "%s", e.msg);
    const char *bad = "{\"step\": 4, \"loss\": \"low\"}";
    tu_write_file(tu_path(dir, AR_FINAL_EVAL_FILE), bad, strlen(bad));
    ar_final_eval f;
    cr_assert_eq(ar_final_eval_read(dir, 4, 0, &f, &e), -1);
    cr_expect_eq(e.kind, AR_ERR_FORMAT, "%s", e.msg);
}
