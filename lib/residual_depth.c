/* Block AttnRes (docs/reference.md §2.4; Full AttnRes is block_size 1).
 *
 * Sublayers are grouped into blocks of consecutive sublayers (core/blocks.h:
 * S each, or model.residual.block_sizes); block 0 is the embedding alone.
 * With P_l the running sum of the current block (P_l = v_l when l opens a
 * block, else P_{l-1} + v_l), block n's summary is b_n = P_{end(n)}, and its
 * partial sum after i sublayers is b_n^i = P_{start(n)+i-1}.  Sublayer l,
 * the i-th of block n, mixes by depth attention
 *     [b_0 .. b_{n-1}]            (i = 1)
 *     [b_0 .. b_{n-1}, P_{l-1}]   (i >= 2)
 * and h_out mixes [b_0 .. b_{nb}] (nb = ceil(L/S) for block_size S, the
 * last one possibly shorter).  Each mixer m = 1..L+1 (L+1 = final) has its own pseudo-query w_m
 * (zero-initialised, so every alpha starts at 1/n) and key-norm gain g_m
 * (none with key_norm: false, whose logits are w_m . x unnormalised).
 *
 * Backward: dv_l = dP_l once every later consumer has added into it.  One
 * gradient buffer per block, dB_n: every later mixer adds into it while it
 * stands for dP of the summary b_n; going down through block n it becomes
 * dP_{l-1} = dP_l + (mixer l's term for P_{l-1}) in place, since P_{l-1}
 * feeds only mixer l and P_l.  Each mixer scatters dL/dh into the dB of its
 * sources. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "../core/error.h"
#include "chunks.h"
#include "depth_sources.h"
#include "residual.h"

/* Schedule (two-phase, the report's Algorithm 1 generalised): mixers
 * 1..L are cut into chunks of at most ar_depth_chunk (default 4) consecutive mixers;
 * the final mixer L+1 is a chunk of its own.  The first k sources of a
 * chunk's mixers are the same for all of them (the common prefix: block
 * summaries, or for Full every output before the chunk) and exist before
 * the chunk starts, so
 *   forward:  phase 1 mixes them for all C mixers in one pass (one read of
 *             each shared source per chunk, not per mixer); phase 2 merges
 *             each mixer's own later sources (the partial sum; for Full the
 *             outputs inside the chunk) by online softmax when it runs;
 *   backward: each mixer's own sources get their gradient at once (the next
 *             sublayer down needs it); the shared sources' gradient from all
 *             C mixers is deferred to the chunk's lowest mixer and done in
 *             one pass.
 * Memory traffic per chunk, in rows of N x d (k shared, j_c own sources):
 *   forward  k + sum_c j_c reads, C writes   (one-phase: 2 sum_c n_c reads)
 *   backward k + C reads, k read-modify-writes of dsrc, plus 3 j_c per mixer
 *            (one-phase: 3 n_c + 1 per mixer)
 * Memory.  The sublayer inputs h are not kept.  The forward builds a chunk's
 * C inputs in scratch the model lends (its sublayer-backward buffers, idle
 * then).  The backward needs no h either: the intra op forms dh_l by the
 * backward of the sublayer's input norm from the xn = RMSNorm(h_l) the
 * sublayer keeps for its own backward (h_l rstd = xn / gain), and writes
 * it into P_l, dead by then (P_q is dead once every mixer above q is done:
 * the deferred pass reads only sources before its chunk), where the
 * chunk's deferred pass finds it.  So beyond the baseline (which keeps
 * the same P_0..P_L and one running gradient) AttnRes keeps, in buffers of
 * N x d, only the nb+1 block gradients dB less one, i.e. nb = N_blocks
 * (Full: L), plus the N x n weights and N-float statistics of every mixer.
 * Under bf16 storage (lib/backend.h, alloc_act) the rows P_l are bf16,
 * which the depth ops read with fp32 arithmetic, and the sums P_l =
 * P_{l-1} + v_l are rounded once each; a gradient stays fp32, so dh_l
 * goes into one of ar_depth_chunk fp32 buffers instead of P_l (at 12
 * layers and chunks of 4: 25 rows of half the bytes less 4 rows more). */
int ar_depth_chunk = 0;

typedef struct {
    int n;                /* number of sources */
    int *src;             /* indices into P */
    int q_idx, g_idx;     /* parameter indices */
    int chunk, pos;       /* its chunk, and its place there */
    float *alpha;         /* maxN x n: logits, then weights (saved for the backward) */
    float *lse;           /* maxN: phase-1 log-sum-exp, then the total */
    float *cdot;          /* maxN: dh.h of the backward (shared by chunk position) */
    const float **sp;     /* host array of source pointers */
    float **dsp, **rsp;   /* their gradients and rstd arrays */
} mixer;

typedef struct {
    int m0, m1, C, k;     /* mixers m0..m1 (C of them) share their first k sources */
    /* host argument arrays for the chunk ops (C or k entries) */
    float **h, **lse, **alpha, **cdot, **dw, **dg;
    float **dh;           /* dh_q: in P_q (the final mixer's: fgrad) */
    const float **w, **g;
    int *n;
} chunk;

typedef struct {
    ar_residual base;
    ar_blocks blk;        /* the block layout */
    int nch, cmax;
    int key_norm; /* 0 (key_norm: false): no gains, g_idx -1 */
    int sigmoid;  /* score: sigmoid: independent weights sigmoid(z) */
    float **P;            /* L+1 buffers maxN x d */
    float **dB;           /* nb+1 buffers maxN x d: gradient of block n's sums */
    int nb;               /* blocks after the embedding (blk.nb) */
    float **rs;           /* L+1 arrays maxN: rstd of each P_l as a key */
    float **cdot;         /* cmax arrays maxN: dh.h per chunk position */
    float **dhb;          /* cmax buffers maxN x d: dh per chunk position, where P
                           * is in bf16 storage (NULL: dh goes into P_l) */
    float **hb;           /* cmax buffers: the current chunk's h (forward) */
    float *fgrad;         /* dL/dh_out */
    float *own;           /* the hb block, where bind had to allocate it */
    mixer *mx;            /* mx[1..L+1] */
    chunk *ch;
    const ar_param_table *pt;
    float *params, *grads;
} depth_res;

#define D(r) ((depth_res *)(r))

static int block_of(depth_res *s, int l) { return s->blk.of[l]; }

/* Source list for mixer m (sublayer m, or the final state when m = L+1):
 * b_0 .. b_{n-1} (+ P_{m-1}) as indices into P (lib/depth_sources.h). */
static void plan_sources(mixer *x, int m, const ar_blocks *b)
{
    x->src = ar_depth_source_rows(b, 0, m, &x->n);
    x->sp = ar_xcalloc((size_t)x->n, sizeof *x->sp);
    x->dsp = ar_xcalloc((size_t)x->n, sizeof *x->dsp);
    x->rsp = ar_xcalloc((size_t)x->n, sizeof *x->rsp);
}

/* Chunks of at most cmax consecutive mixers, none across a cut between
 * npipe pipeline chunks (a stage runs its sublayers alone); k = common
 * source prefix. */
static void plan_chunks(depth_res *s, int npipe)
{
    int L = s->base.L;
    s->cmax = ar_depth_chunk > 0 ? ar_depth_chunk : 4; /* 8 measured the same (BENCHMARKS.md) */
    s->ch = ar_xcalloc((size_t)L + 2, sizeof(chunk));
    s->nch = 0;
    for (int m = 1; m <= L + 1;) {
        chunk *c = &s->ch[s->nch];
        c->m0 = m;
        c->m1 = m == L + 1 ? m : (m + s->cmax - 1 < L ? m + s->cmax - 1 : L);
        for (int p = 1; p < npipe && m <= L; p++) {
            int cut = ar_chunk_first(L, npipe, p);
            if (cut > m && cut <= c->m1)
                c->m1 = cut - 1;
        }
        c->C = c->m1 - c->m0 + 1;
        c->k = s->mx[m].n;
        for (int q = m + 1; q <= c->m1; q++) {
            int k = 0;
            while (k < c->k && k < s->mx[q].n && s->mx[q].src[k] == s->mx[m].src[k])
                k++;
            c->k = k;
        }
        c->h = ar_xcalloc((size_t)c->C, sizeof(float *));
        c->lse = ar_xcalloc((size_t)c->C, sizeof(float *));
        c->alpha = ar_xcalloc((size_t)c->C, sizeof(float *));
        c->cdot = ar_xcalloc((size_t)c->C, sizeof(float *));
        c->dw = ar_xcalloc((size_t)c->C, sizeof(float *));
        /* no gain lists without key norm: the ops take NULL (lib/ops.def) */
        c->dg = s->key_norm ? ar_xcalloc((size_t)c->C, sizeof(float *)) : NULL;
        c->w = ar_xcalloc((size_t)c->C, sizeof(float *));
        c->g = s->key_norm ? ar_xcalloc((size_t)c->C, sizeof(float *)) : NULL;
        c->dh = ar_xcalloc((size_t)c->C, sizeof(float *));
        c->n = ar_xcalloc((size_t)c->C, sizeof(int));
        for (int q = c->m0; q <= c->m1; q++) {
            s->mx[q].chunk = s->nch;
            s->mx[q].pos = q - c->m0;
        }
        s->nch++;
        m = c->m1 + 1;
    }
}

/* a parameter and its gradient; index -1 (no key-norm gain): NULL */
static const float *pq(depth_res *s, int idx) { return idx < 0 ? NULL : s->params + s->pt->p[idx].offset; }
static float *gq(depth_res *s, int idx) { return idx < 0 ? NULL : s->grads + s->pt->p[idx].offset; }

static void depth_bind(ar_residual *r, float *params, float *grads, float *const *scratch,
                       int nscratch)
{
    depth_res *s = D(r);
    const ar_backend *be = r->be;
    size_t bytes = (size_t)r->maxN * r->d * sizeof(float);
    s->params = params;
    s->grads = grads;
    /* the residual rows are activations: bf16 storage under bf16 (lib/backend.h) */
    for (int l = 0; l <= r->L; l++) {
        s->P[l] = ar_alloc_act(be, (size_t)r->maxN * r->d);
        s->rs[l] = be->alloc((size_t)r->maxN * sizeof(float));
    }
    for (int c = 0; c < s->cmax; c++)
        s->cdot[c] = be->alloc((size_t)r->maxN * sizeof(float));
    /* dh_l is a gradient, kept in fp32: in P_l where that holds floats,
     * else in one buffer per chunk position (it lives from mixer l's
     * backward to its chunk's deferred pass, as cdot) */
    if (ar_act_size(be) < sizeof(float)) {
        s->dhb = ar_xcalloc((size_t)s->cmax, sizeof(float *));
        for (int c = 0; c < s->cmax; c++)
            s->dhb[c] = be->alloc(bytes);
    }
    for (int b = 0; b <= s->nb; b++)
        s->dB[b] = be->alloc(bytes);
    /* hb[0..cmax-1] and fgrad (= hb[1]: the final chunk has one mixer) */
    int need = s->cmax > 2 ? s->cmax : 2;
    size_t nfl = (size_t)r->maxN * r->d;
    if (nscratch < need)
        s->own = be->alloc(need * bytes);
    for (int c = 0; c < need; c++) {
        float *b = nscratch >= need ? scratch[c] : s->own + c * nfl;
        if (c < s->cmax)
            s->hb[c] = b;
        if (c == 1)
            s->fgrad = b;
    }
    for (int m = 1; m <= r->L + 1; m++) {
        mixer *x = &s->mx[m];
        x->alpha = be->alloc((size_t)r->maxN * x->n * sizeof(float));
        x->lse = be->alloc((size_t)r->maxN * sizeof(float));
        /* dh.h lives from a mixer's backward to its chunk's deferred pass:
         * one array per chunk position serves every chunk */
        x->cdot = s->cdot[x->pos];
        for (int i = 0; i < x->n; i++) {
            x->sp[i] = s->P[x->src[i]];
            x->dsp[i] = s->dB[block_of(s, x->src[i])];
            x->rsp[i] = s->rs[x->src[i]];
        }
    }
    for (int i = 0; i < s->nch; i++) {
        chunk *c = &s->ch[i];
        for (int p = 0; p < c->C; p++) {
            mixer *x = &s->mx[c->m0 + p];
            c->lse[p] = x->lse;
            c->alpha[p] = x->alpha;
            c->cdot[p] = x->cdot;
            c->w[p] = pq(s, x->q_idx);
            if (c->g)
                c->g[p] = pq(s, x->g_idx);
            c->dw[p] = gq(s, x->q_idx);
            if (c->dg)
                c->dg[p] = gq(s, x->g_idx);
            c->dh[p] = c->m0 + p > r->L ? s->fgrad : s->dhb ? s->dhb[p] : s->P[c->m0 + p];
            c->n[p] = x->n;
        }
    }
}

/* With one shared source, phase 1's o is that source itself (its weight
 * is exp(0)/1 = 1): mixers after the first then merge from it in place of
 * an o written and read back (3 rows of N x d per chunk at the bench
 * shapes).  The first mixer's o is needed: it is h, or fused into xn.
 * Not under score: sigmoid, whose one weight is sigmoid(z), not 1. */
static int o_elided(const depth_res *s, const chunk *c, int pos) { return !s->sigmoid && c->k == 1 && pos > 0; }

/* Sublayer inputs of chunk c live in hb[0..C-1] (the final mixer's too),
 * but for elided o's (NULL: not written). */
static float **chunk_h(depth_res *s, chunk *c)
{
    for (int p = 0; p < c->C; p++)
        c->h[p] = o_elided(s, c, p) ? NULL : s->hb[p];
    return c->h;
}

/* The op arguments of chunk c (its shared sources: mixer m0's first k)
 * and of mixer x's own sources, for N tokens. */
static ar_depth_inter inter_args(const depth_res *s, const chunk *c, int N)
{
    const mixer *x0 = &s->mx[c->m0];
    return (ar_depth_inter){.C = c->C, .k = c->k, .n = c->n, .src = x0->sp, .rs = x0->rsp,
                            .w = c->w, .g = c->g, .alpha = c->alpha, .lse = c->lse,
                            .sigmoid = s->sigmoid, .weights_unread = s->base.weights_unread,
                            .N = N, .d = s->base.d};
}

static ar_depth_intra intra_args(depth_res *s, const chunk *c, const mixer *x, int N)
{
    return (ar_depth_intra){.n = x->n, .k = c->k, .src = x->sp, .rsi = x->rsp + c->k,
                            .w = pq(s, x->q_idx), .g = pq(s, x->g_idx), .alpha = x->alpha,
                            .lse = x->lse, .sigmoid = s->sigmoid,
                            .weights_unread = s->base.weights_unread, .N = N, .d = s->base.d};
}

/* nf (or NULL): where the sublayer wants RMSNorm(h); written here (and NULL
 * returned), so h is never stored. */
static const float *mix_fwd(depth_res *s, int m, int N, const ar_norm_out *nf)
{
    const ar_backend *be = s->base.be;
    mixer *x = &s->mx[m];
    chunk *c = &s->ch[x->chunk];
    /* the sublayer's RMSNorm is fused where h_m is complete: in phase 1 for
     * the chunk's first mixer if it has no sources of its own, else in
     * phase 2 */
    int fuse1 = nf && m == c->m0 && x->n == c->k;
    if (m == c->m0) {
        ar_depth_inter shared = inter_args(s, c, N);
        be->depth_fwd_inter(&shared, chunk_h(s, c), fuse1 ? nf : NULL);
    }
    float *h = s->hb[x->pos];
    int fuse = nf && x->n > c->k;
    if (o_elided(s, c, x->pos)) {
        if (fuse) /* read only, never written: the source itself */
            h = (float *)x->sp[0];
        else
            be->copy(h, x->sp[0], (size_t)N * s->base.d);
    }
    ar_depth_intra own = intra_args(s, c, x, N);
    be->depth_fwd_merge(&own, h, fuse ? nf : NULL);
    return fuse || fuse1 ? NULL : h;
}

/* Backward of mixer m: its own sources now; the chunk's shared sources,
 * for all its mixers at once, when m is its lowest mixer m0.  dh_m is in
 * c->dh (given: the final mixer, whose h is kept), or with ng formed there
 * from the sublayer's norm. */
static void mix_bwd(depth_res *s, int m, const float *h, const ar_norm_grad *ng, int N)
{
    const ar_backend *be = s->base.be;
    mixer *x = &s->mx[m];
    chunk *c = &s->ch[x->chunk];
    ar_depth_intra own = intra_args(s, c, x, N);
    be->depth_bwd_intra(&own, x->dsp + c->k, gq(s, x->q_idx), gq(s, x->g_idx), x->cdot,
                        c->dh[x->pos], h, ng);
    if (m == c->m0) {
        ar_depth_inter shared = inter_args(s, c, N);
        /* The final mixer comes first in the backward and reaches every dB
         * (its sources are all block summaries): it initialises them. */
        be->depth_bwd_inter(&shared, s->mx[c->m0].dsp, c->dw, c->dg, (const float *const *)c->dh,
                            (const float *const *)c->cdot, m == s->base.L + 1);
    }
}

static int opens_block(depth_res *s, int l) { return ar_blocks_opens(&s->blk, l); }

static float *depth_embed_out(ar_residual *r) { return D(r)->P[0]; }
static const float *depth_input_fwd(ar_residual *r, int l, int N, const ar_norm_out *nf)
{
    return mix_fwd(D(r), l, N, nf);
}
static float *depth_output_buf(ar_residual *r, int l) { return D(r)->P[l]; }

static void depth_accept_fwd(ar_residual *r, int l, int N)
{
    if (!opens_block(D(r), l))
        r->be->add(D(r)->P[l], D(r)->P[l - 1], (size_t)N * r->d);
}

/* h_out is kept (not fused with the final norm): its backward needs it. */
static const float *depth_final_fwd(ar_residual *r, int N) { return mix_fwd(D(r), r->L + 1, N, NULL); }

static float *depth_final_grad_buf(ar_residual *r) { return D(r)->fgrad; }

/* h_out is still in hb[0], where the forward left it. */
static void depth_final_bwd(ar_residual *r, int N)
{
    mix_bwd(D(r), r->L + 1, D(r)->hb[0], NULL, N);
}

static float *depth_output_grad(ar_residual *r, int l, int N)
{
    (void)N;
    return D(r)->dB[block_of(D(r), l)];
}

/* dh_l from the norm's backward, formed by the intra op into P_l (or dhb) */
static void depth_input_norm_bwd(ar_residual *r, int l, int N, const ar_norm_grad *ng)
{
    mix_bwd(D(r), l, NULL, ng, N);
}

static float *depth_embed_grad(ar_residual *r) { return D(r)->dB[0]; }
static int depth_n_sources(ar_residual *r, int l) { return D(r)->mx[l].n; }

/* the weights of the last forward; NaN where it left them unwritten */
static void depth_mean_weights(ar_residual *r, int l, int N, float *out)
{
    mixer *x = &D(r)->mx[l];
    if (r->weights_unread) {
        for (int i = 0; i < x->n; i++)
            out[i] = NAN;
        return;
    }
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

static long depth_token_weights(ar_residual *r, int l, int N, float *out)
{
    mixer *x = &D(r)->mx[l];
    if (out && r->weights_unread)
        for (size_t i = 0; i < (size_t)N * x->n; i++)
            out[i] = NAN;
    else if (out)
        r->be->download(out, x->alpha, (size_t)N * x->n * sizeof(float));
    return N;
}

static const float *depth_source(ar_residual *r, int l, int i) { return D(r)->mx[l].sp[i]; }

static float *depth_row(ar_residual *r, int q) { return D(r)->P[q]; }
static float *depth_row_grad(ar_residual *r, int q) { return D(r)->dB[block_of(D(r), q)]; }
static void depth_zero_row_grads(ar_residual *r, int N)
{
    for (int b = 0; b <= D(r)->nb; b++)
        r->be->zero(D(r)->dB[b], (size_t)N * r->d * sizeof(float));
}

static void depth_destroy(ar_residual *r)
{
    depth_res *s = D(r);
    const ar_backend *be = r->be;
    for (int l = 0; l <= r->L; l++) {
        be->free(s->P[l]);
        be->free(s->rs[l]);
    }
    for (int b = 0; b <= s->nb; b++)
        be->free(s->dB[b]);
    if (s->own)
        be->free(s->own);
    for (int c = 0; c < s->cmax; c++) {
        be->free(s->cdot[c]);
        if (s->dhb)
            be->free(s->dhb[c]);
    }
    free(s->cdot);
    free(s->dhb);
    for (int m = 1; m <= r->L + 1; m++) {
        mixer *x = &s->mx[m];
        be->free(x->alpha);
        be->free(x->lse);
        free(x->src);
        free(x->sp);
        free(x->dsp);
        free(x->rsp);
    }
    for (int i = 0; i < s->nch; i++) {
        chunk *c = &s->ch[i];
        void *arrs[] = {c->h, c->lse, c->alpha, c->cdot, c->dw, c->dg, c->w, c->g, c->dh, c->n};
        for (size_t j = 0; j < sizeof arrs / sizeof *arrs; j++)
            free(arrs[j]);
    }
    free(s->ch);
    free(s->P);
    free(s->dB);
    free(s->rs);
    free(s->hb);
    free(s->mx);
    ar_blocks_free(&s->blk);
    free(s);
}

static const ar_residual_vt depth_vt = {
    .bind = depth_bind,
    .embed_out = depth_embed_out,
    .input_fwd = depth_input_fwd,
    .output_buf = depth_output_buf,
    .accept_fwd = depth_accept_fwd,
    .final_fwd = depth_final_fwd,
    /* no zero_grads: the final mixer's backward writes every dB first, and
     * the caller writes dL/dh_out into fgrad (final_grad_overwrite), and
     * dL/dh_l is written by the intra op (input_norm_bwd) */
    .final_grad_buf = depth_final_grad_buf,
    .final_bwd = depth_final_bwd,
    .output_grad = depth_output_grad,
    .input_norm_bwd = depth_input_norm_bwd,
    .embed_grad = depth_embed_grad,
    .n_sources = depth_n_sources,
    .mean_weights = depth_mean_weights,
    .token_weights = depth_token_weights,
    .source = depth_source,
    .row = depth_row,
    .row_grad = depth_row_grad,
    .zero_row_grads = depth_zero_row_grads,
    .destroy = depth_destroy,
};

ar_residual *ar_residual_depth_create(const ar_model_cfg *cfg, const ar_backend *be, int maxN,
                                      int nchunks, ar_param_table *pt)
{
    depth_res *s = ar_xcalloc(1, sizeof *s);
    int L = ar_cfg_sublayers(cfg), d = cfg->d_model;
    s->base.vt = &depth_vt;
    s->base.be = be;
    s->base.L = L;
    s->base.d = d;
    s->base.maxN = maxN;
    s->base.final_grad_overwrite = 1;
    ar_blocks_of_cfg(&s->blk, cfg);
    /* key_norm: false has no gain: logits u.x with rstd 1 (lib/ops.def) */
    s->key_norm = cfg->residual.key_norm == AR_KEY_NORM_ON;
    s->sigmoid = cfg->residual.score == AR_SCORE_SIGMOID;
    s->pt = pt;
    s->P = ar_xcalloc((size_t)L + 1, sizeof(float *));
    s->nb = s->blk.nb;
    s->dB = ar_xcalloc((size_t)s->nb + 1, sizeof(float *));
    s->rs = ar_xcalloc((size_t)L + 1, sizeof(float *));
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
        plan_sources(&s->mx[m], m, &s->blk);
        s->mx[m].q_idx = ar_params_add(pt, qn, d, 0, AR_INIT_ZEROS, 0, m);
        s->mx[m].g_idx = s->key_norm ? ar_params_add(pt, gn, d, 0, AR_INIT_ONES, 0, m) : -1;
    }
    plan_chunks(s, nchunks);
    s->hb = ar_xcalloc((size_t)s->cmax, sizeof(float *));
    s->cdot = ar_xcalloc((size_t)s->cmax, sizeof(float *));
    return &s->base;
}
