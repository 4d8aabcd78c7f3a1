#include "eval.h"

#include <stdlib.h>

#include "../parallel/comm.h"

/* The protocol's windows of d, at most max_windows (<= 0: all). */
static int windows_of(const ar_model *m, const ar_eval_data *d, long max_windows, size_t *nw, ar_err *e)
{
    *nw = ar_eval_data_windows(d, m->T);
    if (*nw == 0) {
        size_t n = 0;
        for (int i = 0; i < d->nparts; i++)
            n += d->part[i].n;
        return ar_fail(e, "evaluation data holds %zu tokens, fewer than one window of seq_len+1 = %d", n,
                       m->T + 1);
    }
    if (max_windows > 0 && (size_t)max_windows < *nw)
        *nw = (size_t)max_windows;
    return 0;
}

/* Windows w0 .. w0+B-1 of d as B rows of inputs and targets. */
static int read_batch(const ar_eval_data *d, size_t w0, int B, int T, int32_t *in, int32_t *tg, ar_err *e)
{
    for (int b = 0; b < B; b++)
        if (ar_eval_data_window(d, w0 + (size_t)b, T, in + (size_t)b * T, tg + (size_t)b * T, e) != 0)
            return -1;
    return 0;
}

int ar_evaluate_data(ar_model *m, const ar_eval_data *d, long max_windows, int want_grads, ar_eval_result *r,
                     ar_err *e)
{
    return ar_evaluate_with(m, d, max_windows, want_grads, NULL, NULL, r, e);
}

int ar_evaluate(ar_model *m, const int32_t *x, size_t n, long max_windows, int want_grads, ar_eval_result *r,
                ar_err *e)
{
    ar_token_set *ts = ar_token_set_wrap(x, n, "evaluation tokens");
    ar_token_span part = {ts, 0, n};
    ar_eval_data d = {&part, 1, m->V};
    int rc = ar_evaluate_with(m, &d, max_windows, want_grads, NULL, NULL, r, e);
    ar_token_set_free(ts);
    return rc;
}

/* One batch's forward; where nothing reads its depth weights (no hook, no
 * backward: reads 0), without writing them (lib/model.h) */
static void eval_forward(ar_model *m, const int32_t *in, const int32_t *tg, int B, double *sum, int reads)
{
    if (reads)
        ar_model_forward(m, in, tg, B, sum);
    else
        ar_model_forward_unread(m, in, tg, B, sum);
}

int ar_evaluate_with(ar_model *m, const ar_eval_data *d, long max_windows, int want_grads, ar_eval_hook hook,
                     void *ud, ar_eval_result *r, ar_err *e)
{
    int T = m->T;
    size_t nw;
    if (windows_of(m, d, max_windows, &nw, e) != 0)
        return -1;
    int32_t *in = ar_xmalloc((size_t)m->maxB * T * sizeof(int32_t));
    int32_t *tg = ar_xmalloc((size_t)m->maxB * T * sizeof(int32_t));
    int stats = m->collect_stats, rc = 0;
    double total = 0;
    if (want_grads)
        ar_model_zero_grad(m);
    for (size_t w0 = 0; w0 < nw; w0 += (size_t)m->maxB) {
        int B = (int)(nw - w0 < (size_t)m->maxB ? nw - w0 : (size_t)m->maxB);
        if ((rc = read_batch(d, w0, B, T, in, tg, e)) != 0)
            break;
        double s;
        eval_forward(m, in, tg, B, &s, hook || want_grads);
        if (hook)
            hook(m, B, ud);
        m->collect_stats = 0;
        total += s;
        /* d(mean over all nw*T positions)/dparams accumulates batch by batch. */
        if (want_grads)
            ar_model_backward(m, (float)(1.0 / ((double)nw * T)));
    }
    m->collect_stats = stats;
    free(in);
    free(tg);
    if (rc != 0)
        return -1;
    r->windows = (long)nw;
    r->tokens = (long)nw * T;
    r->sum_nats = total;
    r->loss = total / (double)r->tokens;
    return 0;
}

int ar_evaluate_ranks(ar_model *m, ar_comm *c, const ar_eval_data *d, long max_windows, ar_eval_result *r,
                      ar_err *e)
{
    return ar_evaluate_ranks_with(m, c, d, max_windows, NULL, NULL, r, e);
}

int ar_evaluate_ranks_with(ar_model *m, ar_comm *c, const ar_eval_data *d, long max_windows, ar_eval_hook hook,
                           void *ud, ar_eval_result *r, ar_err *e)
{
    if (!c || c->size == 1)
        return ar_evaluate_with(m, d, max_windows, 0, hook, ud, r, e);
    int T = m->T;
    size_t nw;
    if (windows_of(m, d, max_windows, &nw, e) != 0)
        return -1;
    /* batch i of maxB windows runs on rank i mod P; its sum goes to slot i,
     * zero elsewhere, so summing the slots over ranks is exact and the
     * total adds them in batch order, as one process does */
    size_t nb = (nw + (size_t)m->maxB - 1) / (size_t)m->maxB;
    double *sums = ar_xcalloc(nb, sizeof(double));
    int32_t *in = ar_xmalloc((size_t)m->maxB * T * sizeof(int32_t));
    int32_t *tg = ar_xmalloc((size_t)m->maxB * T * sizeof(int32_t));
    int stats = m->collect_stats, rc = 0;
    for (size_t i = (size_t)c->rank; i < nb; i += (size_t)c->size) {
        size_t w0 = i * (size_t)m->maxB;
        int B = (int)(nw - w0 < (size_t)m->maxB ? nw - w0 : (size_t)m->maxB);
        if ((rc = read_batch(d, w0, B, T, in, tg, e)) != 0)
            break;
        eval_forward(m, in, tg, B, &sums[i], hook != NULL);
        if (hook)
            hook(m, B, ud);
        m->collect_stats = 0;
    }
    m->collect_stats = stats;
    free(in);
    free(tg);
    /* a rank that could not read its windows fails them all, before the
     * sum every rank takes part in */
    if (ar_comm_agree(c, rc, e) != 0 || c->ops->sum_doubles(c, sums, nb, e) != 0) {
        free(sums);
        return -1;
    }
    double total = 0;
    for (size_t i = 0; i < nb; i++)
        total += sums[i];
    free(sums);
    r->windows = (long)nw;
    r->tokens = (long)nw * T;
    r->sum_nats = total;
    r->loss = total / (double)r->tokens;
    return 0;
}

int ar_eval_data_open(const char *spec, const ar_model_cfg *mc, ar_token_set **set, ar_token_span **parts,
                      ar_eval_data *d, ar_err *e)
{
    *parts = NULL;
    if (!(*set = ar_token_set_open(spec, e)))
        return -1;
    if (mc->vocab_bytes && ar_token_set_format(*set) != AR_TOKENS_TEXT) {
        ar_token_set_free(*set);
        *set = NULL;
        return ar_fail(e, "'%s' is a token file but the model's vocabulary is bytes", spec);
    }
    *parts = ar_token_spans_of_shards(*set);
    *d = (ar_eval_data){*parts, ar_token_set_shards(*set), mc->vocab_bytes ? 256 : mc->vocab};
    return 0;
}

void ar_eval_data_close(ar_token_set *set, ar_token_span *parts)
{
    ar_token_set_free(set);
    free(parts);
}
