/* attnres bench --pipeline P [--virtual V], under mpirun: the measured
 * communication of a pipeline (bytes of block representations moved
 * forward and back, per step and per token, cached and naive) beside the
 * plan's exact count and the report's eqs. 7 and 8, the bubble measured
 * and scheduled, the step time of Block AttnRes against the baseline, and
 * every rank's peak memory (experiments/pipe_bench.h).  Every rank runs this;
 * rank 0 alone prints. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../formats/config.h"
#include "../formats/json.h"
#include "../parallel/comm.h"
#include "../run/machine.h"
#include "../parallel/pipe.h"
#include "../experiments/pipe_bench.h"
#include "cmds.h"
#include "options.h"

#define MB 1e6
#define MAX_RUNS 32

/* The options of `attnres bench` that take a value (cmd/bench.c's and
 * these), for cli_bench_pipelined's scan. */
static const char *const valued[] = {"--set",     "--device",    "--precision", "--threads",       "--steps",
                                     "--warmup",  "--repeat",    "--peak-tflops", "--variants",    "--pipeline",
                                     "--virtual", "--micro-batches", NULL};

int cli_bench_pipelined(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--pipeline") == 0)
            return 1;
        for (const char *const *v = valued; *v; v++)
            if (strcmp(argv[i], *v) == 0) {
                i++; /* its value is no option */
                break;
            }
    }
    return 0;
}

typedef struct {
    const ar_pipe_bench_variant_def *def;
    int cache;
    ar_config cfg;
    ar_pipe_bench_result r;
} run;

static void valid_names(char *buf, size_t n)
{
    size_t k = 0;
    buf[0] = 0;
    for (int i = 0; i < ar_pipe_bench_n_variants && k < n; i++)
        k += (size_t)snprintf(buf + k, n - k, "%s%s", i ? ", " : "", ar_pipe_bench_variants[i].name);
}

/* "baseline,block4" -> sel[i] = 1 for the named variants. */
static int parse_variants(const char *usage, const char *list, int *sel)
{
    char names[256];
    valid_names(names, sizeof names);
    memset(sel, 0, (size_t)ar_pipe_bench_n_variants * sizeof *sel);
    for (const char *p = list;;) {
        size_t len = strcspn(p, ",");
        char name[64];
        if (len == 0 || len >= sizeof name)
            return cli_usage_error(usage, "'--variants' expects a comma-separated list of %s, got '%s'", names,
                                   list);
        memcpy(name, p, len);
        name[len] = 0;
        const ar_pipe_bench_variant_def *d = ar_pipe_bench_find_variant(name);
        if (!d)
            return cli_usage_error(usage, "unknown variant '%s' in '--variants' (valid with '--pipeline': %s)",
                                   name, names);
        int i = (int)(d - ar_pipe_bench_variants);
        if (sel[i])
            return cli_usage_error(usage, "variant '%s' is named twice in '--variants'", name);
        sel[i] = 1;
        if (!p[len])
            return 0;
        p += len + 1;
    }
}

static const char *cache_name(const run *v)
{
    return v->r.baseline ? "-" : v->cache ? "cached" : "naive";
}

/* "block S=2, cached", "baseline" */
static const char *run_name(const run *v, char *buf, size_t n)
{
    if (v->def->kind == AR_RES_BASELINE)
        snprintf(buf, n, "%s", v->def->label);
    else
        snprintf(buf, n, "%s, %s", v->def->label, cache_name(v));
    return buf;
}

/* The report's formula for the run: eq. 8 cached, eq. 7 naive, rows per
 * micro-batch (NaN for the baseline). */
static double formula(const run *v) { return v->cache ? v->r.eq8 : v->r.eq7; }

static double overhead(const run *v, const run *base)
{
    if (!base || v == base || !(base->r.step_ms > 0))
        return NAN;
    return 100.0 * (v->r.step_ms / base->r.step_ms - 1.0);
}

static int matches(const run *v)
{
    return v->r.fwd_bytes == v->r.pred_bytes && v->r.bwd_bytes == v->r.pred_bytes && v->r.bytes_steady;
}

static double max_peak(const run *v)
{
    double mx = -1;
    for (int k = 0; k < v->r.W; k++)
        mx = v->r.rank_peak_mib[k] > mx ? v->r.rank_peak_mib[k] : mx;
    return mx;
}

static void jnum(ar_jw *w, const char *key, double x)
{
    ar_jw_key(w, key);
    ar_jw_num(w, x); /* NaN -> null */
}

static void jint(ar_jw *w, const char *key, long long x)
{
    ar_jw_key(w, key);
    ar_jw_int(w, x);
}

/* The "config" object: the model's shape and the batch. */
static void json_config(ar_jw *w, const char *config, const ar_config *cfg)
{
    const ar_model_cfg *m = &cfg->model;
    ar_jw_key(w, "config");
    ar_jw_obj_begin(w);
    ar_jw_key(w, "file");
    if (config)
        ar_jw_str(w, config);
    else
        ar_jw_null(w);
    jint(w, "d_model", m->d_model);
    jint(w, "n_layer", m->n_layer);
    jint(w, "n_head", m->n_head);
    jint(w, "d_ff", m->d_ff);
    jint(w, "seq_len", m->seq_len);
    jint(w, "batch_size", cfg->train.batch_size);
    jint(w, "vocab", m->vocab);
    jint(w, "sublayers", ar_cfg_sublayers(m));
    ar_jw_obj_end(w);
}

/* One element of "results": a run's rows, bytes, time and memory; tokens:
 * those of a step. */
static void json_result(ar_jw *w, const run *v, const run *base, double tokens)
{
    const ar_pipe_bench_result *r = &v->r;
    double per_mb = (double)r->A * r->row_bytes;
    ar_jw_obj_begin(w);
    ar_jw_key(w, "variant");
    ar_jw_str(w, v->def->label);
    ar_jw_key(w, "name");
    ar_jw_str(w, v->def->name);
    ar_jw_key(w, "kind");
    ar_jw_str(w, ar_res_kind_name(v->cfg.model.residual.kind));
    ar_jw_key(w, "block_size");
    if (r->baseline)
        ar_jw_null(w);
    else
        ar_jw_int(w, r->S);
    jint(w, "num_blocks", r->baseline ? 0 : (r->L + r->S - 1) / r->S);
    jnum(w, "blocks_per_chunk", r->baseline ? NAN : (double)((r->L + r->S - 1) / r->S) / r->C);
    ar_jw_key(w, "cache_blocks");
    ar_jw_bool(w, v->cache);
    /* rows per micro-batch */
    jnum(w, "rows_per_mb", r->fwd_bytes / per_mb);
    jnum(w, "bwd_rows_per_mb", r->bwd_bytes / per_mb);
    jint(w, "predicted_rows_per_mb", r->rows_per_mb);
    jnum(w, "eq7_rows_per_mb", r->eq7);
    jnum(w, "eq8_rows_per_mb", r->eq8);
    ar_jw_key(w, "formula");
    if (r->baseline)
        ar_jw_null(w);
    else
        ar_jw_str(w, v->cache ? "eq8" : "eq7");
    /* bytes a step, over all ranks */
    jnum(w, "fwd_bytes", r->fwd_bytes);
    jnum(w, "bwd_bytes", r->bwd_bytes);
    jnum(w, "predicted_bytes", r->pred_bytes);
    jnum(w, "formula_bytes", formula(v) * per_mb);
    /* bytes a token */
    jnum(w, "fwd_bytes_per_token", r->fwd_bytes / tokens);
    jnum(w, "bwd_bytes_per_token", r->bwd_bytes / tokens);
    jnum(w, "predicted_bytes_per_token", r->pred_bytes / tokens);
    jnum(w, "formula_bytes_per_token", formula(v) * per_mb / tokens);
    ar_jw_key(w, "match");
    ar_jw_bool(w, matches(v));
    /* time */
    jnum(w, "step_ms", r->step_ms);
    jnum(w, "step_ms_min", r->step_ms_min);
    jnum(w, "step_ms_max", r->step_ms_max);
    jnum(w, "overhead_percent", overhead(v, base));
    jnum(w, "bubble", r->bubble);
    jnum(w, "simulated_bubble", r->sim_bubble);
    jnum(w, "loss", r->loss);
    /* memory */
    ar_jw_key(w, "rank_peak_rss_mib");
    ar_jw_arr_begin(w);
    for (int k = 0; k < r->W; k++)
        ar_jw_num(w, r->rank_peak_mib[k] >= 0 ? r->rank_peak_mib[k] : NAN);
    ar_jw_arr_end(w);
    jnum(w, "max_peak_rss_mib", max_peak(v) >= 0 ? max_peak(v) : NAN);
    ar_jw_obj_end(w);
}

/* The document: the config, the pipeline's shape, the machine and the
 * options, then "results", one object a run. */
static void print_json(const char *config, const ar_config *cfg, const ar_pipe_bench_opts *o, const run *runs,
                       int n, const run *base)
{
    const ar_pipe_bench_result *r0 = &runs[0].r;
    const char *ct = getenv("OPENBLAS_CORETYPE");
    double tokens = (double)r0->A * r0->B * r0->T;
    ar_jw w;
    ar_jw_init(&w);
    ar_jw_obj_begin(&w);
    ar_jw_key(&w, "mode");
    ar_jw_str(&w, "pipeline");
    json_config(&w, config, cfg);
    jint(&w, "ranks", r0->W);
    jint(&w, "pipeline", r0->P);
    jint(&w, "virtual", r0->V);
    jint(&w, "chunks", r0->C);
    jint(&w, "data_parallel", r0->D);
    ar_jw_key(&w, "schedule");
    ar_jw_str(&w, ar_pipe_sched_name(cfg->parallel.schedule));
    jint(&w, "micro_batches", r0->M);
    jint(&w, "micro_batches_per_step", r0->A);
    jint(&w, "tokens_per_step", (long long)tokens);
    jint(&w, "row_bytes", (long long)r0->row_bytes);
    ar_machine mach;
    ar_machine_describe(&mach);
    ar_machine_json(&w, &mach);
    jint(&w, "threads", r0->threads);
    ar_jw_key(&w, "openblas_coretype");
    if (ct)
        ar_jw_str(&w, ct);
    else
        ar_jw_null(&w);
    jint(&w, "steps", o->steps);
    jint(&w, "warmup", o->warmup);
    int reset = 1;
    for (int i = 0; i < n; i++)
        reset &= runs[i].r.peak_reset;
    ar_jw_key(&w, "peak_rss");
    ar_jw_str(&w, reset ? "per_variant" : "cumulative");
    ar_jw_key(&w, "results");
    ar_jw_arr_begin(&w);
    for (int i = 0; i < n; i++)
        json_result(&w, &runs[i], base, tokens);
    ar_jw_arr_end(&w);
    ar_jw_obj_end(&w);
    printf("%s\n", w.s);
    ar_jw_free(&w);
}

static void fmt_num(char *buf, size_t n, const char *fmt, double x)
{
    if (isfinite(x))
        snprintf(buf, n, fmt, x);
    else
        snprintf(buf, n, "-");
}

static void print_table(const char *config, const ar_config *cfg, const ar_pipe_bench_opts *o, const run *runs,
                        int n, const run *base)
{
    const ar_model_cfg *m = &cfg->model;
    const ar_pipe_bench_result *r0 = &runs[0].r;
    const char *ct = getenv("OPENBLAS_CORETYPE");
    double tokens = (double)r0->A * r0->B * r0->T;
    int reset = 1;
    for (int i = 0; i < n; i++)
        reset &= runs[i].r.peak_reset;
    printf("pipeline P = %d, V = %d: %d chunks on %d rank%s (%d stage%s x data-parallel %d), %s%s schedule, "
           "%d micro-batches per pipeline, %d a step\n",
           r0->P, r0->V, r0->C, r0->W, r0->W == 1 ? "" : "s", r0->P, r0->P == 1 ? "" : "s", r0->D,
           ar_pipe_sched_name(cfg->parallel.schedule),
           cfg->parallel.schedule == AR_PIPE_SCHED_1F1B && r0->V > 1 ? " interleaved" : "", r0->M, r0->A);
    printf("config %s: d_model %d, n_layer %d (L = %d), n_head %d, d_ff %d, T %d, batch %d, vocab %d\n",
           config ? config : "(built-in default, n_layer 8, batch 4)", m->d_model, m->n_layer, ar_cfg_sublayers(m),
           m->n_head, m->d_ff, m->seq_len, cfg->train.batch_size, m->vocab);
    ar_machine mach;
    ar_machine_describe(&mach);
    printf("machine (rank 0): %s, %s, %d thread%s per rank, OPENBLAS_CORETYPE=%s, built for %s\n", mach.cpu,
           mach.blas, r0->threads, r0->threads == 1 ? "" : "s", ct ? ct : "(unset)", mach.build);
    printf("median of %d timed step%s after %d warm-up step%s\n", o->steps, o->steps == 1 ? "" : "s", o->warmup,
           o->warmup == 1 ? "" : "s");
    printf("a row = one block representation of one micro-batch = B T d floats = %.0f bytes; "
           "MB = 10^6 bytes; a step = %.0f tokens\n\n",
           r0->row_bytes, tokens);
    printf("%-10s %-6s | %7s %5s %11s | %9s %9s %9s %9s | %7s %7s | %9s %8s | %6s %6s | %8s\n", "", "", "rows/mb",
           "pred", "eq.7/8", "fwd MB", "bwd MB", "pred MB", "eq MB", "fwd B", "bwd B", "step", "overhead", "bubble",
           "bubble", "peak MiB");
    printf("%-10s %-6s | %7s %5s %11s | %9s %9s %9s %9s | %7s %7s | %9s %8s | %6s %6s | %8s\n", "variant", "cache",
           "meas", "", "", "a step", "a step", "a step", "a step", "/token", "/token", "ms", "", "meas", "sched",
           "max rank");
    for (int i = 0; i < n; i++) {
        const run *v = &runs[i];
        const ar_pipe_bench_result *r = &v->r;
        double per_mb = (double)r->A * r->row_bytes, f = formula(v);
        char rows[24], eq[24], fwd[24], bwd[24], pred[24], eqb[24], ovh[24], bub[24], sim[24], peak[24];
        snprintf(rows, sizeof rows, r->fwd_bytes / per_mb == floor(r->fwd_bytes / per_mb) ? "%.0f" : "%.3f",
                 r->fwd_bytes / per_mb);
        if (isfinite(f))
            snprintf(eq, sizeof eq, "%s %.2f", v->cache ? "eq8" : "eq7", f);
        else
            snprintf(eq, sizeof eq, "-");
        fmt_num(fwd, sizeof fwd, "%.3f", r->fwd_bytes / MB);
        fmt_num(bwd, sizeof bwd, "%.3f", r->bwd_bytes / MB);
        fmt_num(pred, sizeof pred, "%.3f", r->pred_bytes / MB);
        fmt_num(eqb, sizeof eqb, "%.3f", f * per_mb / MB);
        fmt_num(ovh, sizeof ovh, "%+.1f%%", overhead(v, base));
        fmt_num(bub, sizeof bub, "%.1f%%", 100 * r->bubble);
        fmt_num(sim, sizeof sim, "%.1f%%", 100 * r->sim_bubble);
        fmt_num(peak, sizeof peak, "%.1f", max_peak(v) >= 0 ? max_peak(v) : NAN);
        printf("%-10s %-6s | %7s %5ld %11s | %9s %9s %9s %9s | %7.0f %7.0f | %9.1f %8s | %6s %6s | %8s%s\n",
               v->def->label, cache_name(v), rows, r->rows_per_mb, eq, fwd, bwd, pred, eqb, r->fwd_bytes / tokens,
               r->bwd_bytes / tokens, r->step_ms, ovh, bub, sim, peak, matches(v) ? "" : "  <- differs");
    }
    printf("\npeak resident memory per rank, MiB (VmHWM, %s)\n",
           reset ? "reset before each variant" : "cumulative: /proc/self/clear_refs could not reset it");
    printf("%-10s %-6s", "variant", "cache");
    for (int k = 0; k < r0->W; k++)
        printf("  rank %-3d", k);
    printf("\n");
    for (int i = 0; i < n; i++) {
        printf("%-10s %-6s", runs[i].def->label, cache_name(&runs[i]));
        for (int k = 0; k < r0->W; k++)
            printf("  %8.1f", runs[i].r.rank_peak_mib[k]);
        printf("\n");
    }
    printf("\nrows/mb: rows moved per micro-batch over the C-1 transitions, measured (forward bytes / (micro-batches "
           "x row)) and as the plan\n"
           "  predicts (pipe_plan.h); the gradients of the same rows go back;\n"
           "eq.7 (naive) = C(C-1)/2 N_p, eq.8 (cached) = P(P-1)/2 N_p + (V-1) P^2 N_p rows per micro-batch, "
           "N_p = ceil(L/S)/C blocks a chunk:\n"
           "  they leave out the embedding and the partial blocks, and eq.8 counts P chunks of blocks where P-1 "
           "are new, so exact counts differ;\n"
           "MB a step: over every rank, for the step's %d micro-batches; B/token: bytes per token of the step;\n"
           "step ms: the slowest rank's step, median over the timed steps; overhead = 100 (step / baseline step - "
           "1);\n"
           "bubble meas: the ranks' time waiting on receives over their step time; sched: the schedule's own "
           "(forward 1, backward 2 a sublayer,\n"
           "  messages free)\n",
           r0->A);
    for (int i = 0; i < n; i++) {
        const ar_pipe_bench_variant_def *d = runs[i].def;
        if (d->kind == AR_RES_BLOCK && runs[i].r.S != d->block_size && runs[i].cache)
            printf("note: the model has only L = %d sublayers, so '%s' runs with S = %d\n", runs[i].r.L, d->label,
                   runs[i].r.S);
    }
}

/* The config every variant starts from: the built-in default with n_layer
 * 8 and batch 4, CONFIG, --set; the pipeline's keys. */
static int resolve(const cli_opts *so, const char *config, ar_config *cfg, ar_err *e)
{
    ar_config_defaults(cfg);
    cfg->model.n_layer = 8;
    cfg->train.batch_size = 4;
    if (config && ar_config_load(cfg, config, e) != 0)
        return -1;
    return cli_opts_apply(so, cfg, e);
}

/* The command line, as parsed. */
typedef struct {
    const char *config, *variants;
    int json, P, V, M; /* --pipeline, --virtual, --micro-batches (0: the config's) */
    ar_pipe_bench_opts o;
} pipe_args;

/* The command's own options and CONFIG into a, the variants to run into
 * sel; 0, or -1 after the usage error. */
static int parse_args(cli_opts *so, const char *usage, pipe_args *a, int *sel)
{
    for (const char *o, *v; (o = cli_opts_next(so, &v));) {
        int bad = 0;
        if (!strcmp(o, "--variants"))
            a->variants = v;
        else if (!strcmp(o, "--pipeline"))
            bad = cli_parse_int(o, v, 2, &a->P) != 0;
        else if (!strcmp(o, "--virtual"))
            bad = cli_parse_int(o, v, 1, &a->V) != 0;
        else if (!strcmp(o, "--micro-batches"))
            bad = cli_parse_int(o, v, 1, &a->M) != 0;
        else if (!strcmp(o, "--steps"))
            bad = cli_parse_int(o, v, 1, &a->o.steps) != 0;
        else if (!strcmp(o, "--warmup"))
            bad = cli_parse_int(o, v, 0, &a->o.warmup) != 0;
        else if (!strcmp(o, "--repeat") || !strcmp(o, "--peak-tflops")) {
            cli_usage_error(usage, "'%s' is an option of the one-process bench; with '--pipeline' the steps are "
                                   "timed as they run ('--steps')",
                            o);
            bad = 1;
        } else if (!strcmp(o, "--json"))
            a->json = 1;
        else
            bad = cli_opts_argument(so, o, &a->config) != 0;
        if (bad)
            return -1;
    }
    if (so->bad)
        return -1;
    for (int i = 0; i < ar_pipe_bench_n_variants; i++)
        sel[i] = 1;
    if (a->variants && parse_variants(usage, a->variants, sel) != 0)
        return -1;
    int M = a->M, P = a->P;
    if (M > 0 && a->V == 1 && M < P) {
        cli_usage_error(usage, "'--micro-batches' %d is too few for %d stages: the 1F1B schedule needs at least one "
                               "per stage (%d or more)",
                        M, P, P);
        return -1;
    }
    if (M > 0 && a->V > 1 && M % P) {
        cli_usage_error(usage, "'--micro-batches' %d does not fit the interleaved schedule of %d stages: it runs "
                               "micro-batches in groups of '--pipeline' (a multiple of %d)",
                        M, P, P);
        return -1;
    }
    return 0;
}

/* The runs into runs[0..*n), every variant's config checked before any
 * runs: baseline once, each AttnRes variant cached, then naive.  This
 * rank's 0 or -1 (e set), for the ranks to agree on. */
static int plan_runs(ar_comm *world, const ar_config *cfg, const int *sel, run *runs, int *n, ar_err *e)
{
    int vr = 0;
    for (int i = 0; i < ar_pipe_bench_n_variants && vr == 0; i++) {
        if (!sel[i])
            continue;
        const ar_pipe_bench_variant_def *d = &ar_pipe_bench_variants[i];
        for (int cache = 1; cache >= (d->kind == AR_RES_BASELINE ? 1 : 0) && vr == 0; cache--) {
            run *v = &runs[(*n)++];
            v->def = d;
            v->cache = cache;
            v->cfg = *cfg;
            ar_pipe_bench_apply_variant(&v->cfg, d, cache);
            if (ar_config_validate(&v->cfg, e) != 0 || ar_pipe_check(world, &v->cfg, e) != 0)
                vr = -1;
        }
    }
    return vr;
}

/* Measures every run in turn; *base: the baseline's run, or NULL.  0, or
 * -1 with e set. */
static int measure_runs(ar_comm *world, run *runs, int n, const ar_pipe_bench_opts *o, const run **base,
                        ar_err *e)
{
    int tty = world->rank == 0 && isatty(STDERR_FILENO);
    *base = NULL;
    for (int i = 0; i < n; i++) {
        run *v = &runs[i];
        char name[64];
        run_name(v, name, sizeof name);
        if (tty) {
            fprintf(stderr, "\r\033[Kmeasuring '%s' (%d/%d)...", name, i + 1, n);
            fflush(stderr);
        }
        int r = ar_pipe_bench_variant(world, &v->cfg, o, &v->r, e);
        if (tty) {
            fprintf(stderr, "\r\033[K");
            fflush(stderr);
        }
        if (r != 0) {
            ar_wrap(e, "variant '%s'", name);
            return -1;
        }
        if (v->def->kind == AR_RES_BASELINE)
            *base = v;
    }
    return 0;
}

/* The counts must be exact: every rank holds the same sums.  The exit
 * status, after an error for each run whose bytes differ from the plan's. */
static int check_counts(const run *runs, int n)
{
    int rc = AR_EXIT_OK;
    for (int i = 0; i < n; i++) {
        const run *v = &runs[i];
        if (matches(v))
            continue;
        char name[64];
        cli_error("variant '%s' moved %.0f bytes of rows forward and %.0f back in a step%s, but the plan "
                  "predicts %.0f each (%ld rows per micro-batch x %d micro-batches x %.0f bytes)",
                  run_name(v, name, sizeof name), v->r.fwd_bytes, v->r.bwd_bytes,
                  v->r.bytes_steady ? "" : " (and not the same every step)", v->r.pred_bytes, v->r.rows_per_mb,
                  v->r.A, v->r.row_bytes);
        rc = AR_EXIT_FAIL;
    }
    return rc;
}

int cmd_bench_pipeline(int argc, char **argv, const char *usage)
{
    pipe_args a = {.V = 1, .o = {.steps = 4, .warmup = 1}};
    int rc = AR_EXIT_USAGE, n = 0;
    run *runs = NULL;
    static const char *const own[] = {"--steps",    "--warmup",  "--repeat",        "--peak-tflops", "--variants",
                                      "--pipeline", "--virtual", "--micro-batches", NULL};
    cli_opts so;
    cli_opts_init(&so, usage, CLI_SET | CLI_THREADS | CLI_DEVICE | CLI_PRECISION, own, argc, argv);
    int sel[MAX_RUNS];
    if (parse_args(&so, usage, &a, sel) != 0)
        goto out;

    rc = AR_EXIT_FAIL;
    ar_err e = {{0}};
    ar_comm *world = ar_comm_world();
    int W = world->size, P = a.P, V = a.V, M = a.M;
    if (W % P) {
        ar_fail(&e, "'--pipeline' %d does not divide the %d rank%s %s: measure a pipeline under mpirun with a "
                "multiple of %d ranks (mpirun -np %d attnres bench --pipeline %d)",
                P, W, W == 1 ? "" : "s", ar_comm_launched() ? "mpirun started" : "of this process (not under mpirun)",
                P, P, P);
        goto fail;
    }
    int D = W / P;
    ar_config cfg;
    if (ar_comm_agree(world, resolve(&so, a.config, &cfg, &e), &e) != 0)
        goto fail;
    cfg.parallel.pipeline = P;
    cfg.parallel.virtual_stages = V;
    cfg.parallel.shard_optimizer = 0; /* no optimizer here */
    if (M == 0) /* the config's micro-batches per pipeline, as many as the schedule needs */
        M = ar_pipe_bench_fit_micro(P, V, (cfg.train.grad_accum + D - 1) / D);
    cfg.train.grad_accum = M * D;
    runs = calloc(MAX_RUNS, sizeof *runs);
    if (ar_comm_agree(world, plan_runs(world, &cfg, sel, runs, &n, &e), &e) != 0)
        goto fail;
    const run *base;
    if (measure_runs(world, runs, n, &a.o, &base, &e) != 0)
        goto fail;
    if (world->rank == 0) {
        if (a.json)
            print_json(a.config, &cfg, &a.o, runs, n, base);
        else
            print_table(a.config, &cfg, &a.o, runs, n, base);
        fflush(stdout);
    }
    rc = check_counts(runs, n);
    goto out;
fail:
    cli_error("%s", e.msg);
out:
    for (int i = 0; runs && i < n; i++)
        ar_pipe_bench_result_free(&runs[i].r);
    free(runs);
    cli_opts_free(&so);
    return rc;
}
