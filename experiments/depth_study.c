/* Depth studies (experiments/depth_study.h). */
#include "depth_study.h"

#include <gsl/gsl_cdf.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/atomic.h"
#include "../formats/config.h"
#include "../viz/plot.h"

/* ---------------------------------------------------------- statistics */

static void diff_from_paired(const ar_paired *p, ar_depth_diff *o)
{
    o->t = *p;
    o->ci_lo = o->ci_hi = NAN;
    if (p->pairs < 2 || !isfinite(p->se))
        return;
    /* mean -+ t_{0.975, n-1} se: the two-sided 95% interval of Student's t */
    double q = gsl_cdf_tdist_Pinv(0.975, p->df);
    o->ci_lo = p->mean - q * p->se;
    o->ci_hi = p->mean + q * p->se;
}

void ar_depth_diff_of(const double *d, int n, ar_depth_diff *out)
{
    ar_paired p;
    ar_paired_t(d, n, &p);
    diff_from_paired(&p, out);
}

/* ---------------------------------------------------------------- plan */

void ar_depth_study_free(ar_depth_study *s)
{
    for (int i = 0; i < s->ndepths; i++)
        ar_ablate_free(&s->ab[i]);
    free(s->ab);
    free(s->depth);
    memset(s, 0, sizeof *s);
}

int ar_depth_study_plan(ar_depth_study *s, const ar_config *base, const int *depths, int ndepths,
                        const char *variants, int seeds, ar_err *e)
{
    memset(s, 0, sizeof *s);
    if (ndepths < 1)
        return ar_fail_kind(e, AR_ERR_BAD_VALUE, "'--depths' needs at least one depth");
    for (int i = 0; i < ndepths; i++) {
        if (depths[i] < 1)
            return ar_fail_kind(e, AR_ERR_BAD_VALUE,
                                "depth %d in '--depths' is not a positive number of transformer blocks", depths[i]);
        for (int j = 0; j < i; j++)
            if (depths[j] == depths[i])
                return ar_fail_kind(e, AR_ERR_BAD_VALUE, "depth %d appears twice in '--depths'", depths[i]);
    }
    s->depth = ar_xcalloc((size_t)ndepths, sizeof *s->depth);
    s->ab = ar_xcalloc((size_t)ndepths, sizeof *s->ab);
    for (int i = 0; i < ndepths; i++) {
        ar_config c = *base;
        c.model.n_layer = depths[i]; /* only the depth differs */
        ar_err ve;
        if (ar_config_validate(&c, &ve) != 0) {
            ar_fail(e, "depth %d: %s", depths[i], ve.msg);
            goto fail;
        }
        if (ar_ablate_plan(&s->ab[i], &c, variants, seeds, NULL, 0, e) != 0) {
            ar_wrap(e, "depth %d", depths[i]);
            goto fail;
        }
        s->depth[i] = depths[i];
        s->ndepths = i + 1;
    }
    return 0;
fail:
    ar_depth_study_free(s);
    return -1;
}

void ar_depth_study_dir(const ar_depth_study *s, int i, const char *out_dir, char *buf, size_t n)
{
    snprintf(buf, n, "%s/L%d", out_dir, s->depth[i]);
}

/* -------------------------------------------------------------- report */

typedef struct {
    const ar_depth_study *s;
    const ar_ablate_stat *st; /* ndepths x nvariants */
    const ar_depth_diff *d;
} dctx;

static void num(FILE *f, double v, const char *fmt)
{
    if (isfinite(v))
        fprintf(f, fmt, v);
    else
        fputs("nan", f);
}

static int fill_csv(FILE *f, void *ud)
{
    const dctx *c = ud;
    const ar_depth_study *s = c->s;
    int nv = s->ab[0].nvariants;
    fprintf(f, "%s\n", AR_DEPTH_STUDY_COLUMNS);
    for (int i = 0; i < s->ndepths; i++)
        for (int v = 1; v < nv; v++) {
            const ar_ablate_stat *b = &c->st[i * nv], *x = &c->st[i * nv + v];
            const ar_depth_diff *d = &c->d[i * nv + v];
            fprintf(f, "%d,%s,%d,", s->depth[i], s->ab[i].variant[v], d->t.pairs);
            num(f, b->n ? b->mean : NAN, "%.6f");
            fputc(',', f);
            num(f, x->n ? x->mean : NAN, "%.6f");
            const double more[] = {d->t.mean, d->t.sd, d->t.se, d->ci_lo, d->ci_hi, d->t.t, d->t.df, d->t.p};
            for (size_t k = 0; k < sizeof more / sizeof *more; k++) {
                fputc(',', f);
                num(f, more[k], k == 6 ? "%.0f" : k == 7 ? "%.6g" : "%.6f");
            }
            fputc('\n', f);
        }
    return ferror(f) ? -1 : 0;
}

static void md_num(FILE *f, double v, const char *fmt)
{
    if (isfinite(v))
        fprintf(f, fmt, v);
    else
        fputs("-", f);
}

int ar_depth_study_onset(const ar_depth_study *s, const ar_depth_diff *diff, int v, int *all_ci)
{
    int nv = s->ab[0].nvariants, onset = -1, ci = 1;
    /* down from the deepest depth while the variant stays ahead */
    for (int done = 0; done < s->ndepths; done++) {
        int at = -1;
        for (int i = 0; i < s->ndepths; i++)
            if ((onset < 0 || s->depth[i] < onset) && (at < 0 || s->depth[i] > s->depth[at]))
                at = i;
        const ar_depth_diff *d = &diff[at * nv + v];
        if (!(d->t.pairs >= 1 && isfinite(d->t.mean) && d->t.mean < 0))
            break;
        onset = s->depth[at];
        ci &= isfinite(d->ci_hi) && d->ci_hi < 0;
    }
    if (all_ci)
        *all_ci = onset > 0 && ci;
    return onset;
}

/* One line per variant: from which depth it beats the baseline. */
static void onset_lines(FILE *f, const ar_depth_study *s, const ar_depth_diff *diff)
{
    int nv = s->ab[0].nvariants, deepest = s->depth[0];
    for (int i = 1; i < s->ndepths; i++)
        deepest = s->depth[i] > deepest ? s->depth[i] : deepest;
    for (int v = 1; v < nv; v++) {
        int ci, at = ar_depth_study_onset(s, diff, v, &ci);
        if (at < 0)
            fprintf(f, "- %s: no lower loss than the baseline at the deepest depth studied (n_layer %d).\n",
                    s->ab[0].variant[v], deepest);
        else
            fprintf(f, "- %s: lower loss than the baseline from n_layer %d on (at every depth studied from %d to "
                       "%d); the 95%% interval is below zero at %s of them.\n",
                    s->ab[0].variant[v], at, at, deepest, ci ? "all" : "not all");
    }
}

void ar_depth_study_onset_print(const ar_depth_study *s, const ar_depth_diff *diff) { onset_lines(stdout, s, diff); }

static int fill_md(FILE *f, void *ud)
{
    const dctx *c = ud;
    const ar_depth_study *s = c->s;
    const ar_sweep_run *r0 = &s->ab[0].sweep.runs[0];
    int nv = s->ab[0].nvariants, ns = s->ab[0].nseeds;
    fprintf(f, "# Depth study: %s\n\n", r0->cfg.data.train);
    fprintf(f, "Depths (n_layer, transformer blocks):");
    for (int i = 0; i < s->ndepths; i++)
        fprintf(f, "%s %d", i ? "," : "", s->depth[i]);
    fprintf(f, ".  Every run: d_model %d, n_head %d, %ld steps of %d x %d tokens (%ld tokens), lr %g, "
               "seeds %" PRIu64 "..%" PRIu64 "; only n_layer and the residual differ.\n\n",
            r0->cfg.model.d_model, r0->cfg.model.n_head, r0->cfg.train.steps,
            r0->cfg.train.batch_size * r0->cfg.train.grad_accum, r0->cfg.model.seq_len, r0->tokens, r0->cfg.train.lr,
            r0->cfg.train.seed, r0->cfg.train.seed + (uint64_t)(ns - 1));
    fprintf(f, "| n_layer | variant | pairs | baseline | variant loss | diff (variant - baseline) | se "
               "| 95%% CI | t | p |\n");
    fprintf(f, "|---:|---|---:|---:|---:|---:|---:|---|---:|---:|\n");
    for (int i = 0; i < s->ndepths; i++)
        for (int v = 1; v < nv; v++) {
            const ar_ablate_stat *b = &c->st[i * nv], *x = &c->st[i * nv + v];
            const ar_depth_diff *d = &c->d[i * nv + v];
            fprintf(f, "| %d | %s | %d | ", s->depth[i], s->ab[i].variant[v], d->t.pairs);
            md_num(f, b->n ? b->mean : NAN, "%.4f");
            fputs(" | ", f);
            md_num(f, x->n ? x->mean : NAN, "%.4f");
            fputs(" | ", f);
            md_num(f, d->t.mean, "%+.4f");
            fputs(" | ", f);
            md_num(f, d->t.se, "%.2g");
            fputs(" | ", f);
            if (isfinite(d->ci_lo))
                fprintf(f, "[%+.4f, %+.4f]", d->ci_lo, d->ci_hi);
            else
                fputs("-", f);
            fputs(" | ", f);
            md_num(f, d->t.t, "%.2f");
            fputs(" | ", f);
            md_num(f, d->t.p, "%.3g");
            fputs(" |\n", f);
        }
    fprintf(f, "\nWhere it pays:\n\n");
    onset_lines(f, s, c->d);
    fprintf(f, "\nLosses are the runs' final evaluations (`final_val_loss`).  At each depth, seed k of a variant is\n"
               "compared with seed k of the baseline (the same batches and initial weights): pairs is the number\n"
               "of seeds finished on both sides, diff the mean of the differences d_k = variant - baseline\n"
               "(negative: the variant is better), se = sd(d) / sqrt(pairs), the 95%% CI diff -+ t_0.975,pairs-1 x se\n"
               "(Student's t), t = diff / se with pairs - 1 degrees of freedom and p its two-sided p-value;\n"
               "- with fewer than 2 pairs.  Each depth's own table is in L<depth>/results.md.\n");
    return ferror(f) ? -1 : 0;
}

static int draw(const dctx *c, const char *path, ar_err *e)
{
    const ar_depth_study *s = c->s;
    int nv = s->ab[0].nvariants, nd = s->ndepths, nser = nv; /* nv - 1 variants and the zero line */
    double *x = ar_xcalloc((size_t)nd * nv, sizeof *x), *y = ar_xcalloc((size_t)nd * nv, sizeof *y);
    double *lo = ar_xcalloc((size_t)nd * nv, sizeof *lo), *hi = ar_xcalloc((size_t)nd * nv, sizeof *hi);
    ar_series *ser = ar_xcalloc((size_t)nser, sizeof *ser);
    double xmin = INFINITY, xmax = -INFINITY, zx[2], zy[2] = {0, 0};
    for (int i = 0; i < nd; i++) {
        xmin = fmin(xmin, s->depth[i]);
        xmax = fmax(xmax, s->depth[i]);
    }
    zx[0] = xmin;
    zx[1] = xmax > xmin ? xmax : xmin + 1;
    /* several variants: each set 1.5% of the depth range apart, so that
     * their error bars do not hide each other */
    double dodge = nv > 2 ? 0.015 * (zx[1] - zx[0]) : 0;
    int k = 0;
    for (int v = 1; v < nv; v++) {
        for (int i = 0; i < nd; i++) {
            x[v * nd + i] = s->depth[i] + dodge * (v - 1 - 0.5 * (nv - 2));
            const ar_depth_diff *d = &c->d[i * nv + v];
            y[v * nd + i] = d->t.pairs >= 1 ? d->t.mean : NAN;
            lo[v * nd + i] = d->ci_lo;
            hi[v * nd + i] = d->ci_hi;
        }
        ser[k++] = (ar_series){.label = s->ab[0].variant[v], .x = x + v * nd, .y = y + v * nd, .n = nd, .markers = 1,
                               .ylo = lo + v * nd, .yhi = hi + v * nd};
    }
    ser[k++] = (ar_series){.label = "no difference", .x = zx, .y = zy, .n = 2, .color = nv};
    char title[160];
    snprintf(title, sizeof title, "AttnRes minus baseline against depth (mean over %d seed%s, 95%% CI)",
             s->ab[0].nseeds, s->ab[0].nseeds > 1 ? "s" : "");
    ar_plot_opts po = {.title = title, .xlabel = "transformer blocks (n_layer)",
                       .ylabel = "final val loss difference (nats/token)", .empty = "no finished pairs",
                       .note = "below zero: the variant beats the baseline"};
    int rc = ar_plot_lines(path, &po, ser, k, e);
    free(x);
    free(y);
    free(lo);
    free(hi);
    free(ser);
    return rc;
}

int ar_depth_study_report(const ar_depth_study *s, const char *out_dir, ar_depth_diff *diff, ar_err *e)
{
    int nv = s->ab[0].nvariants, rc = -1;
    ar_ablate_stat *st = ar_xcalloc((size_t)s->ndepths * nv, sizeof *st);
    ar_depth_diff *d = ar_xcalloc((size_t)s->ndepths * nv, sizeof *d);
    char path[AR_PATH_MAX + 64];
    for (int i = 0; i < s->ndepths; i++) {
        ar_depth_study_dir(s, i, out_dir, path, sizeof path);
        if (ar_mkdir_p(path, e) != 0 || ar_ablate_report(&s->ab[i], path, st + (size_t)i * nv, e) != 0)
            goto out;
        for (int v = 0; v < nv; v++)
            diff_from_paired(&st[(size_t)i * nv + v].paired, &d[(size_t)i * nv + v]);
    }
    dctx c = {s, st, d};
    snprintf(path, sizeof path, "%s/depth_study.csv", out_dir);
    if (ar_write_atomic(path, fill_csv, &c, e) != 0)
        goto out;
    snprintf(path, sizeof path, "%s/depth_study.md", out_dir);
    if (ar_write_atomic(path, fill_md, &c, e) != 0)
        goto out;
    snprintf(path, sizeof path, "%s/depth_study.png", out_dir);
    if (draw(&c, path, e) != 0)
        goto out;
    if (diff)
        memcpy(diff, d, (size_t)s->ndepths * nv * sizeof *d);
    rc = 0;
out:
    free(st);
    free(d);
    return rc;
}
