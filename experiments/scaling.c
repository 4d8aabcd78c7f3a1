#include "scaling.h"

#include <errno.h>
#include <gsl/gsl_cdf.h>
#include <gsl/gsl_errno.h>
#include <gsl/gsl_fit.h>
#include <gsl/gsl_multifit_nlinear.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../formats/csv.h"
#include "../formats/json.h"
#include "sweep_grid.h"

const char *ar_fit_form_name(ar_fit_form f)
{
    return f == AR_FIT_OFFSET ? "offset" : "power";
}

/* ------------------------------------------------------------------ */
/* One curve                                                           */
/* ------------------------------------------------------------------ */

/* Internal parameters q = (a, alpha[, E]) with the model
 * L_i = E + exp(a - alpha * u_i),  u_i = ln(x_i / x0). */
typedef struct {
    const double *u, *y;
    size_t n;
    int offset;
} curve_data;

static int curve_f(const gsl_vector *q, void *vd, gsl_vector *f)
{
    const curve_data *d = vd;
    double a = gsl_vector_get(q, 0), al = gsl_vector_get(q, 1), E = d->offset ? gsl_vector_get(q, 2) : 0;
    for (size_t i = 0; i < d->n; i++)
        gsl_vector_set(f, i, E + exp(a - al * d->u[i]) - d->y[i]);
    return GSL_SUCCESS;
}

static int curve_df(const gsl_vector *q, void *vd, gsl_matrix *J)
{
    const curve_data *d = vd;
    double a = gsl_vector_get(q, 0), al = gsl_vector_get(q, 1);
    for (size_t i = 0; i < d->n; i++) {
        double m = exp(a - al * d->u[i]);
        gsl_matrix_set(J, i, 0, m);
        gsl_matrix_set(J, i, 1, -d->u[i] * m);
        if (d->offset)
            gsl_matrix_set(J, i, 2, 1.0);
    }
    return GSL_SUCCESS;
}

typedef struct {
    double q[3];
    double covq[3][3]; /* (J^T J)^-1 in q, unscaled */
    double rss;
    int iter;
    int ok;
} lm_result;

/* Levenberg-Marquardt from q0; ok = 0 when it ends somewhere non-finite or
 * stops for a reason other than convergence or no further progress. */
static void run_lm(curve_data *d, const double *q0, int np, lm_result *r)
{
    memset(r, 0, sizeof *r);
    gsl_multifit_nlinear_parameters params = gsl_multifit_nlinear_default_parameters();
    gsl_multifit_nlinear_workspace *w =
        gsl_multifit_nlinear_alloc(gsl_multifit_nlinear_trust, &params, d->n, (size_t)np);
    if (!w)
        return;
    gsl_multifit_nlinear_fdf fdf = {.f = curve_f, .df = curve_df, .fvv = NULL, .n = d->n,
                                    .p = (size_t)np, .params = d};
    double start[3];
    memcpy(start, q0, (size_t)np * sizeof *start);
    gsl_vector_view x0 = gsl_vector_view_array(start, (size_t)np);
    int info = 0, st = gsl_multifit_nlinear_init(&x0.vector, &fdf, w);
    if (st == GSL_SUCCESS)
        st = gsl_multifit_nlinear_driver(1000, 1e-14, 1e-14, 1e-14, NULL, NULL, &info, w);
    gsl_vector *x = gsl_multifit_nlinear_position(w), *f = gsl_multifit_nlinear_residual(w);
    gsl_matrix *J = gsl_multifit_nlinear_jac(w);
    /* The driver reports "no progress on the first iteration" (the start is
     * already the optimum to machine precision, as with noise-free data) as
     * GSL_EMAXITER with info = GSL_ENOPROG. */
    int ok = st == GSL_SUCCESS || st == GSL_ENOPROG || (st == GSL_EMAXITER && info == GSL_ENOPROG);
    if (ok) {
        /* Re-evaluate at the final position, so the residuals and the
         * Jacobian belong to it whatever the last step was. */
        curve_f(x, d, f);
        curve_df(x, d, J);
        double rss = 0;
        for (size_t i = 0; i < d->n; i++)
            rss += gsl_vector_get(f, i) * gsl_vector_get(f, i);
        gsl_matrix *cov = gsl_matrix_alloc((size_t)np, (size_t)np);
        if (gsl_multifit_nlinear_covar(J, 0.0, cov) != GSL_SUCCESS)
            ok = 0;
        for (int i = 0; i < np; i++) {
            r->q[i] = gsl_vector_get(x, (size_t)i);
            ok = ok && isfinite(r->q[i]);
            for (int j = 0; j < np; j++)
                r->covq[i][j] = gsl_matrix_get(cov, (size_t)i, (size_t)j);
        }
        gsl_matrix_free(cov);
        r->rss = rss;
        r->iter = (int)gsl_multifit_nlinear_niter(w);
        ok = ok && isfinite(rss);
    }
    r->ok = ok;
    gsl_multifit_nlinear_free(w);
}

/* ln(y - E) = a - alpha * u by ordinary least squares; -1 if some y <= E. */
static int loglin_start(const double *u, const double *y, size_t n, double E, double *q)
{
    double *ly = malloc(n * sizeof *ly);
    if (!ly)
        return -1;
    for (size_t i = 0; i < n; i++) {
        if (!(y[i] > E)) {
            free(ly);
            return -1;
        }
        ly[i] = log(y[i] - E);
    }
    double c0, c1, c00, c01, c11, ss;
    gsl_fit_linear(u, 1, ly, 1, n, &c0, &c1, &c00, &c01, &c11, &ss);
    free(ly);
    if (!isfinite(c0) || !isfinite(c1))
        return -1;
    q[0] = c0;
    q[1] = -c1;
    q[2] = E;
    return 0;
}

int ar_fit_curve(const double *x, const double *y, int n, ar_fit_form form, ar_fit *out, ar_err *e)
{
    memset(out, 0, sizeof *out);
    int np = form == AR_FIT_OFFSET ? 3 : 2;
    if (n < np)
        return ar_fail(e, "%d point%s, fewer than the %d parameters of the %s form", n, n == 1 ? "" : "s", np,
                       ar_fit_form_name(form));
    double lx0 = 0, ymin = INFINITY;
    for (int i = 0; i < n; i++) {
        if (!(x[i] > 0) || !(y[i] > 0) || !isfinite(x[i]) || !isfinite(y[i]))
            return ar_fail(e, "point %d (%g, %g) is not a pair of finite positive numbers", i + 1, x[i], y[i]);
        lx0 += log(x[i]);
        ymin = fmin(ymin, y[i]);
    }
    lx0 /= n;
    double *u = ar_xmalloc((size_t)n * sizeof *u);
    int distinct = 0;
    for (int i = 0; i < n; i++) {
        u[i] = log(x[i]) - lx0;
        distinct += i > 0 && x[i] != x[0];
    }
    if (!distinct) {
        free(u);
        return ar_fail(e, "every point has the same compute %g: a curve needs at least two", x[0]);
    }
    gsl_error_handler_t *old = gsl_set_error_handler_off();
    curve_data d = {.u = u, .y = y, .n = (size_t)n, .offset = form == AR_FIT_OFFSET};
    lm_result best = {.ok = 0}, r;
    double q0[3];
    if (form == AR_FIT_POWER) {
        if (loglin_start(u, y, (size_t)n, 0, q0) == 0)
            run_lm(&d, q0, 2, &best);
    } else {
        /* E from well below to just under the smallest loss. */
        static const double frac[] = {0.0, 0.5, 0.8, 0.9, 0.95, 0.98, 0.995};
        for (size_t k = 0; k < sizeof frac / sizeof *frac; k++) {
            if (loglin_start(u, y, (size_t)n, frac[k] * ymin, q0) != 0)
                continue;
            run_lm(&d, q0, 3, &r);
            if (r.ok && (!best.ok || r.rss < best.rss))
                best = r;
        }
    }
    gsl_set_error_handler(old);
    if (!best.ok) {
        free(u);
        return ar_fail(e, "the %s form did not converge", ar_fit_form_name(form));
    }

    out->form = form;
    out->n = n;
    out->np = np;
    out->dof = n - np;
    out->iterations = best.iter;
    double A = exp(best.q[0] + best.q[1] * lx0);
    out->p[AR_FIT_A] = A;
    out->p[AR_FIT_ALPHA] = best.q[1];
    out->p[AR_FIT_E] = np == 3 ? best.q[2] : 0;
    out->rss = best.rss;
    double s2 = out->dof > 0 ? best.rss / out->dof : NAN;
    /* Jacobian of (A, alpha, E) with respect to (a, alpha, E). */
    double T[3][3] = {{A, A * lx0, 0}, {0, 1, 0}, {0, 0, 1}};
    double cq[3][3] = {{0}};
    for (int i = 0; i < np; i++)
        for (int j = 0; j < np; j++)
            cq[i][j] = best.covq[i][j] * s2;
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 3; j++) {
            double acc = 0;
            for (int k = 0; k < 3; k++)
                for (int l = 0; l < 3; l++)
                    acc += T[i][k] * cq[k][l] * T[j][l];
            out->cov[i][j] = acc;
        }
    out->t95 = out->dof > 0 ? gsl_cdf_tdist_Pinv(0.975, out->dof) : NAN;
    for (int i = 0; i < 3; i++) {
        out->se[i] = i < np ? sqrt(fmax(out->cov[i][i], 0)) : 0;
        if (i < np && out->dof == 0)
            out->se[i] = NAN;
        double h = i < np ? out->t95 * out->se[i] : 0;
        out->ci[i][0] = out->p[i] - h;
        out->ci[i][1] = out->p[i] + h;
    }
    double mean = 0, sst = 0;
    for (int i = 0; i < n; i++)
        mean += y[i] / n;
    for (int i = 0; i < n; i++)
        sst += (y[i] - mean) * (y[i] - mean);
    out->r2 = sst > 0 ? 1 - best.rss / sst : NAN;
    free(u);
    return 0;
}

double ar_fit_eval(const ar_fit *f, double x)
{
    return f->p[AR_FIT_E] + f->p[AR_FIT_A] * pow(x, -f->p[AR_FIT_ALPHA]);
}

void ar_fit_ratio(const ar_fit *b, const ar_fit *v, double at, ar_ratio *out)
{
    memset(out, 0, sizeof *out);
    out->at = at;
    out->loss = ar_fit_eval(v, at);
    double Ab = b->p[AR_FIT_A], ab = b->p[AR_FIT_ALPHA], Eb = b->p[AR_FIT_E];
    double D = out->loss - Eb;
    if (!(D > 0) || !(Ab > 0) || ab == 0) {
        out->c_base = out->ratio = out->se = out->se_log = NAN;
        out->ci[0] = out->ci[1] = NAN;
        return;
    }
    double g = log(Ab) - log(D);
    out->c_base = exp(g / ab);
    out->ratio = exp(g / ab - log(at));
    /* d ln r / d(A, alpha, E) of both fits. */
    double gb[3] = {1 / (ab * Ab), -g / (ab * ab), 1 / (ab * D)};
    double Av = v->p[AR_FIT_A], av = v->p[AR_FIT_ALPHA], cpow = pow(at, -av);
    double dL[3] = {cpow, -Av * cpow * log(at), 1};
    double gv[3];
    for (int i = 0; i < 3; i++)
        gv[i] = -dL[i] / (ab * D);
    double var = 0;
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 3; j++)
            var += gb[i] * b->cov[i][j] * gb[j] + gv[i] * v->cov[i][j] * gv[j];
    out->se_log = sqrt(fmax(var, 0));
    if (b->dof == 0 || v->dof == 0)
        out->se_log = NAN;
    out->se = out->ratio * out->se_log;
    double z = gsl_cdf_ugaussian_Pinv(0.975);
    out->ci[0] = out->ratio * exp(-z * out->se_log);
    out->ci[1] = out->ratio * exp(z * out->se_log);
}

void ar_fit_formula(const ar_fit *f, char *buf, size_t n)
{
    if (f->form == AR_FIT_OFFSET)
        snprintf(buf, n, "L = %.4g + %.4g * C^-%.4g", f->p[AR_FIT_E], f->p[AR_FIT_A], f->p[AR_FIT_ALPHA]);
    else
        snprintf(buf, n, "L = %.4g * C^-%.4g", f->p[AR_FIT_A], f->p[AR_FIT_ALPHA]);
}

/* ------------------------------------------------------------------ */
/* Data sets                                                           */
/* ------------------------------------------------------------------ */

void ar_scaling_free(ar_scaling *s)
{
    for (int k = 0; k < s->ng; k++) {
        ar_scaling_group *g = &s->g[k];
        free(g->name);
        free(g->x);
        free(g->y);
        free(g->file);
        free(g->line);
    }
    free(s->g);
    for (int i = 0; i < s->nfiles; i++)
        free(s->files[i]);
    free(s->files);
    memset(s, 0, sizeof *s);
}

static ar_scaling_group *group_of(ar_scaling *s, const char *name)
{
    for (int k = 0; k < s->ng; k++)
        if (strcmp(s->g[k].name, name) == 0)
            return &s->g[k];
    ar_scaling_group *g = ar_xcalloc((size_t)s->ng + 1, sizeof *g);
    if (s->ng)
        memcpy(g, s->g, (size_t)s->ng * sizeof *g);
    free(s->g);
    s->g = g;
    g = &s->g[s->ng++];
    g->name = ar_xstrdup(name);
    return g;
}

static void group_add(ar_scaling_group *g, double x, double y, const char *file, int line)
{
    if ((g->n & (g->n - 1)) == 0) { /* grow at powers of two */
        size_t cap = g->n ? 2 * (size_t)g->n : 1;
        double *nx = ar_xmalloc(cap * sizeof *nx), *ny = ar_xmalloc(cap * sizeof *ny);
        const char **nf = ar_xmalloc(cap * sizeof *nf);
        int *nl = ar_xmalloc(cap * sizeof *nl);
        if (g->n) {
            memcpy(nx, g->x, (size_t)g->n * sizeof *nx);
            memcpy(ny, g->y, (size_t)g->n * sizeof *ny);
            memcpy(nf, g->file, (size_t)g->n * sizeof *nf);
            memcpy(nl, g->line, (size_t)g->n * sizeof *nl);
        }
        free(g->x);
        free(g->y);
        free(g->file);
        free(g->line);
        g->x = nx;
        g->y = ny;
        g->file = nf;
        g->line = nl;
    }
    g->x[g->n] = x;
    g->y[g->n] = y;
    g->file[g->n] = file;
    g->line[g->n] = line;
    g->n++;
}

static int positive_cell(const ar_csv *c, int row, int col, double *v, ar_err *e)
{
    if (ar_csv_num(c, row, col, v, e) != 0)
        return -1;
    if (*v > 0)
        return 0;
    return ar_fail(e, "%s:%d: column '%s' must be positive, got '%s'", c->name, c->line[row], c->header[col],
                   ar_csv_cell(c, row, col));
}

int ar_scaling_load(ar_scaling *s, const char *const *inputs, int ninputs, const char *gcol,
                    const char *xcol, const char *ycol, ar_err *e)
{
    memset(s, 0, sizeof *s);
    snprintf(s->gcol, sizeof s->gcol, "%s", gcol);
    snprintf(s->xcol, sizeof s->xcol, "%s", xcol);
    snprintf(s->ycol, sizeof s->ycol, "%s", ycol ? ycol : "");
    s->files = ar_xcalloc((size_t)ninputs + 1, sizeof *s->files);
    for (int i = 0; i < ninputs; i++) {
        size_t len = strlen(inputs[i]) + 16;
        char *path = ar_xmalloc(len);
        s->files[s->nfiles++] = path;
        ar_csv *c;
        if (ar_sweep_table_file(inputs[i], path, len, e) != 0 || ar_csv_read(&c, path, e) != 0)
            goto fail;
        if (!ycol) {
            /* the default: the final evaluation where the tables have it */
            const char *y = ar_csv_col(c, "final_val_loss") >= 0 ? "final_val_loss" : "val_loss";
            if (i == 0)
                snprintf(s->ycol, sizeof s->ycol, "%s", y);
            else if (strcmp(y, s->ycol) != 0) {
                ar_fail(e, "'%s' has a column 'final_val_loss' and '%s' has not: choose the loss column of both with "
                           "--y (val_loss is in both)",
                        y[0] == 'f' ? path : s->files[0], y[0] == 'f' ? s->files[0] : path);
                ar_csv_free(c);
                goto fail;
            }
        }
        int gk = ar_csv_require_col(c, gcol, e), xk = gk < 0 ? -1 : ar_csv_require_col(c, xcol, e),
            yk = xk < 0 ? -1 : ar_csv_require_col(c, s->ycol, e);
        for (int r = 0; yk >= 0 && r < c->nrows; r++) {
            double x, y;
            if (positive_cell(c, r, xk, &x, e) != 0 || positive_cell(c, r, yk, &y, e) != 0) {
                yk = -1;
                break;
            }
            group_add(group_of(s, ar_csv_cell(c, r, gk)), x, y, path, c->line[r]);
        }
        ar_csv_free(c);
        if (yk < 0)
            goto fail;
    }
    if (s->ng == 0) {
        if (s->nfiles == 1)
            ar_fail(e, "'%s' has no data rows", s->files[0]);
        else
            ar_fail(e, "the %d tables have no data rows", s->nfiles);
        goto fail;
    }
    return 0;
fail:
    ar_scaling_free(s);
    return -1;
}

int ar_scaling_fit(ar_scaling *s, ar_fit_form form, const char *baseline, double at, ar_err *e)
{
    s->form = form;
    int np = form == AR_FIT_OFFSET ? 3 : 2;
    s->baseline = -1;
    for (int k = 0; k < s->ng; k++)
        if (strcmp(s->g[k].name, baseline ? baseline : "baseline") == 0)
            s->baseline = k;
    if (s->baseline < 0 && baseline) {
        char list[1024];
        size_t used = 0;
        list[0] = '\0';
        for (int k = 0; k < s->ng; k++) {
            int w = snprintf(list + used, sizeof list - used, "%s%s", k ? ", " : "", s->g[k].name);
            if (w < 0 || (size_t)w >= sizeof list - used)
                break;
            used += (size_t)w;
        }
        return ar_fail(e, "no group '%s' in column '%s' (groups: %s)", baseline, s->gcol, list);
    }
    if (s->baseline < 0)
        s->baseline = 0;
    double xmax = 0;
    for (int k = 0; k < s->ng; k++) {
        ar_scaling_group *g = &s->g[k];
        for (int i = 0; i < g->n; i++)
            xmax = fmax(xmax, g->x[i]);
        if (g->n < np)
            return ar_fail(e, "%s:%d: group '%s' has %d point%s, fewer than the %d parameters of the %s form",
                           g->file[0], g->line[0], g->name, g->n, g->n == 1 ? "" : "s", np,
                           ar_fit_form_name(form));
        int distinct = 0;
        for (int i = 1; i < g->n; i++)
            distinct += g->x[i] != g->x[0];
        if (!distinct)
            return ar_fail(e, "%s:%d: every point of group '%s' has the same '%s' %g: a curve needs two different values",
                           g->file[0], g->line[0], g->name, s->xcol, g->x[0]);
        ar_err fe;
        if (ar_fit_curve(g->x, g->y, g->n, form, &g->fit, &fe) != 0)
            return ar_fail(e, "group '%s' (from %s:%d): %s", g->name, g->file[0], g->line[0], fe.msg);
    }
    s->at = isfinite(at) && at > 0 ? at : xmax;
    for (int k = 0; k < s->ng; k++) {
        s->g[k].is_baseline = k == s->baseline;
        if (k != s->baseline)
            ar_fit_ratio(&s->g[s->baseline].fit, &s->g[k].fit, s->at, &s->g[k].ratio);
    }
    return 0;
}

/* ------------------------------------------------------------------ */
/* Reports                                                             */
/* ------------------------------------------------------------------ */

static const char *param_name(int i)
{
    return i == AR_FIT_A ? "A" : i == AR_FIT_ALPHA ? "alpha" : "E";
}

/* "2.0001 ± 0.0123 [1.97, 2.03]" */
static void fmt_param(const ar_fit *f, int i, char *buf, size_t n)
{
    if (isfinite(f->se[i]))
        snprintf(buf, n, "%.5g \xc2\xb1 %.2g [%.5g, %.5g]", f->p[i], f->se[i], f->ci[i][0], f->ci[i][1]);
    else
        snprintf(buf, n, "%.5g (exact fit: no uncertainty)", f->p[i]);
}

/* Width of a UTF-8 string in characters. */
static int u8len(const char *s)
{
    int n = 0;
    for (; *s; s++)
        n += ((unsigned char)*s & 0xC0) != 0x80;
    return n;
}

static void pad_to(FILE *f, const char *s, int w)
{
    fputs(s, f);
    for (int k = u8len(s); k < w; k++)
        fputc(' ', f);
}

void ar_scaling_print(FILE *f, const ar_scaling *s)
{
    const ar_fit *f0 = &s->g[0].fit;
    int np = f0->np, gw = 5;
    for (int k = 0; k < s->ng; k++)
        gw = (int)fmax(gw, u8len(s->g[k].name));
    fprintf(f, "%s fits %s by nonlinear least squares\n", s->form == AR_FIT_OFFSET ? "offset power-law" : "power-law",
            s->form == AR_FIT_OFFSET ? "L = E + A * C^-alpha" : "L = A * C^-alpha");
    fprintf(f, "C = '%s', L = '%s', one curve per '%s'; estimate \xc2\xb1 standard error [95%% interval]\n\n",
            s->xcol, s->ycol, s->gcol);
    char cell[3][160];
    int cw[3] = {0, 0, 0};
    for (int k = 0; k < s->ng; k++)
        for (int i = 0; i < np; i++) {
            fmt_param(&s->g[k].fit, i, cell[i], sizeof cell[i]);
            cw[i] = (int)fmax(cw[i], u8len(cell[i]));
        }
    for (int i = 0; i < np; i++)
        cw[i] = (int)fmax(cw[i], 5);
    pad_to(f, "group", gw + 2);
    fprintf(f, "%4s  ", "n");
    for (int i = 0; i < np; i++)
        pad_to(f, param_name(i), cw[i] + 2);
    fprintf(f, "R^2\n");
    for (int k = 0; k < s->ng; k++) {
        const ar_scaling_group *g = &s->g[k];
        pad_to(f, g->name, gw + 2);
        fprintf(f, "%4d  ", g->n);
        for (int i = 0; i < np; i++) {
            fmt_param(&g->fit, i, cell[i], sizeof cell[i]);
            pad_to(f, cell[i], cw[i] + 2);
        }
        fprintf(f, "%.6f\n", g->fit.r2);
    }

    if (s->ng > 1) {
        const ar_scaling_group *b = &s->g[s->baseline];
        fprintf(f, "\ncompute-equivalence ratio against '%s' at C = %.6g: C'/C, where '%s' reaches at C' the loss\n"
                   "the group reaches at C (> 1: the group needs less compute); delta-method uncertainty\n\n",
                b->name, s->at, b->name);
        pad_to(f, "group", gw + 2);
        fprintf(f, "%-12s %-12s %-10s %-10s %s\n", "L(C)", "C'", "ratio", "se", "95% interval");
        for (int k = 0; k < s->ng; k++) {
            const ar_scaling_group *g = &s->g[k];
            if (g->is_baseline)
                continue;
            pad_to(f, g->name, gw + 2);
            const ar_ratio *r = &g->ratio;
            if (!isfinite(r->ratio)) {
                fprintf(f, "%-12.6g %s\n", r->loss, "n/a: the baseline's fit never reaches this loss");
                continue;
            }
            if (!isfinite(r->se)) {
                fprintf(f, "%-12.6g %-12.6g %-10.4f %-10s %s\n", r->loss, r->c_base, r->ratio, "-",
                        "- (exact fits: no uncertainty)");
                continue;
            }
            fprintf(f, "%-12.6g %-12.6g %-10.4f %-10.4f [%.4f, %.4f]\n", r->loss, r->c_base, r->ratio, r->se,
                    r->ci[0], r->ci[1]);
        }
    }

    fprintf(f, "\nresiduals (L - fit)\n\n");
    pad_to(f, "group", gw + 2);
    fprintf(f, "%-14s %-12s %-12s %-13s %s\n", "C", "L", "fit", "residual", "source");
    for (int k = 0; k < s->ng; k++) {
        const ar_scaling_group *g = &s->g[k];
        for (int i = 0; i < g->n; i++) {
            double fit = ar_fit_eval(&g->fit, g->x[i]);
            pad_to(f, g->name, gw + 2);
            fprintf(f, "%-14.6g %-12.6g %-12.6g %-+13.4e %s:%d\n", g->x[i], g->y[i], fit, g->y[i] - fit, g->file[i],
                    g->line[i]);
        }
    }
}

static void jw_pair(ar_jw *w, const char *key, const double *v)
{
    ar_jw_key(w, key);
    ar_jw_arr_begin(w);
    ar_jw_num(w, v[0]);
    ar_jw_num(w, v[1]);
    ar_jw_arr_end(w);
}

/* The "points" of group g: each measurement beside the fit. */
static void json_points(ar_jw *w, const ar_scaling_group *g)
{
    ar_jw_key(w, "points");
    ar_jw_arr_begin(w);
    for (int i = 0; i < g->n; i++) {
        double fit = ar_fit_eval(&g->fit, g->x[i]);
        ar_jw_obj_begin(w);
        ar_jw_key(w, "x");
        ar_jw_num(w, g->x[i]);
        ar_jw_key(w, "y");
        ar_jw_num(w, g->y[i]);
        ar_jw_key(w, "fit");
        ar_jw_num(w, fit);
        ar_jw_key(w, "residual");
        ar_jw_num(w, g->y[i] - fit);
        ar_jw_key(w, "source");
        char src[4200];
        snprintf(src, sizeof src, "%s:%d", g->file[i], g->line[i]);
        ar_jw_str(w, src);
        ar_jw_obj_end(w);
    }
    ar_jw_arr_end(w);
}

/* One element of "groups": the fit's parameters with their errors, its
 * quality, the compute ratio against the baseline (other groups) and the
 * points. */
static void json_group(ar_jw *w, const ar_scaling *s, const ar_scaling_group *g)
{
    const ar_fit *f = &g->fit;
    ar_jw_obj_begin(w);
    ar_jw_key(w, "group");
    ar_jw_str(w, g->name);
    ar_jw_key(w, "baseline");
    ar_jw_bool(w, g->is_baseline);
    ar_jw_key(w, "n");
    ar_jw_int(w, g->n);
    for (int i = 0; i < f->np; i++) {
        char key[32];
        ar_jw_key(w, param_name(i));
        ar_jw_num(w, f->p[i]);
        snprintf(key, sizeof key, "%s_se", param_name(i));
        ar_jw_key(w, key);
        ar_jw_num(w, f->se[i]);
        snprintf(key, sizeof key, "%s_ci95", param_name(i));
        jw_pair(w, key, f->ci[i]);
    }
    ar_jw_key(w, "covariance");
    ar_jw_arr_begin(w);
    for (int i = 0; i < f->np; i++) {
        ar_jw_arr_begin(w);
        for (int j = 0; j < f->np; j++)
            ar_jw_num(w, f->dof > 0 ? f->cov[i][j] : NAN);
        ar_jw_arr_end(w);
    }
    ar_jw_arr_end(w);
    ar_jw_key(w, "r2");
    ar_jw_num(w, f->r2);
    ar_jw_key(w, "rss");
    ar_jw_num(w, f->rss);
    ar_jw_key(w, "dof");
    ar_jw_int(w, f->dof);
    ar_jw_key(w, "t95");
    ar_jw_num(w, f->t95);
    ar_jw_key(w, "loss_at");
    ar_jw_num(w, ar_fit_eval(f, s->at));
    if (!g->is_baseline) {
        const ar_ratio *r = &g->ratio;
        ar_jw_key(w, "ratio");
        ar_jw_num(w, r->ratio);
        ar_jw_key(w, "ratio_se");
        ar_jw_num(w, r->se);
        jw_pair(w, "ratio_ci95", r->ci);
        ar_jw_key(w, "ratio_log_se");
        ar_jw_num(w, r->se_log);
        ar_jw_key(w, "baseline_compute");
        ar_jw_num(w, r->c_base);
    }
    json_points(w, g);
    ar_jw_obj_end(w);
}

char *ar_scaling_json(const ar_scaling *s)
{
    ar_jw w;
    ar_jw_init(&w);
    ar_jw_obj_begin(&w);
    ar_jw_key(&w, "form");
    ar_jw_str(&w, ar_fit_form_name(s->form));
    ar_jw_key(&w, "formula");
    ar_jw_str(&w, s->form == AR_FIT_OFFSET ? "L = E + A * C^-alpha" : "L = A * C^-alpha");
    ar_jw_key(&w, "x");
    ar_jw_str(&w, s->xcol);
    ar_jw_key(&w, "y");
    ar_jw_str(&w, s->ycol);
    ar_jw_key(&w, "group");
    ar_jw_str(&w, s->gcol);
    ar_jw_key(&w, "baseline");
    ar_jw_str(&w, s->g[s->baseline].name);
    ar_jw_key(&w, "at");
    ar_jw_num(&w, s->at);
    ar_jw_key(&w, "inputs");
    ar_jw_arr_begin(&w);
    for (int i = 0; i < s->nfiles; i++)
        ar_jw_str(&w, s->files[i]);
    ar_jw_arr_end(&w);
    ar_jw_key(&w, "groups");
    ar_jw_arr_begin(&w);
    for (int k = 0; k < s->ng; k++)
        json_group(&w, s, &s->g[k]);
    ar_jw_arr_end(&w);
    ar_jw_obj_end(&w);
    return w.s;
}
