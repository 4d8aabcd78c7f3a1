/* Training records from metrics.jsonl, checked field by field
 * (run_record.h). */
#include "run_record.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "json.h"
#include "metrics.h"

static const char *type_name(ar_json_type t)
{
    static const char *const names[] = {"null", "a boolean", "a number", "a string", "a list", "an object"};
    return names[t];
}

/* A number field: 1 and *out = the value, 0 when absent or null, -1 (with
 * the error) for another type. */
static int num_field(const ar_json *row, const char *key, double *out, const char *path, int line, ar_err *e)
{
    const ar_json *v = ar_json_get(row, key);
    *out = NAN;
    if (!v || v->type == AR_JSON_NULL)
        return 0;
    if (v->type != AR_JSON_NUM)
        return ar_fail(e, "%s:%d: '%s' must be a number, not %s", path, line, key, type_name(v->type));
    *out = v->num;
    return 1;
}

/* A list of numbers (null entries read as NaN) of length *len (set by the
 * first list seen, when *len < 0); NULL when absent, with *bad = -1 on a
 * wrong type or length. */
static const ar_json *num_list(const ar_json *row, const char *key, int *len, const char *path, int line,
                               int *bad, ar_err *e)
{
    const ar_json *v = ar_json_get(row, key);
    if (!v || v->type == AR_JSON_NULL)
        return NULL;
    if (v->type != AR_JSON_ARR) {
        *bad = ar_fail(e, "%s:%d: '%s' must be a list of numbers, not %s", path, line, key, type_name(v->type));
        return NULL;
    }
    for (int i = 0; i < v->n; i++)
        if (v->items[i].type != AR_JSON_NUM && v->items[i].type != AR_JSON_NULL) {
            *bad = ar_fail(e, "%s:%d: '%s' item %d must be a number, not %s", path, line, key, i + 1,
                           type_name(v->items[i].type));
            return NULL;
        }
    if (*len >= 0 && v->n != *len) {
        *bad = ar_fail(e, "%s:%d: '%s' lists %d sublayers, earlier records %d", path, line, key, v->n, *len);
        return NULL;
    }
    *len = v->n;
    return v;
}

static double item(const ar_json *a, int i)
{
    return a->items[i].type == AR_JSON_NUM ? a->items[i].num : NAN;
}

/* depth_attn: a list (one per mixer) of lists of numbers. */
static int check_depth(const ar_json *v, const char *path, int line, ar_err *e)
{
    if (v->type != AR_JSON_ARR)
        return ar_fail(e, "%s:%d: 'depth_attn' must be a list of lists of numbers, not %s", path, line,
                       type_name(v->type));
    for (int l = 0; l < v->n; l++) {
        const ar_json *a = &v->items[l];
        if (a->type != AR_JSON_ARR)
            return ar_fail(e, "%s:%d: 'depth_attn' mixer %d must be a list of numbers, not %s", path, line, l + 1,
                           type_name(a->type));
        for (int i = 0; i < a->n; i++)
            if (a->items[i].type != AR_JSON_NUM && a->items[i].type != AR_JSON_NULL)
                return ar_fail(e, "%s:%d: 'depth_attn' mixer %d item %d must be a number, not %s", path, line,
                               l + 1, i + 1, type_name(a->items[i].type));
    }
    return 0;
}

static void keep_depth(ar_run_record *r, const ar_json *v, long step)
{
    free(r->nsrc);
    free(r->off);
    free(r->da);
    r->nmix = v->n;
    r->nsrc = ar_xcalloc((size_t)v->n + 1, sizeof(int));
    r->off = ar_xcalloc((size_t)v->n + 1, sizeof(int));
    int total = 0;
    for (int l = 0; l < v->n; l++) {
        r->off[l] = total;
        r->nsrc[l] = v->items[l].n;
        total += v->items[l].n;
    }
    r->da = ar_xcalloc((size_t)total + 1, sizeof(double));
    for (int l = 0; l < v->n; l++)
        for (int i = 0; i < r->nsrc[l]; i++)
            r->da[r->off[l] + i] = item(&v->items[l], i);
    r->da_step = step;
}

/* depth_routing: its per-mixer lists, each value in its range (a little
 * slack for rounding); appended to r's series. */
static int take_routing(ar_run_record *r, const ar_json *v, double step, double tokens, const char *path, int line,
                        ar_err *e)
{
    if (v->type != AR_JSON_OBJ)
        return ar_fail(e, "%s:%d: 'depth_routing' must be an object, not %s", path, line, type_name(v->type));
    static const char *const keys[] = {"entropy", "entropy_norm", "eff_sources", "mean_max"};
    static const double lo[] = {0, 0, 1, 0}, hi[] = {INFINITY, 1, INFINITY, 1};
    const ar_json *a[4];
    int nm = -1;
    for (int k = 0; k < 4; k++) {
        a[k] = ar_json_get(v, keys[k]);
        if (!a[k] || a[k]->type != AR_JSON_ARR)
            return ar_fail(e, "%s:%d: 'depth_routing.%s' must be a list of numbers, not %s", path, line, keys[k],
                           a[k] ? type_name(a[k]->type) : "missing");
        if (nm >= 0 && a[k]->n != nm)
            return ar_fail(e, "%s:%d: 'depth_routing.%s' lists %d mixers, 'depth_routing.%s' %d", path, line,
                           keys[k], a[k]->n, keys[0], nm);
        nm = a[k]->n;
        for (int i = 0; i < a[k]->n; i++) {
            const ar_json *x = &a[k]->items[i];
            if (x->type == AR_JSON_NULL)
                continue;
            if (x->type != AR_JSON_NUM)
                return ar_fail(e, "%s:%d: 'depth_routing.%s' item %d must be a number, not %s", path, line,
                               keys[k], i + 1, type_name(x->type));
            if (!(x->num >= lo[k] - 1e-6 && x->num <= hi[k] + 1e-6))
                return ar_fail(e, "%s:%d: 'depth_routing.%s' item %d is %g, outside [%g, %g]", path, line, keys[k],
                               i + 1, x->num, lo[k], hi[k]);
        }
    }
    const ar_json *ts = ar_json_get(v, "top_share");
    if (ts && ts->type != AR_JSON_NULL) {
        if (ts->type != AR_JSON_ARR || ts->n != nm)
            return ar_fail(e, "%s:%d: 'depth_routing.top_share' must be a list of %d lists of numbers", path, line,
                           nm);
        for (int l = 0; l < ts->n; l++) {
            const ar_json *sl = &ts->items[l];
            if (sl->type != AR_JSON_ARR)
                return ar_fail(e, "%s:%d: 'depth_routing.top_share' mixer %d must be a list of numbers, not %s",
                               path, line, l + 1, type_name(sl->type));
            for (int i = 0; i < sl->n; i++)
                if (sl->items[i].type != AR_JSON_NULL &&
                    (sl->items[i].type != AR_JSON_NUM || !(sl->items[i].num >= -1e-6 && sl->items[i].num <= 1 + 1e-6)))
                    return ar_fail(e, "%s:%d: 'depth_routing.top_share' mixer %d item %d must be a number in [0, 1]",
                                   path, line, l + 1, i + 1);
        }
    }
    if (r->nrt > 0 && nm != r->rt_nmix)
        return ar_fail(e, "%s:%d: 'depth_routing' lists %d mixers, earlier records %d", path, line, nm, r->rt_nmix);
    r->rt_nmix = nm;
    int k = r->nrt++;
    size_t rows = (size_t)r->nrt, cols = (size_t)nm + 1;
    double **ser[] = {&r->rt_entropy, &r->rt_hnorm, &r->rt_eff, &r->rt_max};
    for (int j = 0; j < 4; j++) {
        double *nv = realloc(*ser[j], rows * cols * sizeof(double));
        if (!nv)
            ar_xmalloc((size_t)-1);
        *ser[j] = nv;
        for (int i = 0; i < nm; i++)
            nv[(size_t)k * nm + i] = item(a[j], i);
    }
    double **pt[] = {&r->rt_step, &r->rt_tokens};
    for (int j = 0; j < 2; j++) {
        double *nv = realloc(*pt[j], rows * sizeof(double));
        if (!nv)
            ar_xmalloc((size_t)-1);
        *pt[j] = nv;
    }
    r->rt_step[k] = step;
    r->rt_tokens[k] = tokens;
    return 0;
}

/* One record into r; -1 on a malformed field. */
static int take(ar_run_record *r, const ar_json *row, const char *path, int line, int *Lo, int *Lg, ar_err *e)
{
    double step, tokens, loss, vloss;
    if (num_field(row, "step", &step, path, line, e) < 0 || num_field(row, "tokens", &tokens, path, line, e) < 0 ||
        num_field(row, "loss", &loss, path, line, e) < 0 || num_field(row, "val_loss", &vloss, path, line, e) < 0)
        return -1;
    if (isfinite(step) && (long)step > r->last_step)
        r->last_step = (long)step;
    if (isfinite(loss)) {
        r->step[r->n] = step;
        r->tokens[r->n] = tokens;
        r->loss[r->n++] = loss;
    }
    if (isfinite(vloss)) {
        r->vstep[r->nv] = step;
        r->vtokens[r->nv] = tokens;
        r->vloss[r->nv++] = vloss;
    }
    int bad = 0;
    const ar_json *o = num_list(row, "out_rms", Lo, path, line, &bad, e);
    const ar_json *g = bad ? NULL : num_list(row, "grad_rms", Lg, path, line, &bad, e);
    if (bad)
        return -1;
    if (o) {
        free(r->out_rms);
        free(r->grad_rms);
        r->L = o->n;
        r->out_rms = ar_xcalloc((size_t)o->n + 1, sizeof(double));
        r->grad_rms = ar_xcalloc((size_t)o->n + 1, sizeof(double));
        for (int i = 0; i < o->n; i++) {
            r->out_rms[i] = item(o, i);
            r->grad_rms[i] = g && i < g->n ? item(g, i) : NAN;
        }
        r->eval_step = isfinite(step) ? (long)step : -1;
    }
    const ar_json *da = ar_json_get(row, "depth_attn");
    if (da && da->type != AR_JSON_NULL) {
        if (check_depth(da, path, line, e) < 0)
            return -1;
        keep_depth(r, da, isfinite(step) ? (long)step : -1);
    }
    const ar_json *rt = ar_json_get(row, "depth_routing");
    if (rt && rt->type != AR_JSON_NULL && take_routing(r, rt, step, tokens, path, line, e) < 0)
        return -1;
    return 0;
}

int ar_run_record_read(ar_run_record *r, const char *path, ar_err *e)
{
    memset(r, 0, sizeof *r);
    r->last_step = r->eval_step = r->da_step = -1;
    ar_json **rows;
    int *lines, n;
    if (ar_metrics_read_lines(path, &rows, &lines, &n, e) != 0)
        return -1;
    double **cols[] = {&r->step, &r->tokens, &r->loss, &r->vstep, &r->vtokens, &r->vloss};
    for (size_t k = 0; k < sizeof cols / sizeof *cols; k++)
        *cols[k] = ar_xcalloc((size_t)n + 1, sizeof(double));
    int Lo = -1, Lg = -1, rc = 0;
    for (int i = 0; i < n && rc == 0; i++)
        rc = take(r, rows[i], path, lines[i], &Lo, &Lg, e);
    ar_metrics_free(rows, n);
    free(lines);
    if (rc != 0) {
        ar_run_record_free(r);
        return -1;
    }
    return 0;
}

void ar_run_record_free(ar_run_record *r)
{
    double *p[] = {r->step,    r->tokens,  r->loss,       r->vstep,    r->vtokens, r->vloss,  r->out_rms,
                   r->grad_rms, r->da,      r->rt_step,    r->rt_tokens, r->rt_entropy, r->rt_hnorm, r->rt_eff,
                   r->rt_max};
    for (size_t k = 0; k < sizeof p / sizeof *p; k++)
        free(p[k]);
    free(r->nsrc);
    free(r->off);
    memset(r, 0, sizeof *r);
}

/* Last path component of path[0..n), trailing slashes ignored. */
static void last_component(const char *path, size_t n, const char **start, size_t *len)
{
    while (n > 1 && path[n - 1] == '/')
        n--;
    size_t b = n;
    while (b > 0 && path[b - 1] != '/')
        b--;
    *start = path + b;
    *len = n - b;
}

void ar_run_label(const char *path, char *buf, size_t cap)
{
    const char *s;
    size_t n;
    last_component(path, strlen(path), &s, &n);
    struct stat st;
    int is_dir = stat(path, &st) == 0 && S_ISDIR(st.st_mode);
    if (!is_dir && s > path) { /* a file in a directory: the directory names the run */
        const char *d;
        size_t dn;
        last_component(path, (size_t)(s - path), &d, &dn);
        if (dn > 0 && !(dn == 1 && (*d == '.' || *d == '/')) && !(dn == 2 && !strncmp(d, "..", 2))) {
            snprintf(buf, cap, "%.*s", (int)dn, d);
            return;
        }
    }
    if (!is_dir) { /* a file on its own: its name without the extension */
        const char *dot = memchr(s, '.', n);
        if (dot && dot != s)
            n = (size_t)(dot - s);
    }
    char *real = NULL;
    if (is_dir && (n == 0 || (n == 1 && *s == '.') || (n == 2 && !strncmp(s, "..", 2))) &&
        (real = realpath(path, NULL)) != NULL) { /* "." names the directory it is */
        last_component(real, strlen(real), &s, &n);
        snprintf(buf, cap, "%.*s", (int)n, s);
        free(real);
        return;
    }
    if (n == 0 || (n == 1 && *s == '.'))
        snprintf(buf, cap, "%s", path);
    else
        snprintf(buf, cap, "%.*s", (int)n, s);
}
