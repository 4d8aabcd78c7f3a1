/* Sampling from a trained model (generate.h). */
#define _GNU_SOURCE /* qsort_r */
#include "generate.h"

#include <gsl/gsl_rng.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint.h"
#include "../core/clock.h"

int ar_gen_load(const char *path, const ar_backend *be, int chunk, ar_config *cfg, ar_model **m,
                long *step, ar_err *e)
{
    *m = NULL;
    if (ar_ckpt_read_config(path, cfg, step, e) != 0)
        return -1;
    ar_model_cfg mc = cfg->model;
    mc.seq_len = chunk < 1 ? 1 : chunk > mc.seq_len ? mc.seq_len : chunk;
    unsigned char *runs = ar_xcalloc((size_t)ar_cfg_sublayers(&mc) + 2, 1);
    ar_model_split sp = {.nchunks = 1, .runs = runs};
    int rc = ar_model_create_split(m, &mc, be, 1, &sp, e);
    free(runs);
    if (rc != 0)
        return -1;
    char file[AR_PATH_MAX + 32];
    ar_ckpt_model_path(path, file, sizeof file);
    if (ar_ckpt_load_weights(file, *m, e) != 0) {
        ar_model_free(*m);
        *m = NULL;
        return -1;
    }
    return 0;
}

/* ---- the sampler ---- */

struct ar_sampler {
    ar_sample_cfg c;
    int V;
    gsl_rng *rng;
    int *idx;      /* candidate ids */
    double *p;     /* their probabilities */
};

ar_sampler *ar_sampler_create(const ar_sample_cfg *c, int V)
{
    ar_sampler *s = ar_xcalloc(1, sizeof *s);
    s->c = *c;
    s->V = V;
    s->rng = gsl_rng_alloc(gsl_rng_mt19937);
    gsl_rng_set(s->rng, (unsigned long)c->seed);
    s->idx = ar_xcalloc((size_t)V, sizeof *s->idx);
    s->p = ar_xcalloc((size_t)V, sizeof *s->p);
    return s;
}

void ar_sampler_free(ar_sampler *s)
{
    if (!s)
        return;
    gsl_rng_free(s->rng);
    free(s->idx);
    free(s->p);
    free(s);
}

/* a before b: the larger logit, or of equal logits the lower id */
static int before(const float *z, int a, int b) { return z[a] > z[b] || (z[a] == z[b] && a < b); }

static int cmp_desc(const void *pa, const void *pb, void *zp)
{
    const float *z = zp;
    int a = *(const int *)pa, b = *(const int *)pb;
    return before(z, a, b) ? -1 : before(z, b, a) ? 1 : 0;
}

/* heap of k ids whose root is the one that comes last in `before` order */
static void sift_down(int *h, int k, int i, const float *z)
{
    for (;;) {
        int l = 2 * i + 1, r = l + 1, w = i;
        if (l < k && before(z, h[w], h[l]))
            w = l;
        if (r < k && before(z, h[w], h[r]))
            w = r;
        if (w == i)
            return;
        int t = h[i];
        h[i] = h[w];
        h[w] = t;
        i = w;
    }
}

/* The k first ids in `before` order into idx[0..k), sorted: a heap of the
 * best k seen, then a sort of those. */
static void top_k(ar_sampler *s, const float *z, int k)
{
    int *h = s->idx;
    for (int i = 0; i < k; i++)
        h[i] = i;
    for (int i = k / 2 - 1; i >= 0; i--)
        sift_down(h, k, i, z);
    for (int i = k; i < s->V; i++)
        if (before(z, i, h[0])) {
            h[0] = i;
            sift_down(h, k, 0, z);
        }
    qsort_r(h, (size_t)k, sizeof *h, cmp_desc, (void *)z);
}

static int32_t argmax(const float *z, int V)
{
    int best = 0;
    for (int i = 1; i < V; i++)
        if (z[i] > z[best])
            best = i;
    return best;
}

int32_t ar_sample(ar_sampler *s, const float *z)
{
    int V = s->V, k = s->c.top_k > 0 && s->c.top_k < V ? s->c.top_k : V;
    if (s->c.temperature <= 0 || k == 1)
        return argmax(z, V);
    int sorted = k < V || s->c.top_p < 1;
    if (sorted)
        top_k(s, z, k);
    else
        for (int i = 0; i < V; i++)
            s->idx[i] = i;
    double zmax = z[sorted ? s->idx[0] : argmax(z, V)], total = 0;
    for (int i = 0; i < k; i++) {
        s->p[i] = exp(((double)z[s->idx[i]] - zmax) / s->c.temperature);
        total += s->p[i];
    }
    if (s->c.top_p < 1) { /* the nucleus: the shortest prefix reaching top_p */
        double cum = 0;
        int n = 0;
        while (n < k && cum < s->c.top_p * total)
            cum += s->p[n++];
        k = n;
        total = cum;
    }
    double u = gsl_rng_uniform(s->rng) * total, cum = 0;
    for (int i = 0; i < k; i++) {
        cum += s->p[i];
        if (u < cum)
            return s->idx[i];
    }
    return s->idx[k - 1]; /* u within rounding of the total */
}

/* ---- the generation loop ---- */

int ar_generate(ar_decoder *dec, ar_sampler *s, const int32_t *prompt, long np, long n_new,
                void (*emit)(int32_t tok, void *ud), void *ud, ar_gen_stats *st, ar_err *e)
{
    int ctx = ar_decoder_ctx(dec), V = s->V;
    *st = (ar_gen_stats){.prompt_tokens = np};
    if (np < 1 || np > ctx)
        return ar_fail(e, "a prompt of %ld tokens does not fit a context of 1 to %d", np, ctx);
    int32_t *hist = ar_xcalloc((size_t)ctx + 1, sizeof *hist);
    float *logits = ar_xcalloc((size_t)V, sizeof *logits);
    memcpy(hist, prompt, (size_t)np * sizeof *hist);
    int nh = (int)np, rc = 0;
    double t0 = ar_now_s();
    ar_decoder_reset(dec);
    if (ar_decoder_feed(dec, hist, nh, logits, e) != 0)
        rc = -1;
    double t1 = ar_now_s();
    st->prefill_s = t1 - t0;
    for (long i = 0; rc == 0 && i < n_new; i++) {
        int32_t tok = ar_sample(s, logits);
        st->generated++;
        emit(tok, ud);
        if (i + 1 == n_new)
            break;
        hist[nh++] = tok;
        if (ar_decoder_pos(dec) < ctx) {
            rc = ar_decoder_step(dec, &tok, 1, logits, 0, e);
            continue;
        }
        /* the context is full: slide to its last ceil(ctx/2) tokens */
        int keep = ctx - ctx / 2;
        memmove(hist, hist + nh - keep, (size_t)keep * sizeof *hist);
        nh = keep;
        st->slides++;
        ar_decoder_reset(dec);
        rc = ar_decoder_feed(dec, hist, nh, logits, e);
    }
    st->decode_s = ar_now_s() - t1;
    free(hist);
    free(logits);
    return rc;
}
