/* Ablation studies (experiments/ablate.h). */
#include "ablate.h"
#include "table4.h"

#include <gsl/gsl_cdf.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../core/atomic.h"
#include "../core/blocks.h"
#include "../formats/config.h"
#include "../formats/csv.h"
#include "../viz/bar_chart.h"
#include "../viz/plot.h"
#include "../run/checkpoint.h"

/* ------------------------------------------------------------ variants */

static int base_block_size(const ar_model_cfg *b)
{
    int L = ar_cfg_sublayers(b);
    if (b->residual.kind == AR_RES_BLOCK)
        return ar_cfg_block_size(b);
    return L < 4 ? L : 4; /* the report's S = 4 */
}

typedef void (*apply_fn)(ar_residual_cfg *r, const ar_model_cfg *b);

static void v_baseline(ar_residual_cfg *r, const ar_model_cfg *b) { (void)b; r->kind = AR_RES_BASELINE; }
static void v_full(ar_residual_cfg *r, const ar_model_cfg *b) { (void)b; r->kind = AR_RES_FULL; }
/* Block and the variants built on it take the base's blocks: its S, or its
 * blocks of different sizes (model.residual.block_sizes). */
static void v_block(ar_residual_cfg *r, const ar_model_cfg *b)
{
    r->kind = AR_RES_BLOCK;
    if (b->residual.kind == AR_RES_BLOCK && b->residual.block_sizes.n > 0)
        r->block_sizes = b->residual.block_sizes;
    else
        r->block_size = base_block_size(b);
}
static void v_sigmoid(ar_residual_cfg *r, const ar_model_cfg *b) { v_full(r, b); r->score = AR_SCORE_SIGMOID; }
static void v_nokn(ar_residual_cfg *r, const ar_model_cfg *b) { v_full(r, b); r->key_norm = AR_KEY_NORM_OFF; }
/* the stabilisers from the config (query_scale, query_norm, query_gate) */
static void v_query(ar_residual_cfg *r, const ar_model_cfg *b)
{
    v_full(r, b);
    r->query = AR_QUERY_INPUT;
    r->query_scale = b->residual.query_scale;
    r->query_norm = b->residual.query_norm;
    r->query_gate = b->residual.query_gate;
    r->query_lr_scale = b->residual.query_lr_scale;
}
static void v_static(ar_residual_cfg *r, const ar_model_cfg *b) { (void)b; r->kind = AR_RES_STATIC; }
static void v_swa(ar_residual_cfg *r, const ar_model_cfg *b)
{
    r->kind = AR_RES_SWA;
    r->window = b->residual.window > 0 ? b->residual.window : 8;
}
static void v_heads(ar_residual_cfg *r, const ar_model_cfg *b)
{
    v_block(r, b);
    r->heads = b->residual.heads > 1 ? b->residual.heads : 16;
}
static void v_block_nokn(ar_residual_cfg *r, const ar_model_cfg *b) { v_block(r, b); r->key_norm = AR_KEY_NORM_OFF; }
static void v_mhc(ar_residual_cfg *r, const ar_model_cfg *b)
{
    r->kind = AR_RES_MHC;
    r->streams = ar_cfg_streams(b);
}
static void v_dense(ar_residual_cfg *r, const ar_model_cfg *b) { (void)b; r->kind = AR_RES_DENSEFORMER; }
static void v_rescaled(ar_residual_cfg *r, const ar_model_cfg *b) { (void)b; r->kind = AR_RES_RESCALED; }

static const struct {
    const char *name, *what;
    apply_fn fn;
} VARIANTS[] = {
    {"baseline", "PreNorm residual", v_baseline},
    {"full", "Full AttnRes", v_full},
    {"block", "Block AttnRes (S or block_sizes from the config, else S = 4)", v_block},
    {"sigmoid", "Full, score: sigmoid", v_sigmoid},
    {"no-key-norm", "Full, key_norm: false", v_nokn},
    {"input-query", "Full, query: input", v_query},
    {"static", "kind static (input-independent softmax(theta))", v_static},
    {"swa", "kind swa (window from the config, else 8)", v_swa},
    {"heads", "Block, heads from the config, else 16", v_heads},
    {"block-no-key-norm", "Block, key_norm: false", v_block_nokn},
    {"mhc", "kind mhc (mHC-lite, streams from the config, else 4)", v_mhc},
    {"denseformer", "kind denseformer", v_dense},
    {"rescaled", "kind rescaled (uniform 1/n)", v_rescaled},
};
enum { NV = sizeof VARIANTS / sizeof VARIANTS[0] };

int ar_ablate_nvariants(void) { return NV; }
const char *ar_ablate_variant_name(int i) { return VARIANTS[i].name; }
const char *ar_ablate_variant_what(int i) { return VARIANTS[i].what; }

const char *ar_ablate_variant_list(void)
{
    static char buf[512];
    if (!buf[0]) {
        size_t u = 0;
        for (int i = 0; i < NV; i++)
            u += (size_t)snprintf(buf + u, sizeof buf - u, "%s%s", i ? ", " : "", VARIANTS[i].name);
    }
    return buf;
}

/* ------------------------------------------------------ block layouts */

static int add_variant(ar_ablation *a, const char *name, ar_err *e);
static int plan_run(ar_ablation *a, const ar_config *base, int v, int k, ar_err *e);

#define LAYOUT_PREFIX "block-l"

/* "block-l2-2-4-8" -> [2, 2, 4, 8]: 0, or -1 when name is not a layout
 * variant's name (entries positive, at most AR_LIST_MAX of them). */
static int layout_of_name(const char *name, ar_int_list *out)
{
    size_t k = strlen(LAYOUT_PREFIX);
    if (strncmp(name, LAYOUT_PREFIX, k) != 0)
        return -1;
    return ar_ablate_parse_layout(name + k, '-', out);
}

int ar_ablate_parse_layout(const char *s, char sep, ar_int_list *out)
{
    memset(out, 0, sizeof *out);
    const char *p = s;
    while (*p) {
        if (*p < '0' || *p > '9' || out->n == AR_LIST_MAX)
            return -1;
        char *end;
        long v = strtol(p, &end, 10);
        if (v < 1 || v > 100000 || (*end && *end != sep) || (*end == sep && !end[1]))
            return -1;
        out->v[out->n++] = (int)v;
        p = *end ? end + 1 : end;
    }
    return out->n > 0 ? 0 : -1;
}

void ar_ablate_layout_name(const ar_int_list *l, char *buf, size_t n)
{
    char list[AR_SWEEP_NAME_MAX * 2];
    ar_int_list_text(l->v, l->n, "-", list, sizeof list);
    snprintf(buf, n, LAYOUT_PREFIX "%s", list);
}

int ar_ablate_add_layouts(ar_ablation *a, const ar_config *base, const char *layouts, ar_err *e)
{
    int L = ar_cfg_sublayers(&base->model);
    const char *p = layouts;
    if (!*p)
        return ar_fail_kind(e, AR_ERR_BAD_VALUE,
                            "'--block-layouts' is empty (expected layouts separated by ';', each a comma-separated "
                            "list of block sizes summing to L = 2*'model.n_layer' = %d, such as \"2,2,4,8;4,4,4,4\")",
                            L);
    while (*p) {
        size_t len = strcspn(p, ";");
        char one[1024], name[AR_SWEEP_NAME_MAX * 2];
        ar_int_list l;
        snprintf(one, sizeof one, "%.*s", (int)(len < sizeof one ? len : sizeof one - 1), p);
        if (len >= sizeof one || ar_ablate_parse_layout(one, ',', &l) != 0)
            return ar_fail_kind(e, AR_ERR_BAD_VALUE,
                                "'--block-layouts': layout '%s' is not a comma-separated list of positive integers "
                                "(sublayers per block, such as 2,2,4,8; layouts are separated by ';')",
                                one);
        long sum = 0;
        for (int i = 0; i < l.n; i++)
            sum += l.v[i];
        if (sum != L) /* a well-formed layout that does not fit this model: not a BAD_VALUE */
            return ar_fail(e, "'--block-layouts': layout '%s' sums to %ld sublayers, expected L = 2*'model.n_layer' "
                              "= %d",
                           one, sum, L);
        ar_ablate_layout_name(&l, name, sizeof name);
        if (strlen(name) >= AR_SWEEP_NAME_MAX - 8)
            return ar_fail_kind(e, AR_ERR_BAD_VALUE,
                                "'--block-layouts': layout '%s' has too many blocks to name its run directory "
                                "('%s...' is longer than %d characters)",
                                one, LAYOUT_PREFIX, AR_SWEEP_NAME_MAX - 9);
        int known = 0;
        for (int v = 0; v < a->nvariants; v++)
            known |= strcmp(a->variant[v], name) == 0;
        if (!known) {
            /* one more variant: its seeds appended, variant-major as ar_ablate_plan lays them out */
            if (add_variant(a, name, e) != 0)
                return -1;
            ar_sweep_run *runs = ar_xcalloc((size_t)(a->nvariants * a->nseeds), sizeof *runs);
            memcpy(runs, a->sweep.runs, (size_t)a->sweep.nruns * sizeof *runs);
            free(a->sweep.runs);
            a->sweep.runs = runs;
            for (int k = 1; k <= a->nseeds; k++)
                if (plan_run(a, base, a->nvariants - 1, k, e) != 0)
                    return -1;
            a->sweep.nvariants = a->nvariants;
            a->sweep.nruns = a->nvariants * a->nseeds;
        }
        p += len + (p[len] == ';');
    }
    return 0;
}

/* -------------------------------------------------------------- apply */

int ar_ablate_apply(ar_model_cfg *m, const ar_model_cfg *base, const char *name, ar_err *e)
{
    *m = *base;
    ar_residual_cfg_of_kind(&m->residual, AR_RES_BASELINE); /* each name sets its kind below */
    int S;
    char tail;
    if (sscanf(name, "block-s%d%c", &S, &tail) == 1 && S >= 1) {
        m->residual.kind = AR_RES_BLOCK;
        m->residual.block_size = S;
        return 0;
    }
    if (layout_of_name(name, &m->residual.block_sizes) == 0) {
        m->residual.kind = AR_RES_BLOCK;
        return 0;
    }
    for (int i = 0; i < NV; i++)
        if (strcmp(name, VARIANTS[i].name) == 0) {
            VARIANTS[i].fn(&m->residual, base);
            return 0;
        }
    return ar_fail_kind(e, AR_ERR_BAD_VALUE,
                        "unknown variant '%s' (expected one of: %s, all, block-s<S>, or block-l<S1>-<S2>-... "
                        "for blocks of S1, S2, ... sublayers)",
                        name, ar_ablate_variant_list());
}

/* ---------------------------------------------------------------- plan */

static int add_variant(ar_ablation *a, const char *name, ar_err *e)
{
    for (int i = 0; i < a->nvariants; i++)
        if (strcmp(a->variant[i], name) == 0)
            return 0;
    if (strlen(name) >= AR_SWEEP_NAME_MAX - 8)
        return ar_fail_kind(e, AR_ERR_BAD_VALUE, "variant name '%.40s...' is too long", name);
    char (*nv)[AR_SWEEP_NAME_MAX] = ar_xcalloc((size_t)a->nvariants + 1, sizeof *nv);
    if (a->nvariants)
        memcpy(nv, a->variant, (size_t)a->nvariants * sizeof *nv);
    free(a->variant);
    a->variant = nv;
    snprintf(a->variant[a->nvariants++], AR_SWEEP_NAME_MAX, "%s", name);
    return 0;
}

/* The run of variant v at seed index k (1..nseeds), as ar_ablate_plan
 * plans each of its runs (for the variants --block-layouts appends). */
static int plan_run(ar_ablation *a, const ar_config *base, int v, int k, ar_err *e)
{
    ar_sweep_run *r = &a->sweep.runs[v * a->nseeds + k - 1];
    r->cfg = *base;
    if (ar_ablate_apply(&r->cfg.model, &base->model, a->variant[v], e) != 0)
        return -1;
    /* seed index k: the same seed for every variant */
    r->cfg.train.seed = base->train.seed + (uint64_t)(k - 1);
    snprintf(r->variant, sizeof r->variant, "%s", a->variant[v]);
    snprintf(r->size, sizeof r->size, "seed%d", k);
    snprintf(r->name, sizeof r->name, "%s-seed%d", a->variant[v], k);
    r->tokens = r->cfg.train.steps * r->cfg.train.batch_size * r->cfg.train.grad_accum * (long)r->cfg.model.seq_len;
    ar_err ve;
    /* a known variant whose config does not validate: a failure (kind
     * OTHER), not a wrong variant name */
    if (ar_config_validate(&r->cfg, &ve) != 0)
        return ar_fail(e, "variant '%s': %s", a->variant[v], ve.msg);
    return 0;
}

void ar_ablate_free(ar_ablation *a)
{
    free(a->sweep.runs);
    free(a->variant);
    free(a->block_size);
    memset(a, 0, sizeof *a);
}

int ar_ablate_plan(ar_ablation *a, const ar_config *base, const char *variants, int seeds,
                   const int *block_sizes, int nblock, ar_err *e)
{
    memset(a, 0, sizeof *a);
    if (seeds < 1)
        return ar_fail_kind(e, AR_ERR_BAD_VALUE, "'--seeds' must be at least 1");
    ar_model_cfg probe;
    if (add_variant(a, "baseline", e) != 0)
        goto fail;
    if (nblock > 0 && add_variant(a, "full", e) != 0)
        goto fail;
    if (strcmp(variants, "all") == 0) {
        for (int i = 0; i < NV; i++)
            if (add_variant(a, VARIANTS[i].name, e) != 0)
                goto fail;
    } else {
        const char *p = variants;
        while (*p) {
            size_t n = strcspn(p, ",");
            char name[AR_SWEEP_NAME_MAX];
            if (n == 0 || n >= sizeof name) {
                ar_fail_kind(e, AR_ERR_BAD_VALUE, "variant list '%s' has an empty or overlong name", variants);
                goto fail;
            }
            memcpy(name, p, n);
            name[n] = 0;
            if (strcmp(name, "all") == 0) {
                for (int i = 0; i < NV; i++)
                    if (add_variant(a, VARIANTS[i].name, e) != 0)
                        goto fail;
            } else if (ar_ablate_apply(&probe, &base->model, name, e) != 0 || add_variant(a, name, e) != 0)
                goto fail;
            p += n + (p[n] == ',');
        }
    }
    if (nblock > 0) {
        a->block_size = ar_xcalloc((size_t)nblock, sizeof(int));
        a->nblock = nblock;
        for (int i = 0; i < nblock; i++) {
            char name[32];
            a->block_size[i] = block_sizes[i];
            snprintf(name, sizeof name, "block-s%d", block_sizes[i]);
            if (block_sizes[i] < 1) {
                ar_fail_kind(e, AR_ERR_BAD_VALUE, "block size %d in '--block-sizes' is not a positive integer",
                             block_sizes[i]);
                goto fail;
            }
            if (add_variant(a, name, e) != 0)
                goto fail;
        }
    }
    a->nseeds = seeds;
    a->sweep.nvariants = a->nvariants;
    a->sweep.nsizes = 1;
    a->sweep.nruns = a->nvariants * seeds;
    a->sweep.runs = ar_xcalloc((size_t)a->sweep.nruns, sizeof *a->sweep.runs);
    for (int v = 0; v < a->nvariants; v++)
        for (int k = 1; k <= seeds; k++) {
            ar_sweep_run *r = &a->sweep.runs[v * seeds + k - 1];
            r->cfg = *base;
            if (ar_ablate_apply(&r->cfg.model, &base->model, a->variant[v], e) != 0)
                goto fail;
            /* seed index k: the same seed for every variant */
            r->cfg.train.seed = base->train.seed + (uint64_t)(k - 1);
            snprintf(r->variant, sizeof r->variant, "%s", a->variant[v]);
            snprintf(r->size, sizeof r->size, "seed%d", k);
            snprintf(r->name, sizeof r->name, "%s-seed%d", a->variant[v], k);
            r->tokens = r->cfg.train.steps * r->cfg.train.batch_size * r->cfg.train.grad_accum *
                        (long)r->cfg.model.seq_len;
            ar_err ve;
            if (ar_config_validate(&r->cfg, &ve) != 0) {
                ar_fail(e, "variant '%s': %s", a->variant[v], ve.msg);
                goto fail;
            }
        }
    return 0;
fail:
    ar_ablate_free(a);
    return -1;
}

/* ------------------------------------------------------------- stats */

static void mean_sd(const double *x, int n, double *m, double *sd)
{
    double s = 0, q = 0;
    for (int i = 0; i < n; i++)
        s += x[i];
    *m = n ? s / n : NAN;
    for (int i = 0; i < n; i++)
        q += (x[i] - *m) * (x[i] - *m);
    *sd = n > 1 ? sqrt(q / (n - 1)) : 0;
}

double ar_welch_p(const double *a, int na, const double *b, int nb)
{
    if (na < 2 || nb < 2)
        return NAN;
    double ma, sa, mb, sb;
    mean_sd(a, na, &ma, &sa);
    mean_sd(b, nb, &mb, &sb);
    double va = sa * sa / na, vb = sb * sb / nb, se2 = va + vb;
    if (!(se2 > 0))
        return NAN;
    double t = (ma - mb) / sqrt(se2);
    double df = se2 * se2 / (va * va / (na - 1) + vb * vb / (nb - 1));
    return 2 * gsl_cdf_tdist_Q(fabs(t), df);
}

void ar_paired_t(const double *d, int n, ar_paired *o)
{
    o->pairs = n;
    o->mean = o->sd = o->se = o->t = o->df = o->p = NAN;
    if (n < 1)
        return;
    mean_sd(d, n, &o->mean, &o->sd);
    if (n < 2) {
        o->sd = NAN;
        return;
    }
    o->df = n - 1;
    o->se = o->sd / sqrt(n);
    if (!(o->se > 0))
        return; /* identical differences: no test */
    o->t = o->mean / o->se;
    o->p = 2 * gsl_cdf_tdist_Q(fabs(o->t), o->df);
}

void ar_ablate_stats(const double *loss, int nv, int ns, ar_ablate_stat *st)
{
    double *vals = ar_xcalloc((size_t)nv * ns + 1, sizeof *vals), *d = ar_xcalloc((size_t)ns + 1, sizeof *d);
    for (int v = 0; v < nv; v++) {
        int n = 0;
        for (int k = 0; k < ns; k++)
            if (isfinite(loss[v * ns + k]))
                vals[v * ns + n++] = loss[v * ns + k];
        st[v].n = n;
        mean_sd(vals + v * ns, n, &st[v].mean, &st[v].sd);
    }
    for (int v = 0; v < nv; v++) {
        st[v].diff = st[v].mean - st[0].mean;
        st[v].p = v == 0 ? NAN : ar_welch_p(vals + v * ns, st[v].n, vals, st[0].n);
        /* seed k of the variant against seed k of the baseline: the same
         * batches and initial weights; a seed missing on either side is
         * left out */
        int np = 0;
        for (int k = 0; v > 0 && k < ns; k++)
            if (isfinite(loss[v * ns + k]) && isfinite(loss[k]))
                d[np++] = loss[v * ns + k] - loss[k];
        ar_paired_t(d, np, &st[v].paired);
    }
    free(vals);
    free(d);
}

/* ------------------------------------------------------------ report */

typedef struct {
    int have; /* trained to its steps and finally evaluated */
    int seed;
    ar_sweep_compute c;
    double val_loss, wall_s;
    ar_final_eval fe;
} arow;

typedef struct {
    const ar_ablation *a;
    const arow *rows;
    const ar_ablate_stat *st;
    const char *base_name;
} actx;

static int fill_csv(FILE *f, void *ud)
{
    const actx *c = ud;
    fprintf(f, "%s\n", AR_ABLATE_COLUMNS);
    for (int i = 0; i < c->a->sweep.nruns; i++) {
        const ar_sweep_run *r = &c->a->sweep.runs[i];
        const arow *w = &c->rows[i];
        if (!w->have)
            continue;
        ar_csv_write_field(f, r->variant);
        fprintf(f, ",%d,%ld,%ld,%.6e,", w->seed, w->c.nonembed_params, r->tokens, w->c.flops);
        if (isfinite(w->val_loss))
            fprintf(f, "%.6f", w->val_loss);
        else
            fprintf(f, "nan");
        fprintf(f, ",%.1f,%.1f,", w->wall_s > 0 ? (double)r->tokens / w->wall_s : 0.0, w->wall_s);
        ar_csv_write_field(f, r->name);
        fprintf(f, ",%.6f,%ld,%ld,%d,%d,%d\n", w->fe.loss, w->fe.windows, w->fe.tokens, r->cfg.model.n_layer,
                r->cfg.model.d_model, r->cfg.model.n_head);
    }
    return ferror(f) ? -1 : 0;
}

/* The validation split, for the text: "`val.txt`" or "the last 5% of `train.txt`". */
static void split_name(const ar_data_cfg *dc, char *buf, size_t n)
{
    if (dc->val[0])
        snprintf(buf, n, "`%s`", dc->val);
    else
        snprintf(buf, n, "the last %g%% of `%s`", 100 * dc->val_fraction, dc->train);
}

/* results.md's comparison with the report's Table 4: the variants it has,
 * published and measured deltas side by side, and Spearman's rho. */
static void md_table4(FILE *f, const ar_ablation *a, const ar_ablate_stat *st)
{
    ar_table4_cmp *cmp = ar_xcalloc((size_t)a->nvariants, sizeof *cmp);
    int nboth = 0, rows = 0;
    double rho = ar_table4_compare(a->variant, st, a->nvariants, cmp, &nboth);
    for (int v = 1; v < a->nvariants; v++)
        rows += cmp[v].pub != NULL;
    if (rows == 0) {
        free(cmp);
        return;
    }
    fprintf(f, "\n## Against the report's Table 4\n\n");
    fprintf(f, "The AttnRes report's published deltas (its 16-layer model, 87.9 B tokens; final validation loss\n"
               "minus its baseline's %.3f) beside the deltas measured here: the paired mean difference where a\n"
               "seed of both finished, else the difference of means.  The settings are the report's; the\n"
               "variant runs with this configuration's (block size, window, heads, streams).\n\n",
            AR_TABLE4_BASELINE);
    fprintf(f, "| variant | report's setting | report delta | measured delta | same sign |\n");
    fprintf(f, "|---|---|---:|---:|---|\n");
    for (int v = 1; v < a->nvariants; v++) {
        const ar_table4_cmp *c = &cmp[v];
        if (!c->pub)
            continue;
        fprintf(f, "| %s | %s | %+.3f | ", a->variant[v], c->pub->setting, c->pub->delta);
        if (isfinite(c->measured))
            fprintf(f, "%+.4f | %s |\n", c->measured, c->same_sign ? "yes" : "**no**");
        else
            fprintf(f, "- | - |\n");
    }
    if (isfinite(rho))
        fprintf(f, "\nSpearman's rank correlation between the report's and the measured deltas over the %d variants\n"
                   "both have: rho = %.3f (1: the same order, -1: the reverse).\n",
                nboth, rho);
    else
        fprintf(f, "\nSpearman's rank correlation needs at least 2 variants with both deltas (and neither side\n"
                   "all equal): %d here.\n",
                nboth);
    free(cmp);
}

static int fill_md(FILE *f, void *ud)
{
    const actx *c = ud;
    const ar_ablation *a = c->a;
    const ar_sweep_run *r0 = &a->sweep.runs[0];
    const ar_final_eval *fe = NULL;
    for (int i = 0; i < a->sweep.nruns && !fe; i++)
        if (c->rows[i].have)
            fe = &c->rows[i].fe;
    char split[AR_PATH_MAX + 64];
    split_name(&r0->cfg.data, split, sizeof split);
    fprintf(f, "# Ablation: %s\n\n", c->base_name);
    fprintf(f, "Every variant: %ld steps of %d x %d tokens (%ld tokens), lr %g, seeds %" PRIu64 "..%" PRIu64 ".\n\n",
            r0->cfg.train.steps, r0->cfg.train.batch_size * r0->cfg.train.grad_accum, r0->cfg.model.seq_len,
            r0->tokens, r0->cfg.train.lr, r0->cfg.train.seed, r0->cfg.train.seed + (uint64_t)(a->nseeds - 1));
    fprintf(f, "Losses are each run's final evaluation (`final_val_loss` in results.csv) on ");
    if (r0->cfg.train.final_eval_windows > 0)
        fprintf(f, "the first %ld windows (train.final_eval_windows) of the validation split",
                r0->cfg.train.final_eval_windows);
    else
        fprintf(f, "the whole validation split");
    if (fe)
        fprintf(f, ", %ld windows of %d tokens (%ld tokens)", fe->windows, r0->cfg.model.seq_len, fe->tokens);
    fprintf(f, ", %s; evaluations during training used %ld windows (`val_loss`).\n\n", split,
            r0->cfg.train.eval_windows);
    fprintf(f, "| variant | seeds | val loss (mean) | std | diff vs baseline | p (Welch) "
               "| pairs | paired diff | se | t | p (paired) |\n");
    fprintf(f, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for (int v = 0; v < a->nvariants; v++) {
        const ar_ablate_stat *s = &c->st[v];
        fprintf(f, "| %s | %d | ", a->variant[v], s->n);
        if (s->n == 0)
            fprintf(f, "- | - | - | - | ");
        else {
            fprintf(f, "%.4f | %.4f | ", s->mean, s->sd);
            if (v == 0)
                fprintf(f, "- | - | ");
            else {
                fprintf(f, "%+.4f | ", s->diff);
                if (isfinite(s->p))
                    fprintf(f, "%.3g | ", s->p);
                else
                    fprintf(f, "%s | ", s->n < 2 || c->st[0].n < 2 ? "- (needs 2+ seeds)" : "n/a");
            }
        }
        const ar_paired *pp = &s->paired;
        if (v == 0)
            fprintf(f, "- | - | - | - | - |\n");
        else if (pp->pairs < 2)
            fprintf(f, "%d | - | - | - | - |\n", pp->pairs);
        else if (!isfinite(pp->p))
            fprintf(f, "%d | %+.4f | %.2g | n/a | n/a |\n", pp->pairs, pp->mean, pp->se);
        else
            fprintf(f, "%d | %+.4f | %.2g | %.2f | %.3g |\n", pp->pairs, pp->mean, pp->se, pp->t, pp->p);
    }
    fprintf(f, "\nstd is the sample standard deviation over seeds; p (Welch) is the two-sided Welch t-test of\n"
               "the variant's losses against the baseline's.  The paired columns compare each seed of the\n"
               "variant with the same seed of the baseline (the same batches and initial weights): pairs is\n"
               "the number of seeds finished on both sides, paired diff the mean of the differences (variant -\n"
               "baseline), se their sample standard deviation / sqrt(pairs), t = paired diff / se with pairs - 1\n"
               "degrees of freedom and p (paired) its two-sided p-value; - with fewer than 2 pairs.\n");
    md_table4(f, a, c->st);
    return ferror(f) ? -1 : 0;
}

/* rows[i] of every run finished and finally evaluated under
 * OUT_DIR/runs/NAME (the others keep have = 0); 0, or -1 with e set. */
static int collect_rows(const ar_ablation *a, const char *out_dir, arow *rows, ar_err *e)
{
    char path[AR_PATH_MAX + 160];
    for (int i = 0; i < a->sweep.nruns; i++) {
        const ar_sweep_run *r = &a->sweep.runs[i];
        snprintf(path, sizeof path, "%s/runs/%s/model.safetensors", out_dir, r->name);
        if (access(path, F_OK) != 0)
            continue;
        ar_config saved;
        long step;
        if (ar_ckpt_read_config(path, &saved, &step, e) != 0)
            return -1;
        if (step != r->cfg.train.steps)
            continue; /* not finished */
        snprintf(path, sizeof path, "%s/runs/%s", out_dir, r->name);
        /* a run counts once it has its final evaluation */
        int fe = ar_final_eval_read(path, r->cfg.train.steps, r->cfg.train.final_eval_windows, &rows[i].fe, e);
        if (fe < 0)
            return -1;
        if (fe == 0)
            continue;
        if (ar_sweep_compute_of(r, &rows[i].c, e) != 0 ||
            ar_sweep_run_stats(path, &rows[i].wall_s, &rows[i].val_loss, e) != 0)
            return -1;
        rows[i].seed = i % a->nseeds + 1;
        rows[i].have = 1;
    }
    return 0;
}

/* OUT_DIR/ablation.png: a bar a variant with results, mean +- 1 std, the
 * baseline as a line.  0, or -1 with e set. */
static int plot_ablation(const ar_ablation *a, const ar_ablate_stat *st, const char *out_dir, ar_err *e)
{
    char path[AR_PATH_MAX + 160];
    const char **lab = ar_xcalloc((size_t)a->nvariants, sizeof *lab);
    double *m = ar_xcalloc((size_t)a->nvariants, sizeof *m), *sd = ar_xcalloc((size_t)a->nvariants, sizeof *sd);
    int nb = 0;
    for (int v = 0; v < a->nvariants; v++)
        if (st[v].n > 0) {
            lab[nb] = a->variant[v];
            m[nb] = st[v].mean;
            sd[nb++] = st[v].sd;
        }
    char title[160];
    snprintf(title, sizeof title, "Ablation: final validation loss (mean \xc2\xb1 1 std over %d seed%s)", a->nseeds,
             a->nseeds > 1 ? "s" : "");
    snprintf(path, sizeof path, "%s/ablation.png", out_dir);
    ar_bar_opts bo = {.title = title, .ylabel = "validation loss (nats/token)",
                      .ref = st[0].n > 0 ? st[0].mean : NAN, .ref_label = "baseline"};
    int brc = nb > 0 ? ar_plot_bars(path, &bo, lab, m, sd, nb, e) : 0;
    free(lab);
    free(m);
    free(sd);
    return brc != 0 ? -1 : 0;
}

/* OUT_DIR/block_sizes.png: val loss against S, full and baseline as
 * lines.  0, or -1 with e set. */
static int plot_block_sizes(const ar_ablation *a, const ar_ablate_stat *st, const char *out_dir, ar_err *e)
{
    char path[AR_PATH_MAX + 160];
    double *x = ar_xcalloc((size_t)a->nblock, sizeof *x), *y = ar_xcalloc((size_t)a->nblock, sizeof *y);
    double *yl = ar_xcalloc((size_t)a->nblock, sizeof *yl), *yh = ar_xcalloc((size_t)a->nblock, sizeof *yh);
    double rx[2], rf[2], rb[2];
    int vf = -1;
    for (int v = 0; v < a->nvariants; v++)
        if (strcmp(a->variant[v], "full") == 0)
            vf = v;
    double xmin = INFINITY, xmax = -INFINITY;
    for (int i = 0; i < a->nblock; i++) {
        char name[32];
        snprintf(name, sizeof name, "block-s%d", a->block_size[i]);
        x[i] = a->block_size[i];
        y[i] = yl[i] = yh[i] = NAN;
        xmin = fmin(xmin, x[i]);
        xmax = fmax(xmax, x[i]);
        for (int v = 0; v < a->nvariants; v++)
            if (strcmp(a->variant[v], name) == 0 && st[v].n > 0) {
                y[i] = st[v].mean;
                yl[i] = st[v].mean - st[v].sd;
                yh[i] = st[v].mean + st[v].sd;
            }
    }
    rx[0] = xmin;
    rx[1] = xmax > xmin ? xmax : xmin + 1;
    rf[0] = rf[1] = vf >= 0 && st[vf].n > 0 ? st[vf].mean : NAN;
    rb[0] = rb[1] = st[0].n > 0 ? st[0].mean : NAN;
    ar_series s[5] = {
        {.label = "Block AttnRes", .x = x, .y = y, .n = a->nblock, .markers = 1, .color = 1},
        {.label = "Full AttnRes", .x = rx, .y = rf, .n = 2, .color = 2},
        {.label = "baseline", .x = rx, .y = rb, .n = 2, .color = 3},
        {.label = a->nseeds > 1 ? "\xc2\xb1 1 std" : NULL, .x = x, .y = yl, .n = a->nblock, .markers = 1,
         .no_line = 1, .color = 1},
        {.x = x, .y = yh, .n = a->nblock, .markers = 1, .no_line = 1, .color = 1},
    };
    ar_plot_opts po = {.title = "Validation loss against block size S", .xlabel = "block size S (sublayers)",
                       .ylabel = "validation loss (nats/token)", .logx = xmax / xmin >= 4, .empty = "no finished runs"};
    snprintf(path, sizeof path, "%s/block_sizes.png", out_dir);
    int prc = ar_plot_lines(path, &po, s, a->nseeds > 1 ? 5 : 3, e);
    free(x);
    free(y);
    free(yl);
    free(yh);
    return prc != 0 ? -1 : 0;
}

int ar_ablate_report(const ar_ablation *a, const char *out_dir, ar_ablate_stat *stats, ar_err *e)
{
    int nr = a->sweep.nruns, rc = -1;
    arow *rows = ar_xcalloc((size_t)nr, sizeof *rows);
    ar_ablate_stat *st = ar_xcalloc((size_t)a->nvariants, sizeof *st);
    double *loss = ar_xcalloc((size_t)nr, sizeof *loss);
    char path[AR_PATH_MAX + 160];
    if (collect_rows(a, out_dir, rows, e) != 0)
        goto out;
    for (int i = 0; i < nr; i++)
        loss[i] = rows[i].have ? rows[i].fe.loss : NAN;
    ar_ablate_stats(loss, a->nvariants, a->nseeds, st);
    actx c = {a, rows, st, a->sweep.runs[0].cfg.data.train};
    snprintf(path, sizeof path, "%s/results.csv", out_dir);
    if (ar_write_atomic(path, fill_csv, &c, e) != 0)
        goto out;
    snprintf(path, sizeof path, "%s/results.md", out_dir);
    if (ar_write_atomic(path, fill_md, &c, e) != 0)
        goto out;
    if (plot_ablation(a, st, out_dir, e) != 0)
        goto out;
    if (a->nblock > 0 && plot_block_sizes(a, st, out_dir, e) != 0)
        goto out;
    if (stats)
        memcpy(stats, st, (size_t)a->nvariants * sizeof *st);
    rc = 0;
out:
    free(rows);
    free(st);
    free(loss);
    return rc;
}
