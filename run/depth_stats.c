/* Token-averaged depth-attention weights (depth_stats.h). */
#include "depth_stats.h"

#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "../core/config.h"
#include "../lib/mixing.h"
#include "../parallel/comm.h"

typedef struct {
    ar_depth_attn *a;
    double *sum; /* (L+1) x (L+1): sum over tokens of alpha */
    float *buf;
    ar_depth_route *route; /* or NULL */
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
    if (c->route)
        ar_depth_route_add(c->route, r, N);
}

int ar_depth_attn_measure(ar_model *m, const ar_eval_data *d, long max_windows, ar_depth_attn *a,
                          ar_eval_result *r, ar_err *e)
{
    return ar_depth_measure(m, d, max_windows, a, NULL, r, e);
}

int ar_depth_measure(ar_model *m, const ar_eval_data *d, long max_windows, ar_depth_attn *a,
                     ar_depth_route *route, ar_eval_result *r, ar_err *e)
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
    if (route && !ar_depth_route_init(route, res)) {
        ar_depth_attn_free(a);
        return ar_fail(e, "the %s scheme gives no per-token weights", ar_res_kind_name(m->cfg.residual.kind));
    }
    acc c = {.a = a, .sum = ar_xcalloc((size_t)(L + 1) * (size_t)(L + 1), sizeof(double)),
             .buf = ar_xmalloc(((size_t)L + 1) * sizeof(float)), .route = route};
    ar_eval_result rr;
    int rc = ar_evaluate_with(m, d, max_windows, 0, add_batch, &c, r ? r : &rr, e);
    if (rc == 0)
        for (int l = 1; l <= L + 1; l++)
            for (int i = 0; i < a->n[l - 1]; i++)
                ar_depth_attn_row(a, l)[i] = c.sum[(size_t)(l - 1) * (L + 1) + i] / (double)a->tokens;
    free(c.sum);
    free(c.buf);
    if (rc != 0) {
        ar_depth_attn_free(a);
        if (route)
            ar_depth_route_free(route);
    }
    return rc;
}

void ar_depth_route_hook(ar_model *m, int B, void *ud) { ar_depth_route_add(ud, m->res, B * m->T); }

int ar_depth_route_reduce(ar_depth_route *a, ar_comm *c, ar_err *e)
{
    if (!c || c->size == 1 || !a->acc)
        return 0;
    size_t k = (size_t)(a->L + 1) * ar_route_stride(a->L);
    double *v = ar_xmalloc((k + 1) * sizeof(double));
    memcpy(v, a->acc, k * sizeof(double));
    v[k] = (double)a->tokens;
    int rc = c->ops->sum_doubles(c, v, k + 1, e);
    if (rc == 0) {
        memcpy(a->acc, v, k * sizeof(double));
        a->tokens = (long)v[k];
    }
    free(v);
    return rc;
}

static void route_list(ar_jw *w, const char *key, const ar_route_stats *st, size_t off, int nm)
{
    ar_jw_key(w, key);
    ar_jw_arr_begin(w);
    for (int l = 0; l < nm; l++)
        ar_jw_num(w, *(const double *)((const char *)&st[l] + off));
    ar_jw_arr_end(w);
}

void ar_depth_route_json(ar_jw *w, const char *key, const ar_depth_route *a)
{
    int nm = a->L + 1;
    ar_route_stats *st = ar_xcalloc((size_t)nm, sizeof *st);
    double *share = ar_xcalloc((size_t)nm * (size_t)nm, sizeof(double));
    for (int l = 1; l <= nm; l++)
        ar_route_stats_of(ar_depth_route_acc(a, l), a->n[l - 1], &st[l - 1], share + (size_t)(l - 1) * nm);
    ar_jw_key(w, key);
    ar_jw_obj_begin(w);
    ar_jw_key(w, "tokens");
    ar_jw_int(w, a->tokens);
    ar_jw_key(w, "sources");
    ar_jw_arr_begin(w);
    for (int l = 0; l < nm; l++)
        ar_jw_int(w, a->n[l]);
    ar_jw_arr_end(w);
    route_list(w, "entropy", st, offsetof(ar_route_stats, entropy), nm);
    route_list(w, "entropy_norm", st, offsetof(ar_route_stats, entropy_norm), nm);
    route_list(w, "eff_sources", st, offsetof(ar_route_stats, eff_sources), nm);
    route_list(w, "mean_max", st, offsetof(ar_route_stats, max_weight), nm);
    ar_jw_key(w, "top_share");
    ar_jw_arr_begin(w);
    for (int l = 0; l < nm; l++) {
        ar_jw_arr_begin(w);
        for (int i = 0; i < a->n[l]; i++)
            ar_jw_num(w, share[(size_t)l * nm + i]);
        ar_jw_arr_end(w);
    }
    ar_jw_arr_end(w);
    ar_jw_obj_end(w);
    free(st);
    free(share);
}
