#include "optim.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void ar_adamw_init_ranges(ar_adamw *o, const ar_model *model, int n, const size_t *lo, const size_t *hi)
{
    o->be = model->be;
    o->nranges = n;
    o->lo = ar_xcalloc((size_t)n + 1, sizeof(size_t));
    o->hi = ar_xcalloc((size_t)n + 1, sizeof(size_t));
    o->n = 0;
    for (int r = 0; r < n; r++) {
        o->lo[r] = lo[r];
        o->hi[r] = hi[r];
        o->n += hi[r] - lo[r];
    }
    o->m = o->be->alloc((o->n ? o->n : 1) * sizeof(float));
    o->v = o->be->alloc((o->n ? o->n : 1) * sizeof(float));
    o->t = 0;
    o->muon = 0;
    for (int k = 0; k < 4; k++)
        o->ns[k] = NULL;
    o->rec = o->be->alloc(sizeof(ar_step_rec)); /* zeros: t = 0 */
    o->given = o->be->alloc(2 * sizeof(double));
}

void ar_adamw_init(ar_adamw *o, const ar_model *model)
{
    size_t lo = 0, hi = model->pt.total;
    ar_adamw_init_ranges(o, model, 1, &lo, &hi);
}

void ar_adamw_free(ar_adamw *o)
{
    for (int k = 0; k < 4; k++)
        if (o->ns[k])
            o->be->free(o->ns[k]);
    o->be->free(o->m);
    o->be->free(o->v);
    o->be->free(o->rec);
    o->be->free(o->given);
    free(o->lo);
    free(o->hi);
}

size_t ar_norm_chunks(const ar_model *model, int b, size_t *first)
{
    if (first) {
        *first = 0;
        for (int i = 0; i < b; i++)
            *first += (model->bucket_len[i] + AR_NORM_CHUNK - 1) / AR_NORM_CHUNK;
    }
    return (model->bucket_len[b] + AR_NORM_CHUNK - 1) / AR_NORM_CHUNK;
}

/* Chunks [c0, c1) of bucket b summed on the device into the model's
 * norm_sums (one op call, asynchronous); returns where they are. */
static double *chunk_sums_on_device(const ar_model *model, int b, size_t c0, size_t c1)
{
    size_t first, len = model->bucket_len[b];
    ar_norm_chunks(model, b, &first);
    size_t lo = c0 * AR_NORM_CHUNK, hi = c1 * AR_NORM_CHUNK < len ? c1 * AR_NORM_CHUNK : len;
    double *dev = model->norm_sums + first + c0;
    if (c1 > c0)
        model->be->sumsq_chunks(dev, model->grads + model->bucket_off[b] + lo, hi - lo, AR_NORM_CHUNK);
    return dev;
}

void ar_norm_chunk_sumsq(const ar_model *model, int b, size_t c0, size_t c1, double *out)
{
    double *dev = chunk_sums_on_device(model, b, c0, c1);
    if (c1 > c0)
        model->be->download(out, dev, (c1 - c0) * sizeof(double));
}

double ar_norm_from_chunks(const double *sums, size_t n)
{
    double s = 0;
    for (size_t i = 0; i < n; i++)
        s += sums[i];
    return sqrt(s);
}

/* Every bucket's chunk sums into the model's norm_sums, on the device;
 * returns how many. */
static size_t all_chunk_sums_on_device(const ar_model *model)
{
    size_t total = 0, first;
    for (int b = 0; b < model->nbuckets; b++) {
        size_t nc = ar_norm_chunks(model, b, &first);
        chunk_sums_on_device(model, b, 0, nc);
        total += nc;
    }
    return total;
}

double *ar_norm_chunk_sums(const ar_model *model, size_t *n)
{
    /* every bucket's sums on the device, then one copy back: one wait for
     * the device a step, not one a chunk */
    size_t total = all_chunk_sums_on_device(model);
    double *s = ar_xcalloc(total + 1, sizeof(double));
    if (total)
        model->be->download(s, model->norm_sums, total * sizeof(double));
    *n = total;
    return s;
}

double ar_grad_norm(const ar_model *model)
{
    size_t n;
    double *s = ar_norm_chunk_sums(model, &n);
    double norm = ar_norm_from_chunks(s, n);
    free(s);
    return norm;
}

void ar_adamw_moments_to_full(const ar_adamw *o, size_t total, float *m, float *v)
{
    memset(m, 0, total * sizeof(float));
    memset(v, 0, total * sizeof(float));
    size_t at = 0;
    for (int r = 0; r < o->nranges; r++) {
        size_t n = o->hi[r] - o->lo[r];
        o->be->download(m + o->lo[r], o->m + at, n * sizeof(float));
        o->be->download(v + o->lo[r], o->v + at, n * sizeof(float));
        at += n;
    }
}

void ar_adamw_moments_from_full(ar_adamw *o, const float *m, const float *v)
{
    size_t at = 0;
    for (int r = 0; r < o->nranges; r++) {
        size_t n = o->hi[r] - o->lo[r];
        o->be->upload(o->m + at, m + o->lo[r], n * sizeof(float));
        o->be->upload(o->v + at, v + o->lo[r], n * sizeof(float));
        at += n;
    }
}

int ar_muon_param(const ar_model *model, int i)
{
    for (int k = 0; k < model->cfg.n_layer; k++) {
        const ar_block_idx *b = &model->blk[k];
        if (i == b->q || i == b->k || i == b->v || i == b->o || i == b->gate || i == b->up || i == b->down)
            return 1;
    }
    return 0;
}

void ar_muon_ns(const ar_backend *be, float *x, int m, int n, int steps, float *const s[3])
{
    size_t mn = (size_t)m * n;
    double norm = sqrt(be->sumsq(x, mn));
    be->scale(x, (float)(1.0 / (norm + 1e-7)), mn);
    /* The iteration runs on the wide X (r x c, r <= c).  A tall x (m > n)
     * is X^T, kept untransposed: A = X X^T = x^T x, and the update
     * X = a X + B X becomes x = a x + x B^T (B is symmetric). */
    int tall = m > n, r = tall ? n : m;
    float *X = x, *Y = s[0], *A = s[1], *BB = s[2];
    for (int it = 0; it < steps; it++) {
        if (tall) {
            be->zero(A, (size_t)r * r * sizeof(float));
            be->matmul_bwd(NULL, A, X, X, X, 0, m, n, n); /* A += x^T x */
        } else {
            be->matmul_fwd(A, X, X, m, n, m); /* A = X X^T */
        }
        be->matmul_fwd(BB, A, A, r, r, r); /* A A^T = A A */
        be->scale(BB, (float)AR_NS_C, (size_t)r * r);
        be->scale(A, (float)AR_NS_B, (size_t)r * r);
        be->add(BB, A, (size_t)r * r); /* B = b A + c A A */
        if (tall) {
            be->matmul_fwd(Y, X, BB, m, n, n); /* Y = x B^T */
            be->scale(X, (float)AR_NS_A, mn);
            be->add(Y, X, mn);
        } else {
            be->copy(Y, X, mn);
            be->scale(Y, (float)AR_NS_A, mn);
            be->matmul_bwd(NULL, Y, BB, X, X, 0, m, n, m); /* Y += B^T X */
        }
        float *t = X;
        X = Y;
        Y = t;
    }
    if (X != x)
        be->copy(x, X, mn);
}

/* Muon's scratch for the matrices of o's ranges: the largest matrix (two
 * of it) and the largest min(m,n)^2 (two of it). */
static void muon_scratch(ar_adamw *o, const ar_model *model)
{
    size_t big = 1, sq = 1;
    for (int i = 0; i < model->pt.n; i++) {
        const ar_param *p = &model->pt.p[i];
        if (!ar_muon_param(model, i))
            continue;
        size_t r = (size_t)(p->shape[0] < p->shape[1] ? p->shape[0] : p->shape[1]);
        big = p->numel > big ? p->numel : big;
        sq = r * r > sq ? r * r : sq;
    }
    o->ns[0] = o->be->alloc(big * sizeof(float));
    o->ns[1] = o->be->alloc(big * sizeof(float));
    o->ns[2] = o->be->alloc(sq * sizeof(float));
    o->ns[3] = o->be->alloc(sq * sizeof(float));
}

/* One Muon update of matrix p, whose momentum buffer is B. */
static void muon_update(ar_adamw *o, ar_model *model, const ar_param *p, float *B, const ar_train_cfg *tc,
                        float gscale, double lr)
{
    const ar_backend *be = o->be;
    size_t n = p->numel;
    int rows = (int)p->shape[0], cols = (int)p->shape[1];
    float *W = model->params + p->offset, *X = o->ns[0], *T = o->ns[1];
    float mu = (float)tc->muon_momentum;
    be->copy(X, model->grads + p->offset, n);
    if (gscale != 1.0f)
        be->scale(X, gscale, n); /* g */
    be->scale(B, mu, n);
    be->add(B, X, n); /* B = mu B + g */
    if (tc->muon_nesterov) {
        be->copy(T, B, n);
        be->scale(T, mu, n);
        be->add(X, T, n); /* g + mu B */
    } else {
        be->copy(X, B, n);
    }
    ar_muon_ns(be, X, rows, cols, tc->muon_ns_steps, o->ns + 1);
    double s = tc->muon_scale == AR_MUON_SCALE_MOONLIGHT ? 0.2 * sqrt((double)(rows > cols ? rows : cols))
                                                         : sqrt(rows > cols ? (double)rows / cols : 1.0);
    if (tc->muon_weight_decay > 0)
        be->scale(W, (float)(1.0 - lr * tc->muon_weight_decay), n);
    be->scale(X, (float)(-lr * s), n);
    be->add(W, X, n);
}

void ar_adamw_update(ar_adamw *o, ar_model *model, const ar_train_cfg *tc, double lr)
{
    float gscale = 1.0f;
    if (o->muon) { /* the Newton-Schulz steps run from the host: the record first */
        ar_step_rec r;
        ar_adamw_read(o, &r);
        if (r.skip)
            return;
        gscale = r.gscale;
    }
    if (o->muon && !o->ns[0])
        muon_scratch(o, model);
    double lr_muon = tc->muon_lr * lr / tc->lr; /* the schedule's factor */
    ar_adamw_hparams st = {.lr = (float)lr, .b1 = (float)tc->beta1, .b2 = (float)tc->beta2, .eps = (float)tc->eps};
    size_t moff = 0; /* where range r's moments start */
    for (int r = 0; r < o->nranges; r++) {
        /* Neighbouring tensors with the same weight decay and learning-rate
         * scale are one AdamW call, the same update element by element:
         * the small tensors of a narrow model would each be too short to
         * split among threads. */
        size_t run_lo = 0, run_hi = 0;
        float run_wd = 0, run_ls = 1;
        for (int i = 0; i <= model->pt.n; i++) {
            const ar_param *p = i < model->pt.n ? &model->pt.p[i] : NULL;
            size_t lo = 0, hi = 0;
            if (p) {
                lo = p->offset > o->lo[r] ? p->offset : o->lo[r];
                hi = p->offset + p->numel < o->hi[r] ? p->offset + p->numel : o->hi[r];
                if (lo >= hi)
                    continue;
            }
            /* a matrix split between ranges (ZeRO-1, which validation
             * refuses with Muon) would fall back to AdamW */
            int muon = p && o->muon && ar_muon_param(model, i) && lo == p->offset && hi == p->offset + p->numel;
            float wd = p && p->decay ? (float)tc->weight_decay : 0.0f, ls = p ? p->lr_scale : 1.0f;
            if (run_hi > run_lo && (!p || muon || wd != run_wd || ls != run_ls || lo != run_hi)) {
                size_t mo = moff + (run_lo - o->lo[r]);
                st.wd = run_wd;
                st.lr = (float)(lr * run_ls);
                o->be->adamw(model->params + run_lo, model->grads + run_lo, o->m + mo, o->v + mo, run_hi - run_lo,
                             &st, o->rec);
                run_lo = run_hi = 0;
            }
            if (!p)
                break;
            if (muon) {
                muon_update(o, model, p, o->m + moff + (lo - o->lo[r]), tc, gscale, lr_muon);
                continue;
            }
            if (run_hi == run_lo)
                run_lo = lo, run_wd = wd, run_ls = ls;
            run_hi = hi;
        }
        moff += o->hi[r] - o->lo[r];
    }
}

static void check_into(ar_adamw *o, const ar_step_check *c) { o->be->step_check(c, o->rec); }

void ar_step_check_device(ar_adamw *o, ar_model *model, const ar_train_cfg *tc, const double *parts, int A,
                          int nc)
{
    size_t ns = all_chunk_sums_on_device(model);
    ar_step_check c = {.parts = parts, .A = A, .nc = nc, .N = (double)model->N, .sums = model->norm_sums,
                       .nsums = ns, .clip = tc->grad_clip, .b1 = (float)tc->beta1, .b2 = (float)tc->beta2};
    check_into(o, &c);
}

void ar_step_check_given(ar_adamw *o, const ar_train_cfg *tc, double loss, double gnorm)
{
    double v[2] = {loss, gnorm};
    o->be->upload(o->given, v, sizeof v);
    /* one micro-batch of one chunk, N = 1: loss = (0 + loss) / 1 / 1, the same bits */
    ar_step_check c = {.parts = o->given, .A = 1, .nc = 1, .N = 1, .sums = o->given + 1, .nsums = 1,
                       .norm_given = 1, .clip = tc->grad_clip, .b1 = (float)tc->beta1, .b2 = (float)tc->beta2};
    check_into(o, &c);
}

void ar_adamw_read(ar_adamw *o, ar_step_rec *out)
{
    o->be->download(out, o->rec, sizeof *out);
    o->t = (long)out->t;
}

/* step_check writes every other field before adamw reads it */
void ar_adamw_sync_t(ar_adamw *o)
{
    ar_step_rec r = {.t = o->t};
    o->be->upload(o->rec, &r, sizeof r);
}

void ar_adamw_step(ar_adamw *o, ar_model *model, const ar_train_cfg *tc, double lr, double gnorm)
{
    ar_step_check_given(o, tc, 0.0, gnorm);
    ar_adamw_update(o, model, tc, lr);
    ar_step_rec r;
    ar_adamw_read(o, &r); /* o->t */
}
