/* The architecture-sweep figure (experiments/sweep_plot.h). */
#include "sweep_plot.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../viz/plot.h"

/* ------------------------------------------------------------ drawing */

/* "d_model / L_b" for the axis title: the expression as given, spaced. */
static void axis_title(const ar_axis_expr *x, char *buf, size_t n)
{
    const char *slash = strchr(x->text, '/');
    if (!slash) {
        snprintf(buf, n, "%s", x->text);
        return;
    }
    int a = (int)(slash - x->text);
    while (a > 0 && x->text[a - 1] == ' ')
        a--;
    const char *b = slash + 1;
    while (*b == ' ')
        b++;
    snprintf(buf, n, "%.*s / %s", a, x->text, b);
}

int ar_sweep_grid_plot(const ar_sweep_grid *g, const ar_axis_expr *x, const ar_axis_expr *y, const char *out,
                       const ar_fig_meta *meta, ar_err *e)
{
    size_t cells = (size_t)g->ny * g->nx;
    /* one colour scale for every method */
    double lo = INFINITY, hi = -INFINITY;
    for (size_t i = 0; i < (size_t)g->nm * cells; i++)
        if (isfinite(g->v[i])) {
            lo = fmin(lo, g->v[i]);
            hi = fmax(hi, g->v[i]);
        }
    if (!isfinite(lo))
        return ar_fail(e, "cannot plot '%s': no run has a value of '%s'", out, g->metric);
    char (*xl)[24] = ar_xcalloc((size_t)g->nx, sizeof *xl), (*yl)[24] = ar_xcalloc((size_t)g->ny, sizeof *yl);
    const char **xlp = ar_xcalloc((size_t)g->nx, sizeof *xlp), **ylp = ar_xcalloc((size_t)g->ny, sizeof *ylp);
    for (int i = 0; i < g->nx; i++) {
        snprintf(xl[i], sizeof xl[i], "%.3g", g->xs[i]);
        xlp[i] = xl[i];
    }
    for (int i = 0; i < g->ny; i++) {
        snprintf(yl[i], sizeof yl[i], "%.3g", g->ys[i]);
        ylp[i] = yl[i];
    }
    unsigned char *star = ar_xcalloc((size_t)g->nm * cells, 1);
    ar_heat_panel *p = ar_xcalloc((size_t)g->nm, sizeof *p);
    char (*titles)[160] = ar_xcalloc((size_t)g->nm, sizeof *titles);
    char (*notes)[400] = ar_xcalloc((size_t)g->nm, sizeof *notes);
    char xt[AR_AXIS_EXPR_MAX + 8], yt[AR_AXIS_EXPR_MAX + 8];
    axis_title(x, xt, sizeof xt);
    axis_title(y, yt, sizeof yt);
    for (int m = 0; m < g->nm; m++) {
        int b = g->best[m];
        if (b >= 0) {
            star[(size_t)m * cells + (size_t)b] = 1;
            int u = snprintf(notes[m], sizeof notes[m], "star: lowest %s, %.4f\nat %s = %s, %s = %s", g->metric,
                             g->v[(size_t)m * cells + (size_t)b], xt, xl[b % g->nx], yt, yl[b / g->nx]);
            if (isfinite(g->flops) && u > 0 && (size_t)u < sizeof notes[m])
                snprintf(notes[m] + u, sizeof notes[m] - (size_t)u, "\nevery run: %.3g training FLOPs (within 2%%)", g->flops);
        } else {
            snprintf(notes[m], sizeof notes[m], "no run with a value");
        }
        snprintf(titles[m], sizeof titles[m], "%s", g->method[m]);
        p[m] = (ar_heat_panel){.title = titles[m], .xlabel = xt, .ylabel = yt, .m = g->v + (size_t)m * cells,
                               .rows = g->ny, .cols = g->nx, .row_labels = ylp, .col_labels = xlp, .vmin = lo,
                               .vmax = hi, .starred = star + (size_t)m * cells, .mark_note = notes[m],
                               .cbar_label = g->metric, .decimals = 3};
    }
    char title[256], seeds[64] = "";
    if (g->seeds > 1)
        snprintf(seeds, sizeof seeds, ", mean over seeds (up to %d a cell)", g->seeds);
    if (isfinite(g->flops))
        snprintf(title, sizeof title, "Architecture sweep at fixed compute (%.3g FLOPs): %s%s", g->flops, g->metric,
                 seeds);
    else
        snprintf(title, sizeof title, "Architecture sweep: %s%s", g->metric, seeds);
    /* a method none of whose runs has a value has no panel (there is
     * nothing to draw in it) */
    int np = 0;
    for (int m = 0; m < g->nm; m++)
        if (g->best[m] >= 0)
            p[np++] = p[m];
    int rc = ar_plot_heatmaps(out, title, p, np, np, meta, NULL, e);
    free(xl);
    free(yl);
    free(xlp);
    free(ylp);
    free(star);
    free(p);
    free(titles);
    free(notes);
    return rc;
}
