/* Depth mixing matrices and AttnRes source lists (mixing.h). */
#include "mixing.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "residual_mhc.h"

void ar_depth_attn_alloc(ar_depth_attn *a, int L)
{
    a->L = L;
    a->tokens = 0;
    a->n = ar_xcalloc((size_t)L + 1, sizeof(int));
    a->w = ar_xmalloc((size_t)(L + 1) * (size_t)(L + 1) * sizeof(double));
    for (size_t i = 0; i < (size_t)(L + 1) * (size_t)(L + 1); i++)
        a->w[i] = NAN;
}

void ar_depth_attn_free(ar_depth_attn *a)
{
    free(a->n);
    free(a->w);
    a->n = NULL;
    a->w = NULL;
}

int ar_res_has_depth_attn(ar_res_kind k)
{
    /* static and rescaled weigh Full's sources (S = 1), swa a window of them */
    return k == AR_RES_FULL || k == AR_RES_BLOCK || k == AR_RES_STATIC || k == AR_RES_RESCALED ||
           k == AR_RES_SWA;
}

static int sources_in_window(const ar_model_cfg *cfg, int l, int window, ar_source *out)
{
    if (!ar_res_has_depth_attn(cfg->residual.kind))
        return 0;
    ar_blocks b;
    ar_blocks_of_cfg(&b, cfg);
    int n = ar_depth_sources(&b, window, l, out);
    ar_blocks_free(&b);
    return n;
}

int ar_mixer_sources(const ar_model_cfg *cfg, int l, ar_source *out)
{
    return sources_in_window(cfg, l, cfg->residual.kind == AR_RES_SWA ? cfg->residual.window : 0, out);
}

int ar_mixer_columns(const ar_model_cfg *cfg)
{
    return sources_in_window(cfg, ar_cfg_sublayers(cfg) + 1, 0, NULL);
}

/* ------------------------------------------------------------ matrices */

typedef int (*mixing_fn)(const ar_model_cfg *cfg, const ar_model *m, const ar_depth_attn *w, double *M,
                         ar_err *e);

/* PreNorm residual: h_l = v_0 + ... + v_{l-1}. */
static int baseline_M(const ar_model_cfg *cfg, const ar_model *m, const ar_depth_attn *w, double *M,
                      ar_err *e)
{
    (void)m, (void)w, (void)e;
    int L = ar_cfg_sublayers(cfg);
    for (int l = 1; l <= L + 1; l++)
        for (int i = 0; i <= L; i++)
            M[(size_t)(l - 1) * (L + 1) + i] = i < l ? 1.0 : NAN;
    return 0;
}

/* Depth attention: source s = v_first + ... + v_last with weight abar_s,
 * so each v_i in it gets abar_s; a v_i that no source holds (swa: before
 * the window) gets 0. */
static int attnres_M(const ar_model_cfg *cfg, const ar_model *m, const ar_depth_attn *w, double *M, ar_err *e)
{
    (void)m;
    int L = ar_cfg_sublayers(cfg);
    if (!w || w->L != L)
        return ar_fail(e, "the mixing matrix of a %s model needs its depth-attention weights for %d sublayers",
                       ar_res_kind_name(cfg->residual.kind), L);
    ar_source *src = ar_xcalloc((size_t)L + 2, sizeof *src);
    for (int l = 1; l <= L + 1; l++) {
        double *row = M + (size_t)(l - 1) * (L + 1);
        for (int i = 0; i <= L; i++)
            row[i] = i < l ? 0.0 : NAN;
        int n = ar_mixer_sources(cfg, l, src);
        if (n != w->n[l - 1]) {
            free(src);
            return ar_fail(e, "mixer %d has %d weights, the %s scheme gives it %d sources", l, w->n[l - 1],
                           ar_res_kind_name(cfg->residual.kind), n);
        }
        const double *a = ar_depth_attn_row(w, l);
        for (int s = 0; s < n; s++)
            for (int i = src[s].first; i <= src[s].last; i++)
                row[i] = a[s];
    }
    free(src);
    return 0;
}

/* A parameter tensor of the model, downloaded (NULL if absent). */
static float *param_of(const ar_model *m, const char *name, size_t *n)
{
    int i = ar_params_find(&m->pt, name);
    if (i < 0)
        return NULL;
    const ar_param *p = &m->pt.p[i];
    float *h = ar_xmalloc(p->numel * sizeof(float));
    m->be->download(h, m->params + p->offset, p->numel * sizeof(float));
    *n = p->numel;
    return h;
}

/* mHC-lite (lib/residual_mhc.c): X_{l-1} = sum_{i<l} (R_{l-1}..R_{i+1}) q_i v_i
 * (q_0 = 1), so M[l][i] = p_l^T R_{l-1} .. R_{i+1} q_i; the final row uses
 * p = 1 (h_out = sum_j X_{L,j}). */
static int mhc_M(const ar_model_cfg *cfg, const ar_model *m, const ar_depth_attn *w, double *M, ar_err *e)
{
    (void)w;
    int L = ar_cfg_sublayers(cfg), S = ar_cfg_streams(cfg);
    if (!m)
        return ar_fail(e, "the mixing matrix of an mhc model needs the model's parameters");
    double *P = ar_xcalloc((size_t)(L + 2) * S, sizeof *P), *Q = ar_xcalloc((size_t)(L + 1) * S, sizeof *Q);
    double *R = ar_xcalloc((size_t)(L + 1) * S * S, sizeof *R), u[8], t[8];
    int rc = 0;
    for (int j = 0; j < S; j++) {
        Q[j] = 1;                       /* q_0: v_0 is in every stream */
        P[(size_t)(L + 1) * S + j] = 1; /* the final read */
    }
    for (int l = 1; l <= L && rc == 0; l++) {
        char nm[96];
        const char *which = l % 2 ? "attn_hc" : "mlp_hc";
        size_t n1 = 0, n2 = 0, n3 = 0;
        snprintf(nm, sizeof nm, "blocks.%d.%s.pre", (l - 1) / 2, which);
        float *bp = param_of(m, nm, &n1);
        snprintf(nm, sizeof nm, "blocks.%d.%s.post", (l - 1) / 2, which);
        float *bq = param_of(m, nm, &n2);
        snprintf(nm, sizeof nm, "blocks.%d.%s.res", (l - 1) / 2, which);
        float *br = param_of(m, nm, &n3);
        if (!bp || !bq || !br || n1 != (size_t)S || n2 != (size_t)S)
            rc = ar_fail(e, "the mhc model lacks the parameters of sublayer %d ('%s')", l, nm);
        else {
            for (int j = 0; j < S; j++) {
                P[(size_t)l * S + j] = 1 / (1 + exp(-(double)bp[j]));
                Q[(size_t)l * S + j] = 2 / (1 + exp(-(double)bq[j]));
            }
            ar_mhc_hres(br, S, R + (size_t)l * S * S);
        }
        free(bp), free(bq), free(br);
    }
    for (int l = 1; l <= L + 1 && rc == 0; l++) {
        double *row = M + (size_t)(l - 1) * (L + 1);
        for (int i = 0; i <= L; i++)
            row[i] = NAN;
        memcpy(u, P + (size_t)l * S, (size_t)S * sizeof *u);
        for (int i = l - 1; i >= 0; i--) {
            double c = 0;
            for (int j = 0; j < S; j++)
                c += u[j] * Q[(size_t)i * S + j];
            row[i] = c;
            if (i == 0)
                break;
            const double *Ri = R + (size_t)i * S * S; /* u <- u R_i */
            for (int j = 0; j < S; j++) {
                t[j] = 0;
                for (int k = 0; k < S; k++)
                    t[j] += u[k] * Ri[k * S + j];
            }
            memcpy(u, t, (size_t)S * sizeof *u);
        }
    }
    free(P), free(Q), free(R);
    return rc;
}

/* DenseFormer (lib/residual_denseformer.c): each state as its coefficients
 * over v_0..v_L: x_0 = y_0 = v_0; h_{2k-1} = y_{k-1}, h_{2k} = y_{k-1} +
 * v_{2k-1}, x_k = h_{2k} + v_{2k}, y_k = sum_{j<k} a_j x_j + a_k x_k. */
static int dense_M(const ar_model_cfg *cfg, const ar_model *m, const ar_depth_attn *w, double *M, ar_err *e)
{
    (void)w;
    int L = ar_cfg_sublayers(cfg), K = cfg->n_layer, C = L + 1;
    if (!m)
        return ar_fail(e, "the mixing matrix of a denseformer model needs the model's parameters");
    double *X = ar_xcalloc((size_t)(K + 1) * C, sizeof *X), *Y = ar_xcalloc((size_t)C, sizeof *Y);
    int rc = 0;
    X[0] = Y[0] = 1;
    for (int l = 1; l <= L + 1; l++)
        for (int i = 0; i <= L; i++)
            M[(size_t)(l - 1) * C + i] = i < l ? 0 : NAN;
    for (int k = 1; k <= K && rc == 0; k++) {
        double *ra = M + (size_t)(2 * k - 2) * C, *rm = M + (size_t)(2 * k - 1) * C, *xk = X + (size_t)k * C;
        for (int i = 0; i < 2 * k - 1; i++)
            ra[i] = rm[i] = Y[i];
        rm[2 * k - 1] = 1;
        memcpy(xk, rm, (size_t)C * sizeof *xk);
        for (int i = 2 * k; i <= L; i++)
            xk[i] = 0;
        xk[2 * k] = 1;
        char nm[96];
        size_t np = 0, ns = 0;
        snprintf(nm, sizeof nm, "blocks.%d.dwa.prev", k - 1);
        float *pv = param_of(m, nm, &np);
        snprintf(nm, sizeof nm, "blocks.%d.dwa.self", k - 1);
        float *sf = param_of(m, nm, &ns);
        if (!pv || !sf || np != (size_t)k || ns != 1)
            rc = ar_fail(e, "the denseformer model lacks the parameters of block %d", k - 1);
        else
            for (int i = 0; i <= L; i++) {
                double v = sf[0] * xk[i];
                for (int j = 0; j < k; j++)
                    v += pv[j] * X[(size_t)j * C + i];
                Y[i] = v;
            }
        free(pv), free(sf);
    }
    if (rc == 0)
        for (int i = 0; i <= L; i++)
            M[(size_t)L * C + i] = Y[i];
    free(X), free(Y);
    return rc;
}

/* One entry per residual kind; a new scheme adds its M here. */
static const struct {
    ar_res_kind kind;
    int needs_weights;
    mixing_fn fn;
} schemes[] = {
    {AR_RES_BASELINE, 0, baseline_M},
    {AR_RES_FULL, 1, attnres_M},
    {AR_RES_BLOCK, 1, attnres_M},
    {AR_RES_STATIC, 1, attnres_M},
    {AR_RES_RESCALED, 1, attnres_M},
    {AR_RES_SWA, 1, attnres_M},
    {AR_RES_MHC, 0, mhc_M},
    {AR_RES_DENSEFORMER, 0, dense_M},
};

int ar_mixing_needs_weights(ar_res_kind k)
{
    for (size_t i = 0; i < sizeof schemes / sizeof *schemes; i++)
        if (schemes[i].kind == k)
            return schemes[i].needs_weights;
    return 0;
}

int ar_mixing_matrix(const ar_model_cfg *cfg, const ar_model *m, const ar_depth_attn *w, double *M, ar_err *e)
{
    for (size_t i = 0; i < sizeof schemes / sizeof *schemes; i++)
        if (schemes[i].kind == cfg->residual.kind)
            return schemes[i].fn(cfg, m, w, M, e);
    return ar_fail(e, "no depth mixing matrix is defined for residual kind '%s' yet",
                   ar_res_kind_name(cfg->residual.kind));
}

/* ---------------------------------------------------- routing statistics */

void ar_route_add(double *acc, const float *w, long rows, int n)
{
    for (long t = 0; t < rows; t++) {
        const float *p = w + (size_t)t * (size_t)n;
        double sum = 0, hi = -INFINITY, h = 0;
        int top = 0;
        for (int i = 0; i < n; i++) {
            sum += p[i];
            if (p[i] > hi) { /* strictly: a tie keeps the lowest index */
                hi = p[i];
                top = i;
            }
        }
        if (!(sum > 0) || !isfinite(sum) || !isfinite(hi)) {
            acc[1] = acc[2] = acc[3] = NAN;
            acc[0] += 1;
            continue;
        }
        for (int i = 0; i < n; i++) {
            double q = p[i] / sum;
            if (q > 0)
                h -= q * log(q);
        }
        acc[0] += 1;
        acc[1] += h;
        acc[2] += exp(h);
        acc[3] += hi / sum;
        acc[4 + top] += 1;
    }
}

void ar_route_stats_of(const double *acc, int n, ar_route_stats *s, double *share)
{
    double T = acc[0];
    s->n = n;
    s->rows = T;
    s->entropy = T > 0 ? acc[1] / T : NAN;
    s->entropy_norm = n > 1 ? s->entropy / log((double)n) : NAN;
    s->eff_sources = T > 0 ? acc[2] / T : NAN;
    s->max_weight = T > 0 ? acc[3] / T : NAN;
    for (int i = 0; share && i < n; i++)
        share[i] = T > 0 && isfinite(s->entropy) ? acc[4 + i] / T : NAN;
}

int ar_depth_route_init(ar_depth_route *a, ar_residual *r)
{
    memset(a, 0, sizeof *a);
    if (!r->vt->token_weights || r->vt->n_sources(r, 1) == 0)
        return 0;
    a->L = r->L;
    a->n = ar_xcalloc((size_t)r->L + 1, sizeof(int));
    a->acc = ar_xcalloc((size_t)(r->L + 1) * ar_route_stride(r->L), sizeof(double));
    for (int l = 1; l <= r->L + 1; l++)
        a->n[l - 1] = r->vt->n_sources(r, l);
    return 1;
}

void ar_depth_route_free(ar_depth_route *a)
{
    free(a->n);
    free(a->acc);
    memset(a, 0, sizeof *a);
}

void ar_depth_route_add(ar_depth_route *a, ar_residual *r, int N)
{
    for (int l = 1; l <= a->L + 1; l++) {
        long rows = r->vt->token_weights(r, l, N, NULL);
        float *w = ar_xmalloc((size_t)rows * (size_t)a->n[l - 1] * sizeof(float) + 1);
        r->vt->token_weights(r, l, N, w);
        ar_route_add(ar_depth_route_acc(a, l), w, rows, a->n[l - 1]);
        free(w);
    }
    a->tokens += N;
}
