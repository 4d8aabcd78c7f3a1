/* Block AttnRes (DESIGN.md section 1; Full AttnRes is block_size 1).
 *
 * Sublayers are grouped into blocks of S consecutive sublayers; block 0 is
 * the embedding alone.  With P_l the running sum of the current block
 * (P_l = v_l when l opens a block, else P_{l-1} + v_l), block n's summary
 * is b_n = P_{end(n)}, end(n) = min(n*S, L), and its partial sum after i
 * sublayers is b_n^i = P_{(n-1)S+i}.  Sublayer l, the i-th of block n,
 * mixes by depth attention
 *     [b_0 .. b_{n-1}]            (i = 1)
 *     [b_0 .. b_{n-1}, P_{l-1}]   (i >= 2)
 * and h_out mixes [b_0 .. b_{nb}], nb = ceil(L/S), the last one possibly
 * partial.  Each mixer m = 1..L+1 (L+1 = final) has its own pseudo-query w_m
 * (zero-initialised, so every alpha starts at 1/n) and key-norm gain g_m.
 *
 * Backward: dv_l = dP_l once every later consumer has added into it; the
 * block chain adds dP_{l-1} += dP_l; each mixer scatters dL/dh into the dP
 * of its sources. */
#include <stdio.h>
#include <stdlib.h>

#include "error.h"
#include "residual.h"

typedef struct {
    int n;            /* number of sources */
    int *src;         /* indices into P */
    int q_idx, g_idx; /* parameter indices */
    float *alpha, *rstd;  /* maxN x n, saved for the backward */
    const float **sp; /* host array of source pointers */
    float **dsp;
} mixer;

typedef struct {
    ar_residual base;
    int S;
    float **P, **dP;  /* L+1 buffers */
    float **H;        /* mixer outputs: H[m] for m = 1..L+1 */
    float *dH;        /* one scratch for dL/dh of the mixer being differentiated */
    mixer *mx;        /* mx[1..L+1] */
    const ar_param_table *pt;
    float *params, *grads;
} depth_res;

#define D(r) ((depth_res *)(r))

static int block_end(int n, int S, int L) { return n * S < L ? n * S : L; }

/* Source list for mixer m (sublayer m, or the final state when m = L+1). */
static void plan_sources(mixer *x, int m, int S, int L)
{
    int nblk, partial;
    if (m == L + 1) {
        nblk = (L + S - 1) / S + 1; /* b_0 .. b_{ceil(L/S)} */
        partial = 0;
    } else {
        int blk = (m - 1) / S + 1, pos = (m - 1) % S + 1;
        nblk = blk;                 /* b_0 .. b_{blk-1} */
        partial = pos >= 2;
    }
    x->n = nblk + partial;
    x->src = ar_xcalloc((size_t)x->n, sizeof(int));
    for (int b = 0; b < nblk; b++)
        x->src[b] = block_end(b, S, L);
    if (partial)
        x->src[nblk] = m - 1;
    x->sp = ar_xcalloc((size_t)x->n, sizeof *x->sp);
    x->dsp = ar_xcalloc((size_t)x->n, sizeof *x->dsp);
}

static void depth_bind(ar_residual *r, float *params, float *grads)
{
    depth_res *s = D(r);
    const ar_backend *be = r->be;
    size_t bytes = (size_t)r->maxN * r->d * sizeof(float);
    s->params = params;
    s->grads = grads;
    for (int l = 0; l <= r->L; l++) {
        s->P[l] = be->alloc(bytes);
        s->dP[l] = be->alloc(bytes);
    }
    for (int m = 1; m <= r->L + 1; m++) {
        mixer *x = &s->mx[m];
        s->H[m] = be->alloc(bytes);
        x->alpha = be->alloc((size_t)r->maxN * x->n * sizeof(float));
        x->rstd = be->alloc((size_t)r->maxN * x->n * sizeof(float));
        for (int i = 0; i < x->n; i++) {
            x->sp[i] = s->P[x->src[i]];
            x->dsp[i] = s->dP[x->src[i]];
        }
    }
    s->dH = be->alloc(bytes);
}

static const float *pq(depth_res *s, int idx) { return s->params + s->pt->p[idx].offset; }
static float *gq(depth_res *s, int idx) { return s->grads + s->pt->p[idx].offset; }

static const float *mix_fwd(depth_res *s, int m, int N)
{
    mixer *x = &s->mx[m];
    s->base.be->depth_attn_fwd(s->H[m], x->alpha, x->rstd, x->sp, x->n, pq(s, x->q_idx),
                               pq(s, x->g_idx), N, s->base.d);
    return s->H[m];
}

static void mix_bwd(depth_res *s, int m, const float *dh, int N)
{
    mixer *x = &s->mx[m];
    s->base.be->depth_attn_bwd(x->dsp, gq(s, x->q_idx), gq(s, x->g_idx), dh, x->alpha, x->rstd,
                               x->sp, x->n, pq(s, x->q_idx), pq(s, x->g_idx), N, s->base.d);
}

static int opens_block(depth_res *s, int l) { return (l - 1) % s->S == 0; }

static float *depth_embed_out(ar_residual *r) { return D(r)->P[0]; }
static const float *depth_input_fwd(ar_residual *r, int l, int N) { return mix_fwd(D(r), l, N); }
static float *depth_output_buf(ar_residual *r, int l) { return D(r)->P[l]; }

static void depth_accept_fwd(ar_residual *r, int l, int N)
{
    if (!opens_block(D(r), l))
        r->be->add(D(r)->P[l], D(r)->P[l - 1], (size_t)N * r->d);
}

static const float *depth_final_fwd(ar_residual *r, int N) { return mix_fwd(D(r), r->L + 1, N); }

static void depth_zero_grads(ar_residual *r, int N)
{
    for (int l = 0; l <= r->L; l++)
        r->be->zero(D(r)->dP[l], (size_t)N * r->d * sizeof(float));
    r->be->zero(D(r)->dH, (size_t)N * r->d * sizeof(float));
}

static float *depth_final_grad_buf(ar_residual *r) { return D(r)->dH; }

static void depth_final_bwd(ar_residual *r, int N) { mix_bwd(D(r), r->L + 1, D(r)->dH, N); }

static float *depth_output_grad(ar_residual *r, int l, int N)
{
    if (!opens_block(D(r), l))
        r->be->add(D(r)->dP[l - 1], D(r)->dP[l], (size_t)N * r->d);
    return D(r)->dP[l];
}

static float *depth_input_grad_buf(ar_residual *r, int l, int N)
{
    (void)l;
    r->be->zero(D(r)->dH, (size_t)N * r->d * sizeof(float));
    return D(r)->dH;
}

static void depth_input_bwd(ar_residual *r, int l, int N) { mix_bwd(D(r), l, D(r)->dH, N); }
static float *depth_embed_grad(ar_residual *r) { return D(r)->dP[0]; }
static int depth_n_sources(ar_residual *r, int l) { return D(r)->mx[l].n; }

static void depth_mean_weights(ar_residual *r, int l, int N, float *out)
{
    mixer *x = &D(r)->mx[l];
    float *a = ar_xmalloc((size_t)N * x->n * sizeof(float));
    r->be->download(a, x->alpha, (size_t)N * x->n * sizeof(float));
    for (int i = 0; i < x->n; i++) {
        double acc = 0;
        for (int t = 0; t < N; t++)
            acc += a[(size_t)t * x->n + i];
        out[i] = (float)(acc / N);
    }
    free(a);
}

static const float *depth_source(ar_residual *r, int l, int i) { return D(r)->mx[l].sp[i]; }

static void depth_destroy(ar_residual *r)
{
    depth_res *s = D(r);
    const ar_backend *be = r->be;
    for (int l = 0; l <= r->L; l++) {
        be->free(s->P[l]);
        be->free(s->dP[l]);
    }
    for (int m = 1; m <= r->L + 1; m++) {
        mixer *x = &s->mx[m];
        be->free(s->H[m]);
        be->free(x->alpha);
        be->free(x->rstd);
        free(x->src);
        free(x->sp);
        free(x->dsp);
    }
    be->free(s->dH);
    free(s->P);
    free(s->dP);
    free(s->H);
    free(s->mx);
    free(s);
}

static const ar_residual_vt depth_vt = {
    .bind = depth_bind,
    .embed_out = depth_embed_out,
    .input_fwd = depth_input_fwd,
    .output_buf = depth_output_buf,
    .accept_fwd = depth_accept_fwd,
    .final_fwd = depth_final_fwd,
    .zero_grads = depth_zero_grads,
    .final_grad_buf = depth_final_grad_buf,
    .final_bwd = depth_final_bwd,
    .output_grad = depth_output_grad,
    .input_grad_buf = depth_input_grad_buf,
    .input_bwd = depth_input_bwd,
    .embed_grad = depth_embed_grad,
    .n_sources = depth_n_sources,
    .mean_weights = depth_mean_weights,
    .source = depth_source,
    .destroy = depth_destroy,
};

ar_residual *ar_residual_depth_create(const ar_model_cfg *cfg, const ar_backend *be, int maxN,
                                      ar_param_table *pt)
{
    depth_res *s = ar_xcalloc(1, sizeof *s);
    int L = ar_cfg_sublayers(cfg), d = cfg->d_model;
    s->base.vt = &depth_vt;
    s->base.be = be;
    s->base.L = L;
    s->base.d = d;
    s->base.maxN = maxN;
    s->S = ar_cfg_block_size(cfg);
    s->pt = pt;
    s->P = ar_xcalloc((size_t)L + 1, sizeof(float *));
    s->dP = ar_xcalloc((size_t)L + 1, sizeof(float *));
    s->H = ar_xcalloc((size_t)L + 2, sizeof(float *));
    s->mx = ar_xcalloc((size_t)L + 2, sizeof(mixer));
    for (int m = 1; m <= L + 1; m++) {
        char qn[96], gn[96];
        if (m == L + 1) {
            snprintf(qn, sizeof qn, "final_res.query");
            snprintf(gn, sizeof gn, "final_res.norm.weight");
        } else {
            const char *which = (m % 2) ? "attn_res" : "mlp_res";
            snprintf(qn, sizeof qn, "blocks.%d.%s.query", (m - 1) / 2, which);
            snprintf(gn, sizeof gn, "blocks.%d.%s.norm.weight", (m - 1) / 2, which);
        }
        plan_sources(&s->mx[m], m, s->S, L);
        s->mx[m].q_idx = ar_params_add(pt, qn, d, 0, AR_INIT_ZEROS, 0, m);
        s->mx[m].g_idx = ar_params_add(pt, gn, d, 0, AR_INIT_ONES, 0, m);
    }
    return &s->base;
}
