/* The general depth mixer (docs/reference.md §2.5-2.11): one one-phase
 * mixer with a per-mixer source list (lib/depth_sources.h), used for
 *   full / block with  query: input  or  heads: H > 1  (score and key_norm
 *                             may be set too)
 *   swa      sources v_0 and the last `window` sublayer outputs
 *   static   alpha = softmax(theta_l), one learned logit per source (Full's sources)
 *   rescaled alpha = 1/n (Full's sources; no parameters)
 * Plain full/block, also with score: sigmoid or key_norm: false alone, run
 * on the optimised two-phase residual_depth.c; with ar_depth_general set
 * they run here too (tests compare the two).
 *
 * Notation of residual_depth.c: P_l is the running sum of the current block
 * (P_l = v_l when l opens a block, else P_{l-1} + v_l; blocks of 1 for
 * every kind but block, so P_l = v_l).  Mixer m (1..L, L+1 = final) reads
 *   block/full [P_end(0), .., P_end(n-1)] (+ P_{m-1} if m is not first in its block)
 *   swa        [P_0, P_max(1,m-W), .., P_{m-1}]      (final: up to P_L)
 * and forms h_m = sum_s alpha[a(j),s] src_s[j] with the backend's
 * depth_mix op (lib/ops.def gives the exact math).  Per mixer, under the
 * prefix blocks.{k}.attn_res / blocks.{k}.mlp_res / final_res:
 *   .query [d]          learned pseudo-query (zero-initialised)
 *   .query.weight [d,d] query: input, u_m = W_m RMSNorm(last source) (no gain),
 *                       zero-initialised (normal(0, 0.02) with query_gate);
 *                       then with the stabilisers of the config
 *                         query_norm:  u_m <- RMSNorm(u_m)  (no gain)
 *                         query_gate:  w_m = q_m + g_m u_m  (else w_m = u_m)
 *                         query_scale: head: w_m <- w_m / sqrt(d / H)
 *                       and the logits are w_m . k_s as for a learned query;
 *                       without query_gate it replaces .query
 *   .query [d], .query.gate [1]  query_gate: the static part q_m and the
 *                       gate g_m of the dynamic one (zero-initialised)
 *   .norm.weight [d]    key-norm gain (absent with key_norm: false)
 *   .logits [n]         static: theta_m (zero-initialised)
 *
 * The backward in chunks: mixers 1..L are cut into chunks of up to
 * ar_depth_chunk consecutive ones (the final mixer, and every mixer of an
 * input-dependent query, is a chunk of its own).  Some sources are listed
 * by every mixer of a chunk (Full's: every output before the chunk, the
 * first k of each list; block kinds: the block summaries; swa: v_0 and
 * the outputs in every window, at places that shift by one from a mixer
 * to the next), and their gradients are needed only below the chunk.  So
 * when mixer m's dL/dh is known, the backward takes
 *   cdot = dh.h per head (depth_mix_cdot: the softmax's sum over all of
 *          m's sources, sum_s alpha_s da_s) and m's own sources, the rest
 *          (depth_mix_bwd_chunk with C = 1, a run of places at a time:
 *          swa's are the outputs leaving the window before the chunk's
 *          highest mixer and those made inside the chunk);
 * and at the chunk's lowest mixer, the shared sources of all its mixers
 * at once (C = the chunk's size, the places of each mixer's list given by
 * its offset): one read of each shared source row and of its gradient row
 * per chunk instead of per mixer.  The chunk's dL/dh rows wait in one
 * buffer per place in the chunk (dHc).
 *
 * rescaled (uniform weights 1/n over Full's sources) takes none of this:
 * h_m = S_m / m with S_m = v_0 + .. + v_{m-1} one running sum (an add and
 * a scaled copy a mixer, where mixing read all m sources), and in the
 * backward every v_s gets sum_{m > s} dL/dh_m / m, one running gradient
 * R that each mixer adds its dL/dh_m / m into, as the baseline's dR (L
 * passes where the chunked backward took about L^2 / 2C).  Its weights
 * (1/n, the softmax of n zeros) are written once, for the diagnostics.
 *
 * static takes none of the per-token machinery either: its weights
 * alpha_m = softmax(theta_m) are the same for every token, so its mixing is
 * a weighted sum of buffers (lib/ops.def: wmix, wsum), read as a matrix
 * product over depth.  At the forward of a chunk's lowest mixer m0, one
 * wmix pass reads each shared source s < k once and starts every mixer of
 * the chunk, h_m = sum_{s<k} alpha_m[s] v_s; each mixer then adds its own
 * sources s >= k (wsum).  Backward: dv_s += alpha_m[s] dh_m and
 * dalpha_m[s] = sum over tokens of dh_m . v_s, the own sources per mixer
 * (wsum_bwd), the shared ones for the whole chunk at m0 (wmix_bwd: one
 * read of each shared row and of its gradient row); then on the host
 * dtheta_m = alpha_m * (dalpha_m - alpha_m . dalpha_m), the softmax's
 * backward, a few floats a mixer (as mHC's coefficients, residual_mhc.c).
 * The host forms every mixer's weights at the first mixer's forward and
 * every gradient after the last backward, so a device is waited for
 * twice a step, not at every chunk.
 * Where one mixer has more than AR_WMIX_MAX_IN sources, or with
 * ar_depth_general, static runs on the per-token ops like the others.
 *
 * Memory is simple rather than lean: P and the mixed inputs h of every
 * mixer are kept, and dP of every block (2(L+1) + nb + 1 buffers of N x d,
 * nb blocks after the embedding, L of them but for block; rescaled: no dP,
 * and S and R),
 * plus per mixer its weights and the input-dependent query's activations,
 * and the chunk's dL/dh rows; with key norm, each P_l's rstd (N floats a
 * row, Prs), so that the mixers that list a row after the first read its
 * key norm's scale instead of summing its squares again. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/error.h"
#include "depth_sources.h"
#include "residual.h"

int ar_depth_general = 0;
int ar_depth_rstd_cache = 1;

#define AR_MIXER_CHUNK_MAX 8
_Static_assert(AR_MIXER_CHUNK_MAX <= AR_WMIX_MAX, "static starts a chunk's mixers in one wmix");

typedef struct {
    int n;
    int *src;            /* indices into P */
    int q_idx, g_idx, t_idx, W_idx; /* parameter indices or -1 */
    const float **sp;
    float **dsp;
    float *alpha, *rstd; /* N x n x H (lib/op_args.h), N x n */
    float **rsc;         /* key norm: its sources' rstd caches (mixer_res's Prs) */
    int *rsc_ok;         /* and whether each holds this forward's rstd */
    float *h;            /* the mixed input (N x d) */
    float *qn, *qrs, *wq; /* query: input: RMSNorm(last), its rstd, the query w */
    float *u, *un, *urs; /* W qn; with query_norm RMSNorm(W qn) and its rstd */
    int gate_idx;        /* query_gate: g_m's parameter index */
    float *cdot;         /* N x H: dh.h per head (chunked backward) */
    int m0, pos;         /* its chunk's lowest mixer, and its place in the chunk */
    int nown, own[2][2]; /* its own sources: runs of places [own[r][0], own[r][1]) */
    /* at a chunk's lowest mixer, the sources every mixer of the chunk
     * lists: runs [shr[r][0], shr[r][1]) of places of the chunk's highest
     * mixer, which mixer m0 + c lists at those places + shoff[r][c] */
    int nshr, shr[2][2], shoff[2][AR_MIXER_CHUNK_MAX];
    /* static on weighted sums (the module comment): alpha holds n floats,
     * ahost the same on the host; at a chunk's lowest mixer coef and dcoef
     * (device, C x k, rows k floats apart) the chunk's weights of the
     * shared sources and their gradients; dalpha (device, n) the gradients
     * of the weights of its own sources s >= k */
    float *ahost, *coef, *dcoef, *dalpha;
} mixer;

typedef struct {
    ar_residual base;
    ar_res_kind kind;
    ar_blocks blk;       /* block layout (core/blocks.h); blocks of 1 but for block */
    int H, W, sigmoid, key_norm, qinput;
    int qnorm, qgate;    /* query: input's stabilisers */
    float qscale;        /* 1, or 1/sqrt(d / H) */
    float **P, **dP;
    /* key norm on the per-token ops: each P_l's rstd (maxN floats), taken
     * by the first mixer that lists P_l in a forward and read by the rest
     * (ar_depth_mix: rsc); Prs_ok[l] whether it holds the rstd of P_l as
     * it is now (cleared wherever P_l is written) */
    float **Prs;
    int *Prs_ok;
    mixer *mx;
    float *fgrad, *dwq, *dqn, *ones, *dgdump;
    float *du, *dun;     /* query: input: dL/du, and dL/dN(u) with query_norm */
    int cmax;            /* most mixers in a backward chunk (1: none batched) */
    int *csize;          /* per lowest mixer m0: its chunk's size */
    float **dHc;         /* cmax buffers N x d: dL/dh of each place in a chunk */
    int uniform;         /* rescaled: running sums (the module comment) */
    int wsums;           /* static: weighted sums (the module comment) */
    float *hbuf;         /* static: host rows, (AR_MIXER_CHUNK_MAX + 2)(L + 1) floats */
    float *S, *R, *inv;  /* uniform: the running sum, its gradient; inv[m] = 1/n_m (device) */
    const ar_param_table *pt;
    float *params, *grads;
} mixer_res;

#define MR(r) ((mixer_res *)(r))

static int opens(mixer_res *s, int l) { return ar_blocks_opens(&s->blk, l); }

/* whether P_l is a block's sum b_n (the last sublayer of its block, or
 * the embedding), not a partial sum inside a block */
static int block_end(mixer_res *s, int l) { return l == s->base.L || opens(s, l + 1); }

/* The number of sources every mixer of chunk m0 lists where they are the
 * first of each list (Full's sources, as static's weighted sums take
 * them); 0 where they are not (swa). */
static int shared_prefix(const mixer_res *s, int m0)
{
    const mixer *x0 = &s->mx[m0];
    return x0->nshr == 1 && x0->shr[0][0] == 0 ? x0->shr[0][1] : 0;
}

/* Sources of mixer m as indices into P: Block's (Full's: S = 1), or for
 * swa v_0 and the last W outputs. */
static void plan(mixer_res *s, mixer *x, int m)
{
    int W = s->kind == AR_RES_SWA ? s->W : 0;
    x->src = ar_depth_source_rows(&s->blk, W, m, &x->n);
    x->sp = ar_xcalloc((size_t)x->n, sizeof *x->sp);
    x->dsp = ar_xcalloc((size_t)x->n, sizeof *x->dsp);
    x->rsc = ar_xcalloc((size_t)x->n, sizeof *x->rsc);
    x->rsc_ok = ar_xcalloc((size_t)x->n, sizeof *x->rsc_ok);
}

static const float *pp(mixer_res *s, int idx) { return idx < 0 ? NULL : s->params + s->pt->p[idx].offset; }
static float *gp(mixer_res *s, int idx) { return idx < 0 ? NULL : s->grads + s->pt->p[idx].offset; }

static void mixer_bind(ar_residual *r, float *params, float *grads, float *const *scratch, int nscratch)
{
    (void)scratch;
    (void)nscratch;
    mixer_res *s = MR(r);
    const ar_backend *be = r->be;
    size_t nd = (size_t)r->maxN * r->d * sizeof(float);
    s->params = params;
    s->grads = grads;
    /* one gradient buffer a block: a partial sum's dP_{l-1} is its block's,
     * dP_l with mixer l's term added in place (mixer_output_grad) */
    for (int l = r->L; l >= 0; l--) {
        s->P[l] = be->alloc(nd);
        if (s->Prs)
            s->Prs[l] = be->alloc((size_t)r->maxN * sizeof(float));
        if (!s->uniform)
            s->dP[l] = block_end(s, l) ? be->alloc(nd) : s->dP[l + 1];
    }
    if (s->Prs_ok)
        memset(s->Prs_ok, 0, (size_t)(r->L + 1) * sizeof(int));
    s->fgrad = be->alloc(nd);
    if (s->uniform) {
        s->S = be->alloc(nd);
        s->R = be->alloc(nd);
        float inv[r->L + 2];
        inv[0] = 0.0f;
        for (int m = 1; m <= r->L + 1; m++)
            inv[m] = 1.0f / (float)s->mx[m].n;
        s->inv = be->alloc((size_t)(r->L + 2) * sizeof(float));
        be->upload(s->inv, inv, sizeof inv);
    }
    for (int c = 0; c < s->cmax; c++)
        s->dHc[c] = be->alloc(nd);
    if (s->qinput) {
        if (s->qgate)
            s->dwq = be->alloc(nd);
        s->dqn = be->alloc(nd);
        s->du = be->alloc(nd);
        if (s->qnorm)
            s->dun = be->alloc(nd);
        s->dgdump = be->alloc((size_t)r->d * sizeof(float));
        /* ones: the query norms' gain (d) and, with the gate, the column
         * that broadcasts q_m to every token (maxN) */
        size_t no = (size_t)(r->maxN > r->d ? r->maxN : r->d);
        s->ones = be->alloc(no * sizeof(float));
        float *o = ar_xmalloc(no * sizeof(float));
        for (size_t j = 0; j < no; j++)
            o[j] = 1.0f;
        be->upload(s->ones, o, no * sizeof(float));
        free(o);
    }
    for (int m = 1; m <= r->L + 1; m++) {
        mixer *x = &s->mx[m];
        if (s->wsums) {
            x->alpha = be->alloc((size_t)x->n * sizeof(float));
            x->dalpha = be->alloc((size_t)x->n * sizeof(float));
            x->ahost = ar_xcalloc((size_t)x->n, sizeof(float));
            if (x->m0 == m) {
                size_t ck = (size_t)s->csize[m] * shared_prefix(s, m) * sizeof(float);
                x->coef = be->alloc(ck);
                x->dcoef = be->alloc(ck);
            }
        } else {
            x->alpha = be->alloc((size_t)r->maxN * s->H * x->n * sizeof(float));
        }
        if (s->key_norm)
            x->rstd = be->alloc((size_t)r->maxN * x->n * sizeof(float));
        x->h = be->alloc(nd);
        if (s->cmax > 1 && !s->wsums)
            x->cdot = be->alloc((size_t)r->maxN * s->H * sizeof(float));
        if (s->qinput) {
            x->qn = be->alloc(nd);
            if (s->qgate)
                x->wq = be->alloc(nd);
            x->qrs = be->alloc((size_t)r->maxN * sizeof(float));
            x->u = be->alloc(nd);
            if (s->qnorm) {
                x->un = be->alloc(nd);
                x->urs = be->alloc((size_t)r->maxN * sizeof(float));
            }
        }
        for (int i = 0; i < x->n; i++) {
            x->sp[i] = s->P[x->src[i]];
            x->dsp[i] = s->dP[x->src[i]];
            x->rsc[i] = s->Prs ? s->Prs[x->src[i]] : NULL;
        }
        if (s->uniform) { /* the weights, 1/n for every token, once */
            size_t cnt = (size_t)r->maxN * x->n;
            float *a = ar_xmalloc(cnt * sizeof(float));
            for (size_t t = 0; t < cnt; t++)
                a[t] = 1.0f / (float)x->n;
            be->upload(x->alpha, a, cnt * sizeof(float));
            free(a);
        }
    }
}

/* The op arguments of mixer x with query w (wstride 0: shared; d: one
 * per token), its own gain and logits, for N tokens. */
static ar_depth_mix mix_args(mixer_res *s, const mixer *x, const float *w, int wstride, int N)
{
    return (ar_depth_mix){.n = x->n, .src = x->sp, .w = w, .wstride = wstride, .g = pp(s, x->g_idx),
                          .theta = pp(s, x->t_idx), .alpha = x->alpha, .rstd = x->rstd,
                          .sigmoid = s->sigmoid, .H = s->H, .weights_unread = s->base.weights_unread,
                          .N = N, .d = s->base.d};
}

/* query: input: the rows of per-token queries w the depth op reads: the
 * gated sum with query_gate, else W qn (or N(W qn)) itself, scaled in
 * place by the forward */
static float *query_rows(const mixer_res *s, const mixer *x)
{
    return s->qgate ? x->wq : s->qnorm ? x->un : x->u;
}

/* static: alpha_q = softmax(theta_q) of each mixer q of the chunk that m0
 * opens, on the host (in double, rounded once) and uploaded; coef the
 * chunk's rows of the k shared sources' weights */
static void static_weights(mixer_res *s, int m0)
{
    const ar_backend *be = s->base.be;
    int C = s->csize[m0], k = shared_prefix(s, m0);
    float *coef = s->hbuf;
    for (int c = 0; c < C; c++) {
        mixer *y = &s->mx[m0 + c];
        int n = y->n;
        float *a = y->ahost; /* theta, then softmax(theta) in place */
        be->download(a, pp(s, y->t_idx), (size_t)n * sizeof(float));
        double mx = a[0], sum = 0;
        for (int i = 1; i < n; i++)
            mx = a[i] > mx ? a[i] : mx;
        for (int i = 0; i < n; i++)
            sum += exp((double)a[i] - mx);
        for (int i = 0; i < n; i++)
            a[i] = (float)(exp((double)a[i] - mx) / sum);
        be->upload(y->alpha, a, (size_t)n * sizeof(float));
        memcpy(coef + (size_t)c * k, a, (size_t)k * sizeof(float));
    }
    be->upload(s->mx[m0].coef, coef, (size_t)C * k * sizeof(float));
}

/* static: h_m = sum_{s<k} alpha_m[s] v_s for every mixer of the chunk at
 * its lowest (one wmix pass), then each adds its own sources s >= k */
static const float *static_fwd(mixer_res *s, int m, int N)
{
    const ar_backend *be = s->base.be;
    mixer *x = &s->mx[m];
    int m0 = x->m0, C = s->csize[m0], k = shared_prefix(s, m0);
    size_t nd = (size_t)N * s->base.d;
    if (m == 1) /* every mixer's weights at once: one wait for the device */
        for (int q = 1; q <= s->base.L + 1; q += s->csize[q])
            static_weights(s, q);
    if (m == m0) {
        float *hs[AR_MIXER_CHUNK_MAX];
        for (int c = 0; c < C; c++)
            hs[c] = s->mx[m0 + c].h;
        ar_wmix mix = {.p = C, .n = k, .C = x->coef, .ldc = k, .len = nd};
        be->wmix_fwd(&mix, hs, x->sp);
    }
    if (x->n > k)
        be->wsum_fwd(x->h, x->sp + k, x->alpha + k, x->n - k, 1, nd);
    return x->h;
}

/* static: dtheta_q += alpha_q * (dalpha_q - alpha_q . dalpha_q) for each
 * mixer q of the chunk m0 opens, dalpha_q from the chunk's dcoef (shared
 * sources) and q's own dalpha (the rest) */
static void static_theta_grads(mixer_res *s, int m0)
{
    const ar_backend *be = s->base.be;
    int C = s->csize[m0], k = shared_prefix(s, m0), L1 = s->base.L + 1;
    float *dcoef = s->hbuf, *da = dcoef + (size_t)AR_MIXER_CHUNK_MAX * L1, *g = da + L1;
    be->download(dcoef, s->mx[m0].dcoef, (size_t)C * k * sizeof(float));
    for (int c = 0; c < C; c++) {
        mixer *y = &s->mx[m0 + c];
        int n = y->n;
        memcpy(da, dcoef + (size_t)c * k, (size_t)k * sizeof(float));
        if (n > k)
            be->download(da + k, y->dalpha + k, (size_t)(n - k) * sizeof(float));
        double cd = 0;
        for (int i = 0; i < n; i++)
            cd += (double)y->ahost[i] * da[i];
        be->download(g, gp(s, y->t_idx), (size_t)n * sizeof(float));
        for (int i = 0; i < n; i++)
            g[i] += (float)(y->ahost[i] * (da[i] - cd));
        be->upload(gp(s, y->t_idx), g, (size_t)n * sizeof(float));
    }
}

/* static's backward (dh: dL/dh_m): m's own sources now, the shared ones
 * and every weight's gradient with the whole chunk at its lowest mixer */
static void static_bwd(mixer_res *s, int m, const float *dh, int N)
{
    const ar_backend *be = s->base.be;
    mixer *x = &s->mx[m];
    int m0 = x->m0, C = s->csize[m0], k = shared_prefix(s, m0);
    size_t nd = (size_t)N * s->base.d;
    if (x->n > k) {
        be->zero(x->dalpha + k, (size_t)(x->n - k) * sizeof(float));
        be->wsum_bwd(x->dsp + k, x->dalpha + k, dh, x->sp + k, x->alpha + k, x->n - k, nd);
    }
    if (m != m0)
        return;
    const float *dys[AR_MIXER_CHUNK_MAX];
    for (int c = 0; c < C; c++)
        dys[c] = c == 0 ? dh : s->dHc[s->mx[m0 + c].pos];
    be->zero(x->dcoef, (size_t)C * k * sizeof(float));
    ar_wmix mix = {.p = C, .n = k, .C = x->coef, .ldc = k, .len = nd};
    /* the final mixer reads every v_s and comes first: it writes dv_s
     * (mixer_zero_grads leaves them), the others add */
    be->wmix_bwd(&mix, x->dsp, m <= s->base.L, x->dcoef, dys, x->sp);
    if (m == 1) /* the last mixer: every weight's gradient at once, one wait */
        for (int q = 1; q <= s->base.L + 1; q += s->csize[q])
            static_theta_grads(s, q);
}

static const float *mix_fwd(mixer_res *s, int m, int N)
{
    const ar_backend *be = s->base.be;
    mixer *x = &s->mx[m];
    int d = s->base.d;
    if (s->uniform) { /* S_m = S_{m-1} + v_{m-1};  h_m = S_m / m */
        size_t nd = (size_t)N * d;
        if (m == 1)
            be->copy(s->S, s->P[0], nd);
        else
            be->add(s->S, s->P[m - 1], nd);
        const float *S = s->S;
        be->wsum_fwd(x->h, &S, s->inv + m, 1, 0, nd);
        return x->h;
    }
    if (s->wsums)
        return static_fwd(s, m, N);
    const float *w = pp(s, x->q_idx);
    int wstride = 0;
    if (s->qinput) {
        /* w = scale [q + g] N(W RMSNorm(last source)) (the module comment) */
        be->rmsnorm_fwd(x->qn, x->qrs, x->sp[x->n - 1], s->ones, N, d);
        be->matmul_fwd(x->u, x->qn, pp(s, x->W_idx), N, d, d);
        const float *dyn = x->u;
        if (s->qnorm) {
            be->rmsnorm_fwd(x->un, x->urs, x->u, s->ones, N, d);
            dyn = x->un;
        }
        if (s->qgate) {
            /* q broadcast to every token as ones (N x 1) times q (d x 1)^T,
             * then + g dyn */
            be->matmul_fwd(x->wq, s->ones, pp(s, x->q_idx), N, 1, d);
            be->wsum_fwd(x->wq, &dyn, pp(s, x->gate_idx), 1, 1, (size_t)N * d);
        }
        /* without the gate the query is dyn itself, scaled in place: the
         * backward needs neither W qn nor N(W qn) again */
        w = query_rows(s, x);
        if (s->qscale != 1.0f)
            be->scale((float *)w, s->qscale, (size_t)N * d);
        wstride = d;
    }
    ar_depth_mix mix = mix_args(s, x, w, wstride, N);
    if (s->Prs) { /* the rstd of rows an earlier mixer of this forward took */
        for (int i = 0; i < x->n; i++)
            x->rsc_ok[i] = s->Prs_ok[x->src[i]];
        mix.rsc = x->rsc, mix.rsc_ok = x->rsc_ok;
    }
    be->depth_mix_fwd(&mix, x->h);
    for (int i = 0; s->Prs && i < x->n; i++)
        s->Prs_ok[x->src[i]] |= x->rsc_ok[i];
    return x->h;
}

static void mix_bwd(mixer_res *s, int m, const float *dh, int N)
{
    const ar_backend *be = s->base.be;
    mixer *x = &s->mx[m];
    int d = s->base.d;
    size_t nd = (size_t)N * d * sizeof(float);
    if (s->uniform) { /* R = dh_out / (L+1) (the first), then R += dh_m / m */
        be->wsum_fwd(s->R, &dh, s->inv + m, 1, m <= s->base.L, (size_t)N * d);
        return;
    }
    if (s->wsums) {
        static_bwd(s, m, dh, N);
        return;
    }
    if (s->qinput) {
        /* dL/d dyn: g dw with the gate (and dq += sum_i dw_i, dg += dw . dyn),
         * else dw itself, written where dL/d dyn goes */
        float *ddyn = s->qnorm ? s->dun : s->du;
        float *dw = s->qgate ? s->dwq : ddyn;
        be->zero(dw, nd);
        ar_depth_mix mix = mix_args(s, x, query_rows(s, x), d, N);
        be->depth_mix_bwd(&mix, x->dsp, dw, gp(s, x->g_idx), NULL, dh);
        if (s->qscale != 1.0f)
            be->scale(dw, s->qscale, nd / sizeof(float));
        if (s->qgate) {
            const float *dyn = s->qnorm ? x->un : x->u;
            be->zero(ddyn, nd);
            be->wsum_bwd(&ddyn, gp(s, x->gate_idx), s->dwq, &dyn, pp(s, x->gate_idx), 1, (size_t)N * d);
            be->matmul_bwd(NULL, gp(s, x->q_idx), s->dwq, s->ones, pp(s, x->q_idx), 0, N, 1, d);
        }
        if (s->qnorm) {
            be->zero(s->dgdump, (size_t)d * sizeof(float));
            be->rmsnorm_bwd(s->du, s->dgdump, s->dun, x->u, s->ones, x->urs, 1, N, d);
        }
        be->matmul_bwd(s->dqn, gp(s, x->W_idx), s->du, x->qn, pp(s, x->W_idx), 1, N, d, d);
        /* the query's RMSNorm has no gain: its gradient goes to a scratch row */
        be->zero(s->dgdump, (size_t)d * sizeof(float));
        be->rmsnorm_bwd(x->dsp[x->n - 1], s->dgdump, s->dqn, x->sp[x->n - 1], s->ones, x->qrs, 0, N,
                        d);
        return;
    }
    if (s->cmax == 1 || m == s->base.L + 1) {
        ar_depth_mix mix = mix_args(s, x, pp(s, x->q_idx), 0, N);
        be->depth_mix_bwd(&mix, x->dsp, gp(s, x->q_idx), gp(s, x->g_idx), gp(s, x->t_idx), dh);
        return;
    }
    /* its own sources now; the shared ones with the whole chunk, at its
     * lowest mixer, from the highest one's list (the module comment) */
    int m0 = x->m0, C = s->csize[m0];
    const mixer *x0 = &s->mx[m0], *top = &s->mx[m0 + C - 1];
    float *dw[AR_MIXER_CHUNK_MAX], *dg[AR_MIXER_CHUNK_MAX], *dt[AR_MIXER_CHUNK_MAX];
    const float *dhs[AR_MIXER_CHUNK_MAX], *cd[AR_MIXER_CHUNK_MAX], *al[AR_MIXER_CHUNK_MAX],
        *rs[AR_MIXER_CHUNK_MAX], *w[AR_MIXER_CHUNK_MAX], *g[AR_MIXER_CHUNK_MAX], *th[AR_MIXER_CHUNK_MAX];
    int n[AR_MIXER_CHUNK_MAX];
    /* the argument lists: the whole chunk at m0, else this mixer alone */
    int hi = m == m0 ? m0 + C - 1 : m;
    for (int q = m; q <= hi; q++) {
        const mixer *y = &s->mx[q];
        int c = q - m;
        dw[c] = gp(s, y->q_idx), dg[c] = gp(s, y->g_idx), dt[c] = gp(s, y->t_idx);
        dhs[c] = s->dHc[y->pos], cd[c] = y->cdot, al[c] = y->alpha, rs[c] = y->rstd, n[c] = y->n;
        w[c] = pp(s, y->q_idx), g[c] = pp(s, y->g_idx), th[c] = pp(s, y->t_idx);
    }
    ar_depth_mix_chunk ch = {.C = 1, .src = x->sp, .n = n, .w = w, .g = g, .theta = th, .alpha = al, .rstd = rs,
                             .sigmoid = s->sigmoid, .H = s->H, .N = N, .d = d};
    be->depth_mix_cdot(x->cdot, dh, x->h, s->H, N, d);
    for (int r = 0; r < x->nown; r++) {
        ch.s0 = x->own[r][0], ch.s1 = x->own[r][1];
        be->depth_mix_bwd_chunk(&ch, x->dsp, dw, dg, dt, dhs, cd);
    }
    if (m != m0)
        return;
    ch.C = C, ch.src = top->sp;
    for (int r = 0; r < x0->nshr; r++) {
        ch.s0 = x0->shr[r][0], ch.s1 = x0->shr[r][1], ch.off = x0->shoff[r];
        be->depth_mix_bwd_chunk(&ch, top->dsp, dw, dg, dt, dhs, cd);
    }
}

/* Every write of a row P_l goes through embed_out, output_buf or accept_fwd:
 * each clears the row's cached rstd. */
static void row_changes(mixer_res *s, int l)
{
    if (s->Prs_ok)
        s->Prs_ok[l] = 0;
}
static float *mixer_embed_out(ar_residual *r)
{
    row_changes(MR(r), 0);
    return MR(r)->P[0];
}
static const float *mixer_input_fwd(ar_residual *r, int l, int N, const ar_norm_out *nf)
{
    (void)nf;
    return mix_fwd(MR(r), l, N);
}
static float *mixer_output_buf(ar_residual *r, int l)
{
    row_changes(MR(r), l);
    return MR(r)->P[l];
}
static void mixer_accept_fwd(ar_residual *r, int l, int N)
{
    row_changes(MR(r), l);
    if (!opens(MR(r), l))
        r->be->add(MR(r)->P[l], MR(r)->P[l - 1], (size_t)N * r->d);
}
static const float *mixer_final_fwd(ar_residual *r, int N) { return mix_fwd(MR(r), r->L + 1, N); }

static void mixer_zero_grads(ar_residual *r, int N)
{
    if (MR(r)->uniform || MR(r)->wsums)
        return; /* R, or static's every dP, is written by the final mixer */
    size_t nd = (size_t)N * r->d * sizeof(float);
    for (int l = 0; l <= r->L; l++) /* one buffer a block (mixer_bind) */
        if (block_end(MR(r), l))
            r->be->zero(MR(r)->dP[l], nd);
    /* fgrad and dHc are written, not added into (final_grad_overwrite,
     * input_grad_overwrite) */
}
static float *mixer_final_grad_buf(ar_residual *r) { return MR(r)->fgrad; }
static void mixer_final_bwd(ar_residual *r, int N) { mix_bwd(MR(r), r->L + 1, MR(r)->fgrad, N); }

/* dv_l = dP_l, complete: every mixer above l is done.  Where l does not
 * open a block, P_{l-1} is a partial sum that only P_l and mixer l read,
 * so dP_{l-1} = dP_l + mixer l's term: the same buffer (mixer_bind), which
 * mixer l's backward adds into once the sublayer has read dv_l. */
static float *mixer_output_grad(ar_residual *r, int l, int N)
{
    (void)N;
    mixer_res *s = MR(r);
    if (s->uniform) /* sum_{m > l} dh_m / m, complete: every mixer above l is done */
        return s->R;
    return s->dP[l];
}
static const float *mixer_input_saved(ar_residual *r, int l, int N)
{
    (void)N;
    return MR(r)->mx[l].h;
}
static float *mixer_input_grad_buf(ar_residual *r, int l, int N, float *spare)
{
    (void)N;
    (void)spare;
    mixer_res *s = MR(r);
    return s->dHc[s->mx[l].pos];
}
static void mixer_input_bwd(ar_residual *r, int l, int N) { mix_bwd(MR(r), l, mixer_input_grad_buf(r, l, N, NULL), N); }
static float *mixer_embed_grad(ar_residual *r) { return MR(r)->uniform ? MR(r)->R : MR(r)->dP[0]; }
static int mixer_n_sources(ar_residual *r, int l) { return MR(r)->mx[l].n; }

/* whether the last forward left mixer weights unwritten (weights_unread:
 * the per-token ones; static's and rescaled's are set apart from it) */
static int weights_left(const mixer_res *s) { return s->base.weights_unread && !s->wsums && !s->uniform; }

/* averaged over tokens and heads; NaN where the last forward left them
 * unwritten */
static void mixer_mean_weights(ar_residual *r, int l, int N, float *out)
{
    mixer_res *s = MR(r);
    mixer *x = &s->mx[l];
    if (s->wsums) { /* the same weights for every token */
        memcpy(out, x->ahost, (size_t)x->n * sizeof(float));
        return;
    }
    if (weights_left(s)) {
        for (int i = 0; i < x->n; i++)
            out[i] = NAN;
        return;
    }
    size_t cnt = (size_t)N * s->H * x->n;
    float *a = ar_xmalloc(cnt * sizeof(float));
    r->be->download(a, x->alpha, cnt * sizeof(float));
    /* alpha is source-major: token t's source i, head h at (t n + i) H + h */
    for (int i = 0; i < x->n; i++) {
        double acc = 0;
        for (size_t t = 0; t < (size_t)N; t++)
            for (int h = 0; h < s->H; h++)
                acc += a[(t * x->n + i) * s->H + h];
        out[i] = (float)(acc / ((double)N * s->H));
    }
    free(a);
}

/* (token, head) rows; sigmoid scores as they are (not normalised) */
static long mixer_token_weights(ar_residual *r, int l, int N, float *out)
{
    mixer_res *s = MR(r);
    mixer *x = &s->mx[l];
    if (out && s->wsums)
        for (long t = 0; t < (long)N * s->H; t++)
            memcpy(out + (size_t)t * x->n, x->ahost, (size_t)x->n * sizeof(float));
    else if (out && weights_left(s))
        for (size_t t = 0; t < (size_t)N * s->H * x->n; t++)
            out[t] = NAN;
    else if (out && s->H == 1)
        r->be->download(out, x->alpha, (size_t)N * x->n * sizeof(float));
    else if (out) { /* source-major on the device: each token's H x n block transposed */
        const size_t per = (size_t)s->H * x->n;
        float *a = ar_xmalloc((size_t)N * per * sizeof(float));
        r->be->download(a, x->alpha, (size_t)N * per * sizeof(float));
        for (size_t t = 0; t < (size_t)N; t++)
            for (int i = 0; i < x->n; i++)
                for (int h = 0; h < s->H; h++)
                    out[t * per + (size_t)h * x->n + i] = a[t * per + (size_t)i * s->H + h];
        free(a);
    }
    return (long)N * s->H;
}

static const float *mixer_source(ar_residual *r, int l, int i) { return MR(r)->mx[l].sp[i]; }

static void mixer_destroy(ar_residual *r)
{
    mixer_res *s = MR(r);
    const ar_backend *be = r->be;
    for (int l = 0; l <= r->L; l++) {
        be->free(s->P[l]);
        if (s->Prs && s->Prs[l])
            be->free(s->Prs[l]);
        if (s->dP[l] && block_end(s, l))
            be->free(s->dP[l]);
    }
    float *bufs[] = {s->fgrad, s->dwq, s->dqn, s->ones, s->dgdump, s->du, s->dun, s->S, s->R, s->inv};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++)
        if (bufs[i])
            be->free(bufs[i]);
    for (int c = 0; c < s->cmax; c++)
        if (s->dHc[c])
            be->free(s->dHc[c]);
    free(s->dHc);
    free(s->hbuf);
    free(s->csize);
    for (int m = 1; m <= r->L + 1; m++) {
        mixer *x = &s->mx[m];
        float *mb[] = {x->alpha, x->rstd, x->h,  x->qn,   x->wq,    x->qrs,
                       x->cdot,  x->u,    x->un, x->urs, x->coef, x->dcoef, x->dalpha};
        for (size_t i = 0; i < sizeof mb / sizeof *mb; i++)
            if (mb[i])
                be->free(mb[i]);
        free(x->ahost);
        free(x->src);
        free(x->sp);
        free(x->dsp);
        free(x->rsc);
        free(x->rsc_ok);
    }
    free(s->mx);
    free(s->P);
    free(s->dP);
    free(s->Prs);
    free(s->Prs_ok);
    ar_blocks_free(&s->blk);
    free(s);
}

static const ar_residual_vt mixer_vt = {
    .bind = mixer_bind,
    .embed_out = mixer_embed_out,
    .input_fwd = mixer_input_fwd,
    .output_buf = mixer_output_buf,
    .accept_fwd = mixer_accept_fwd,
    .final_fwd = mixer_final_fwd,
    .zero_grads = mixer_zero_grads,
    .final_grad_buf = mixer_final_grad_buf,
    .final_bwd = mixer_final_bwd,
    .output_grad = mixer_output_grad,
    .input_saved = mixer_input_saved,
    .input_grad_buf = mixer_input_grad_buf,
    .input_bwd = mixer_input_bwd,
    .embed_grad = mixer_embed_grad,
    .n_sources = mixer_n_sources,
    .mean_weights = mixer_mean_weights,
    .token_weights = mixer_token_weights,
    .source = mixer_source,
    .destroy = mixer_destroy,
};

/* The place of row j of P in mixer x's source list, or -1. */
static int place_of(const mixer *x, int j)
{
    for (int p = 0; p < x->n; p++)
        if (x->src[p] == j)
            return p;
    return -1;
}

/* Splits the sources of chunk m0..m0+C-1 into those every mixer of it
 * lists (runs of the highest mixer's places, one offset per mixer each:
 * Full's and Block's lists share a prefix, swa's windows shift by a place
 * a mixer) and each mixer's own (runs of its places), into the mixers'
 * nshr/shr/shoff and nown/own.  Returns 0 where that takes more runs than
 * kept, or no source is shared. */
static int split_chunk(mixer_res *s, int m0, int C)
{
    mixer *top = &s->mx[m0 + C - 1], *x0 = &s->mx[m0];
    int shared[top->n > 0 ? top->n : 1], off[AR_MIXER_CHUNK_MAX], prev = 0;
    x0->nshr = 0;
    for (int p = 0; p < top->n; p++) {
        shared[p] = 1;
        for (int c = 0; c < C && shared[p]; c++) {
            int q = place_of(&s->mx[m0 + c], top->src[p]);
            shared[p] = q >= p; /* a negative offset is not taken (the op's off >= 0) */
            off[c] = q - p;
        }
        if (!shared[p]) {
            prev = 0;
            continue;
        }
        int r = x0->nshr - 1;
        if (prev && memcmp(off, x0->shoff[r], (size_t)C * sizeof(int)) == 0) {
            x0->shr[r][1] = p + 1;
        } else {
            if (x0->nshr == 2)
                return 0;
            r = x0->nshr++;
            x0->shr[r][0] = p, x0->shr[r][1] = p + 1;
            memcpy(x0->shoff[r], off, (size_t)C * sizeof(int));
        }
        prev = 1;
    }
    if (x0->nshr == 0)
        return 0;
    for (int c = 0; c < C; c++) {
        mixer *y = &s->mx[m0 + c];
        int was_own = 0;
        y->nown = 0;
        for (int p = 0; p < y->n; p++) {
            int t = place_of(top, y->src[p]), own = t < 0 || !shared[t];
            if (own && was_own) {
                y->own[y->nown - 1][1] = p + 1;
            } else if (own) {
                if (y->nown == 2)
                    return 0;
                y->own[y->nown][0] = p, y->own[y->nown][1] = p + 1;
                y->nown++;
            }
            was_own = own;
        }
    }
    return 1;
}

/* The most mixers a chunk takes: ar_depth_chunk where set, else by kind.
 * static: 8, wmix's most outputs (its passes over the shared sources are
 * memory-bound: 8 took a quarter off its weighted sums' time against 4 at
 * the ablation shape, BENCHMARKS.md).  swa: a chunk of C windows of W
 * shares v_0 and W - C + 1 outputs, and each of its mixers owns C - 1, so
 * the backward reads (W - C + 2) / C + C - 1 rows a mixer, least near C =
 * sqrt(W + 2) (3 at W = 8, 4.33 rows against 4.5 at C = 4).  Others: 4. */
static int chunk_most(const mixer_res *s)
{
    if (s->qinput)
        return 1; /* the query's backward needs the whole dL/dh at once */
    int c = ar_depth_chunk;
    if (c <= 0)
        c = s->wsums ? AR_MIXER_CHUNK_MAX : s->kind == AR_RES_SWA ? (int)lround(sqrt(s->W + 2.0)) : 4;
    return c < 1 ? 1 : c > AR_MIXER_CHUNK_MAX ? AR_MIXER_CHUNK_MAX : c;
}

/* Chunks of the backward: mixers 1..L in runs of up to cmax consecutive
 * ones that share a source (split_chunk); each mixer learns its chunk's
 * lowest mixer m0 and its place, m0 the chunk's size and the runs of
 * shared and own sources (shared_prefix reads the former). */
static void plan_chunks(mixer_res *s)
{
    int L = s->base.L;
    s->cmax = chunk_most(s);
    s->csize = ar_xcalloc((size_t)L + 2, sizeof(int));
    s->dHc = ar_xcalloc((size_t)s->cmax, sizeof(float *));
    for (int m0 = 1; m0 <= L + 1;) {
        int C = 1;
        while (m0 + C <= L && C < s->cmax && split_chunk(s, m0, C + 1))
            C++;
        split_chunk(s, m0, C); /* a mixer alone shares its whole list with itself */
        s->csize[m0] = C;
        for (int c = 0; c < C; c++)
            s->mx[m0 + c].m0 = m0, s->mx[m0 + c].pos = c;
        m0 += C;
    }
}

ar_residual *ar_residual_mixer_create(const ar_model_cfg *cfg, const ar_backend *be, int maxN,
                                      ar_param_table *pt)
{
    mixer_res *s = ar_xcalloc(1, sizeof *s);
    const ar_residual_cfg *rc = &cfg->residual;
    int L = ar_cfg_sublayers(cfg), d = cfg->d_model;
    s->base.vt = &mixer_vt;
    s->base.be = be;
    s->base.L = L;
    s->base.d = d;
    s->base.maxN = maxN;
    s->base.final_grad_overwrite = s->base.input_grad_overwrite = 1;
    s->kind = rc->kind;
    s->uniform = rc->kind == AR_RES_RESCALED;
    if (rc->kind == AR_RES_BLOCK)
        ar_blocks_of_cfg(&s->blk, cfg);
    else
        ar_blocks_uniform(&s->blk, L, 1);
    s->W = rc->window;
    int attn = rc->kind == AR_RES_FULL || rc->kind == AR_RES_BLOCK || rc->kind == AR_RES_SWA;
    s->H = attn && rc->heads > 1 ? rc->heads : 1;
    s->sigmoid = attn && rc->score == AR_SCORE_SIGMOID;
    s->key_norm = attn && rc->key_norm == AR_KEY_NORM_ON;
    s->qinput = attn && rc->query == AR_QUERY_INPUT;
    s->qnorm = s->qinput && rc->query_norm;
    s->qgate = s->qinput && rc->query_gate;
    s->qscale = s->qinput && rc->query_scale == AR_QUERY_SCALE_HEAD ? 1.0f / sqrtf((float)d / (float)s->H) : 1.0f;
    s->pt = pt;
    s->P = ar_xcalloc((size_t)L + 1, sizeof(float *));
    s->dP = ar_xcalloc((size_t)L + 1, sizeof(float *));
    if (s->key_norm && ar_depth_rstd_cache) {
        s->Prs = ar_xcalloc((size_t)L + 1, sizeof(float *));
        s->Prs_ok = ar_xcalloc((size_t)L + 1, sizeof(int));
    }
    s->mx = ar_xcalloc((size_t)L + 2, sizeof(mixer));
    for (int m = 1; m <= L + 1; m++) {
        mixer *x = &s->mx[m];
        char pre[80], nm[128];
        if (m == L + 1)
            snprintf(pre, sizeof pre, "final_res");
        else
            snprintf(pre, sizeof pre, "blocks.%d.%s", (m - 1) / 2, (m % 2) ? "attn_res" : "mlp_res");
        plan(s, x, m);
        x->q_idx = x->g_idx = x->t_idx = x->W_idx = x->gate_idx = -1;
        if (attn && s->qinput) {
            snprintf(nm, sizeof nm, "%s.query.weight", pre);
            /* gated: W random so that the gate's gradient dw . W qn is not
             * zero at the start (q and g are) */
            x->W_idx = ar_params_add(pt, nm, d, d, s->qgate ? AR_INIT_NORMAL : AR_INIT_ZEROS, 0.02f, m);
            pt->p[x->W_idx].lr_scale = (float)rc->query_lr_scale;
            if (s->qgate) {
                snprintf(nm, sizeof nm, "%s.query", pre);
                x->q_idx = ar_params_add(pt, nm, d, 0, AR_INIT_ZEROS, 0, m);
                snprintf(nm, sizeof nm, "%s.query.gate", pre);
                x->gate_idx = ar_params_add(pt, nm, 1, 0, AR_INIT_ZEROS, 0, m);
            }
        } else if (attn) {
            snprintf(nm, sizeof nm, "%s.query", pre);
            x->q_idx = ar_params_add(pt, nm, d, 0, AR_INIT_ZEROS, 0, m);
        }
        if (s->key_norm) {
            snprintf(nm, sizeof nm, "%s.norm.weight", pre);
            x->g_idx = ar_params_add(pt, nm, d, 0, AR_INIT_ONES, 0, m);
        }
        if (rc->kind == AR_RES_STATIC) {
            snprintf(nm, sizeof nm, "%s.logits", pre);
            x->t_idx = ar_params_add(pt, nm, x->n, 0, AR_INIT_ZEROS, 0, m);
        }
    }
    if (rc->kind == AR_RES_STATIC && !ar_depth_general) {
        s->wsums = 1;
        for (int m = 1; m <= L + 1; m++)
            s->wsums &= s->mx[m].n <= AR_WMIX_MAX_IN;
        if (s->wsums)
            s->hbuf = ar_xmalloc((size_t)(AR_MIXER_CHUNK_MAX + 2) * (L + 1) * sizeof(float));
    }
    plan_chunks(s);
    return &s->base;
}
