/* Baseline PreNorm residual:  h_l = v_0 + ... + v_{l-1},  h_out = v_0 + ... + v_L.
 *
 * One running sum P_l = P_{l-1} + v_l; the input of sublayer l is P_{l-1}
 * itself (no copy), which also keeps it for the sublayer's backward.
 * Backward: dv_l = dP_l and dP_{l-1} = dP_l + dL/dh_l, all in one buffer dR:
 * it holds dP_l when sublayer l's backward starts (which reads it first), and
 * the sublayer adds its dL/dh_l into it last. */
#include <stdlib.h>

#include "../core/error.h"
#include "residual.h"

typedef struct {
    ar_residual base;
    float **P;  /* L+1 buffers of maxN x d each */
    float *dR;  /* the running gradient dP_l */
} sum_res;

#define S(r) ((sum_res *)(r))

static void sum_bind(ar_residual *r, float *params, float *grads, float *const *scratch,
                     int nscratch)
{
    (void)params;
    (void)grads;
    (void)scratch;
    (void)nscratch;
    sum_res *s = S(r);
    size_t bytes = (size_t)r->maxN * r->d * sizeof(float);
    /* the rows are activations (bf16 storage under bf16: lib/backend.h,
     * each sum rounded once); the running gradient fp32 */
    for (int l = 0; l <= r->L; l++)
        s->P[l] = ar_alloc_act(r->be, (size_t)r->maxN * r->d);
    s->dR = r->be->alloc(bytes);
}

static float *sum_embed_out(ar_residual *r) { return S(r)->P[0]; }
static const float *sum_input_fwd(ar_residual *r, int l, int N, const ar_norm_out *nf)
{
    (void)N;
    (void)nf;
    return S(r)->P[l - 1];
}
static float *sum_output_buf(ar_residual *r, int l) { return S(r)->P[l]; }

static void sum_accept_fwd(ar_residual *r, int l, int N)
{
    r->be->add(S(r)->P[l], S(r)->P[l - 1], (size_t)N * r->d);
}

static const float *sum_final_fwd(ar_residual *r, int N) { (void)N; return S(r)->P[r->L]; }

static float *sum_final_grad_buf(ar_residual *r) { return S(r)->dR; }
static void sum_final_bwd(ar_residual *r, int N) { (void)r; (void)N; }

static float *sum_output_grad(ar_residual *r, int l, int N) { (void)l; (void)N; return S(r)->dR; }

static const float *sum_input_saved(ar_residual *r, int l, int N) { (void)N; return S(r)->P[l - 1]; }
static float *sum_input_grad_buf(ar_residual *r, int l, int N, float *spare)
{
    (void)l;
    (void)N;
    (void)spare;
    return S(r)->dR;
}
static void sum_input_bwd(ar_residual *r, int l, int N) { (void)r; (void)l; (void)N; }
static float *sum_embed_grad(ar_residual *r) { return S(r)->dR; }
static int sum_n_sources(ar_residual *r, int l) { (void)r; (void)l; return 0; }
static void sum_mean_weights(ar_residual *r, int l, int N, float *out) { (void)r; (void)l; (void)N; (void)out; }

static const float *sum_source(ar_residual *r, int l, int i) { (void)r; (void)l; (void)i; return 0; }

/* The state after sublayer q is P_q alone; its gradient is the running dR
 * (dP_q once the sublayers above q are done). */
static float *sum_row(ar_residual *r, int q) { return S(r)->P[q]; }
static float *sum_row_grad(ar_residual *r, int q) { (void)q; return S(r)->dR; }
static void sum_zero_row_grads(ar_residual *r, int N)
{
    r->be->zero(S(r)->dR, (size_t)N * r->d * sizeof(float));
}

static void sum_destroy(ar_residual *r)
{
    sum_res *s = S(r);
    for (int l = 0; l <= r->L; l++)
        r->be->free(s->P[l]);
    r->be->free(s->dR);
    free(s->P);
    free(s);
}

static const ar_residual_vt sum_vt = {
    .bind = sum_bind,
    .embed_out = sum_embed_out,
    .input_fwd = sum_input_fwd,
    .output_buf = sum_output_buf,
    .accept_fwd = sum_accept_fwd,
    .final_fwd = sum_final_fwd,
    /* no zero_grads: the caller writes dL/dh_out into dR first
     * (final_grad_overwrite), and every later gradient adds onto that */
    .final_grad_buf = sum_final_grad_buf,
    .final_bwd = sum_final_bwd,
    .output_grad = sum_output_grad,
    .input_saved = sum_input_saved,
    .input_grad_buf = sum_input_grad_buf,
    .input_bwd = sum_input_bwd,
    .embed_grad = sum_embed_grad,
    .n_sources = sum_n_sources,
    .mean_weights = sum_mean_weights,
    .source = sum_source,
    .row = sum_row,
    .row_grad = sum_row_grad,
    .zero_row_grads = sum_zero_row_grads,
    .destroy = sum_destroy,
};

ar_residual *ar_residual_sum_create(const ar_model_cfg *cfg, const ar_backend *be, int maxN)
{
    sum_res *s = ar_xcalloc(1, sizeof *s);
    s->base.vt = &sum_vt;
    s->base.be = be;
    s->base.L = ar_cfg_sublayers(cfg);
    s->base.d = cfg->d_model;
    s->base.maxN = maxN;
    s->base.final_grad_overwrite = 1;
    s->P = ar_xcalloc((size_t)s->base.L + 1, sizeof(float *));
    return &s->base;
}
