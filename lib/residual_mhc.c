/* mHC-lite: manifold-constrained hyper-connections (Xie et al. 2025, mHC;
 * the "lite" parameterisation of H_res as a convex combination of
 * permutation matrices, which is exactly doubly stochastic).
 *
 * The residual stream is m streams X_{l,1..m} (each N x d).  X_{0,j} = v_0
 * for every j.  Sublayer l (1..L) with its own static parameters
 *   p_l = sigmoid(b_pre)            (H_pre, m non-negative weights)
 *   q_l = 2 sigmoid(b_post)         (H_post, m non-negative weights in (0, 2))
 *   R_l = sum_k pi_k P_k,  pi = softmax(r)   over the m! permutation
 *         matrices P_k of {1..m} (H_res, doubly stochastic)
 * reads and writes the streams as
 *   h_l = sum_j p_j X_{l-1,j}
 *   X_{l,i} = sum_j R_ij X_{l-1,j} + q_i v_l
 * and h_out = sum_j X_{L,j} (final_norm makes its scale moot).
 * Parameters, per sublayer (prefix blocks.{k}.attn_hc / blocks.{k}.mlp_hc):
 *   .pre [m]    b_pre,  zero-initialised (p = 1/2)
 *   .post [m]   b_post, normal(0, 1) (breaks the symmetry between streams,
 *               which identical streams and identical weights would keep)
 *   .res [m!]   r, zero-initialised (R = J/m, the uniform mixture)
 * The mixing coefficients are derived from the parameters on the host (they
 * are a few floats) and uploaded; dL/dp, dq, dR come back from the
 * backend's wmix_bwd and are chained to b_pre, b_post, r on the host.
 * Each sublayer's stream update is one wmix pass forward (read X_{l-1} and
 * v_l once, write X_l, and from the new X_l still in registers the next
 * sublayer's input h_{l+1}, bit for bit the separate weighted sum that
 * input_fwd runs where no such pass came before it) and two backward (dv_l
 * and dq; then dX_{l-1}, dR and dp together). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/error.h"
#include "residual.h"
#include "residual_mhc.h"

/* coefficients per sublayer: a (m + 1) x (m + 1) matrix, row-major,
 *   row i < m: R_i0 .. R_i(m-1), q_i   (X_{l,i} from X_{l-1,0..m-1}, v_l)
 *   row m:     p_0 .. p_{m-1}, 0       (h_l from X_{l-1,0..m-1})
 * so the forward update is rows 0..m-1 over [X_{l-1}, v_l], dv_l column m
 * of rows 0..m-1, and dX_{l-1} columns 0..m-1 of every row against
 * [dX_l, dh_l]. */
#define LDC(m) ((m) + 1)
#define NCOEF(m) (LDC(m) * LDC(m))
#define RROW(m, i) ((i) * LDC(m))

typedef struct {
    int pre, post, res; /* parameter indices */
    float *coef;        /* device: p, q, rows [R_i, q_i] (NCOEF) */
    float *dcoef;       /* device: their gradients */
    int ready;          /* Hin[l] built by accept_fwd(l - 1) in this pass, not yet read */
} hmixer;

typedef struct {
    ar_residual base;
    int m, nperm;
    int *perm;        /* nperm x m: P_k[i, perm[k][i]] = 1 */
    float **X;        /* (L+1) x m stream buffers (level 0: all v_0) */
    float **V, **Hin; /* V[l], Hin[l], l = 1..L */
    float *E;         /* v_0 */
    float **dXa, **dXb, **dXcur, **dXprev; /* 2 x m */
    const float **xv; /* m + 1: X_{l-1,0..m-1}, v_l (accept_fwd's sources) */
    const float **gv; /* m + 1: dX_{l,0..m-1}, dh_l (input_bwd's gradients) */
    float *dV, *dH, *fgrad, *ones, *hout;
    hmixer *mx;
    const ar_param_table *pt;
    float *params, *grads;
} mhc_res;

#define MH(r) ((mhc_res *)(r))

int ar_mhc_perms(int m, int *perm)
{
    int n = 0, a[8];
    for (int i = 0; i < m; i++)
        a[i] = i;
    for (;;) {
        if (perm)
            memcpy(perm + (size_t)n * m, a, (size_t)m * sizeof(int));
        n++;
        /* next lexicographic permutation */
        int i = m - 2;
        while (i >= 0 && a[i] > a[i + 1])
            i--;
        if (i < 0)
            return n;
        int j = m - 1;
        while (a[j] < a[i])
            j--;
        int t = a[i];
        a[i] = a[j];
        a[j] = t;
        for (int lo = i + 1, hi = m - 1; lo < hi; lo++, hi--) {
            t = a[lo];
            a[lo] = a[hi];
            a[hi] = t;
        }
    }
}

void ar_mhc_hres(const float *r, int m, double *R)
{
    int np = ar_mhc_perms(m, NULL);
    int *perm = ar_xmalloc((size_t)np * m * sizeof(int));
    ar_mhc_perms(m, perm);
    double mx = r[0], sum = 0;
    for (int k = 1; k < np; k++)
        mx = r[k] > mx ? r[k] : mx;
    for (int k = 0; k < np; k++)
        sum += exp(r[k] - mx);
    memset(R, 0, (size_t)m * m * sizeof(double));
    for (int k = 0; k < np; k++) {
        double pk = exp(r[k] - mx) / sum;
        for (int i = 0; i < m; i++)
            R[i * m + perm[(size_t)k * m + i]] += pk;
    }
    free(perm);
}

static float *hparam(mhc_res *s, int i) { return s->params + s->pt->p[i].offset; }
static float *hgrad(mhc_res *s, int i) { return s->grads + s->pt->p[i].offset; }

/* p, q, R of sublayer l from its parameters, uploaded to coef. */
static void coeffs(mhc_res *s, int l)
{
    const ar_backend *be = s->base.be;
    int m = s->m, np = s->nperm;
    hmixer *x = &s->mx[l];
    float *b = ar_xmalloc((size_t)(2 * m + np) * sizeof(float));
    float *c = ar_xmalloc((size_t)NCOEF(m) * sizeof(float));
    double *R = ar_xmalloc((size_t)m * m * sizeof(double));
    be->download(b, hparam(s, x->pre), (size_t)m * sizeof(float));
    be->download(b + m, hparam(s, x->post), (size_t)m * sizeof(float));
    be->download(b + 2 * m, hparam(s, x->res), (size_t)np * sizeof(float));
    ar_mhc_hres(b + 2 * m, m, R);
    for (int i = 0; i < m; i++) {
        for (int j = 0; j < m; j++)
            c[RROW(m, i) + j] = (float)R[i * m + j];
        c[RROW(m, i) + m] = (float)(2.0 / (1.0 + exp(-(double)b[m + i])));
        c[RROW(m, m) + i] = (float)(1.0 / (1.0 + exp(-(double)b[i])));
    }
    c[RROW(m, m) + m] = 0.0f;
    be->upload(x->coef, c, (size_t)NCOEF(m) * sizeof(float));
    free(b);
    free(c);
    free(R);
}

/* dL/dp, dq, dR of sublayer l (in dcoef) chained to b_pre, b_post, r. */
static void chain(mhc_res *s, int l)
{
    const ar_backend *be = s->base.be;
    int m = s->m, np = s->nperm, nc = NCOEF(m);
    hmixer *x = &s->mx[l];
    float *c = ar_xmalloc((size_t)nc * sizeof(float)), *dc = ar_xmalloc((size_t)nc * sizeof(float));
    float *b = ar_xmalloc((size_t)np * sizeof(float)), *g = ar_xmalloc((size_t)(2 * m + np) * sizeof(float));
    be->download(c, x->coef, (size_t)nc * sizeof(float));
    be->download(dc, x->dcoef, (size_t)nc * sizeof(float));
    be->download(b, hparam(s, x->res), (size_t)np * sizeof(float));
    be->download(g, hgrad(s, x->pre), (size_t)m * sizeof(float));
    be->download(g + m, hgrad(s, x->post), (size_t)m * sizeof(float));
    be->download(g + 2 * m, hgrad(s, x->res), (size_t)np * sizeof(float));
    for (int j = 0; j < m; j++) {
        float p = c[RROW(m, m) + j], q = c[RROW(m, j) + m];
        g[j] += dc[RROW(m, m) + j] * p * (1.0f - p);
        g[m + j] += dc[RROW(m, j) + m] * q * (1.0f - 0.5f * q);
    }
    double mx = b[0], sum = 0, dot = 0;
    for (int k = 1; k < np; k++)
        mx = b[k] > mx ? b[k] : mx;
    for (int k = 0; k < np; k++)
        sum += exp(b[k] - mx);
    double *pi = ar_xmalloc((size_t)np * sizeof(double)), *dpi = ar_xmalloc((size_t)np * sizeof(double));
    for (int k = 0; k < np; k++) {
        pi[k] = exp(b[k] - mx) / sum;
        dpi[k] = 0;
        for (int i = 0; i < m; i++)
            dpi[k] += dc[RROW(m, i) + s->perm[(size_t)k * m + i]];
        dot += pi[k] * dpi[k];
    }
    for (int k = 0; k < np; k++)
        g[2 * m + k] += (float)(pi[k] * (dpi[k] - dot));
    be->upload(hgrad(s, x->pre), g, (size_t)m * sizeof(float));
    be->upload(hgrad(s, x->post), g + m, (size_t)m * sizeof(float));
    be->upload(hgrad(s, x->res), g + 2 * m, (size_t)np * sizeof(float));
    free(c);
    free(dc);
    free(b);
    free(g);
    free(pi);
    free(dpi);
}

static void mhc_bind(ar_residual *r, float *params, float *grads, float *const *scratch, int nscratch)
{
    (void)scratch;
    (void)nscratch;
    mhc_res *s = MH(r);
    const ar_backend *be = r->be;
    int m = s->m;
    size_t nd = (size_t)r->maxN * r->d * sizeof(float);
    s->params = params;
    s->grads = grads;
    s->E = be->alloc(nd);
    for (int j = 0; j < m; j++)
        s->X[j] = s->E;
    for (int i = m; i < (r->L + 1) * m; i++)
        s->X[i] = be->alloc(nd);
    for (int l = 1; l <= r->L; l++) {
        s->V[l] = be->alloc(nd);
        s->Hin[l] = be->alloc(nd);
        s->mx[l].coef = be->alloc((size_t)NCOEF(m) * sizeof(float));
        s->mx[l].dcoef = be->alloc((size_t)NCOEF(m) * sizeof(float));
    }
    for (int j = 0; j < m; j++) {
        s->dXa[j] = be->alloc(nd);
        s->dXb[j] = be->alloc(nd);
    }
    s->dV = be->alloc(nd);
    s->dH = be->alloc(nd);
    s->fgrad = be->alloc(nd);
    s->hout = be->alloc(nd);
    s->ones = be->alloc((size_t)m * sizeof(float));
    float one[8];
    for (int j = 0; j < m; j++)
        one[j] = 1.0f;
    be->upload(s->ones, one, (size_t)m * sizeof(float));
}

static float **lvl(mhc_res *s, int l) { return s->X + (size_t)l * s->m; }

static float *mhc_embed_out(ar_residual *r)
{
    mhc_res *s = MH(r);
    for (int l = 1; l <= r->L; l++) /* a new pass: no input is built yet */
        s->mx[l].ready = 0;
    return s->E;
}

static const float *mhc_input_fwd(ar_residual *r, int l, int N, const ar_norm_out *nf)
{
    (void)nf;
    mhc_res *s = MH(r);
    if (s->mx[l].ready) { /* built by accept_fwd(l - 1) */
        s->mx[l].ready = 0;
        return s->Hin[l];
    }
    coeffs(s, l);
    r->be->wsum_fwd(s->Hin[l], (const float *const *)lvl(s, l - 1), s->mx[l].coef + RROW(s->m, s->m),
                    s->m, 0, (size_t)N * r->d);
    return s->Hin[l];
}

static float *mhc_output_buf(ar_residual *r, int l) { return MH(r)->V[l]; }

static void mhc_accept_fwd(ar_residual *r, int l, int N)
{
    mhc_res *s = MH(r);
    int m = s->m;
    for (int j = 0; j < m; j++)
        s->xv[j] = lvl(s, l - 1)[j];
    s->xv[m] = s->V[l];
    /* X_{l,i} = sum_j R_ij X_{l-1,j} + q_i v_l, every i in one pass, and
     * with them h_{l+1} = sum_i p_i X_{l,i} (sublayer l + 1's p) */
    ar_wmix mix = {.p = m, .n = m + 1, .C = s->mx[l].coef, .ldc = LDC(m), .len = (size_t)N * r->d};
    if (l < r->L) {
        coeffs(s, l + 1);
        mix.zc = s->mx[l + 1].coef + RROW(m, m);
        mix.z = s->Hin[l + 1];
        s->mx[l + 1].ready = 1;
    }
    r->be->wmix_fwd(&mix, lvl(s, l), s->xv);
}

static const float *mhc_final_fwd(ar_residual *r, int N)
{
    mhc_res *s = MH(r);
    r->be->wsum_fwd(s->hout, (const float *const *)lvl(s, r->L), s->ones, s->m, 0, (size_t)N * r->d);
    return s->hout;
}

static float *mhc_final_grad_buf(ar_residual *r) { return MH(r)->fgrad; }

static void mhc_final_bwd(ar_residual *r, int N)
{
    mhc_res *s = MH(r);
    s->dXcur = s->dXa;
    s->dXprev = s->dXb;
    for (int j = 0; j < s->m; j++)
        r->be->copy(s->dXcur[j], s->fgrad, (size_t)N * r->d);
}

/* dv_l = sum_i q_i dX_{l,i};  dq_i = dX_{l,i} . v_l */
static float *mhc_output_grad(ar_residual *r, int l, int N)
{
    mhc_res *s = MH(r);
    int m = s->m;
    size_t n = (size_t)N * r->d;
    hmixer *x = &s->mx[l];
    const float *v = s->V[l];
    r->be->zero(x->dcoef, (size_t)NCOEF(m) * sizeof(float));
    ar_wmix mix = {.p = m, .n = 1, .C = x->coef + m, .ldc = LDC(m), .len = n};
    r->be->wmix_bwd(&mix, &s->dV, 0, x->dcoef + m, (const float *const *)s->dXcur, &v);
    return s->dV;
}

static const float *mhc_input_saved(ar_residual *r, int l, int N) { (void)N; return MH(r)->Hin[l]; }

static float *mhc_input_grad_buf(ar_residual *r, int l, int N, float *spare)
{
    (void)l;
    (void)N;
    (void)spare;
    return MH(r)->dH;
}

/* dX_{l-1,j} = sum_i R_ij dX_{l,i} + p_j dh_l;  dR_ij = dX_{l,i} . X_{l-1,j};
 * dp_j = dh_l . X_{l-1,j} */
static void mhc_input_bwd(ar_residual *r, int l, int N)
{
    mhc_res *s = MH(r);
    const ar_backend *be = r->be;
    int m = s->m;
    size_t n = (size_t)N * r->d;
    hmixer *x = &s->mx[l];
    const float *const *Xp = (const float *const *)lvl(s, l - 1);
    for (int i = 0; i < m; i++)
        s->gv[i] = s->dXcur[i];
    s->gv[m] = s->dH;
    /* rows 0..m-1 (R) against dX_l, row m (p) against dh_l */
    ar_wmix mix = {.p = m + 1, .n = m, .C = x->coef, .ldc = LDC(m), .len = n};
    be->wmix_bwd(&mix, s->dXprev, 0, x->dcoef, s->gv, Xp);
    float **t = s->dXcur;
    s->dXcur = s->dXprev;
    s->dXprev = t;
    chain(s, l);
    if (l == 1) /* dv_0 = sum_j dX_{0,j} (dV is free again) */
        be->wsum_fwd(s->dV, (const float *const *)s->dXcur, s->ones, m, 0, n);
}

/* X_{0,j} = v_0 for every j */
static float *mhc_embed_grad(ar_residual *r) { return MH(r)->dV; }

static int mhc_n_sources(ar_residual *r, int l) { (void)r; (void)l; return 0; }
static void mhc_mean_weights(ar_residual *r, int l, int N, float *out) { (void)r; (void)l; (void)N; (void)out; }
static const float *mhc_source(ar_residual *r, int l, int i) { (void)r; (void)l; (void)i; return 0; }

static void mhc_destroy(ar_residual *r)
{
    mhc_res *s = MH(r);
    const ar_backend *be = r->be;
    be->free(s->E);
    for (int i = s->m; i < (r->L + 1) * s->m; i++)
        be->free(s->X[i]);
    for (int l = 1; l <= r->L; l++) {
        be->free(s->V[l]);
        be->free(s->Hin[l]);
        be->free(s->mx[l].coef);
        be->free(s->mx[l].dcoef);
    }
    for (int j = 0; j < s->m; j++) {
        be->free(s->dXa[j]);
        be->free(s->dXb[j]);
    }
    float *bufs[] = {s->dV, s->dH, s->fgrad, s->hout, s->ones};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++)
        be->free(bufs[i]);
    free(s->X);
    free(s->V);
    free(s->Hin);
    free(s->dXa);
    free(s->dXb);
    free(s->xv);
    free(s->gv);
    free(s->mx);
    free(s->perm);
    free(s);
}

static const ar_residual_vt mhc_vt = {
    .bind = mhc_bind,
    .embed_out = mhc_embed_out,
    .input_fwd = mhc_input_fwd,
    .output_buf = mhc_output_buf,
    .accept_fwd = mhc_accept_fwd,
    .final_fwd = mhc_final_fwd,
    /* no zero_grads: fgrad and dH are written, not added into
     * (final_grad_overwrite, input_grad_overwrite) */
    .final_grad_buf = mhc_final_grad_buf,
    .final_bwd = mhc_final_bwd,
    .output_grad = mhc_output_grad,
    .input_saved = mhc_input_saved,
    .input_grad_buf = mhc_input_grad_buf,
    .input_bwd = mhc_input_bwd,
    .embed_grad = mhc_embed_grad,
    .n_sources = mhc_n_sources,
    .mean_weights = mhc_mean_weights,
    .source = mhc_source,
    .destroy = mhc_destroy,
};

ar_residual *ar_residual_mhc_create(const ar_model_cfg *cfg, const ar_backend *be, int maxN,
                                    ar_param_table *pt)
{
    mhc_res *s = ar_xcalloc(1, sizeof *s);
    int L = ar_cfg_sublayers(cfg), m = ar_cfg_streams(cfg);
    s->base.vt = &mhc_vt;
    s->base.be = be;
    s->base.L = L;
    s->base.d = cfg->d_model;
    s->base.maxN = maxN;
    s->base.final_grad_overwrite = s->base.input_grad_overwrite = 1;
    s->m = m;
    s->nperm = ar_mhc_perms(m, NULL);
    s->perm = ar_xmalloc((size_t)s->nperm * m * sizeof(int));
    ar_mhc_perms(m, s->perm);
    s->pt = pt;
    s->X = ar_xcalloc((size_t)(L + 1) * m, sizeof(float *));
    s->V = ar_xcalloc((size_t)L + 1, sizeof(float *));
    s->Hin = ar_xcalloc((size_t)L + 1, sizeof(float *));
    s->dXa = ar_xcalloc((size_t)m, sizeof(float *));
    s->dXb = ar_xcalloc((size_t)m, sizeof(float *));
    s->xv = ar_xcalloc((size_t)m + 1, sizeof(float *));
    s->gv = ar_xcalloc((size_t)m + 1, sizeof(float *));
    s->mx = ar_xcalloc((size_t)L + 1, sizeof(hmixer));
    for (int l = 1; l <= L; l++) {
        char pre[80], nm[128];
        snprintf(pre, sizeof pre, "blocks.%d.%s", (l - 1) / 2, (l % 2) ? "attn_hc" : "mlp_hc");
        snprintf(nm, sizeof nm, "%s.pre", pre);
        s->mx[l].pre = ar_params_add(pt, nm, m, 0, AR_INIT_ZEROS, 0, l);
        snprintf(nm, sizeof nm, "%s.post", pre);
        s->mx[l].post = ar_params_add(pt, nm, m, 0, AR_INIT_NORMAL, 1.0f, l);
        snprintf(nm, sizeof nm, "%s.res", pre);
        s->mx[l].res = ar_params_add(pt, nm, s->nperm, 0, AR_INIT_ZEROS, 0, l);
    }
    return &s->base;
}
