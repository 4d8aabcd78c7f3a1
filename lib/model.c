#include "model.h"
#include "optim.h"

#include <gsl/gsl_randist.h>
#include <gsl/gsl_rng.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int add_matrix(ar_model *m, const char *fmt, int k, int rows, int cols, float std, int group)
{
    char name[96];
    snprintf(name, sizeof name, fmt, k);
    return ar_params_add(&m->pt, name, rows, cols, AR_INIT_NORMAL, std, group);
}

static int add_gain(ar_model *m, const char *fmt, int k, int group)
{
    char name[96];
    snprintf(name, sizeof name, fmt, k);
    return ar_params_add(&m->pt, name, m->d, 0, AR_INIT_ONES, 0, group);
}

/* Parameter layout in the order of the tensor list (docs/reference.md §3). */
static void plan_params(ar_model *m)
{
    int d = m->d, F = m->F, V = m->V, n = m->cfg.n_layer;
    float std = 0.02f, out_std = 0.02f / sqrtf(2.0f * n);
    m->embed = ar_params_add(&m->pt, "embed.weight", V, d, AR_INIT_NORMAL, std, 0);
    m->blk = ar_xcalloc((size_t)n, sizeof *m->blk);
    for (int k = 0; k < n; k++) {
        ar_block_idx *b = &m->blk[k];
        int la = 2 * k + 1, lm = 2 * k + 2;
        b->attn_norm = add_gain(m, "blocks.%d.attn_norm.weight", k, la);
        b->q = add_matrix(m, "blocks.%d.attn.q.weight", k, d, d, std, la);
        b->k = add_matrix(m, "blocks.%d.attn.k.weight", k, d, d, std, la);
        b->v = add_matrix(m, "blocks.%d.attn.v.weight", k, d, d, std, la);
        b->o = add_matrix(m, "blocks.%d.attn.o.weight", k, d, d, out_std, la);
        b->mlp_norm = add_gain(m, "blocks.%d.mlp_norm.weight", k, lm);
        b->gate = add_matrix(m, "blocks.%d.mlp.gate.weight", k, F, d, std, lm);
        b->up = add_matrix(m, "blocks.%d.mlp.up.weight", k, F, d, std, lm);
        b->down = add_matrix(m, "blocks.%d.mlp.down.weight", k, d, F, out_std, lm);
    }
    m->final_norm = ar_params_add(&m->pt, "final_norm.weight", d, 0, AR_INIT_ONES, 0, m->L + 1);
    m->lm_head = ar_params_add(&m->pt, "lm_head.weight", V, d, AR_INIT_NORMAL, std, m->L + 1);
}

static float *falloc(const ar_backend *be, size_t n) { return be->alloc(n * sizeof(float)); }

int ar_head_chunk = 0;

/* N rows in the fewest chunks of at most `most` rows, as equal as can be:
 * rows per chunk (the last chunk may be shorter).  Never more than most. */
static int split_rows(int N, int most)
{
    int nc = (N + most - 1) / most;
    return (N + nc - 1) / nc;
}

int ar_head_rows(int V, int N) { return ar_head_rows_within(V, N, AR_HEAD_CHUNK_FLOATS); }

int ar_head_rows_within(int V, int N, size_t floats)
{
    size_t most = ar_head_chunk > 0 ? (size_t)ar_head_chunk : floats / (size_t)V;
    if (most < 1)
        most = 1;
    return most < (size_t)N ? split_rows(N, (int)most) : N;
}

/* The gradient buckets (model.h) from the parameter layout: every tensor of
 * block k, then final_norm with lm_head, are contiguous; the residual
 * scheme's tensors come after lm_head. */
static void plan_buckets(ar_model *m)
{
    int n = m->cfg.n_layer;
    const ar_param *p = m->pt.p;
    m->nbuckets = n + 3;
    m->bucket_off = ar_xcalloc((size_t)m->nbuckets, sizeof(size_t));
    m->bucket_len = ar_xcalloc((size_t)m->nbuckets, sizeof(size_t));
    size_t head_end = p[m->lm_head].offset + p[m->lm_head].numel;
    m->bucket_off[0] = p[m->final_norm].offset;
    m->bucket_len[0] = head_end - m->bucket_off[0];
    for (int k = n - 1; k >= 0; k--) {
        size_t lo = p[m->blk[k].attn_norm].offset;
        size_t hi = k + 1 < n ? p[m->blk[k + 1].attn_norm].offset : p[m->final_norm].offset;
        m->bucket_off[n - k] = lo;
        m->bucket_len[n - k] = hi - lo;
    }
    m->bucket_off[n + 1] = head_end;
    m->bucket_len[n + 1] = m->pt.total - head_end;
    m->bucket_off[n + 2] = p[m->embed].offset;
    m->bucket_len[n + 2] = p[m->embed].numel;
}

static void bucket_ready(ar_model *m, int b)
{
    if (m->grad_ready)
        m->grad_ready(m, b, m->grad_ready_ud);
}

/* runs (or NULL: everything): which parts this copy of the model runs
 * (model.h, ar_model_split); share: the model whose backward scratch it
 * borrows (the buffers no forward state lives in between two calls). */
static void alloc_activations(ar_model *m, const unsigned char *runs, const ar_model *share)
{
    const ar_backend *be = m->be;
    size_t N = (size_t)m->maxB * m->T, d = m->d, F = m->F, V = m->V;
    size_t att = be->attention_state(m->maxB, m->T, m->nh); /* saved, and the backward's scratch */
    int L = m->L;
    m->tok = be->alloc(N * sizeof(int32_t));
    m->tgt = be->alloc(N * sizeof(int32_t));
    m->act = ar_xcalloc((size_t)m->cfg.n_layer, sizeof *m->act);
    /* recompute: one set of sublayer internals for every block, formed
     * again in the backward (model.h) */
    int rc = m->cfg.recompute == AR_RECOMPUTE_SUBLAYER;
    ar_block_act *in = &m->internals;
    if (rc) {
        in->q = ar_alloc_act(be, N * d);
        in->k = ar_alloc_act(be, N * d);
        in->v = ar_alloc_act(be, N * d);
        in->att = falloc(be, att);
        in->y = ar_alloc_act(be, N * d);
        in->gate = ar_alloc_act(be, N * F);
        in->up = ar_alloc_act(be, N * F);
        in->act = ar_alloc_act(be, N * F);
    }
    for (int k = 0; k < m->cfg.n_layer; k++) {
        if (runs && !runs[2 * k + 1] && !runs[2 * k + 2])
            continue;
        ar_block_act *a = &m->act[k];
        a->xn = ar_alloc_act(be, N * d);
        a->rstd = falloc(be, N);
        a->mxn = ar_alloc_act(be, N * d);
        a->mrstd = falloc(be, N);
        a->q = rc ? in->q : ar_alloc_act(be, N * d);
        a->k = rc ? in->k : ar_alloc_act(be, N * d);
        a->v = rc ? in->v : ar_alloc_act(be, N * d);
        a->att = rc ? in->att : falloc(be, att);
        a->y = rc ? in->y : ar_alloc_act(be, N * d);
        a->gate = rc ? in->gate : ar_alloc_act(be, N * F);
        a->up = rc ? in->up : ar_alloc_act(be, N * F);
        a->act = rc ? in->act : ar_alloc_act(be, N * F);
    }
    if (!runs || runs[L + 1]) {
        m->head_rows = ar_head_rows_within(m->V, (int)N, be->head_floats());
        m->hn = falloc(be, N * d);
        m->frstd = falloc(be, N);
        m->logits_c = falloc(be, (size_t)m->head_rows * V);
        m->probs_c = falloc(be, (size_t)m->head_rows * V);
        m->losses = falloc(be, N);
        m->head_part = ar_xcalloc(N / (size_t)m->head_rows + 1, sizeof(double));
        ar_model_loss_slots(m, 1);
    }
    m->head_kept = -1;
    /* lent to the residual scheme through the forward (model.h): own */
    m->dxn = falloc(be, N * d);
    m->dq = falloc(be, N * d);
    m->dk = falloc(be, N * d);
    m->dv = falloc(be, N * d);
    m->dy = falloc(be, N * d);
    if (share) {
        m->datt = share->datt;
        m->dgate = share->dgate;
        m->dup = share->dup;
        m->dact = share->dact;
        m->dhn = share->dhn;
    } else {
        m->datt = falloc(be, att);
        m->dgate = falloc(be, N * F);
        m->dup = falloc(be, N * F);
        m->dact = falloc(be, N * F);
        m->dhn = falloc(be, N * d);
    }
    m->out_rms = ar_xcalloc((size_t)m->L, sizeof(double));
    m->depth_w = ar_xcalloc((size_t)(m->L + 1) * (m->L + 1), sizeof(float));
    m->res_in = ar_xcalloc((size_t)m->L + 1, sizeof *m->res_in);
}

/* The backend's bf16 products read this model's weights from one copy a
 * step (lib/backend.h, set_weight_copy), which follows the model whose
 * products run: several models (bench's variants) take turns.  The token
 * embedding, first in the arena, is left out: no product reads it (the
 * lookup reads its fp32 rows), and at GPT-2's vocabulary its copy would
 * be 77 MB. */
static void use_weight_copy(const ar_model *m)
{
    const ar_param *emb = &m->pt.p[m->embed];
    size_t skip = emb->offset == 0 ? emb->numel : 0;
    m->be->set_weight_copy(m->params + skip, m->pt.total - skip);
}

int ar_model_create(ar_model **out, const ar_model_cfg *cfg, const ar_backend *be, int max_batch,
                    ar_err *e)
{
    return ar_model_create_split(out, cfg, be, max_batch, NULL, e);
}

int ar_model_create_split(ar_model **out, const ar_model_cfg *cfg, const ar_backend *be, int max_batch,
                          const ar_model_split *sp, ar_err *e)
{
    if (cfg->d_model % cfg->n_head || (cfg->d_model / cfg->n_head) % 2)
        return ar_fail(e, "'model.d_model' %d must split into 'model.n_head' %d heads of even size",
                       cfg->d_model, cfg->n_head);
    ar_model *m = ar_xcalloc(1, sizeof *m);
    m->cfg = *cfg;
    m->be = be;
    m->maxB = max_batch;
    m->T = cfg->seq_len;
    m->L = ar_cfg_sublayers(cfg);
    m->d = cfg->d_model;
    m->F = cfg->d_ff;
    m->V = cfg->vocab;
    m->nh = cfg->n_head;
    m->hd = cfg->d_model / cfg->n_head;
    plan_params(m);
    m->res = ar_residual_create(cfg, be, max_batch * m->T, sp ? sp->nchunks : 1, &m->pt);
    plan_buckets(m);
    size_t first, nsums = ar_norm_chunks(m, m->nbuckets - 1, &first) + first; /* the norm's chunk grid */
    m->norm_sums = be->alloc((nsums ? nsums : 1) * sizeof(double));
    const ar_model *share = sp ? sp->share : NULL;
    m->shared = share != NULL;
    if (share && (share->pt.total != m->pt.total || share->maxB < max_batch)) {
        ar_model_free(m);
        return ar_fail(e, "internal: a model copy must have its model's parameter layout and batch");
    }
    m->params = share ? share->params : falloc(be, m->pt.total);
    m->grads = share ? share->grads : falloc(be, m->pt.total);
    alloc_activations(m, sp ? sp->runs : NULL, share);
    /* The sublayer backward's N x d scratch is idle through the forward: the
     * residual scheme works there (dy first: it is the spare, idle again
     * from the end of each sublayer's backward to the next one's start). */
    float *scratch[] = {m->dy, m->dxn, m->dq, m->dk, m->dv};
    m->res->vt->bind(m->res, m->params, m->grads, scratch, 5);
    *out = m;
    return 0;
}

void ar_model_free(ar_model *m)
{
    if (!m)
        return;
    const ar_backend *be = m->be;
    if (m->res)
        m->res->vt->destroy(m->res);
    int rc = m->cfg.recompute == AR_RECOMPUTE_SUBLAYER;
    for (int k = 0; m->act && k < m->cfg.n_layer; k++) {
        ar_block_act *a = &m->act[k];
        float *bufs[] = {a->xn, a->rstd, a->mxn, a->mrstd, a->q, a->k, a->v, a->att, a->y,
                         a->gate, a->up, a->act};
        size_t own = rc ? 4 : sizeof bufs / sizeof *bufs; /* the internals are shared */
        for (size_t i = 0; i < own; i++)
            if (bufs[i])
                be->free(bufs[i]);
    }
    {
        ar_block_act *in = &m->internals;
        float *bufs[] = {in->q, in->k, in->v, in->att, in->y, in->gate, in->up, in->act};
        for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++)
            if (bufs[i])
                be->free(bufs[i]);
    }
    float *own[] = {m->hn, m->frstd, m->logits_c, m->probs_c, m->losses, m->dxn, m->dq, m->dk, m->dv, m->dy};
    for (size_t i = 0; i < sizeof own / sizeof *own; i++)
        if (own[i])
            be->free(own[i]);
    if (!m->shared) {
        float *bufs[] = {m->params, m->grads, m->datt, m->dgate, m->dup, m->dact, m->dhn};
        for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++)
            if (bufs[i])
                be->free(bufs[i]);
    }
    if (m->tok)
        be->free(m->tok);
    if (m->tgt)
        be->free(m->tgt);
    if (m->norm_sums)
        be->free(m->norm_sums);
    if (m->loss_parts)
        be->free(m->loss_parts);
    free(m->act);
    free(m->blk);
    free(m->bucket_off);
    free(m->bucket_len);
    free(m->out_rms);
    free(m->depth_w);
    free(m->res_in);
    free(m->head_part);
    ar_params_free(&m->pt);
    free(m);
}

void ar_model_init(ar_model *m, uint64_t seed)
{
    gsl_rng *r = gsl_rng_alloc(gsl_rng_mt19937);
    gsl_rng_set(r, (unsigned long)seed);
    float *host = ar_xcalloc(m->pt.total, sizeof(float));
    for (int i = 0; i < m->pt.n; i++) {
        const ar_param *p = &m->pt.p[i];
        float *x = host + p->offset;
        for (size_t j = 0; j < p->numel; j++)
            x[j] = p->init == AR_INIT_ONES    ? 1.0f
                   : p->init == AR_INIT_ZEROS ? 0.0f
                                              : (float)gsl_ran_gaussian_ziggurat(r, p->std);
    }
    m->be->upload(m->params, host, m->pt.total * sizeof(float));
    free(host);
    gsl_rng_free(r);
}

#define P(i) ar_model_param(m, (i))
#define G(i) ar_model_grad(m, (i))

/* Attention sublayer: v = Wo attn(rope(Wq xn), rope(Wk xn), Wv xn), xn = RMSNorm(h)
 * (xn already formed by the caller). */
static void attn_internals(ar_model *m, int k)
{
    const ar_backend *be = m->be;
    const ar_block_idx *b = &m->blk[k];
    ar_block_act *a = &m->act[k];
    int N = m->N, d = m->d;
    be->matmul_fwd(a->q, a->xn, P(b->q), N, d, d);
    be->matmul_fwd(a->k, a->xn, P(b->k), N, d, d);
    be->matmul_fwd(a->v, a->xn, P(b->v), N, d, d);
    be->rope_fwd(a->q, m->B, m->T, m->nh, m->hd);
    be->rope_fwd(a->k, m->B, m->T, m->nh, m->hd);
    ar_attention at = {a->q, a->k, a->v, a->att, m->B, m->T, m->nh, m->hd};
    be->attention_fwd(&at, a->y);
}

static void attn_forward(ar_model *m, int k, float *out)
{
    attn_internals(m, k);
    m->be->matmul_fwd(out, m->act[k].y, P(m->blk[k].o), m->N, m->d, m->d);
}

/* Attention backward from dout down to dL/dxn (in m->dxn); the RMSNorm is
 * left to the caller, which fetches h only then.  m->dy is free again on
 * return. */
static void attn_backward(ar_model *m, int k, const float *dout)
{
    const ar_backend *be = m->be;
    const ar_block_idx *b = &m->blk[k];
    ar_block_act *a = &m->act[k];
    int N = m->N, d = m->d;
    if (m->cfg.recompute == AR_RECOMPUTE_SUBLAYER)
        attn_internals(m, k); /* the forward's q, k, v, probabilities and y again, from xn */
    be->matmul_bwd(m->dy, G(b->o), dout, a->y, P(b->o), 1, N, d, d);
    ar_attention at = {a->q, a->k, a->v, a->att, m->B, m->T, m->nh, m->hd};
    be->attention_bwd(&at, a->y, m->dy, m->dq, m->dk, m->dv, m->datt);
    be->rope_bwd(m->dq, m->B, m->T, m->nh, m->hd);
    be->rope_bwd(m->dk, m->B, m->T, m->nh, m->hd);
    be->matmul_bwd(m->dxn, G(b->q), m->dq, a->xn, P(b->q), 1, N, d, d);
    be->matmul_bwd(m->dxn, G(b->k), m->dk, a->xn, P(b->k), 0, N, d, d);
    be->matmul_bwd(m->dxn, G(b->v), m->dv, a->xn, P(b->v), 0, N, d, d);
}

/* MLP sublayer: v = W_down (silu(W_gate xn) * (W_up xn)), xn = RMSNorm(h)
 * (xn already formed by the caller). */
static void mlp_internals(ar_model *m, int k)
{
    const ar_backend *be = m->be;
    const ar_block_idx *b = &m->blk[k];
    ar_block_act *a = &m->act[k];
    int N = m->N, d = m->d, F = m->F;
    be->matmul_fwd(a->gate, a->mxn, P(b->gate), N, d, F);
    be->matmul_fwd(a->up, a->mxn, P(b->up), N, d, F);
    be->swiglu_fwd(a->act, a->gate, a->up, (size_t)N * F);
}

static void mlp_forward(ar_model *m, int k, float *out)
{
    mlp_internals(m, k);
    m->be->matmul_fwd(out, m->act[k].act, P(m->blk[k].down), m->N, m->F, m->d);
}

/* MLP backward from dout down to dL/dxn (in m->dxn). */
static void mlp_backward(ar_model *m, int k, const float *dout)
{
    const ar_backend *be = m->be;
    const ar_block_idx *b = &m->blk[k];
    ar_block_act *a = &m->act[k];
    int N = m->N, d = m->d, F = m->F;
    if (m->cfg.recompute == AR_RECOMPUTE_SUBLAYER)
        mlp_internals(m, k); /* gate, up and their SwiGLU again, from xn */
    be->matmul_bwd(m->dact, G(b->down), dout, a->act, P(b->down), 1, N, F, d);
    be->swiglu_bwd(m->dgate, m->dup, m->dact, a->gate, a->up, (size_t)N * F);
    be->matmul_bwd(m->dxn, G(b->gate), m->dgate, a->mxn, P(b->gate), 1, N, d, F);
    be->matmul_bwd(m->dxn, G(b->up), m->dup, a->mxn, P(b->up), 0, N, d, F);
}

void ar_model_set_batch(ar_model *m, int B)
{
    m->B = B;
    m->N = B * m->T;
    m->res->weights_unread = 0; /* every forward starts here */
}

void ar_model_forward_embed(ar_model *m, const int32_t *inputs)
{
    use_weight_copy(m);
    const ar_backend *be = m->be;
    ar_residual *r = m->res;
    be->upload(m->tok, inputs, (size_t)m->N * sizeof(int32_t));
    be->embedding_fwd(r->vt->embed_out(r), m->tok, P(m->embed), m->N, m->d);
}

void ar_model_forward_sublayers(ar_model *m, int l0, int l1)
{
    use_weight_copy(m);
    const ar_backend *be = m->be;
    ar_residual *r = m->res;
    int N = m->N, d = m->d;
    for (int l = l0; l <= l1; l++) {
        int k = (l - 1) / 2, attn = l % 2;
        ar_block_act *a = &m->act[k];
        ar_norm_out nf = {P(attn ? m->blk[k].attn_norm : m->blk[k].mlp_norm),
                          attn ? a->xn : a->mxn, attn ? a->rstd : a->mrstd};
        const float *h = m->res_in[l] = r->vt->input_fwd(r, l, N, &nf);
        if (h) /* else the scheme normalised h_l itself */
            be->rmsnorm_fwd(nf.xn, nf.rstd, h, nf.gain, N, d);
        float *out = r->vt->output_buf(r, l);
        if (attn)
            attn_forward(m, k, out);
        else
            mlp_forward(m, k, out);
        if (m->collect_stats)
            m->out_rms[l - 1] = sqrt(be->sumsq(out, (size_t)N * d) / ((double)N * d));
        r->vt->accept_fwd(r, l, N);
    }
}

/* Rows per chunk of this batch (at most head_rows, the buffers' rows):
 * even chunks, so that the one the backward finds already computed is as
 * large as the others. */
static int chunk_rows(const ar_model *m) { return split_rows(m->N, m->head_rows); }

/* Head chunks of this batch */
static int head_chunks(const ar_model *m) { return (m->N - 1) / chunk_rows(m) + 1; }

void ar_model_loss_slots(ar_model *m, int slots)
{
    if (slots <= m->loss_slots || !m->head_rows) /* (a pipeline stage without the head) */
        return;
    if (m->loss_parts)
        m->be->free(m->loss_parts);
    size_t nc = (size_t)m->maxB * m->T / (size_t)m->head_rows + 1; /* the most chunks of a batch */
    m->loss_parts = m->be->alloc((size_t)slots * nc * sizeof(double));
    m->loss_slots = slots;
}

void ar_model_set_loss_slot(ar_model *m, int slot)
{
    ar_model_loss_slots(m, slot + 1);
    m->loss_slot = slot;
}

void ar_model_loss_on_device(ar_model *m, int on) { m->loss_on_device = on != 0; }

const double *ar_model_loss_parts(const ar_model *m, int *nc)
{
    *nc = head_chunks(m);
    return m->loss_parts;
}

/* logits_c = hn[r0..r0+n) W^T for the chunk of n rows from row r0; returns
 * where its loss sum goes, this slot's part c = r0 / rows (device) */
static double *chunk_logits(ar_model *m, int r0, int n)
{
    m->be->matmul_fwd(m->logits_c, m->hn + (size_t)r0 * m->d, P(m->lm_head), n, m->d, m->V);
    return m->loss_parts + (size_t)m->loss_slot * head_chunks(m) + r0 / chunk_rows(m);
}

/* dhn rows r0..r0+n = dlogits W (each row from one chunk: no zeroing) and
 * dW += dlogits^T hn_c, dlogits in probs_c */
static void chunk_dlogits_back(ar_model *m, int r0, int n)
{
    int d = m->d;
    m->be->matmul_bwd(m->dhn + (size_t)r0 * d, G(m->lm_head), m->probs_c, m->hn + (size_t)r0 * d, P(m->lm_head),
                      1, n, d, m->V);
}

/* One chunk of n rows from row r0 of the head (model.h), its loss sum into
 * its part (device):
 *   logits_c = hn[r0..r0+n) W^T;  probs_c = softmax(logits_c)
 *   losses[r0+i] = log sum_v exp logits_c[i,v] - logits_c[i, target] */
static void head_chunk_fwd(ar_model *m, int r0, int n)
{
    double *part = chunk_logits(m, r0, n);
    m->be->xent_fwd(m->losses + r0, m->probs_c, m->logits_c, m->tgt + r0, n, m->V, part);
}

static int imin(int a, int b) { return a < b ? a : b; }

/* head_chunk_fwd, then head_chunk_bwd: the loss and dlogits by one op
 * (xent_fwd_bwd, the bits of xent_fwd then xent_bwd), into probs_c */
static void head_chunk_grad(ar_model *m, int r0, int n, float scale)
{
    double *part = chunk_logits(m, r0, n);
    m->be->xent_fwd_bwd(m->losses + r0, m->probs_c, m->logits_c, m->tgt + r0, n, m->V, scale, part);
    chunk_dlogits_back(m, r0, n);
}

/* dlogits -> dhn rows r0..r0+n and dW += dlogits^T hn_c, for the chunk of
 * rows r0.. whose probabilities are in probs_c (turned into dlogits in place) */
static void head_chunk_bwd(ar_model *m, int r0, int n, float scale)
{
    m->be->xent_bwd(m->probs_c, m->probs_c, m->tgt + r0, scale, n, m->V);
    chunk_dlogits_back(m, r0, n);
}

/* The head from h_out: hn = final_norm(h_out), then the loss over chunks of
 * rows.  grad_scale > 0 (ar_model_forward_backward): each chunk's gradient
 * is taken while its probabilities are at hand, from the last chunk down,
 * and the backward finds the head done; these are the operations of the
 * backward's own chunk loop, in its order, on the same values, so the
 * gradients are the same bits, with no chunk's logits computed twice. */
static double forward_head(ar_model *m, const int32_t *targets, double *sum_nats,
                           float grad_scale)
{
    use_weight_copy(m);
    const ar_backend *be = m->be;
    ar_residual *r = m->res;
    int N = m->N, d = m->d, rows = chunk_rows(m);
    const float *hout = m->res_hout = r->vt->final_fwd(r, N);
    if (m->collect_stats && r->vt->n_sources(r, 1) > 0)
        for (int l = 1; l <= m->L + 1; l++)
            r->vt->mean_weights(r, l, N, m->depth_w + (size_t)(l - 1) * (m->L + 1));
    be->rmsnorm_fwd(m->hn, m->frstd, hout, P(m->final_norm), N, d);
    m->head_kept = -1;
    m->head_grad_done = 0;
    if (!targets)
        return 0;
    be->upload(m->tgt, targets, (size_t)N * sizeof(int32_t));
    int last = (N - 1) / rows * rows, nc = last / rows + 1;
    if (grad_scale > 0) {
        for (int r0 = last; r0 >= 0; r0 -= rows)
            head_chunk_grad(m, r0, imin(rows, N - r0), grad_scale);
        m->head_grad_done = 1;
    } else {
        for (int r0 = 0; r0 < last; r0 += rows)
            head_chunk_fwd(m, r0, rows);
        head_chunk_fwd(m, last, N - last);
        m->head_kept = last; /* the last chunk's probabilities stay for the backward */
    }
    if (m->loss_on_device)
        return NAN;
    /* the chunks' sums of losses (in double), read in one copy and added
     * in row order */
    double sum = 0, *part = m->head_part;
    be->download(part, m->loss_parts + (size_t)m->loss_slot * nc, (size_t)nc * sizeof(double));
    for (int c = 0; c < nc; c++)
        sum += part[c];
    if (sum_nats)
        *sum_nats = sum;
    return sum / N;
}

double ar_model_forward_head(ar_model *m, const int32_t *targets, double *sum_nats)
{
    return forward_head(m, targets, sum_nats, 0);
}

void ar_model_logits(ar_model *m, int row0, int nrows, float *out)
{
    use_weight_copy(m);
    m->be->matmul_fwd(out, m->hn + (size_t)row0 * m->d, P(m->lm_head), nrows, m->d, m->V);
}

/* unread: nobody reads this pass's depth weights (ar_model_forward_unread) */
static double forward_pass(ar_model *m, const int32_t *inputs, const int32_t *targets, int B,
                           double *sum_nats, int unread)
{
    ar_model_set_batch(m, B);
    /* collect_stats reads the weights in forward_head */
    m->res->weights_unread = unread && !m->collect_stats;
    ar_model_forward_embed(m, inputs);
    ar_model_forward_sublayers(m, 1, m->L);
    return ar_model_forward_head(m, targets, sum_nats);
}

double ar_model_forward(ar_model *m, const int32_t *inputs, const int32_t *targets, int B,
                        double *sum_nats)
{
    return forward_pass(m, inputs, targets, B, sum_nats, 0);
}

double ar_model_forward_unread(ar_model *m, const int32_t *inputs, const int32_t *targets, int B,
                               double *sum_nats)
{
    return forward_pass(m, inputs, targets, B, sum_nats, 1);
}

void ar_model_backward_head(ar_model *m, float scale)
{
    use_weight_copy(m);
    const ar_backend *be = m->be;
    ar_residual *r = m->res;
    int N = m->N, d = m->d;
    if (r->vt->zero_grads)
        r->vt->zero_grads(r, N);
    /* from the last chunk, whose probabilities the forward left in probs_c;
     * every other chunk's are computed again (its losses with them, the same
     * values).  dlogits overwrite the probabilities in place: one buffer
     * less, one pass less over it. */
    if (!m->head_grad_done) {
        int rows = chunk_rows(m);
        for (int r0 = (N - 1) / rows * rows; r0 >= 0; r0 -= rows) {
            int n = imin(rows, N - r0);
            if (r0 != m->head_kept)
                head_chunk_fwd(m, r0, n);
            head_chunk_bwd(m, r0, n, scale);
        }
    }
    m->head_grad_done = 0;
    m->head_kept = -1; /* probs_c holds dlogits now */
    be->rmsnorm_bwd(r->vt->final_grad_buf(r), G(m->final_norm), m->dhn, m->res_hout,
                    P(m->final_norm), m->frstd, r->final_grad_overwrite, N, d);
    r->vt->final_bwd(r, N);
    bucket_ready(m, 0);
}

void ar_model_backward_sublayers(ar_model *m, int l1, int l0)
{
    /* a caller's bug, as an allocation failure is fatal: the weights this
     * backward needs were never written (ar_model_forward_unread) */
    if (m->res->weights_unread)
        abort();
    use_weight_copy(m);
    const ar_backend *be = m->be;
    ar_residual *r = m->res;
    int N = m->N, d = m->d;
    for (int l = l1; l >= l0; l--) {
        const float *dout = r->vt->output_grad(r, l, N);
        int k = (l - 1) / 2, attn = l % 2;
        if (attn)
            attn_backward(m, k, dout);
        else
            mlp_backward(m, k, dout);
        /* dh_l = RMSNorm backward of dxn at h_l (dout is read in full by now,
         * so dh may alias it) */
        const ar_block_idx *b = &m->blk[k];
        const ar_block_act *a = &m->act[k];
        int ni = attn ? b->attn_norm : b->mlp_norm;
        if (r->vt->input_norm_bwd) {
            ar_norm_grad ng = {P(ni), G(ni), m->dxn, attn ? a->xn : a->mxn,
                               attn ? a->rstd : a->mrstd};
            r->vt->input_norm_bwd(r, l, N, &ng);
        } else {
            const float *h = r->vt->input_saved(r, l, N);
            float *dh = r->vt->input_grad_buf(r, l, N, m->dy);
            be->rmsnorm_bwd(dh, G(ni), m->dxn, h, P(ni), attn ? a->rstd : a->mrstd,
                            r->input_grad_overwrite, N, d);
            r->vt->input_bwd(r, l, N);
        }
        if (attn) /* block k's tensors are all final */
            bucket_ready(m, m->cfg.n_layer - k);
    }
}

void ar_model_backward_embed(ar_model *m)
{
    ar_residual *r = m->res;
    const float *demb = r->vt->embed_grad(r); /* after any deferred pass */
    bucket_ready(m, m->cfg.n_layer + 1);      /* the residual scheme's tensors */
    m->be->embedding_bwd(G(m->embed), demb, m->tok, m->N, m->d);
    bucket_ready(m, m->cfg.n_layer + 2);
}

double ar_model_forward_backward(ar_model *m, const int32_t *inputs, const int32_t *targets,
                                 int B, float scale, double *sum_nats)
{
    ar_model_set_batch(m, B);
    ar_model_forward_embed(m, inputs);
    ar_model_forward_sublayers(m, 1, m->L);
    double loss = forward_head(m, targets, sum_nats, scale);
    ar_model_backward(m, scale);
    return loss;
}

void ar_model_backward(ar_model *m, float scale)
{
    ar_model_backward_head(m, scale);
    ar_model_backward_sublayers(m, m->L, 1);
    ar_model_backward_embed(m);
}

void ar_model_zero_grad(ar_model *m) { m->be->zero(m->grads, m->pt.total * sizeof(float)); }

long ar_model_nonembed_params(const ar_model *m)
{
    long n = 0;
    for (int i = 0; i < m->pt.n; i++)
        if (i != m->embed)
            n += (long)m->pt.p[i].numel;
    return n;
}

double ar_model_flops_per_token(const ar_model *m)
{
    return 6.0 * (double)ar_model_nonembed_params(m) +
           12.0 * m->cfg.n_layer * (double)m->d * m->T;
}
