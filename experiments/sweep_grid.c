/* The grids of an architecture sweep (experiments/sweep_grid.h). */
#include "sweep_grid.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../formats/csv.h"

/* ------------------------------------------------------- expressions */

static int name_of(const char *s, size_t n, char *out, const char *whole, ar_err *e)
{
    while (n && isspace((unsigned char)*s)) {
        s++;
        n--;
    }
    while (n && isspace((unsigned char)s[n - 1]))
        n--;
    if (n == 0 || n >= AR_AXIS_EXPR_MAX)
        goto bad;
    for (size_t i = 0; i < n; i++)
        if (!isalnum((unsigned char)s[i]) && s[i] != '_')
            goto bad;
    /* L_b, the report's number of transformer blocks, is n_layer */
    if (n == 3 && memcmp(s, "L_b", 3) == 0)
        snprintf(out, AR_AXIS_EXPR_MAX, "n_layer");
    else
        snprintf(out, AR_AXIS_EXPR_MAX, "%.*s", (int)n, s);
    return 0;
bad:
    return ar_fail_kind(e, AR_ERR_BAD_VALUE,
                        "unknown axis expression '%s': expected COLUMN or COLUMN/COLUMN of results.csv, such as "
                        "d_model/L_b, n_head/L_b, d_model or n_layer (L_b = n_layer, the transformer blocks)",
                        whole);
}

int ar_axis_expr_parse(const char *s, ar_axis_expr *x, ar_err *e)
{
    memset(x, 0, sizeof *x);
    size_t len = strlen(s);
    if (len >= AR_AXIS_EXPR_MAX)
        return name_of("", 0, x->num, s, e);
    memcpy(x->text, s, len + 1); /* fits: text holds AR_AXIS_EXPR_MAX */
    const char *slash = strchr(s, '/');
    if (!slash)
        return name_of(s, strlen(s), x->num, s, e);
    if (strchr(slash + 1, '/'))
        return name_of("", 0, x->num, s, e);
    if (name_of(s, (size_t)(slash - s), x->num, s, e) != 0)
        return -1;
    return name_of(slash + 1, strlen(slash + 1), x->den, s, e);
}

/* ------------------------------------------------------------ loading */

void ar_sweep_grid_free(ar_sweep_grid *g)
{
    for (int m = 0; m < g->nm; m++)
        free(g->method[m]);
    free(g->method);
    free(g->xs);
    free(g->ys);
    free(g->v);
    free(g->best);
    memset(g, 0, sizeof *g);
}

/* The column of a name the expression uses, or an error naming the file,
 * the option's expression and, for the shape columns, how to get them. */
static int expr_col(const ar_csv *c, const char *name, const char *what, ar_err *e)
{
    int k = ar_csv_require_col(c, name, e);
    if (k >= 0)
        return k;
    int shape = !strcmp(name, "n_layer") || !strcmp(name, "d_model") || !strcmp(name, "n_head");
    char msg[sizeof e->msg];
    snprintf(msg, sizeof msg, "%s", e->msg);
    return ar_fail(e, "%.1500s, named %s%s", msg, what,
                   shape ? "; a results.csv written before the shape columns gets them when the same "
                           "'attnres sweep' runs again (it reuses the finished runs and rewrites the table)"
                         : "");
}

typedef struct {
    int num, den; /* columns; den -1: none */
} expr_cols;

static int expr_value(const ar_csv *c, int row, const expr_cols *k, const ar_axis_expr *x, double *out, ar_err *e)
{
    double a, b = 1;
    if (ar_csv_num(c, row, k->num, &a, e) != 0 || (k->den >= 0 && ar_csv_num(c, row, k->den, &b, e) != 0))
        return -1;
    if (b == 0)
        return ar_fail(e, "%s:%d: axis expression '%s' divides by %s = 0", c->name, c->line[row], x->text, x->den);
    *out = a / b;
    return 0;
}

/* Index of v among the n sorted-so-far distinct values, added if new;
 * values within a relative 1e-9 are the same (ratios computed two ways). */
static int value_index(double **vals, int *n, double v)
{
    for (int i = 0; i < *n; i++)
        if (fabs((*vals)[i] - v) <= 1e-9 * fmax(fabs(v), 1e-300))
            return i;
    *vals = realloc(*vals, (size_t)(*n + 1) * sizeof **vals);
    if (!*vals)
        abort();
    (*vals)[*n] = v;
    return (*n)++;
}

static int cmp_up(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static int find_index(const double *vals, int n, double v)
{
    for (int i = 0; i < n; i++)
        if (fabs(vals[i] - v) <= 1e-9 * fmax(fabs(v), 1e-300))
            return i;
    return -1;
}


/* One data row of one of the tables. */
typedef struct {
    double x, y, v;   /* axis values and the metric (NaN: none) */
    int method;
    const ar_csv *c;  /* its table, for errors and the seed */
    int row, ks;      /* its row there; the table's seed column, -1: none */
    size_t cell;
} grid_row;

/* The rows of table c appended to *rows; the metric's name is fixed by the
 * first table (g->metric). */
static int load_table(ar_sweep_grid *g, const ar_csv *c, int first, const ar_axis_expr *x, const ar_axis_expr *y,
                      const char *metric, grid_row **rows, int *n, int *kf_all, double *flo, double *fhi, ar_err *e)
{
    if (first) {
        const char *mname = metric ? metric : ar_csv_col(c, "final_val_loss") >= 0 ? "final_val_loss" : "val_loss";
        snprintf(g->metric, sizeof g->metric, "%s", mname);
    }
    char what[160];
    expr_cols kx, ky;
    int kv = ar_csv_require_col(c, "variant", e), km = kv < 0 ? -1 : ar_csv_require_col(c, g->metric, e);
    if (kv >= 0 && km < 0) {
        char msg[sizeof e->msg];
        snprintf(msg, sizeof msg, "%s", e->msg);
        ar_fail(e, "%.1500s, named %s", msg,
                metric ? "in --metric" : first ? "as the default metric" : "as the default metric (the first table's; --metric picks another)");
    }
    if (kv < 0 || km < 0)
        return -1;
    snprintf(what, sizeof what, "in --x '%s'", x->text);
    kx.den = ky.den = -1;
    if ((kx.num = expr_col(c, x->num, what, e)) < 0 || (x->den[0] && (kx.den = expr_col(c, x->den, what, e)) < 0))
        return -1;
    snprintf(what, sizeof what, "in --y '%s'", y->text);
    if ((ky.num = expr_col(c, y->num, what, e)) < 0 || (y->den[0] && (ky.den = expr_col(c, y->den, what, e)) < 0))
        return -1;
    if (c->nrows == 0)
        return ar_fail(e, "'%s' has no finished runs (no data rows): nothing to plot", c->name);
    int kf = ar_csv_col(c, "flops"), ks = ar_csv_col(c, "seed");
    *rows = realloc(*rows, (size_t)(*n + c->nrows) * sizeof **rows);
    if (!*rows)
        abort();
    for (int r = 0; r < c->nrows; r++) {
        grid_row *w = &(*rows)[*n];
        *w = (grid_row){.c = c, .row = r, .ks = ks};
        if (expr_value(c, r, &kx, x, &w->x, e) != 0 || expr_value(c, r, &ky, y, &w->y, e) != 0)
            return -1;
        const char *cell = ar_csv_cell(c, r, km);
        while (isspace((unsigned char)*cell))
            cell++;
        if (!*cell || !strncasecmp(cell, "nan", 3))
            w->v = NAN; /* a run without the value: an empty cell */
        else if (ar_csv_num(c, r, km, &w->v, e) != 0)
            return -1;
        const char *name = ar_csv_cell(c, r, kv);
        int m = 0;
        while (m < g->nm && strcmp(g->method[m], name) != 0)
            m++;
        if (m == g->nm) {
            g->method = realloc(g->method, (size_t)(g->nm + 1) * sizeof *g->method);
            if (!g->method)
                abort();
            g->method[g->nm++] = ar_xstrdup(name);
        }
        w->method = m;
        value_index(&g->xs, &g->nx, w->x);
        value_index(&g->ys, &g->ny, w->y);
        double f;
        ar_err fe;
        if (kf >= 0 && ar_csv_num(c, r, kf, &f, &fe) == 0 && f > 0) {
            *flo = fmin(*flo, f);
            *fhi = fmax(*fhi, f);
        } else {
            *kf_all = 0;
        }
        (*n)++;
    }
    return 0;
}

int ar_sweep_table_file(const char *path, char *file, size_t n, ar_err *e)
{
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode))
        snprintf(file, n, "%s%sresults.csv", path, path[0] && path[strlen(path) - 1] == '/' ? "" : "/");
    else
        snprintf(file, n, "%s", path);
    if (access(file, R_OK) == 0)
        return 0;
    if (strcmp(file, path) != 0)
        return ar_fail_kind(e, AR_ERR_NOT_FOUND,
                            "'%s' not found: '%s' is not the output directory of an 'attnres sweep' that has "
                            "finished a run (expected DIR/results.csv)",
                            file, path);
    return ar_fail_kind(e, AR_ERR_NOT_FOUND,
                        "'%s' not found: expected an 'attnres sweep' output directory (holding results.csv) "
                        "or a results table",
                        file);
}

/* Whether rows a and b (one method, one cell) are the same run twice: not
 * told apart by a seed (either table without the column, or equal seeds). */
static int same_run(const grid_row *a, const grid_row *b)
{
    return a->ks < 0 || b->ks < 0 || strcmp(ar_csv_cell(a->c, a->row, a->ks), ar_csv_cell(b->c, b->row, b->ks)) == 0;
}

int ar_sweep_grid_load(ar_sweep_grid *g, const char *const *inputs, int ninputs, const ar_axis_expr *x,
                       const ar_axis_expr *y, const char *metric, ar_err *e)
{
    memset(g, 0, sizeof *g);
    if (ninputs < 1)
        return ar_fail(e, "no results table given (an 'attnres sweep' output directory or its results.csv)");
    ar_csv **cs = ar_xcalloc((size_t)ninputs, sizeof *cs);
    grid_row *rows = NULL;
    int n = 0, rc = -1, kf_all = 1;
    double flo = INFINITY, fhi = 0;
    for (int t = 0; t < ninputs; t++) {
        char file[4096];
        if (ar_sweep_table_file(inputs[t], file, sizeof file, e) != 0 || ar_csv_read(&cs[t], file, e) != 0 ||
            load_table(g, cs[t], t == 0, x, y, metric, &rows, &n, &kf_all, &flo, &fhi, e) != 0)
            goto out;
    }
    /* a `flops:` budget is met to within half a step, so the runs of one
     * budget differ a little: within 2% they count as one compute */
    g->flops = kf_all && fhi <= 1.02 * flo ? 0.5 * (flo + fhi) : NAN;
    qsort(g->xs, (size_t)g->nx, sizeof *g->xs, cmp_up);
    qsort(g->ys, (size_t)g->ny, sizeof *g->ys, cmp_up);
    for (int i = 0; i < g->ny / 2; i++) { /* largest y on top */
        double t = g->ys[i];
        g->ys[i] = g->ys[g->ny - 1 - i];
        g->ys[g->ny - 1 - i] = t;
    }
    size_t cells = (size_t)g->ny * g->nx;
    g->v = ar_xcalloc((size_t)g->nm * cells, sizeof *g->v);
    /* Tables of several seeds (a `seed` column: ablate's results.csv, and
     * a sweep's; or one sweep per seed, given together): the runs of one
     * method in one cell with different seeds are averaged over those with
     * a value; two runs not told apart by a seed are an error. */
    double *sum = ar_xcalloc((size_t)g->nm * cells, sizeof *sum);
    int *cnt = ar_xcalloc((size_t)g->nm * cells, sizeof *cnt), *runs = ar_xcalloc((size_t)g->nm * cells, sizeof *runs);
    int clash = 0;
    for (int r = 0; r < n && !clash; r++) {
        grid_row *w = &rows[r];
        size_t i = (size_t)w->method * cells + (size_t)find_index(g->ys, g->ny, w->y) * g->nx +
                   (size_t)find_index(g->xs, g->nx, w->x);
        w->cell = i;
        for (int q = 0; q < r; q++) {
            const grid_row *o = &rows[q];
            if (o->cell != i || !same_run(o, w))
                continue;
            char second[4200];
            if (o->c == w->c)
                snprintf(second, sizeof second, "line %d", w->c->line[w->row]);
            else
                snprintf(second, sizeof second, "%s:%d", w->c->name, w->c->line[w->row]);
            ar_fail(e, "%s:%d and %s: two runs of '%s'%s in the same cell (%s = %g, %s = %g); plot a table of "
                       "one compute budget, or choose axes that tell them apart",
                    o->c->name, o->c->line[o->row], second, g->method[w->method],
                    o->ks >= 0 && w->ks >= 0 ? " with the same seed"
                    : o->c != w->c           ? " (tables without a `seed` column)"
                                             : "",
                    x->text, w->x, y->text, w->y);
            clash = 1;
            break;
        }
        runs[i]++;
        g->seeds = runs[i] > g->seeds ? runs[i] : g->seeds;
        if (isfinite(w->v))
            sum[i] += w->v, cnt[i]++;
    }
    for (size_t i = 0; i < (size_t)g->nm * cells; i++)
        g->v[i] = cnt[i] ? sum[i] / cnt[i] : NAN;
    free(sum);
    free(cnt);
    free(runs);
    if (clash)
        goto out;
    g->best = ar_xcalloc((size_t)g->nm, sizeof *g->best);
    for (int m = 0; m < g->nm; m++) {
        g->best[m] = -1;
        for (size_t i = 0; i < cells; i++) {
            double v = g->v[(size_t)m * cells + i];
            if (isfinite(v) && (g->best[m] < 0 || v < g->v[(size_t)m * cells + (size_t)g->best[m]]))
                g->best[m] = (int)i;
        }
    }
    rc = 0;
out:
    free(rows);
    for (int t = 0; t < ninputs; t++)
        if (cs[t])
            ar_csv_free(cs[t]);
    free(cs);
    if (rc != 0)
        ar_sweep_grid_free(g);
    return rc;
}
