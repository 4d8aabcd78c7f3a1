/* DenseFormer (Pagliardini et al. 2024): a depth-weighted average (DWA)
 * after each transformer block.  With n_layer blocks k = 1..K, block
 * outputs x_k and x_0 = v_0 (the embedding), y_0 = x_0:
 *   h_{2k-1} = y_{k-1}                         (attention input)
 *   h_{2k}   = y_{k-1} + v_{2k-1}              (MLP input)
 *   x_k      = y_{k-1} + v_{2k-1} + v_{2k}     (the block's PreNorm residual)
 *   y_k      = sum_{j<k} a_{k,j} x_j + a_{k,k} x_k,     h_out = y_K
 * Parameters (k counted from 0 in the names, as blocks.{k}):
 *   blocks.{k}.dwa.prev [k+1]   a_{k+1,0..k}, zero-initialised
 *   blocks.{k}.dwa.self [1]     a_{k+1,k+1}, initialised to one
 * so at initialisation y_k = x_k and the model is exactly the baseline.
 *
 * Backward: dX[k] collects dL/dx_k from every DWA j >= k; when block k's
 * MLP is reached it is complete and is dv_{2k}; the MLP's dL/dh adds into
 * the same buffer (residual.h allows it), which then holds dL/d(h_{2k}) =
 * dv_{2k-1}; the attention's input gradient adds into dY[k-1]
 * (dY[0] = dX[0]), which output_grad(2k-1) seeds with dv_{2k-1}. */
#include <stdio.h>
#include <stdlib.h>

#include "../core/error.h"
#include "residual.h"

typedef struct {
    ar_residual base;
    int K;
    float **V;        /* V[l], l = 1..L: sublayer outputs */
    float **X, **M, **Y; /* X[0..K], M[1..K] (MLP inputs), Y[1..K] */
    float **dX, **dY; /* dX[0..K], dY[1..K] (dY[0] is dX[0]) */
    int *prev_idx, *self_idx; /* per block k = 1..K */
    float *ones;      /* {1, 1}: a + b as one weighted sum (device) */
    float *coef;      /* K + 1: one DWA's a_{k,0..k} together (device scratch) */
    const ar_param_table *pt;
    float *params, *grads;
} dense_res;

#define DF(r) ((dense_res *)(r))

static const float *dpar(dense_res *s, int i) { return s->params + s->pt->p[i].offset; }
static float *dgrad(dense_res *s, int i) { return s->grads + s->pt->p[i].offset; }
static float *yb(dense_res *s, int k) { return k == 0 ? s->X[0] : s->Y[k]; }
static float *dyb(dense_res *s, int k) { return k == 0 ? s->dX[0] : s->dY[k]; }

static void df_bind(ar_residual *r, float *params, float *grads, float *const *scratch, int nscratch)
{
    (void)scratch;
    (void)nscratch;
    dense_res *s = DF(r);
    size_t nd = (size_t)r->maxN * r->d * sizeof(float);
    s->params = params;
    s->grads = grads;
    for (int l = 1; l <= r->L; l++)
        s->V[l] = r->be->alloc(nd);
    for (int k = 0; k <= s->K; k++) {
        s->X[k] = r->be->alloc(nd);
        s->dX[k] = r->be->alloc(nd);
        if (k > 0) {
            s->M[k] = r->be->alloc(nd);
            s->Y[k] = r->be->alloc(nd);
            s->dY[k] = r->be->alloc(nd);
        }
    }
    s->ones = r->be->alloc(2 * sizeof(float));
    r->be->upload(s->ones, (const float[2]){1.0f, 1.0f}, 2 * sizeof(float));
    s->coef = r->be->alloc(((size_t)s->K + 1) * sizeof(float));
}

static float *df_embed_out(ar_residual *r) { return DF(r)->X[0]; }

static const float *df_input_fwd(ar_residual *r, int l, int N, const ar_norm_out *nf)
{
    (void)N;
    (void)nf;
    dense_res *s = DF(r);
    int k = (l + 1) / 2;
    return l % 2 ? yb(s, k - 1) : s->M[k];
}

static float *df_output_buf(ar_residual *r, int l) { return DF(r)->V[l]; }

static void df_accept_fwd(ar_residual *r, int l, int N)
{
    dense_res *s = DF(r);
    const ar_backend *be = r->be;
    size_t n = (size_t)N * r->d;
    int k = (l + 1) / 2;
    /* Each sum in one pass over its output: a + b as the weighted sum
     * 0 + 1 a + 1 b (the bits of a copy then an add, but for the sign of a
     * zero), and the DWA over all k + 1 inputs with its two parameters'
     * values side by side in coef (the same operations in the same order
     * as the prev part, then the self term added into it). */
    if (l % 2) { /* M_k = y_{k-1} + v_{2k-1} */
        const float *in[2] = {yb(s, k - 1), s->V[l]};
        be->wsum_fwd(s->M[k], in, s->ones, 2, 0, n);
        return;
    }
    const float *in[2] = {s->M[k], s->V[l]};
    be->wsum_fwd(s->X[k], in, s->ones, 2, 0, n);
    if (k + 1 > AR_LIST_MAX) { /* more inputs than one list takes: in two */
        be->wsum_fwd(s->Y[k], (const float *const *)s->X, dpar(s, s->prev_idx[k]), k, 0, n);
        be->wsum_fwd(s->Y[k], (const float *const *)&s->X[k], dpar(s, s->self_idx[k]), 1, 1, n);
        return;
    }
    be->copy(s->coef, dpar(s, s->prev_idx[k]), (size_t)k);
    be->copy(s->coef + k, dpar(s, s->self_idx[k]), 1);
    be->wsum_fwd(s->Y[k], (const float *const *)s->X, s->coef, k + 1, 0, n);
}

static const float *df_final_fwd(ar_residual *r, int N)
{
    (void)N;
    return DF(r)->Y[DF(r)->K];
}

static void df_zero_grads(ar_residual *r, int N)
{
    dense_res *s = DF(r);
    size_t nd = (size_t)N * r->d * sizeof(float);
    for (int k = 0; k <= s->K; k++) {
        r->be->zero(s->dX[k], nd);
        if (k > 0)
            r->be->zero(s->dY[k], nd);
    }
}

static float *df_final_grad_buf(ar_residual *r) { return DF(r)->dY[DF(r)->K]; }
static void df_final_bwd(ar_residual *r, int N) { (void)r; (void)N; }

static float *df_output_grad(ar_residual *r, int l, int N)
{
    dense_res *s = DF(r);
    const ar_backend *be = r->be;
    size_t n = (size_t)N * r->d;
    int k = (l + 1) / 2;
    if (l % 2 == 0) { /* DWA k backward; then dX[k] is complete = dv_{2k} */
        be->wsum_bwd(s->dX, dgrad(s, s->prev_idx[k]), s->dY[k], (const float *const *)s->X,
                     dpar(s, s->prev_idx[k]), k, n);
        be->wsum_bwd(&s->dX[k], dgrad(s, s->self_idx[k]), s->dY[k], (const float *const *)&s->X[k],
                     dpar(s, s->self_idx[k]), 1, n);
        return s->dX[k];
    }
    /* dX[k] now holds dL/dM_k = dv_{2k-1}; y_{k-1} gets it too */
    be->add(dyb(s, k - 1), s->dX[k], n);
    return s->dX[k];
}

static const float *df_input_saved(ar_residual *r, int l, int N) { return df_input_fwd(r, l, N, NULL); }

static float *df_input_grad_buf(ar_residual *r, int l, int N, float *spare)
{
    (void)N;
    (void)spare;
    dense_res *s = DF(r);
    int k = (l + 1) / 2;
    return l % 2 ? dyb(s, k - 1) : s->dX[k];
}

static void df_input_bwd(ar_residual *r, int l, int N) { (void)r; (void)l; (void)N; }
static float *df_embed_grad(ar_residual *r) { return DF(r)->dX[0]; }
static int df_n_sources(ar_residual *r, int l) { (void)r; (void)l; return 0; }
static void df_mean_weights(ar_residual *r, int l, int N, float *out) { (void)r; (void)l; (void)N; (void)out; }
static const float *df_source(ar_residual *r, int l, int i) { (void)r; (void)l; (void)i; return 0; }

static void df_destroy(ar_residual *r)
{
    dense_res *s = DF(r);
    for (int l = 1; l <= r->L; l++)
        r->be->free(s->V[l]);
    for (int k = 0; k <= s->K; k++) {
        r->be->free(s->X[k]);
        r->be->free(s->dX[k]);
        if (k > 0) {
            r->be->free(s->M[k]);
            r->be->free(s->Y[k]);
            r->be->free(s->dY[k]);
        }
    }
    r->be->free(s->ones);
    r->be->free(s->coef);
    free(s->V);
    free(s->X);
    free(s->M);
    free(s->Y);
    free(s->dX);
    free(s->dY);
    free(s->prev_idx);
    free(s->self_idx);
    free(s);
}

static const ar_residual_vt df_vt = {
    .bind = df_bind,
    .embed_out = df_embed_out,
    .input_fwd = df_input_fwd,
    .output_buf = df_output_buf,
    .accept_fwd = df_accept_fwd,
    .final_fwd = df_final_fwd,
    .zero_grads = df_zero_grads,
    .final_grad_buf = df_final_grad_buf,
    .final_bwd = df_final_bwd,
    .output_grad = df_output_grad,
    .input_saved = df_input_saved,
    .input_grad_buf = df_input_grad_buf,
    .input_bwd = df_input_bwd,
    .embed_grad = df_embed_grad,
    .n_sources = df_n_sources,
    .mean_weights = df_mean_weights,
    .source = df_source,
    .destroy = df_destroy,
};

ar_residual *ar_residual_denseformer_create(const ar_model_cfg *cfg, const ar_backend *be, int maxN,
                                            ar_param_table *pt)
{
    dense_res *s = ar_xcalloc(1, sizeof *s);
    int L = ar_cfg_sublayers(cfg), K = cfg->n_layer;
    s->base.vt = &df_vt;
    s->base.be = be;
    s->base.L = L;
    s->base.d = cfg->d_model;
    s->base.maxN = maxN;
    s->K = K;
    s->pt = pt;
    s->V = ar_xcalloc((size_t)L + 1, sizeof(float *));
    s->X = ar_xcalloc((size_t)K + 1, sizeof(float *));
    s->M = ar_xcalloc((size_t)K + 1, sizeof(float *));
    s->Y = ar_xcalloc((size_t)K + 1, sizeof(float *));
    s->dX = ar_xcalloc((size_t)K + 1, sizeof(float *));
    s->dY = ar_xcalloc((size_t)K + 1, sizeof(float *));
    s->prev_idx = ar_xcalloc((size_t)K + 1, sizeof(int));
    s->self_idx = ar_xcalloc((size_t)K + 1, sizeof(int));
    for (int k = 1; k <= K; k++) {
        char nm[96];
        snprintf(nm, sizeof nm, "blocks.%d.dwa.prev", k - 1);
        s->prev_idx[k] = ar_params_add(pt, nm, k, 0, AR_INIT_ZEROS, 0, 2 * k);
        snprintf(nm, sizeof nm, "blocks.%d.dwa.self", k - 1);
        s->self_idx[k] = ar_params_add(pt, nm, 1, 0, AR_INIT_ONES, 0, 2 * k);
    }
    return &s->base;
}
