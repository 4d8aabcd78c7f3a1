/* Incremental decoding with a key/value cache (decode.h).
 *
 * The residual scheme runs unchanged: the decoder keeps a copy of the model
 * (ar_model_create_split, sharing the trained parameters) built for `chunk`
 * rows, whose scheme (lib/residual*.c) forms every h_l and h_out of the
 * step's rows through its own interface (residual.h), exactly as a forward
 * over `chunk` tokens would; its buffers are the depth cache.  What the
 * model's forward does around it is redone here for rows at absolute
 * positions: attention writes the new keys and values into the caches and
 * attends over them (backend ops rope_fwd_at and attention_decode), the MLP
 * is mlp_forward's, and the head computes only the rows asked for. */
#include "decode.h"

#include <stdlib.h>

#include "../core/blocks.h"

typedef struct {
    float *k, *v; /* ctx x d each: rotated keys, values */
} kv_cache;

struct ar_decoder {
    ar_model *m;        /* the parameters */
    ar_model *c;        /* the copy whose residual scheme runs the chunk */
    const ar_backend *be;
    int chunk, ctx, pos;
    kv_cache *kv;       /* per transformer block */
    int32_t *tok;       /* chunk */
    /* chunk rows each: the sublayer's normed input and its rstd, the
     * queries and attention output, the MLP's hidden activations, the
     * final norm; att: nh x chunk x ctx probabilities */
    float *xn, *rstd, *q, *y, *att, *gate, *up, *act, *hn, *hrstd, *logits;
};

#define P(dec, i) ar_model_param((dec)->m, (i))

/* out = x W^T for n rows: one row (decoding) on matvec_fwd */
static void linear(const ar_backend *be, float *out, const float *x, const float *W, int n, int in, int outd)
{
    if (n == 1)
        be->matvec_fwd(out, x, W, in, outd);
    else
        be->matmul_fwd(out, x, W, n, in, outd);
}

int ar_decoder_create(ar_decoder **out, ar_model *m, int chunk, int ctx, ar_err *e)
{
    *out = NULL;
    if (chunk < 1 || ctx < 1)
        return ar_fail(e, "a decoder needs a chunk and a context of at least 1 token (got %d and %d)",
                       chunk, ctx);
    ar_decoder *dec = ar_xcalloc(1, sizeof *dec);
    dec->m = m;
    dec->be = m->be;
    dec->chunk = chunk;
    dec->ctx = ctx;
    ar_model_cfg cc = m->cfg;
    cc.seq_len = chunk;
    /* the copy allocates no activations of its own: only its residual
     * scheme's rows (and the scratch the scheme borrows) */
    unsigned char *runs = ar_xcalloc((size_t)m->L + 2, 1);
    ar_model_split sp = {.nchunks = 1, .share = m, .runs = runs};
    int rc = ar_model_create_split(&dec->c, &cc, m->be, 1, &sp, e);
    free(runs);
    if (rc != 0) {
        free(dec);
        return -1;
    }
    const ar_backend *be = dec->be;
    size_t d = (size_t)m->d, F = (size_t)m->F, C = (size_t)chunk;
    int nl = m->cfg.n_layer;
    dec->kv = ar_xcalloc((size_t)nl, sizeof *dec->kv);
    for (int k = 0; k < nl; k++) {
        dec->kv[k].k = be->alloc((size_t)ctx * d * sizeof(float));
        dec->kv[k].v = be->alloc((size_t)ctx * d * sizeof(float));
    }
    dec->tok = be->alloc(C * sizeof(int32_t));
    dec->xn = be->alloc(C * d * sizeof(float));
    dec->rstd = be->alloc(C * sizeof(float));
    dec->q = be->alloc(C * d * sizeof(float));
    dec->y = be->alloc(C * d * sizeof(float));
    dec->att = be->alloc((size_t)m->nh * C * ctx * sizeof(float));
    dec->gate = be->alloc(C * F * sizeof(float));
    dec->up = be->alloc(C * F * sizeof(float));
    dec->act = be->alloc(C * F * sizeof(float));
    dec->hn = be->alloc(C * d * sizeof(float));
    dec->hrstd = be->alloc(C * sizeof(float));
    dec->logits = be->alloc(C * (size_t)m->V * sizeof(float));
    *out = dec;
    return 0;
}

void ar_decoder_free(ar_decoder *dec)
{
    if (!dec)
        return;
    const ar_backend *be = dec->be;
    for (int k = 0; k < dec->m->cfg.n_layer; k++) {
        be->free(dec->kv[k].k);
        be->free(dec->kv[k].v);
    }
    free(dec->kv);
    float *bufs[] = {dec->xn, dec->rstd, dec->q, dec->y, dec->att, dec->gate,
                     dec->up, dec->act, dec->hn, dec->hrstd, dec->logits};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++)
        be->free(bufs[i]);
    be->free(dec->tok);
    ar_model_free(dec->c);
    free(dec);
}

void ar_decoder_reset(ar_decoder *dec) { dec->pos = 0; }
int ar_decoder_pos(const ar_decoder *dec) { return dec->pos; }
int ar_decoder_ctx(const ar_decoder *dec) { return dec->ctx; }
int ar_decoder_chunk(const ar_decoder *dec) { return dec->chunk; }

/* Attention sublayer of block k over n rows at positions pos..pos+n-1
 * (xn formed):
 *   q = rope_at(xn Wq^T);  K[pos..pos+n) = rope_at(xn Wk^T);  V[pos..pos+n) = xn Wv^T
 *   y = softmax(q K[0..pos+n)^T / sqrt(hd), causal) V[0..pos+n);  out = y Wo^T */
static void attn_step(ar_decoder *dec, int k, int n, float *out)
{
    const ar_backend *be = dec->be;
    const ar_model *m = dec->m;
    const ar_block_idx *b = &m->blk[k];
    int d = m->d, pos = dec->pos;
    float *kc = dec->kv[k].k + (size_t)pos * d, *vc = dec->kv[k].v + (size_t)pos * d;
    linear(be, dec->q, dec->xn, P(dec, b->q), n, d, d);
    linear(be, kc, dec->xn, P(dec, b->k), n, d, d);
    linear(be, vc, dec->xn, P(dec, b->v), n, d, d);
    be->rope_fwd_at(dec->q, n, pos, m->nh, m->hd);
    be->rope_fwd_at(kc, n, pos, m->nh, m->hd);
    be->attention_decode(dec->y, dec->att, dec->q, dec->kv[k].k, dec->kv[k].v, n, pos, m->nh,
                         m->hd);
    linear(be, out, dec->y, P(dec, b->o), n, d, d);
}

/* MLP sublayer of block k over n rows (xn formed):
 *   out = (silu(xn Wgate^T) * (xn Wup^T)) Wdown^T */
static void mlp_step(ar_decoder *dec, int k, int n, float *out)
{
    const ar_backend *be = dec->be;
    const ar_model *m = dec->m;
    const ar_block_idx *b = &m->blk[k];
    int d = m->d, F = m->F;
    linear(be, dec->gate, dec->xn, P(dec, b->gate), n, d, F);
    linear(be, dec->up, dec->xn, P(dec, b->up), n, d, F);
    be->swiglu_fwd(dec->act, dec->gate, dec->up, (size_t)n * F);
    linear(be, out, dec->act, P(dec, b->down), n, F, d);
}

int ar_decoder_step(ar_decoder *dec, const int32_t *tok, int n, float *logits, int all_rows,
                    ar_err *e)
{
    if (n < 1 || n > dec->chunk)
        return ar_fail(e, "a decoding step takes 1 to %d tokens, not %d", dec->chunk, n);
    if (dec->pos + n > dec->ctx)
        return ar_fail(e, "%d more tokens do not fit the context of %d positions (%d are taken)", n,
                       dec->ctx, dec->pos);
    const ar_backend *be = dec->be;
    ar_model *m = dec->m;
    ar_residual *r = dec->c->res;
    int d = m->d, V = m->V;
    r->weights_unread = 1; /* decoding reads no depth weights and runs no backward */
    be->upload(dec->tok, tok, (size_t)n * sizeof(int32_t));
    be->embedding_fwd(r->vt->embed_out(r), dec->tok, P(dec, m->embed), n, d);
    for (int l = 1; l <= m->L; l++) {
        int k = (l - 1) / 2, attn = l % 2;
        ar_norm_out nf = {P(dec, attn ? m->blk[k].attn_norm : m->blk[k].mlp_norm), dec->xn,
                          dec->rstd};
        const float *h = r->vt->input_fwd(r, l, n, &nf);
        if (h) /* else the scheme normalised h_l itself */
            be->rmsnorm_fwd(nf.xn, nf.rstd, h, nf.gain, n, d);
        float *out = r->vt->output_buf(r, l);
        if (attn)
            attn_step(dec, k, n, out);
        else
            mlp_step(dec, k, n, out);
        r->vt->accept_fwd(r, l, n);
    }
    const float *hout = r->vt->final_fwd(r, n);
    dec->pos += n;
    if (!logits)
        return 0;
    /* logits = RMSNorm_final(h_out) Wlm^T, of the rows asked for */
    int rows = all_rows ? n : 1;
    const float *src = all_rows ? hout : hout + (size_t)(n - 1) * d;
    be->rmsnorm_fwd(dec->hn, dec->hrstd, src, P(dec, m->final_norm), rows, d);
    linear(be, dec->logits, dec->hn, P(dec, m->lm_head), rows, d, V);
    be->download(logits, dec->logits, (size_t)rows * V * sizeof(float));
    return 0;
}

int ar_decoder_feed(ar_decoder *dec, const int32_t *tok, int n, float *logits, ar_err *e)
{
    if (n < 1)
        return ar_fail(e, "nothing to feed: no tokens");
    if (dec->pos + n > dec->ctx)
        return ar_fail(e, "%d more tokens do not fit the context of %d positions (%d are taken)", n,
                       dec->ctx, dec->pos);
    for (int i = 0; i < n; i += dec->chunk) {
        int k = n - i < dec->chunk ? n - i : dec->chunk;
        if (ar_decoder_step(dec, tok + i, k, i + k == n ? logits : NULL, 0, e) != 0)
            return -1;
    }
    return 0;
}

int ar_decode_depth_reps(const ar_model_cfg *c)
{
    int L = ar_cfg_sublayers(c);
    switch (c->residual.kind) {
    case AR_RES_BASELINE:
        return 1;
    case AR_RES_BLOCK: {
        ar_blocks b;
        ar_blocks_of_cfg(&b, c);
        int reps = b.nb + 1; /* b_0 .. b_nb */
        ar_blocks_free(&b);
        return reps;
    }
    case AR_RES_SWA:
        return (c->residual.window < L ? c->residual.window : L) + 1;
    case AR_RES_DENSEFORMER:
        return c->n_layer + 1;
    case AR_RES_MHC:
        return ar_cfg_streams(c);
    case AR_RES_FULL:
    case AR_RES_STATIC:
    case AR_RES_RESCALED:
        break;
    }
    return L + 1;
}

size_t ar_decode_depth_cache_bytes(const ar_model_cfg *c, int rows)
{
    return (size_t)rows * (size_t)ar_decode_depth_reps(c) * (size_t)c->d_model * sizeof(float);
}

size_t ar_decode_kv_cache_bytes(const ar_model_cfg *c, int ctx)
{
    return 2 * (size_t)c->n_layer * (size_t)ctx * (size_t)c->d_model * sizeof(float);
}
