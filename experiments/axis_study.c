/* Studies along depth or token budget (experiments/axis_study.h). */
#include "axis_study.h"

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

static void diff_from_paired(const ar_paired *p, ar_study_diff *o)
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

void ar_study_diff_of(const double *d, int n, ar_study_diff *out)
{
    ar_paired p;
    ar_paired_t(d, n, &p);
    diff_from_paired(&p, out);
}

/* ---------------------------------------------------------------- plan */

void ar_axis_study_free(ar_axis_study *s)
{
    for (int i = 0; i < s->n; i++)
        ar_ablate_free(&s->ab[i]);
    free(s->ab);
    free(s->value);
    memset(s, 0, sizeof *s);
}

void ar_tokens_label(long tokens, char *buf, size_t n)
{
    static const struct {
        long unit;
        const char *suffix;
    } u[] = {{1000000000L, "G"}, {1000000L, "M"}, {1000L, "k"}};
    for (size_t k = 0; k < sizeof u / sizeof *u; k++)
        if (tokens >= u[k].unit && tokens % u[k].unit == 0) {
            snprintf(buf, n, "%ld%s", tokens / u[k].unit, u[k].suffix);
            return;
        }
    snprintf(buf, n, "%ld", tokens);
}

int ar_tokens_parse(const char *s, long *tokens)
{
    char *end;
    if (!s || !*s || strchr(s, '-') || strchr(s, 'e') || strchr(s, 'E'))
        return -1;
    double v = strtod(s, &end);
    double unit = 1;
    if (*end == 'k' || *end == 'K')
        unit = 1e3, end++;
    else if (*end == 'm' || *end == 'M')
        unit = 1e6, end++;
    else if (*end == 'g' || *end == 'G')
        unit = 1e9, end++;
    if (end == s || *end || !isfinite(v) || v <= 0 || v * unit > 1e15)
        return -1;
    double t = floor(v * unit + 0.5);
    if (t < 1)
        return -1;
    *tokens = (long)t;
    return 0;
}

static const char *axis_option(ar_study_axis a) { return a == AR_AXIS_TOKENS ? "--tokens" : "--depths"; }

/* A point's value as written in labels: "4M" on the token axis, "8" on
 * the depth axis. */
static void value_label(ar_study_axis a, long v, char *buf, size_t n)
{
    if (a == AR_AXIS_TOKENS)
        ar_tokens_label(v, buf, n);
    else
        snprintf(buf, n, "%ld", v);
}

void ar_axis_study_point(const ar_axis_study *s, int i, char *buf, size_t n)
{
    char l[32];
    value_label(s->axis, s->value[i], l, sizeof l);
    snprintf(buf, n, s->axis == AR_AXIS_TOKENS ? "%s tokens" : "n_layer %s", l);
}

/* The point's name in messages: "depth 8", "budget 4M". */
static void point_name(ar_study_axis a, long v, char *buf, size_t n)
{
    char l[32];
    value_label(a, v, l, sizeof l);
    snprintf(buf, n, a == AR_AXIS_TOKENS ? "budget %s" : "depth %s", l);
}

/* The base config with the axis's key set to v. */
static void at_point(ar_config *c, ar_study_axis a, long v)
{
    if (a == AR_AXIS_TOKENS) {
        long per = (long)c->train.batch_size * c->train.grad_accum * c->model.seq_len;
        long steps = per > 0 ? (v + per / 2) / per : 1;
        c->train.steps = steps < 1 ? 1 : steps;
    } else {
        c->model.n_layer = (int)v; /* only the depth differs */
    }
}

int ar_axis_study_plan(ar_axis_study *s, ar_study_axis axis, const ar_config *base, const long *values,
                       const int *seeds_at, int n, const char *variants, int seeds, ar_err *e)
{
    memset(s, 0, sizeof *s);
    s->axis = axis;
    const char *opt = axis_option(axis);
    if (n < 1)
        return ar_fail_kind(e, AR_ERR_BAD_VALUE, "'%s' needs at least one %s", opt,
                            axis == AR_AXIS_TOKENS ? "token budget" : "depth");
    char nm[64];
    for (int i = 0; i < n; i++) {
        point_name(axis, values[i], nm, sizeof nm);
        if (values[i] < 1 || (axis == AR_AXIS_DEPTH && values[i] > 100000))
            return ar_fail_kind(e, AR_ERR_BAD_VALUE, "%s in '%s' is not a positive %s", nm, opt,
                                axis == AR_AXIS_TOKENS ? "number of tokens" : "number of transformer blocks");
        if (seeds_at && seeds_at[i] < 0)
            return ar_fail_kind(e, AR_ERR_BAD_VALUE, "%s in '%s': the number of seeds must be positive", nm, opt);
        for (int j = 0; j < i; j++)
            if (values[j] == values[i])
                return ar_fail_kind(e, AR_ERR_BAD_VALUE, "%s appears twice in '%s'", nm, opt);
    }
    s->value = ar_xcalloc((size_t)n, sizeof *s->value);
    s->ab = ar_xcalloc((size_t)n, sizeof *s->ab);
    for (int i = 0; i < n; i++) {
        ar_config c = *base;
        at_point(&c, axis, values[i]);
        point_name(axis, values[i], nm, sizeof nm);
        ar_err ve;
        if (ar_config_validate(&c, &ve) != 0) {
            ar_fail(e, "%s: %s", nm, ve.msg);
            goto fail;
        }
        int k = seeds_at && seeds_at[i] > 0 ? seeds_at[i] : seeds;
        if (ar_ablate_plan(&s->ab[i], &c, variants, k, NULL, 0, e) != 0) {
            ar_wrap(e, "%s", nm);
            goto fail;
        }
        s->value[i] = values[i];
        s->n = i + 1;
    }
    return 0;
fail:
    ar_axis_study_free(s);
    return -1;
}

void ar_axis_study_dir(const ar_axis_study *s, int i, const char *out_dir, char *buf, size_t n)
{
    char l[32];
    value_label(s->axis, s->value[i], l, sizeof l);
    snprintf(buf, n, s->axis == AR_AXIS_TOKENS ? "%s/T%s" : "%s/L%s", out_dir, l);
}

/* -------------------------------------------------------------- report */

typedef struct {
    const ar_axis_study *s;
    const ar_ablate_stat *st; /* n x nvariants */
    const ar_study_diff *d;
    long *steps, *tokens;     /* tokens axis: each point's steps and training tokens */
    double *per_param;        /* tokens over the baseline's non-embedding parameters */
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
    const ar_axis_study *s = c->s;
    int nv = s->ab[0].nvariants, tok = s->axis == AR_AXIS_TOKENS;
    fprintf(f, "%s\n", tok ? AR_TOKEN_STUDY_COLUMNS : AR_DEPTH_STUDY_COLUMNS);
    for (int i = 0; i < s->n; i++)
        for (int v = 1; v < nv; v++) {
            const ar_ablate_stat *b = &c->st[i * nv], *x = &c->st[i * nv + v];
            const ar_study_diff *d = &c->d[i * nv + v];
            if (tok)
                fprintf(f, "%ld,%ld,%.4f,", c->tokens[i], c->steps[i], c->per_param[i]);
            else
                fprintf(f, "%ld,", s->value[i]);
            fprintf(f, "%s,%d,", s->ab[i].variant[v], d->t.pairs);
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

int ar_axis_study_onset(const ar_axis_study *s, const ar_study_diff *diff, int v, int *all_ci)
{
    int nv = s->ab[0].nvariants, onset = -1, ci = 1;
    /* down from the largest point while the variant stays ahead */
    for (int done = 0; done < s->n; done++) {
        int at = -1;
        for (int i = 0; i < s->n; i++)
            if ((onset < 0 || s->value[i] < s->value[onset]) && (at < 0 || s->value[i] > s->value[at]))
                at = i;
        const ar_study_diff *d = &diff[at * nv + v];
        if (!(d->t.pairs >= 1 && isfinite(d->t.mean) && d->t.mean < 0))
            break;
        onset = at;
        ci &= isfinite(d->ci_hi) && d->ci_hi < 0;
    }
    if (all_ci)
        *all_ci = onset >= 0 && ci;
    return onset;
}

/* The smallest and largest points with a finite mean and, with need_se,
 * a finite standard error. */
static void trend_ends(const ar_axis_study *s, const ar_study_diff *diff, int v, int need_se, int *lo, int *hi)
{
    int nv = s->ab[0].nvariants;
    *lo = *hi = -1;
    for (int i = 0; i < s->n; i++) {
        const ar_study_diff *d = &diff[i * nv + v];
        if (d->t.pairs < 1 || !isfinite(d->t.mean) || (need_se && !isfinite(d->t.se)))
            continue;
        if (*lo < 0 || s->value[i] < s->value[*lo])
            *lo = i;
        if (*hi < 0 || s->value[i] > s->value[*hi])
            *hi = i;
    }
}

ar_trend ar_axis_study_trend(const ar_axis_study *s, const ar_study_diff *diff, int v, int *first, int *last,
                             double *change)
{
    int nv = s->ab[0].nvariants, lo, hi;
    trend_ends(s, diff, v, 1, &lo, &hi);
    if (lo < 0 || lo == hi) /* fewer than two points with a standard error */
        trend_ends(s, diff, v, 0, &lo, &hi);
    if (first)
        *first = lo;
    if (last)
        *last = hi;
    if (change)
        *change = NAN;
    if (lo < 0 || lo == hi)
        return AR_TREND_UNKNOWN;
    const ar_study_diff *a = &diff[lo * nv + v], *b = &diff[hi * nv + v];
    double ch = b->t.mean - a->t.mean;
    if (change)
        *change = ch;
    double se = sqrt(a->t.se * a->t.se + b->t.se * b->t.se);
    if (!isfinite(se))
        return AR_TREND_UNKNOWN;
    return ch < -2 * se ? AR_TREND_GROWS : ch > 2 * se ? AR_TREND_FADES : AR_TREND_HOLDS;
}

/* Per variant: from which point it beats the baseline, and along tokens
 * how its difference moves with the budget. */
static void summary_lines(FILE *f, const ar_axis_study *s, const ar_study_diff *diff)
{
    int nv = s->ab[0].nvariants, top = 0, tok = s->axis == AR_AXIS_TOKENS;
    for (int i = 1; i < s->n; i++)
        top = s->value[i] > s->value[top] ? i : top;
    char ptop[64], pat[64], pa[64], pb[64];
    ar_axis_study_point(s, top, ptop, sizeof ptop);
    const char *every = tok ? "budget" : "depth";
    for (int v = 1; v < nv; v++) {
        int ci, at = ar_axis_study_onset(s, diff, v, &ci);
        if (at < 0) {
            fprintf(f, "- %s: no lower loss than the baseline at the largest %s studied (%s).", s->ab[0].variant[v],
                    every, ptop);
        } else {
            ar_axis_study_point(s, at, pat, sizeof pat);
            fprintf(f, "- %s: lower loss than the baseline from %s on (at every %s studied from there to %s); the "
                       "95%% interval is below zero at %s of them.",
                    s->ab[0].variant[v], pat, every, ptop, ci ? "all" : "not all");
        }
        int lo, hi;
        double ch;
        ar_trend tr = tok ? ar_axis_study_trend(s, diff, v, &lo, &hi, &ch) : AR_TREND_UNKNOWN;
        if (tok && isfinite(ch)) {
            const ar_study_diff *a = &diff[lo * nv + v], *b = &diff[hi * nv + v];
            ar_axis_study_point(s, lo, pa, sizeof pa);
            ar_axis_study_point(s, hi, pb, sizeof pb);
            static const char *const word[] = {"cannot be judged (one seed at an end: no standard error)",
                                               "grows (the difference falls by more than 2 se)",
                                               "holds (the change is within 2 se)",
                                               "fades (the difference rises by more than 2 se)"};
            fprintf(f, " From %s (%+.4f) to %s (%+.4f) the difference changes by %+.4f: its %s %s.", pa,
                    a->t.mean, pb, b->t.mean, ch, a->t.mean < 0 || b->t.mean < 0 ? "lead" : "gap", word[tr]);
            /* larger budgets with one seed, after the judged span */
            for (int i = 0; i < s->n; i++) {
                const ar_study_diff *x = &diff[i * nv + v];
                if (tr != AR_TREND_UNKNOWN && s->value[i] > s->value[hi] && x->t.pairs >= 1 && isfinite(x->t.mean)) {
                    ar_axis_study_point(s, i, pat, sizeof pat);
                    fprintf(f, " At %s (%d seed%s): %+.4f.", pat, x->t.pairs, x->t.pairs > 1 ? "s" : "",
                            x->t.mean);
                }
            }
        }
        fputc('\n', f);
    }
}

void ar_axis_study_summary_print(const ar_axis_study *s, const ar_study_diff *diff) { summary_lines(stdout, s, diff); }

static int fill_md(FILE *f, void *ud)
{
    const dctx *c = ud;
    const ar_axis_study *s = c->s;
    const ar_sweep_run *r0 = &s->ab[0].sweep.runs[0];
    int nv = s->ab[0].nvariants, tok = s->axis == AR_AXIS_TOKENS;
    int smin = s->ab[0].nseeds, smax = smin;
    for (int i = 1; i < s->n; i++) {
        smin = s->ab[i].nseeds < smin ? s->ab[i].nseeds : smin;
        smax = s->ab[i].nseeds > smax ? s->ab[i].nseeds : smax;
    }
    char seeds[96];
    if (smin == smax)
        snprintf(seeds, sizeof seeds, "seeds %" PRIu64 "..%" PRIu64, r0->cfg.train.seed,
                 r0->cfg.train.seed + (uint64_t)(smax - 1));
    else
        snprintf(seeds, sizeof seeds, "seeds from %" PRIu64 ", %d to %d per point (pairs below)", r0->cfg.train.seed,
                 smin, smax);
    if (tok) {
        fprintf(f, "# Token-budget study: %s\n\n", r0->cfg.data.train);
        fprintf(f, "Budgets (training tokens):");
        for (int i = 0; i < s->n; i++)
            fprintf(f, "%s %ld", i ? "," : "", c->tokens[i]);
        fprintf(f, ".  Every run: n_layer %d, d_model %d, n_head %d, steps of %d x %d tokens, lr %g to %g (%s, "
                   "warmup %ld), %s; only the steps and the residual differ.\n\n",
                r0->cfg.model.n_layer, r0->cfg.model.d_model, r0->cfg.model.n_head,
                r0->cfg.train.batch_size * r0->cfg.train.grad_accum, r0->cfg.model.seq_len, r0->cfg.train.lr,
                r0->cfg.train.min_lr, ar_sched_name(r0->cfg.train.schedule), r0->cfg.train.warmup, seeds);
        fprintf(f, "| tokens | steps | tokens/param | variant | pairs | baseline | variant loss "
                   "| diff (variant - baseline) | se | 95%% CI | t | p |\n");
        fprintf(f, "|---:|---:|---:|---|---:|---:|---:|---:|---:|---|---:|---:|\n");
    } else {
        fprintf(f, "# Depth study: %s\n\n", r0->cfg.data.train);
        fprintf(f, "Depths (n_layer, transformer blocks):");
        for (int i = 0; i < s->n; i++)
            fprintf(f, "%s %ld", i ? "," : "", s->value[i]);
        fprintf(f, ".  Every run: d_model %d, n_head %d, %ld steps of %d x %d tokens (%ld tokens), lr %g, "
                   "%s; only n_layer and the residual differ.\n\n",
                r0->cfg.model.d_model, r0->cfg.model.n_head, r0->cfg.train.steps,
                r0->cfg.train.batch_size * r0->cfg.train.grad_accum, r0->cfg.model.seq_len, r0->tokens,
                r0->cfg.train.lr, seeds);
        fprintf(f, "| n_layer | variant | pairs | baseline | variant loss | diff (variant - baseline) | se "
                   "| 95%% CI | t | p |\n");
        fprintf(f, "|---:|---|---:|---:|---:|---:|---:|---|---:|---:|\n");
    }
    for (int i = 0; i < s->n; i++)
        for (int v = 1; v < nv; v++) {
            const ar_ablate_stat *b = &c->st[i * nv], *x = &c->st[i * nv + v];
            const ar_study_diff *d = &c->d[i * nv + v];
            if (tok)
                fprintf(f, "| %ld | %ld | %.1f ", c->tokens[i], c->steps[i], c->per_param[i]);
            else
                fprintf(f, "| %ld ", s->value[i]);
            fprintf(f, "| %s | %d | ", s->ab[i].variant[v], d->t.pairs);
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
    summary_lines(f, s, c->d);
    fprintf(f, "\nLosses are the runs' final evaluations (`final_val_loss`).  At each %s, seed k of a variant is\n"
               "compared with seed k of the baseline (the same batches and initial weights): pairs is the number\n"
               "of seeds finished on both sides, diff the mean of the differences d_k = variant - baseline\n"
               "(negative: the variant is better), se = sd(d) / sqrt(pairs), the 95%% CI diff -+ t_0.975,pairs-1 x se\n"
               "(Student's t), t = diff / se with pairs - 1 degrees of freedom and p its two-sided p-value;\n"
               "- with fewer than 2 pairs.  Each %s's own table is in %s/results.md.\n",
            tok ? "budget" : "depth", tok ? "budget" : "depth", tok ? "T<tokens>" : "L<depth>");
    if (tok)
        fprintf(f, "tokens/param is the run's training tokens over the baseline's non-embedding parameters.  A lead\n"
                   "grows or fades when the difference at the largest budget is more than 2 standard errors\n"
                   "(sqrt(se_first^2 + se_last^2)) from the one at the smallest.\n");
    return ferror(f) ? -1 : 0;
}

static int draw(const dctx *c, const char *path, ar_err *e)
{
    const ar_axis_study *s = c->s;
    int nv = s->ab[0].nvariants, nd = s->n, nser = nv, tok = s->axis == AR_AXIS_TOKENS;
    double *x = ar_xcalloc((size_t)nd * nv, sizeof *x), *y = ar_xcalloc((size_t)nd * nv, sizeof *y);
    double *lo = ar_xcalloc((size_t)nd * nv, sizeof *lo), *hi = ar_xcalloc((size_t)nd * nv, sizeof *hi);
    ar_series *ser = ar_xcalloc((size_t)nser, sizeof *ser);
    double xmin = INFINITY, xmax = -INFINITY, zx[2], zy[2] = {0, 0};
    for (int i = 0; i < nd; i++) {
        double at = tok ? (double)c->tokens[i] : (double)s->value[i];
        xmin = fmin(xmin, at);
        xmax = fmax(xmax, at);
    }
    zx[0] = xmin;
    zx[1] = xmax > xmin ? xmax : (tok ? 2 * xmin : xmin + 1);
    /* several variants: each set 1.5% of the axis apart (of its logarithm
     * along tokens), so that their error bars do not hide each other */
    double span = tok ? log(zx[1] / zx[0]) : zx[1] - zx[0], dodge = nv > 2 ? 0.015 * span : 0;
    int k = 0;
    for (int v = 1; v < nv; v++) {
        for (int i = 0; i < nd; i++) {
            double off = dodge * (v - 1 - 0.5 * (nv - 2));
            x[v * nd + i] = tok ? c->tokens[i] * exp(off) : s->value[i] + off;
            const ar_study_diff *d = &c->d[i * nv + v];
            y[v * nd + i] = d->t.pairs >= 1 ? d->t.mean : NAN;
            lo[v * nd + i] = d->ci_lo;
            hi[v * nd + i] = d->ci_hi;
        }
        ser[k++] = (ar_series){.label = s->ab[0].variant[v], .x = x + v * nd, .y = y + v * nd, .n = nd, .markers = 1,
                               .ylo = lo + v * nd, .yhi = hi + v * nd};
    }
    ser[k++] = (ar_series){.label = "no difference", .x = zx, .y = zy, .n = 2, .color = nv};
    int smax = 0;
    for (int i = 0; i < nd; i++)
        smax = s->ab[i].nseeds > smax ? s->ab[i].nseeds : smax;
    char title[160];
    snprintf(title, sizeof title, "AttnRes minus baseline against %s (mean over up to %d seed%s, 95%% CI)",
             tok ? "training tokens" : "depth", smax, smax > 1 ? "s" : "");
    ar_plot_opts po = {.title = title, .xlabel = tok ? "training tokens" : "transformer blocks (n_layer)",
                       .ylabel = "final val loss difference (nats/token)", .empty = "no finished pairs",
                       .note = "below zero: the variant beats the baseline", .logx = tok};
    int rc = ar_plot_lines(path, &po, ser, k, e);
    free(x);
    free(y);
    free(lo);
    free(hi);
    free(ser);
    return rc;
}

int ar_axis_study_report(const ar_axis_study *s, const char *out_dir, ar_study_diff *diff, ar_err *e)
{
    int nv = s->ab[0].nvariants, rc = -1;
    ar_ablate_stat *st = ar_xcalloc((size_t)s->n * nv, sizeof *st);
    ar_study_diff *d = ar_xcalloc((size_t)s->n * nv, sizeof *d);
    dctx c = {s, st, d, ar_xcalloc((size_t)s->n, sizeof(long)), ar_xcalloc((size_t)s->n, sizeof(long)),
              ar_xcalloc((size_t)s->n, sizeof(double))};
    char path[AR_PATH_MAX + 64];
    for (int i = 0; i < s->n; i++) {
        ar_axis_study_dir(s, i, out_dir, path, sizeof path);
        if (ar_mkdir_p(path, e) != 0 || ar_ablate_report(&s->ab[i], path, st + (size_t)i * nv, e) != 0)
            goto out;
        for (int v = 0; v < nv; v++)
            diff_from_paired(&st[(size_t)i * nv + v].paired, &d[(size_t)i * nv + v]);
        const ar_sweep_run *r0 = &s->ab[i].sweep.runs[0]; /* the baseline, seed 1 */
        ar_sweep_compute sc;
        if (ar_sweep_compute_of(r0, &sc, e) != 0)
            goto out;
        c.steps[i] = r0->cfg.train.steps;
        c.tokens[i] = r0->tokens;
        c.per_param[i] = sc.nonembed_params > 0 ? (double)r0->tokens / (double)sc.nonembed_params : NAN;
    }
    const char *stem = s->axis == AR_AXIS_TOKENS ? "token_study" : "depth_study";
    snprintf(path, sizeof path, "%s/%s.csv", out_dir, stem);
    if (ar_write_atomic(path, fill_csv, &c, e) != 0)
        goto out;
    snprintf(path, sizeof path, "%s/%s.md", out_dir, stem);
    if (ar_write_atomic(path, fill_md, &c, e) != 0)
        goto out;
    snprintf(path, sizeof path, "%s/%s.png", out_dir, stem);
    if (draw(&c, path, e) != 0)
        goto out;
    if (diff)
        memcpy(diff, d, (size_t)s->n * nv * sizeof *d);
    rc = 0;
out:
    free(st);
    free(d);
    free(c.steps);
    free(c.tokens);
    free(c.per_param);
    return rc;
}
