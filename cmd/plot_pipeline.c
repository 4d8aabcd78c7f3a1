/* attnres plot-pipeline: the pipeline-parallel plan as a picture (the
 * AttnRes report's section 4.1, Figure 3).  Makes the plan with and
 * without cross-stage caching (parallel/pipe_plan.h), runs its schedule in
 * unit time (ar_pipe_simulate: a sublayer's forward takes 1, its backward
 * 2, the usual ratio), and hands plain numbers to viz/pipeline_figure.h:
 * the rows each rank holds when each chunk starts, the rows each
 * transition sends, and the timeline of every rank. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../formats/config.h"
#include "../parallel/pipe_plan.h"
#include "../viz/depth_figure.h"
#include "../viz/pipeline_figure.h"
#include "cmds.h"
#include "options.h"

static const char *usage =
    "attnres plot-pipeline [CONFIG] [--pipeline P] [--virtual V] [--micro-batches M] "
    "[--residual baseline|full|block] [--n-layer N] [--block-size S] [--no-cache] [--schedule 1f1b|gpipe] "
    "[--out FILE] [--format png|svg|pdf]";

/* The unit-time model of the timeline: a sublayer's backward costs twice
 * its forward (two matrix products per forward one). */
#define T_FWD 1.0
#define T_BWD 2.0

/* Large enough for any figure that still fits a canvas (viz/canvas.h:
 * 20000 pixels a side). */
#define MAX_LAYERS 2048
#define MAX_COUNT 4096

/* The command line; -1 (or NULL) = not given. */
typedef struct {
    const char *config, *out;
    int P, V, M, n_layer, S, kind, sched, no_cache;
    ar_fig_format format;
} opts;

/* What is drawn, after the config and the options. */
typedef struct {
    ar_model_cfg model; /* kind, n_layer, block size: for the titles */
    int L, S, baseline, P, V, M, cache; /* S 0: blocks of different sizes (block_sizes) */
    ar_pipe_sched sched;
} setup;

/* An integer option's value in min..max: 0, or AR_EXIT_USAGE after the
 * usage error. */
static int parse_count(const char *opt, const char *v, int min, int max, int *out)
{
    char *end;
    long x = strtol(v, &end, 10);
    if (!*v || *end || x < min || x > max)
        return cli_usage_error(usage, "'%s' expects an integer from %d to %d, got '%s'", opt, min, max, v);
    *out = (int)x;
    return 0;
}

static int parse(cli_opts *so, opts *o)
{
    for (const char *a, *v; (a = cli_opts_next(so, &v));) {
        int st = 0;
        if (!strcmp(a, "--pipeline"))
            st = parse_count(a, v, 1, MAX_COUNT, &o->P);
        else if (!strcmp(a, "--virtual"))
            st = parse_count(a, v, 1, MAX_COUNT, &o->V);
        else if (!strcmp(a, "--micro-batches"))
            st = parse_count(a, v, 1, MAX_COUNT, &o->M);
        else if (!strcmp(a, "--n-layer"))
            st = parse_count(a, v, 1, MAX_LAYERS, &o->n_layer);
        else if (!strcmp(a, "--block-size"))
            st = parse_count(a, v, 1, 2 * MAX_LAYERS, &o->S);
        else if (!strcmp(a, "--residual")) {
            static const ar_res_kind kinds[] = {AR_RES_BASELINE, AR_RES_FULL, AR_RES_BLOCK};
            o->kind = -1;
            for (int i = 0; i < 3; i++)
                if (!strcmp(v, ar_res_kind_name(kinds[i])))
                    o->kind = kinds[i];
            if (o->kind < 0)
                st = cli_usage_error(usage, "'--residual' expects baseline, full or block, got '%s'", v);
        } else if (!strcmp(a, "--schedule")) {
            if (!strcmp(v, "1f1b"))
                o->sched = AR_PIPE_1F1B;
            else if (!strcmp(v, "gpipe"))
                o->sched = AR_PIPE_GPIPE;
            else
                st = cli_usage_error(usage, "'--schedule' expects 1f1b or gpipe, got '%s'", v);
        } else if (!strcmp(a, "--format")) {
            if (cli_parse_format(usage, v, &o->format) != 0)
                st = AR_EXIT_USAGE;
        } else if (!strcmp(a, "--no-cache"))
            o->no_cache = 1;
        else if (cli_opts_argument(so, a, &o->config) != 0)
            st = AR_EXIT_USAGE;
        if (st != 0)
            return AR_EXIT_USAGE;
    }
    if (so->bad)
        return AR_EXIT_USAGE;
    o->out = so->out;
    if (o->format == AR_FIG_AUTO && o->out)
        o->format = ar_fig_format_of(o->out, AR_FIG_AUTO);
    return 0;
}

/* The model and the pipeline: the built-in case (block AttnRes, S = 2, 8
 * layers, P = 4, V = 2), or CONFIG's model section and, where it sets
 * parallel.pipeline above 1, its P and V (and always its cache_blocks and
 * schedule); then the options.  AR_EXIT_OK, AR_EXIT_FAIL with e set (the
 * config), or AR_EXIT_USAGE after the usage error. */
static int resolve(const opts *o, setup *s, ar_err *e)
{
    ar_config cfg;
    ar_config_defaults(&cfg);
    memset(s, 0, sizeof *s);
    s->P = 4;
    s->V = 2;
    s->cache = 1;
    s->sched = AR_PIPE_1F1B;
    if (o->config) {
        if (ar_config_load(&cfg, o->config, e) != 0 || ar_config_validate(&cfg, e) != 0)
            return AR_EXIT_FAIL;
        ar_res_kind k = cfg.model.residual.kind;
        if (o->kind < 0 && k != AR_RES_BASELINE && k != AR_RES_FULL && k != AR_RES_BLOCK) {
            ar_fail(e, "'%s': 'model.residual.kind' is %s; a pipeline plan exists for baseline, full and block "
                       "(give --residual)", o->config, ar_res_kind_name(k));
            return AR_EXIT_FAIL;
        }
        if (cfg.parallel.pipeline > 1) {
            s->P = cfg.parallel.pipeline;
            s->V = cfg.parallel.virtual_stages;
        }
        s->cache = cfg.parallel.cache_blocks != 0;
        s->sched = cfg.parallel.schedule == AR_PIPE_SCHED_GPIPE ? AR_PIPE_GPIPE : AR_PIPE_1F1B;
    } else {
        cfg.model.n_layer = 8;
        cfg.model.residual.kind = AR_RES_BLOCK;
        cfg.model.residual.block_size = 2; /* blocks of 2 sublayers: one a chunk at P = 4, V = 2 */
        cfg.model.residual.num_blocks = 0;
    }
    ar_model_cfg *m = &cfg.model;
    if (o->n_layer > 0)
        m->n_layer = o->n_layer;
    if (o->kind >= 0)
        m->residual.kind = (ar_res_kind)o->kind;
    if (o->S > 0) {
        if (m->residual.kind != AR_RES_BLOCK)
            return cli_usage_error(usage, "'--block-size' applies to block AttnRes, not %s",
                                   ar_res_kind_name(m->residual.kind));
        m->residual.block_size = o->S;
        m->residual.num_blocks = 0;
        m->residual.block_sizes.n = 0;
    }
    if (m->residual.kind != AR_RES_BLOCK)
        m->residual.block_sizes.n = 0; /* --residual full or baseline over a config with block_sizes */
    if (m->residual.kind == AR_RES_BLOCK && m->residual.block_size == 0 && m->residual.num_blocks == 0 &&
        m->residual.block_sizes.n == 0)
        m->residual.block_size = 2; /* --residual block over a config of another kind */
    s->L = ar_cfg_sublayers(m);
    s->S = ar_cfg_block_size(m);
    s->baseline = m->residual.kind == AR_RES_BASELINE;
    if (!s->baseline && m->residual.block_sizes.n > 0) {
        /* the blocks must still cover the sublayers after --n-layer */
        ar_config probe = cfg;
        probe.model = *m;
        if (ar_config_validate(&probe, e) != 0) {
            ar_wrap(e, "'%s'%s", o->config, o->n_layer > 0 ? " with '--n-layer'" : "");
            return AR_EXIT_FAIL;
        }
    }
    if (!s->baseline && s->S > s->L)
        return cli_usage_error(usage, "'%s' (%d) is more than the model's %d sublayers (2 x '--n-layer')",
                               o->S > 0 ? "--block-size" : "model.residual.block_size", s->S, s->L);
    s->model = *m;
    if (o->P > 0)
        s->P = o->P;
    if (o->V > 0)
        s->V = o->V;
    if (o->no_cache)
        s->cache = 0;
    if (o->sched >= 0)
        s->sched = (ar_pipe_sched)o->sched;
    s->M = o->M > 0 ? o->M : s->P;
    return AR_EXIT_OK;
}

/* ------------------------------------------------------------- the figure */

/* Row q's label: block/full "b<n>" where q ends block n, "b<n>'" for a
 * partial sum (with the sublayer, "b<n>' (q)", where a block has several);
 * baseline "h<q+1>", the running sum into sublayer q+1 ("out" after the
 * last). */
static void row_label(const ar_pipe_plan *p, int q, char *buf, size_t cap)
{
    int complete, n = ar_pipe_row_block(p, q, &complete);
    if (p->baseline)
        snprintf(buf, cap, q == p->L ? "out" : "h%d", q + 1);
    else if (complete)
        snprintf(buf, cap, "b%d", n);
    else if (p->S == 2)
        snprintf(buf, cap, "b%d'", n);
    else
        snprintf(buf, cap, "b%d' (%d)", n, q);
}

static const char *rows_note(const setup *s)
{
    if (s->baseline)
        return "rows: h_l, the running sum into sublayer l (h1 the embedding, out the final state); a transition "
               "sends the last one";
    if (s->S == 1)
        return "rows: b0 the embedding, bn the output of sublayer n (Full AttnRes: every sublayer is a block)";
    if (s->S == 2)
        return "rows: b0 the embedding, bn block n's representation, bn' its partial sum after its first sublayer";
    return "rows: b0 the embedding, bn block n's representation, bn' (q) its partial sum after sublayer q";
}

static int cell_of(unsigned char row_state)
{
    switch (row_state) {
    case AR_ROW_KEPT: return AR_PFIG_KEPT;
    case AR_ROW_RECEIVED: return AR_PFIG_RECEIVED;
    case AR_ROW_PRODUCED: return AR_PFIG_PRODUCED;
    default: return AR_PFIG_ABSENT;
    }
}

static void sched_name(const ar_pipe_plan *p, char *buf, size_t cap)
{
    const char *name = p->sched == AR_PIPE_GPIPE ? "GPipe" : p->V > 1 ? "1F1B interleaved (Megatron)" : "1F1B";
    snprintf(buf, cap, "%s, M = %d micro-batch%s, up to %d in flight on a rank", name, p->M, p->M == 1 ? "" : "es",
             p->slots);
}

/* Draws plan (naive: the plan without caching, for its counts, or NULL). */
static int draw(const ar_pipe_plan *plan, const ar_pipe_plan *naive, const setup *s, const char *out,
                ar_fig_format format, ar_err *e)
{
    int C = plan->C, P = plan->P, nrows = plan->L + 1;
    unsigned char *state = ar_xcalloc((size_t)C * nrows, 1);
    char (*labels)[32] = ar_xcalloc((size_t)nrows, sizeof *labels);
    const char **lp = ar_xcalloc((size_t)nrows, sizeof *lp);
    ar_pfig_chunk *ch = ar_xcalloc((size_t)C, sizeof *ch);
    double **start = ar_xcalloc((size_t)P, sizeof *start);
    ar_pfig_op **ops = ar_xcalloc((size_t)P, sizeof *ops);
    for (int q = 0; q < nrows; q++) {
        row_label(plan, q, labels[q], sizeof labels[q]);
        lp[q] = labels[q];
    }
    for (int c = 0; c < C; c++) {
        unsigned char *st = state + (size_t)c * nrows;
        ar_pipe_held(plan, c, st);
        for (int q = 0; q < nrows; q++)
            st[q] = (unsigned char)cell_of(st[q]);
        ch[c] = (ar_pfig_chunk){.rank = ar_pipe_stage_of(plan, c), .virt = c / P, .lo = plan->lo[c],
                                .hi = plan->hi[c], .state = st, .sent = c + 1 < C ? plan->nsend[c] : 0,
                                .sent_naive = naive && c + 1 < C ? naive->nsend[c] : -1};
    }
    for (int r = 0; r < P; r++)
        start[r] = ar_xcalloc((size_t)plan->nops[r] + 1, sizeof **start);
    double makespan, bubble;
    int rc = ar_pipe_simulate(plan, T_FWD, T_BWD, &makespan, &bubble, start, e);
    if (rc == 0) {
        for (int r = 0; r < P; r++) {
            ops[r] = ar_xcalloc((size_t)plan->nops[r] + 1, sizeof **ops);
            for (int i = 0; i < plan->nops[r]; i++) {
                const ar_pipe_op *o = &plan->ops[r][i];
                int n = plan->hi[o->chunk] - plan->lo[o->chunk] + 1;
                ops[r][i] = (ar_pfig_op){.kind = o->kind, .mb = o->mb, .virt = o->chunk / P, .start = start[r][i],
                                         .dur = (o->kind == 'F' ? T_FWD : T_BWD) * n};
            }
        }
        char variant[96], title[512], sched[160];
        ar_depth_variant_name(&s->model, variant, sizeof variant);
        snprintf(title, sizeof title,
                 "Pipeline parallelism %s cross-stage caching\n%s, L = %d sublayers \xc2\xb7 P = %d rank%s x V = %d "
                 "virtual stage%s = %d chunk%s",
                 plan->cache ? "with" : "without", variant, plan->L, P, P == 1 ? "" : "s", plan->V,
                 plan->V == 1 ? "" : "s", C, C == 1 ? "" : "s");
        sched_name(plan, sched, sizeof sched);
        ar_fig_meta meta = {.format = format};
        ar_pfig f = {.title = title, .P = P, .V = plan->V, .C = C, .nrows = nrows, .row_label = lp,
                     .rows_note = rows_note(s), .chunk = ch, .nops = plan->nops,
                     .ops = (const ar_pfig_op *const *)ops, .makespan = makespan, .bubble = bubble, .sched = sched,
                     .time_label = "time (a sublayer's forward = 1, its backward = 2; messages take none)",
                     .meta = &meta};
        rc = ar_pipeline_figure(out, &f, NULL, e);
    }
    for (int r = 0; r < P; r++) {
        free(start[r]);
        free(ops[r]);
    }
    free(start);
    free(ops);
    free(ch);
    free(lp);
    free(labels);
    free(state);
    return rc;
}

/* "22" or "21.5": the equations' values. */
static void fmt_eq(double v, char *buf, size_t cap)
{
    snprintf(buf, cap, "%.4g", v);
}

int cmd_plot_pipeline(int argc, char **argv)
{
    opts o = {.P = -1, .V = -1, .M = -1, .n_layer = -1, .S = -1, .kind = -1, .sched = -1};
    static const char *const own[] = {"--pipeline", "--virtual", "--micro-batches", "--residual", "--n-layer",
                                      "--block-size", "--schedule", "--format", NULL};
    cli_opts so;
    cli_opts_init(&so, usage, CLI_OUT, own, argc, argv);
    int st = parse(&so, &o);
    cli_opts_free(&so);
    if (st != 0)
        return st;
    ar_err e = {{0}};
    setup s;
    st = resolve(&o, &s, &e);
    if (st == AR_EXIT_FAIL)
        cli_error("%s", e.msg);
    if (st != AR_EXIT_OK)
        return st;
    /* both plans: the one drawn, and the other for the comparison */
    ar_pipe_plan cached, naive;
    ar_blocks blk; /* S, or the blocks of model.residual.block_sizes */
    ar_blocks_of_cfg(&blk, &s.model);
    if (ar_pipe_plan_make_blocks(&cached, &blk, s.baseline, s.P, s.V, s.M, 1, s.sched, &e) != 0) {
        ar_blocks_free(&blk);
        cli_error("%s", e.msg);
        return AR_EXIT_FAIL;
    }
    if (ar_pipe_plan_make_blocks(&naive, &blk, s.baseline, s.P, s.V, s.M, 0, s.sched, &e) != 0) {
        ar_blocks_free(&blk);
        ar_pipe_plan_free(&cached);
        cli_error("%s", e.msg);
        return AR_EXIT_FAIL;
    }
    ar_blocks_free(&blk);
    char out[AR_PATH_MAX + 16];
    if (o.out)
        snprintf(out, sizeof out, "%s", o.out);
    else
        snprintf(out, sizeof out, "pipeline%s", ar_fig_format_ext(o.format == AR_FIG_AUTO ? AR_FIG_PNG : o.format));
    int rc = s.cache ? draw(&cached, &naive, &s, out, o.format, &e) : draw(&naive, NULL, &s, out, o.format, &e);
    if (rc == 0) {
        printf("wrote '%s'\n", out);
        long rc_ = ar_pipe_rows_per_mb(&cached), rn = ar_pipe_rows_per_mb(&naive);
        if (s.baseline) {
            printf("rows sent per micro-batch: %ld cached, %ld naive (eq. 8 and eq. 7 count AttnRes blocks: the "
                   "baseline has none)\n", rc_, rn);
        } else {
            char e8[32], e7[32];
            fmt_eq(ar_pipe_eq8(&cached), e8, sizeof e8);
            fmt_eq(ar_pipe_eq7(&naive), e7, sizeof e7);
            printf("rows sent per micro-batch: %ld cached, %ld naive (eq. 8: %s, eq. 7: %s, counting blocks "
                   "without the embedding)\n", rc_, rn, e8, e7);
        }
    } else {
        cli_error("%s", e.msg);
    }
    ar_pipe_plan_free(&cached);
    ar_pipe_plan_free(&naive);
    return rc == 0 ? AR_EXIT_OK : AR_EXIT_FAIL;
}
