/* Depth-attention heatmaps and mixing-matrix figures (depth_figure.h). */
#include "depth_figure.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/blocks.h"
#include "../lib/mixing.h"

void ar_depth_variant_name(const ar_model_cfg *cfg, char *buf, size_t cap)
{
    switch (cfg->residual.kind) {
    case AR_RES_BLOCK: {
        char blocks[256]; /* "S = 4", or "blocks 1,3,2,2" (block_sizes) */
        ar_cfg_blocks_label(cfg, blocks, sizeof blocks);
        snprintf(buf, cap, "block AttnRes (%s)", blocks);
        break;
    }
    case AR_RES_FULL:
        snprintf(buf, cap, "full AttnRes");
        break;
    default:
        snprintf(buf, cap, "%s", ar_res_kind_name(cfg->residual.kind));
    }
}

/* "RUN · step N · VARIANT": the second title line of every panel. */
static void run_line(const ar_depth_run *r, char *buf, size_t cap)
{
    char v[96], st[48] = "";
    ar_depth_variant_name(&r->cfg, v, sizeof v);
    if (r->step >= 0)
        snprintf(st, sizeof st, " \xc2\xb7 step %ld", r->step);
    snprintf(buf, cap, "%s%s \xc2\xb7 %s", r->name, st, v);
}

/* Storage behind one ar_heat_panel. */
typedef struct {
    double *m;
    unsigned char *mk;
    char **rl, **cl;
    int rows, cols;
    char title[1024], xlabel[160], ylabel[160];
} pbuf;

static void pbuf_init(pbuf *b, int rows, int cols)
{
    b->rows = rows;
    b->cols = cols;
    b->m = ar_xmalloc((size_t)rows * cols * sizeof(double));
    for (size_t i = 0; i < (size_t)rows * cols; i++)
        b->m[i] = NAN;
    b->mk = ar_xcalloc((size_t)rows * cols, 1);
    b->rl = ar_xcalloc((size_t)rows, sizeof(char *));
    b->cl = ar_xcalloc((size_t)cols, sizeof(char *));
    for (int r = 0; r < rows; r++)
        b->rl[r] = ar_xcalloc(24, 1);
    for (int c = 0; c < cols; c++)
        b->cl[c] = ar_xcalloc(24, 1);
}

static void pbuf_free(pbuf *b)
{
    for (int r = 0; r < b->rows; r++)
        free(b->rl[r]);
    for (int c = 0; c < b->cols; c++)
        free(b->cl[c]);
    free(b->rl);
    free(b->cl);
    free(b->m);
    free(b->mk);
}

static ar_heat_panel panel_of(const pbuf *b)
{
    return (ar_heat_panel){.title = b->title, .xlabel = b->xlabel, .ylabel = b->ylabel, .m = b->m,
                           .rows = b->rows, .cols = b->cols, .row_labels = (const char *const *)b->rl,
                           .col_labels = (const char *const *)b->cl, .vmin = 0, .vmax = NAN};
}

/* Largest finite value over every panel: one colour range for the figure,
 * from 0, so equal colours mean equal weights in every panel. */
static double common_max(const pbuf *b, int nb)
{
    double hi = -INFINITY;
    for (int k = 0; k < nb; k++)
        for (size_t i = 0; i < (size_t)b[k].rows * b[k].cols; i++)
            if (isfinite(b[k].m[i]))
                hi = fmax(hi, b[k].m[i]);
    return isfinite(hi) && hi > 0 ? hi : 1;
}

/* Comma-separated list of the runs' names (which = 0), paths (1) or
 * steps (2), into buf. */
static void join(const ar_depth_run *runs, int nr, int which, char *buf, size_t cap)
{
    size_t n = 0;
    buf[0] = '\0';
    for (int k = 0; k < nr && n + 1 < cap; k++) {
        const ar_depth_run *r = &runs[k];
        if (which == 2 && r->step < 0)
            continue;
        if (which == 2)
            n += (size_t)snprintf(buf + n, cap - n, "%s%ld", n ? ", " : "", r->step);
        else
            n += (size_t)snprintf(buf + n, cap - n, "%s%s", k ? ", " : "", which && r->path ? r->path : r->name);
    }
}

/* The file's metadata: the caller's, with the runs and steps filled in. */
static ar_fig_meta metadata(const ar_depth_run *runs, int nr, const ar_fig_meta *in, char *run, size_t rcap,
                            char *step, size_t scap)
{
    ar_fig_meta m = in ? *in : (ar_fig_meta){0};
    join(runs, nr, 1, run, rcap);
    join(runs, nr, 2, step, scap);
    if (!m.run)
        m.run = run;
    if (!m.step)
        m.step = step;
    return m;
}

/* ------------------------------------------------------ Figure 8 panels */

/* Rows of a panel: attention (l = 1, 3, ..., L-1, then L+1 = h_out) or
 * MLP (l = 2, 4, ..., L); columns are the sources of h_out, which has the
 * most: block b_n (or, for Full, v_i) is column n. */
static void fill_weights(pbuf *b, const ar_depth_run *r, int mlp)
{
    int L = ar_cfg_sublayers(&r->cfg), nl = L / 2;
    int cols = ar_mixer_columns(&r->cfg),
        full = r->cfg.residual.kind == AR_RES_FULL || r->cfg.residual.kind == AR_RES_SWA;
    pbuf_init(b, mlp ? nl : nl + 1, cols);
    ar_source *src = ar_xcalloc((size_t)L + 2, sizeof *src);
    int any_partial = 0;
    for (int row = 0; row < b->rows; row++) {
        int l = row == nl ? L + 1 : 2 * row + 1 + mlp;
        snprintf(b->rl[row], 24, l == L + 1 ? "out" : "%d", l);
        int n = ar_mixer_sources(&r->cfg, l, src);
        const double *a = ar_depth_attn_row(r->w, l);
        for (int s = 0; s < n && s < r->w->n[l - 1]; s++) {
            size_t i = (size_t)row * cols + src[s].block;
            b->m[i] = a[s];
            b->mk[i] = (unsigned char)src[s].partial;
            any_partial |= src[s].partial;
        }
    }
    for (int c = 0; c < cols; c++)
        snprintf(b->cl[c], 24, c == 0 ? "emb" : full ? "%d" : "B%d", c);
    free(src);
    char line[600];
    run_line(r, line, sizeof line);
    snprintf(b->title, sizeof b->title, "%s\n%s", mlp ? "Pre-MLP sublayers" : "Pre-attention sublayers", line);
    snprintf(b->ylabel, sizeof b->ylabel, "%s", mlp ? "MLP sublayer l" : "attention sublayer l (out = output)");
    snprintf(b->xlabel, sizeof b->xlabel, "%s",
             full ? "source v_i (emb = embedding)" : "source: block b_n (emb = embedding)");
    if (!any_partial) {
        free(b->mk);
        b->mk = NULL;
    }
}

int ar_depth_figure(const char *path, const ar_depth_run *runs, int nr, const ar_fig_meta *meta,
                    ar_heat_geom *geom, ar_err *e)
{
    for (int k = 0; k < nr; k++)
        if (!runs[k].w || !ar_res_has_depth_attn(runs[k].cfg.residual.kind))
            return ar_fail(e, "cannot plot '%s': '%s' is a %s run, without depth attention", path, runs[k].name,
                           ar_res_kind_name(runs[k].cfg.residual.kind));
    pbuf *b = ar_xcalloc((size_t)nr * 2, sizeof *b);
    ar_heat_panel *p = ar_xcalloc((size_t)nr * 2, sizeof *p);
    for (int k = 0; k < 2 * nr; k++)
        fill_weights(&b[k], &runs[k / 2], k % 2);
    double hi = common_max(b, 2 * nr);
    char (*notes)[1200] = ar_xcalloc((size_t)nr * 2, sizeof *notes);
    for (int k = 0; k < 2 * nr; k++) {
        p[k] = panel_of(&b[k]);
        p[k].vmax = hi;
        p[k].cbar_label = "mean weight \xce\xb1";
        p[k].gap_before = k % 2 ? 0 : b[k].rows - 1; /* h_out apart from the sublayers */
        p[k].marked = b[k].mk;
        /* the partial-sum key under each panel that has one; where the
         * weights come from under the MLP panel only */
        const char *what = k % 2 && runs[k / 2].what ? runs[k / 2].what : "";
        snprintf(notes[k], sizeof notes[k], "%s%s%s", b[k].mk ? "dashed outline: partial sum of the current block" : "",
                 *what && b[k].mk ? "\n" : "", what);
        p[k].mark_note = notes[k];
    }
    char run[2048], step[256], names[1024], title[1200];
    ar_fig_meta m = metadata(runs, nr, meta, run, sizeof run, step, sizeof step);
    join(runs, nr, 0, names, sizeof names);
    snprintf(title, sizeof title, "Depth attention weights: %s", names);
    int rc = ar_plot_heatmaps(path, title, p, 2 * nr, 2, &m, geom, e);
    for (int k = 0; k < 2 * nr; k++)
        pbuf_free(&b[k]);
    free(notes);
    free(b);
    free(p);
    return rc;
}

/* -------------------------------------------------- routing statistics */

static void mixer_label(char *buf, int l, int L)
{
    snprintf(buf, 24, l == L + 1 ? "out" : l % 2 ? "%d attn" : "%d mlp", l);
}

/* Panel 0: entropy / ln n and mean max weight per mixer; panel 1: the
 * top-source shares, in the columns of Figure 8 (block b_n, or v_i). */
static void fill_stats(pbuf *b, const ar_depth_run *r, int shares)
{
    int L = ar_cfg_sublayers(&r->cfg), full = r->cfg.residual.kind != AR_RES_BLOCK;
    int cols = shares ? ar_mixer_columns(&r->cfg) : 2;
    pbuf_init(b, L + 1, cols);
    ar_source *src = ar_xcalloc((size_t)L + 2, sizeof *src);
    double *share = ar_xcalloc((size_t)L + 2, sizeof(double));
    int any_partial = 0;
    for (int l = 1; l <= L + 1; l++) {
        mixer_label(b->rl[l - 1], l, L);
        ar_route_stats st;
        int n = r->route->n[l - 1];
        ar_route_stats_of(ar_depth_route_acc(r->route, l), n, &st, share);
        double *row = b->m + (size_t)(l - 1) * cols;
        if (!shares) {
            row[0] = st.entropy_norm;
            row[1] = st.max_weight;
            continue;
        }
        int ns = ar_mixer_sources(&r->cfg, l, src);
        for (int s = 0; s < ns && s < n; s++) {
            row[src[s].block] = share[s];
            b->mk[(size_t)(l - 1) * cols + src[s].block] = (unsigned char)src[s].partial;
            any_partial |= src[s].partial;
        }
    }
    if (shares)
        for (int c = 0; c < cols; c++)
            snprintf(b->cl[c], 24, c == 0 ? "emb" : full ? "%d" : "B%d", c);
    else {
        snprintf(b->cl[0], 24, "H / ln n");
        snprintf(b->cl[1], 24, "max weight");
    }
    free(src);
    free(share);
    char line[600];
    run_line(r, line, sizeof line);
    snprintf(b->title, sizeof b->title, "%s\n%s",
             shares ? "Top source: share of tokens" : "Routing entropy and largest weight", line);
    snprintf(b->ylabel, sizeof b->ylabel, "mixer: input of sublayer l (out = output)");
    snprintf(b->xlabel, sizeof b->xlabel, "%s",
             !shares ? "token means (H / ln n: normalised entropy)"
             : full  ? "top source v_i (emb = embedding)"
                     : "top source: block b_n (emb = embedding)");
    if (!any_partial) {
        free(b->mk);
        b->mk = NULL;
    }
}

int ar_depth_stats_figure(const char *path, const ar_depth_run *runs, int nr, const ar_fig_meta *meta,
                          ar_heat_geom *geom, ar_err *e)
{
    for (int k = 0; k < nr; k++)
        if (!runs[k].route || !runs[k].route->acc || !ar_res_has_depth_attn(runs[k].cfg.residual.kind))
            return ar_fail(e, "cannot plot '%s': '%s' has no routing statistics (a %s run)", path, runs[k].name,
                           ar_res_kind_name(runs[k].cfg.residual.kind));
    pbuf *b = ar_xcalloc((size_t)nr * 2, sizeof *b);
    ar_heat_panel *p = ar_xcalloc((size_t)nr * 2, sizeof *p);
    char (*notes)[1200] = ar_xcalloc((size_t)nr * 2, sizeof *notes);
    for (int k = 0; k < 2 * nr; k++) {
        fill_stats(&b[k], &runs[k / 2], k % 2);
        p[k] = panel_of(&b[k]);
        p[k].vmax = 1;
        p[k].cbar_label = k % 2 ? "share of tokens" : "H / ln n, mean max weight";
        p[k].gap_before = b[k].rows - 1; /* h_out apart from the sublayers */
        p[k].marked = b[k].mk;
        const char *what = k % 2 && runs[k / 2].what ? runs[k / 2].what : "";
        snprintf(notes[k], sizeof notes[k], "%s%s%s",
                 b[k].mk ? "dashed outline: partial sum of the current block" : "", *what && b[k].mk ? "\n" : "",
                 what);
        p[k].mark_note = notes[k];
    }
    char run[2048], step[256], names[1024], title[1200];
    ar_fig_meta m = metadata(runs, nr, meta, run, sizeof run, step, sizeof step);
    join(runs, nr, 0, names, sizeof names);
    snprintf(title, sizeof title, "Depth routing statistics: %s", names);
    int rc = ar_plot_heatmaps(path, title, p, 2 * nr, 2, &m, geom, e);
    for (int k = 0; k < 2 * nr; k++)
        pbuf_free(&b[k]);
    free(notes);
    free(b);
    free(p);
    return rc;
}

/* ------------------------------------------------------- mixing matrix */

static void fill_matrix(pbuf *b, const ar_depth_run *r)
{
    int L = ar_cfg_sublayers(&r->cfg);
    pbuf_init(b, L + 1, L + 1);
    memcpy(b->m, r->M, (size_t)(L + 1) * (L + 1) * sizeof(double));
    for (int l = 1; l <= L + 1; l++)
        snprintf(b->rl[l - 1], 24, l == L + 1 ? "out" : l % 2 ? "%d attn" : "%d mlp", l);
    for (int i = 0; i <= L; i++)
        snprintf(b->cl[i], 24, i == 0 ? "emb" : "%d", i);
    char line[600];
    run_line(r, line, sizeof line);
    snprintf(b->title, sizeof b->title, "Depth mixing matrix M\n%s", line);
    snprintf(b->ylabel, sizeof b->ylabel, "input h_l of sublayer l");
    snprintf(b->xlabel, sizeof b->xlabel, "source v_i (emb = embedding)");
    free(b->mk);
    b->mk = NULL;
}

int ar_depth_matrix_figure(const char *path, const ar_depth_run *runs, int nr, const ar_fig_meta *meta,
                           ar_heat_geom *geom, ar_err *e)
{
    pbuf *b = ar_xcalloc((size_t)nr, sizeof *b);
    ar_heat_panel *p = ar_xcalloc((size_t)nr, sizeof *p);
    for (int k = 0; k < nr; k++)
        fill_matrix(&b[k], &runs[k]);
    double hi = common_max(b, nr);
    for (int k = 0; k < nr; k++) {
        p[k] = panel_of(&b[k]);
        p[k].vmax = hi;
        p[k].cbar_label = "M[l][i]";
        p[k].gap_before = b[k].rows - 1;
        p[k].mark_note = runs[k].what;
    }
    char run[2048], step[256], names[1024], title[1200];
    ar_fig_meta m = metadata(runs, nr, meta, run, sizeof run, step, sizeof step);
    join(runs, nr, 0, names, sizeof names);
    snprintf(title, sizeof title, "Depth mixing matrix: %s", names);
    int rc = ar_plot_heatmaps(path, title, p, nr, nr < 3 ? nr : 3, &m, geom, e);
    for (int k = 0; k < nr; k++)
        pbuf_free(&b[k]);
    free(b);
    free(p);
    return rc;
}
