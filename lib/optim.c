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
}

void ar_adamw_init(ar_adamw *o, const ar_model *model)
{
    size_t lo = 0, hi = model->pt.total;
    ar_adamw_init_ranges(o, model, 1, &lo, &hi);
}

void ar_adamw_free(ar_adamw *o)
{
    o->be->free(o->m);
    o->be->free(o->v);
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

void ar_norm_chunk_sumsq(const ar_model *model, int b, size_t c0, size_t c1, double *out)
{
    size_t off = model->bucket_off[b], len = model->bucket_len[b];
    for (size_t c = c0; c < c1; c++) {
        size_t lo = c * AR_NORM_CHUNK, n = len - lo < AR_NORM_CHUNK ? len - lo : AR_NORM_CHUNK;
        out[c - c0] = model->be->sumsq(model->grads + off + lo, n);
    }
}

double ar_norm_from_chunks(const double *sums, size_t n)
{
    double s = 0;
    for (size_t i = 0; i < n; i++)
        s += sums[i];
    return sqrt(s);
}

double *ar_norm_chunk_sums(const ar_model *model, size_t *n)
{
    size_t total = 0, first;
    for (int b = 0; b < model->nbuckets; b++)
        total += ar_norm_chunks(model, b, NULL);
    double *s = ar_xcalloc(total + 1, sizeof(double));
    for (int b = 0; b < model->nbuckets; b++) {
        size_t k = ar_norm_chunks(model, b, &first);
        ar_norm_chunk_sumsq(model, b, 0, k, s + first);
    }
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

double ar_clip_scale(const ar_train_cfg *tc, double gnorm)
{
    /* as torch.nn.utils.clip_grad_norm_, which adds 1e-6 to the norm */
    if (tc->grad_clip > 0 && gnorm > tc->grad_clip)
        return tc->grad_clip / (gnorm + 1e-6);
    return 1.0;
}

void ar_adamw_step(ar_adamw *o, ar_model *model, const ar_train_cfg *tc, double lr, double gnorm)
{
    float gscale = (float)ar_clip_scale(tc, gnorm);
    o->t++;
    size_t moff = 0; /* where range r's moments start */
    for (int r = 0; r < o->nranges; r++) {
        for (int i = 0; i < model->pt.n; i++) {
            const ar_param *p = &model->pt.p[i];
            size_t lo = p->offset > o->lo[r] ? p->offset : o->lo[r];
            size_t hi = p->offset + p->numel < o->hi[r] ? p->offset + p->numel : o->hi[r];
            if (lo >= hi)
                continue;
            float wd = p->decay ? (float)tc->weight_decay : 0.0f;
            size_t mo = moff + (lo - o->lo[r]);
            o->be->adamw(model->params + lo, model->grads + lo, o->m + mo, o->v + mo, hi - lo, gscale,
                         (float)lr, (float)tc->beta1, (float)tc->beta2, (float)tc->eps, wd, o->t);
        }
        moff += o->hi[r] - o->lo[r];
    }
}
