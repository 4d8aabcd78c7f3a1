/* The figures every training run leaves in its directory, drawn from
 * metrics.jsonl alone (so they can be redrawn for any run, even a crashed
 * one):
 *   loss.png        training and validation loss against step
 *   depth_attn.png  (AttnRes kinds) token-averaged depth-attention weights
 *                   of the last evaluation: one row per mixer (sublayer
 *                   inputs 1..L, then the output), one column per source */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../formats/metrics.h"
#include "../lib/config.h"
#include "../lib/train.h"
#include "plot.h"

static double num_of(const ar_json *row, const char *key)
{
    const ar_json *v = ar_json_get(row, key);
    return v && v->type == AR_JSON_NUM ? v->num : NAN;
}

static int plot_losses(const char *dir, ar_json **rows, int n, ar_err *e)
{
    double *x = ar_xcalloc((size_t)n, sizeof(double)), *y = ar_xcalloc((size_t)n, sizeof(double));
    double *vx = ar_xcalloc((size_t)n, sizeof(double)), *vy = ar_xcalloc((size_t)n, sizeof(double));
    int nt = 0, nv = 0;
    for (int i = 0; i < n; i++) {
        double s = num_of(rows[i], "step"), l = num_of(rows[i], "loss"), v = num_of(rows[i], "val_loss");
        if (isfinite(s) && isfinite(l)) {
            x[nt] = s;
            y[nt++] = l;
        }
        if (isfinite(s) && isfinite(v)) {
            vx[nv] = s;
            vy[nv++] = v;
        }
    }
    ar_series s[2] = {{.label = "train", .x = x, .y = y, .n = nt},
                      {.label = "validation", .x = vx, .y = vy, .n = nv, .markers = 1}};
    ar_plot_opts o = {.title = "Loss", .xlabel = "step", .ylabel = "cross-entropy (nats/token)"};
    char path[AR_PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/loss.png", dir);
    int rc = nt + nv > 0 ? ar_plot_lines(path, &o, s, nv > 0 ? 2 : 1, e) : 0;
    free(x);
    free(y);
    free(vx);
    free(vy);
    return rc;
}

static int plot_depth(const char *dir, const ar_json *da, long step, ar_err *e)
{
    int rows = da->n, cols = 0;
    for (int r = 0; r < rows; r++)
        if (da->items[r].type == AR_JSON_ARR && da->items[r].n > cols)
            cols = da->items[r].n;
    if (rows == 0 || cols == 0)
        return 0;
    double *m = ar_xmalloc((size_t)rows * cols * sizeof(double));
    char **rl = ar_xcalloc((size_t)rows, sizeof(char *)), **cl = ar_xcalloc((size_t)cols, sizeof(char *));
    for (int r = 0; r < rows; r++) {
        const ar_json *a = &da->items[r];
        for (int c = 0; c < cols; c++)
            m[(size_t)r * cols + c] = a->type == AR_JSON_ARR && c < a->n && a->items[c].type == AR_JSON_NUM
                                          ? a->items[c].num
                                          : NAN;
        rl[r] = ar_xmalloc(32);
        if (r == rows - 1)
            snprintf(rl[r], 32, "output");
        else
            snprintf(rl[r], 32, "%d %s", r + 1, r % 2 == 0 ? "attn" : "mlp");
    }
    for (int c = 0; c < cols; c++) {
        cl[c] = ar_xmalloc(16);
        snprintf(cl[c], 16, c == 0 ? "emb" : "%d", c);
    }
    char path[AR_PATH_MAX + 32], title[96];
    snprintf(path, sizeof path, "%s/depth_attn.png", dir);
    snprintf(title, sizeof title, "Depth attention weights (step %ld)", step);
    int rc = ar_plot_heatmap(path, title, "source (0 = embedding; then block, or sublayer for full)", "mixer (sublayer input)", m, rows,
                             cols, (const char *const *)rl, (const char *const *)cl, e);
    for (int r = 0; r < rows; r++)
        free(rl[r]);
    for (int c = 0; c < cols; c++)
        free(cl[c]);
    free(rl);
    free(cl);
    free(m);
    return rc;
}

int ar_train_figures(const char *run_dir, ar_err *e)
{
    char path[AR_PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/metrics.jsonl", run_dir);
    ar_json **rows;
    int n;
    if (ar_metrics_read(path, &rows, &n, e) != 0)
        return -1;
    int rc = plot_losses(run_dir, rows, n, e);
    for (int i = n - 1; i >= 0 && rc == 0; i--) {
        const ar_json *da = ar_json_get(rows[i], "depth_attn");
        if (da && da->type == AR_JSON_ARR) {
            rc = plot_depth(run_dir, da, (long)num_of(rows[i], "step"), e);
            break;
        }
    }
    ar_metrics_free(rows, n);
    return rc;
}
