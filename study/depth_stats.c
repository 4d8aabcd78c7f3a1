/* Token-averaged depth-attention weights (depth_stats.h). */
#include "depth_stats.h"

#include <math.h>
#include <stdlib.h>

#include "../core/config.h"
#include "../lib/mixing.h"

typedef struct {
    ar_depth_attn *a;
    double *sum; /* (L+1) x (L+1): sum over tokens of alpha */
    float *buf;
} acc;

/* After each batch: mean_weights is that batch's mean over its N = B*T
 * tokens, so N * mean adds the batch's sum. */
static void add_batch(ar_model *m, int B, void *ud)
{
    acc *c = ud;
    ar_residual *r = m->res;
    int N = B * m->T, L = m->L;
    for (int l = 1; l <= L + 1; l++) {
        r->vt->mean_weights(r, l, N, c->buf);
        double *s = c->sum + (size_t)(l - 1) * (L + 1);
        for (int i = 0; i < c->a->n[l - 1]; i++)
            s[i] += (double)N * c->buf[i];
    }
    c->a->tokens += N;
}

int ar_depth_attn_measure(ar_model *m, const int32_t *x, size_t n, long max_windows, ar_depth_attn *a,
                          ar_eval_result *r, ar_err *e)
{
    ar_residual *res = m->res;
    if (!ar_res_has_depth_attn(m->cfg.residual.kind) || res->vt->n_sources(res, 1) == 0)
        return ar_fail(e, "a %s model has no depth attention", ar_res_kind_name(m->cfg.residual.kind));
    int L = m->L;
    ar_depth_attn_alloc(a, L);
    for (int l = 1; l <= L + 1; l++) {
        a->n[l - 1] = res->vt->n_sources(res, l);
        /* The figures label sources from the config (mixing.h); the model
         * must agree with it. */
        if (a->n[l - 1] != ar_mixer_sources(&m->cfg, l, NULL)) {
            int want = ar_mixer_sources(&m->cfg, l, NULL);
            ar_depth_attn_free(a);
            return ar_fail(e, "mixer %d of the model has %d sources, its config says %d", l,
                           res->vt->n_sources(res, l), want);
        }
    }
    acc c = {.a = a, .sum = ar_xcalloc((size_t)(L + 1) * (size_t)(L + 1), sizeof(double)),
             .buf = ar_xmalloc(((size_t)L + 1) * sizeof(float))};
    ar_eval_result rr;
    int rc = ar_evaluate_with(m, x, n, max_windows, 0, add_batch, &c, r ? r : &rr, e);
    if (rc == 0)
        for (int l = 1; l <= L + 1; l++)
            for (int i = 0; i < a->n[l - 1]; i++)
                ar_depth_attn_row(a, l)[i] = c.sum[(size_t)(l - 1) * (L + 1) + i] / (double)a->tokens;
    free(c.sum);
    free(c.buf);
    if (rc != 0)
        ar_depth_attn_free(a);
    return rc;
}
