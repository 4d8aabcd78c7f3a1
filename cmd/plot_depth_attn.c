/* attnres plot-depth-attn (also plot-attn): what depth attention learned.
 * Loads each run, averages its depth-attention weights over the evaluation
 * windows (run/depth_stats.h), and draws them (viz/depth_figure.h): the
 * report's Figure 8, or with --matrix the depth mixing matrix M of any
 * residual kind (lib/mixing.h). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../formats/run_record.h"
#include "../formats/token_set.h"
#include "../lib/mixing.h"
#include "../run/checkpoint.h"
#include "../run/data.h"
#include "../run/depth_csv.h"
#include "../run/depth_stats.h"
#include "../viz/depth_figure.h"
#include "cmds.h"
#include "options.h"

static const char *usage =
    "attnres plot-depth-attn RUN... [--data FILE] [--max-windows N] [--matrix | --stats] [--out FILE] "
    "[--format png|svg|pdf] [--csv FILE] [--threads N]";

typedef struct {
    const char *data, *out, *csv;
    long max_windows;
    int matrix, stats;
    ar_fig_format format;
} opts;

/* One run: its model, weights, matrix and labels. */
typedef struct {
    const char *arg;
    char name[256], what[AR_PATH_MAX + 160];
    ar_config cfg;
    long step;
    ar_depth_attn w;
    int has_w;
    ar_depth_route route; /* --stats */
    double *M;
} run;

/* The tokens to average over: --data, or the run's own validation split
 * (its config's data.val, or the val_fraction tail of data.train). */
static int measure(run *r, ar_model *m, const opts *o, ar_err *e)
{
    ar_token_set *set = NULL;
    ar_token_span *parts = NULL;
    ar_dataset ds = {0};
    ar_eval_data ed;
    char src[AR_PATH_MAX + 64];
    if (o->data) {
        if (ar_eval_data_open(o->data, &r->cfg.model, &set, &parts, &ed, e) != 0)
            return -1;
        snprintf(src, sizeof src, "'%s'", o->data);
    } else {
        if (ar_dataset_open(&ds, &r->cfg.data, &r->cfg.model, e) != 0)
            return ar_wrap(e, "the validation data of '%s' (from its config; give --data FILE)", r->arg);
        ed = ds.eval;
        if (r->cfg.data.val[0])
            snprintf(src, sizeof src, "'%s'", r->cfg.data.val);
        else
            snprintf(src, sizeof src, "the validation tail of '%s'", r->cfg.data.train);
    }
    ar_eval_result res;
    int rc = ar_depth_measure(m, &ed, o->max_windows, &r->w, o->stats ? &r->route : NULL, &res, e);
    if (rc == 0) {
        r->has_w = 1;
        snprintf(r->what, sizeof r->what, "weights: mean over %ld windows (%ld tokens)\nof %s", res.windows,
                 res.tokens, src);
    } else {
        ar_wrap(e, "'%s'", o->data ? o->data : r->arg);
    }
    ar_eval_data_close(set, parts);
    ar_dataset_close(&ds);
    return rc;
}

static int load_run(run *r, const opts *o, ar_err *e)
{
    ar_run_label(r->arg, r->name, sizeof r->name);
    if (ar_ckpt_read_config(r->arg, &r->cfg, &r->step, e) != 0)
        return -1;
    int attn = ar_res_has_depth_attn(r->cfg.model.residual.kind);
    if (!attn && !o->matrix)
        return ar_fail(e, "'%s' is a %s run: it has no depth attention to draw (--matrix draws its depth mixing "
                          "matrix)", r->arg, ar_res_kind_name(r->cfg.model.residual.kind));
    ar_model *m = NULL;
    const ar_backend *be = ar_backend_cpu();
    if (ar_ckpt_load_model(r->arg, be, 8, &r->cfg, &m, &r->step, e) != 0)
        return -1;
    int rc = attn ? measure(r, m, o, e) : 0;
    if (rc == 0 && o->matrix) {
        int L = ar_cfg_sublayers(&r->cfg.model);
        r->M = ar_xmalloc((size_t)(L + 1) * (L + 1) * sizeof(double));
        rc = ar_mixing_matrix(&r->cfg.model, m, r->has_w ? &r->w : NULL, r->M, e);
        if (rc != 0)
            ar_wrap(e, "'%s'", r->arg);
    }
    ar_model_free(m);
    return rc;
}

/* The routing statistics as a table on stdout (a line per mixer). */
static void print_stats(const ar_depth_run *d, int nr)
{
    const ar_depth_route *a = d->route;
    if (nr > 1)
        printf("%s:\n", d->name);
    printf("mixer    sources  entropy  H/ln n  exp(H)  mean max  top source (share)\n");
    double *share = ar_xcalloc((size_t)a->L + 2, sizeof(double));
    for (int l = 1; l <= a->L + 1; l++) {
        ar_route_stats st;
        ar_route_stats_of(ar_depth_route_acc(a, l), a->n[l - 1], &st, share);
        int top = 0;
        for (int i = 1; i < st.n; i++)
            if (share[i] > share[top])
                top = i;
        char name[24], hn[16];
        snprintf(name, sizeof name, l == a->L + 1 ? "out" : l % 2 ? "%d attn" : "%d mlp", l);
        if (isfinite(st.entropy_norm))
            snprintf(hn, sizeof hn, "%.3f", st.entropy_norm);
        else
            snprintf(hn, sizeof hn, "-");
        printf("%-8s %7d  %7.3f  %6s  %6.2f  %8.3f  %d (%.2f)\n", name, st.n, st.entropy, hn, st.eff_sources,
               st.max_weight, top, share[top]);
    }
    free(share);
}

/* Several runs with one name are told apart by the argument as given. */
static void unique_names(run *r, int nr)
{
    for (int i = 0; i < nr; i++)
        for (int j = 0; j < nr; j++)
            if (i != j && strcmp(r[i].name, r[j].name) == 0)
                snprintf(r[i].name, sizeof r[i].name, "%s", r[i].arg);
}

static int draw(run *r, int nr, const opts *o, ar_err *e)
{
    ar_depth_run *d = ar_xcalloc((size_t)nr, sizeof *d);
    for (int k = 0; k < nr; k++)
        d[k] = (ar_depth_run){.name = r[k].name, .path = r[k].arg, .step = r[k].step, .cfg = r[k].cfg.model,
                              .w = r[k].has_w ? &r[k].w : NULL, .M = r[k].M,
                              .what = r[k].has_w ? r[k].what : NULL, .route = &r[k].route};
    char out[AR_PATH_MAX + 64];
    if (o->out)
        snprintf(out, sizeof out, "%s", o->out);
    else
        cli_figure_path(r[0].arg, o->matrix ? "depth_matrix" : o->stats ? "depth_stats" : "depth_attn", o->format,
                        out, sizeof out);
    ar_fig_meta meta = {.format = o->format};
    int rc = o->matrix  ? ar_depth_matrix_figure(out, d, nr, &meta, NULL, e)
             : o->stats ? ar_depth_stats_figure(out, d, nr, &meta, NULL, e)
                        : ar_depth_figure(out, d, nr, &meta, NULL, e);
    if (rc == 0 && o->stats)
        for (int k = 0; k < nr; k++)
            print_stats(&d[k], nr);
    if (rc == 0)
        printf("wrote '%s'\n", out);
    if (rc == 0 && o->csv) {
        rc = o->matrix  ? ar_depth_matrix_csv(o->csv, d, nr, e)
             : o->stats ? ar_depth_stats_csv(o->csv, d, nr, e)
                        : ar_depth_csv(o->csv, d, nr, e);
        if (rc == 0)
            printf("wrote '%s'\n", o->csv);
    }
    free(d);
    return rc;
}

static int parse(cli_opts *so, opts *o, const char **runs, int *nr)
{
    for (const char *a, *v; (a = cli_opts_next(so, &v));) {
        if (!strcmp(a, "--data"))
            o->data = v;
        else if (!strcmp(a, "--csv"))
            o->csv = v;
        else if (!strcmp(a, "--format")) {
            if (cli_parse_format(usage, v, &o->format) != 0)
                return AR_EXIT_USAGE;
        } else if (!strcmp(a, "--max-windows")) {
            if (cli_parse_long(a, v, 1, &o->max_windows) != 0)
                return AR_EXIT_USAGE;
        } else if (!strcmp(a, "--matrix"))
            o->matrix = 1;
        else if (!strcmp(a, "--stats"))
            o->stats = 1;
        else if (a[0] == '-' && a[1])
            return cli_usage_error(usage, "unknown option '%s'", a);
        else
            runs[(*nr)++] = a;
    }
    if (so->bad)
        return AR_EXIT_USAGE;
    o->out = so->out;
    if (o->matrix && o->stats)
        return cli_usage_error(usage, "'--stats' and '--matrix' draw different figures: give one of them");
    if (*nr == 0)
        return cli_usage_error(usage, "missing the run (a run directory or a .safetensors file)");
    if (*nr > 1 && !o->out)
        return cli_usage_error(usage, "several runs need '--out FILE' for their common figure");
    if (o->format == AR_FIG_AUTO && o->out)
        o->format = ar_fig_format_of(o->out, AR_FIG_AUTO);
    return 0;
}

int cmd_plot_depth_attn(int argc, char **argv)
{
    opts o = {0};
    cli_opts so;
    static const char *const own[] = {"--data", "--max-windows", "--csv", "--format", NULL};
    cli_opts_init(&so, usage, CLI_OUT | CLI_THREADS, own, argc, argv);
    const char **args = ar_xcalloc((size_t)argc + 1, sizeof *args);
    run *r = NULL;
    int nr = 0, st = parse(&so, &o, args, &nr);
    if (st != 0)
        goto done;
    ar_backend_cpu()->set_threads(so.threads >= 0 ? so.threads : 0);
    r = ar_xcalloc((size_t)nr, sizeof *r);
    ar_err e = {{0}};
    int rc = 0;
    for (int k = 0; k < nr && rc == 0; k++) {
        r[k].arg = args[k];
        rc = load_run(&r[k], &o, &e);
    }
    if (rc == 0) {
        unique_names(r, nr);
        rc = draw(r, nr, &o, &e);
    }
    if (rc != 0)
        cli_error("%s", e.msg);
    st = rc == 0 ? AR_EXIT_OK : AR_EXIT_FAIL;
    for (int k = 0; k < nr; k++) {
        if (r[k].has_w)
            ar_depth_attn_free(&r[k].w);
        ar_depth_route_free(&r[k].route);
        free(r[k].M);
    }
done:
    free(r);
    free(args);
    cli_opts_free(&so);
    return st;
}
