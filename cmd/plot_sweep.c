/* attnres plot-sweep: the architecture-sweep figure (experiments/sweep_plot.h),
 * one heatmap per method of a sweep's results.csv over two axis
 * expressions of the runs' shape. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/error.h"
#include "../experiments/sweep_plot.h"
#include "cmds.h"
#include "options.h"

static const char *usage = "attnres plot-sweep DIR... --x EXPR --y EXPR [--metric COLUMN] [--out FILE] "
                           "[--format png|svg|pdf]";

int cmd_plot_sweep(int argc, char **argv)
{
    const char *xs = NULL, *ys = NULL, *metric = NULL, *fmt = NULL;
    const char **dirs = ar_xcalloc((size_t)argc, sizeof *dirs); /* the tables, read as one */
    int ndirs = 0;
    ar_fig_format format = AR_FIG_AUTO;
    static const char *const own[] = {"--x", "--y", "--metric", "--format", NULL};
    cli_opts so;
    int rc = AR_EXIT_USAGE;
    cli_opts_init(&so, usage, CLI_OUT, own, argc, argv);
    for (const char *a, *v; (a = cli_opts_next(&so, &v));) {
        if (!strcmp(a, "--x"))
            xs = v;
        else if (!strcmp(a, "--y"))
            ys = v;
        else if (!strcmp(a, "--metric"))
            metric = v;
        else if (!strcmp(a, "--format"))
            fmt = v;
        else if (a[0] == '-' && a[1]) {
            cli_usage_error(usage, "unknown option '%s'", a);
            goto done;
        } else
            dirs[ndirs++] = a;
    }
    if (so.bad)
        goto done;
    const char *dir = dirs[0]; /* the figure's default place and its metadata */
    if (!ndirs) {
        cli_usage_error(usage, "missing DIR (an 'attnres sweep' output directory, or its results.csv)");
        goto done;
    }
    if (!xs || !ys) {
        cli_usage_error(usage, "'%s' is required (an axis expression such as d_model/L_b or n_head/L_b)",
                        !xs ? "--x" : "--y");
        goto done;
    }
    if (fmt && cli_parse_format(usage, fmt, &format) != 0)
        goto done;
    ar_err e = {{0}};
    ar_axis_expr x, y;
    if (ar_axis_expr_parse(xs, &x, &e) != 0 || ar_axis_expr_parse(ys, &y, &e) != 0) {
        cli_usage_error(usage, "'%s': %s", ar_axis_expr_parse(xs, &x, NULL) != 0 ? "--x" : "--y", e.msg);
        goto done;
    }
    rc = AR_EXIT_FAIL;
    if (format == AR_FIG_AUTO && so.out)
        format = ar_fig_format_of(so.out, AR_FIG_AUTO);
    char out[AR_PATH_MAX + 64];
    if (so.out)
        snprintf(out, sizeof out, "%s", so.out);
    else
        cli_figure_path(dir, "arch_sweep", format, out, sizeof out);
    ar_sweep_grid g;
    if (ar_sweep_grid_load(&g, dirs, ndirs, &x, &y, metric, &e) != 0) {
        cli_error("%s", e.msg);
        goto done;
    }
    ar_fig_meta meta = {.run = dir, .format = format};
    if (ar_sweep_grid_plot(&g, &x, &y, out, &meta, &e) != 0) {
        cli_error("%s", e.msg);
    } else {
        size_t cells = (size_t)g.ny * g.nx;
        for (int m = 0; m < g.nm; m++) {
            int b = g.best[m];
            if (b >= 0)
                printf("%-20s optimum %s %.4f at %s = %.4g, %s = %.4g\n", g.method[m], g.metric,
                       g.v[(size_t)m * cells + (size_t)b], x.text, g.xs[b % g.nx], y.text, g.ys[b / g.nx]);
            else
                printf("%-20s no run with a value of %s\n", g.method[m], g.metric);
        }
        if (g.seeds > 1)
            printf("cells are means over seeds (up to %d runs a cell)\n", g.seeds);
        printf("wrote '%s' (%d methods, %d x %d cells)\n", out, g.nm, g.nx, g.ny);
        rc = AR_EXIT_OK;
    }
    ar_sweep_grid_free(&g);
done:
    free(dirs);
    cli_opts_free(&so);
    return rc;
}
