#include "eval.h"

#include <stdlib.h>

#include "../parallel/comm.h"
#include "data.h"

/* The protocol's windows of n tokens, at most max_windows (<= 0: all). */
static int windows_of(const ar_model *m, size_t n, long max_windows, size_t *nw, ar_err *e)
{
    *nw = ar_eval_window_count(n, m->T);
    if (*nw == 0)
        return ar_fail(e, "evaluation data holds %zu tokens, fewer than one window of seq_len+1 = %d", n,
                       m->T + 1);
    if (max_windows > 0 && (size_t)max_windows < *nw)
        *nw = (size_t)max_windows;
    return 0;
}

int ar_evaluate(ar_model *m, const int32_t *x, size_t n, long max_windows, int want_grads,
                ar_eval_result *r, ar_err *e)
{
    return ar_evaluate_with(m, x, n, max_windows, want_grads, NULL, NULL, r, e);
}

int ar_eval_check_tokens(const ar_tokens *t, const ar_model_cfg *mc, const char *path, ar_err *e)
{
    if (mc->vocab_bytes && !t->is_bytes)
        return ar_fail(e, "'%s' is a token file but the model's vocabulary is bytes", path);
    for (size_t i = 0; i < t->n; i++)
        if (t->tok[i] < 0 || t->tok[i] >= mc->vocab)
            return ar_fail(e, "'%s': token %zu has id %d, outside the model's vocabulary of %d", path, i,
                           t->tok[i], mc->vocab);
    return 0;
}

int ar_evaluate_with(ar_model *m, const int32_t *x, size_t n, long max_windows, int want_grads,
                     ar_eval_hook hook, void *ud, ar_eval_result *r, ar_err *e)
{
    int T = m->T;
    size_t nw;
    if (windows_of(m, n, max_windows, &nw, e) != 0)
        return -1;
    int32_t *in = ar_xmalloc((size_t)m->maxB * T * sizeof(int32_t));
    int32_t *tg = ar_xmalloc((size_t)m->maxB * T * sizeof(int32_t));
    int stats = m->collect_stats;
    double total = 0;
    if (want_grads)
        ar_model_zero_grad(m);
    for (size_t w0 = 0; w0 < nw; w0 += (size_t)m->maxB) {
        int B = (int)(nw - w0 < (size_t)m->maxB ? nw - w0 : (size_t)m->maxB);
        for (int b = 0; b < B; b++)
            ar_eval_window(x, w0 + b, T, in + (size_t)b * T, tg + (size_t)b * T);
        double s;
        ar_model_forward(m, in, tg, B, &s);
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
    r->windows = (long)nw;
    r->tokens = (long)nw * T;
    r->sum_nats = total;
    r->loss = total / (double)r->tokens;
    return 0;
}

int ar_evaluate_ranks(ar_model *m, ar_comm *c, const int32_t *x, size_t n, long max_windows, ar_eval_result *r,
                      ar_err *e)
{
    return ar_evaluate_ranks_with(m, c, x, n, max_windows, NULL, NULL, r, e);
}

int ar_evaluate_ranks_with(ar_model *m, ar_comm *c, const int32_t *x, size_t n, long max_windows,
                           ar_eval_hook hook, void *ud, ar_eval_result *r, ar_err *e)
{
    if (!c || c->size == 1)
        return ar_evaluate_with(m, x, n, max_windows, 0, hook, ud, r, e);
    int T = m->T;
    size_t nw;
    if (windows_of(m, n, max_windows, &nw, e) != 0)
        return -1;
    /* batch i of maxB windows runs on rank i mod P; its sum goes to slot i,
     * zero elsewhere, so summing the slots over ranks is exact and the
     * total adds them in batch order, as one process does */
    size_t nb = (nw + (size_t)m->maxB - 1) / (size_t)m->maxB;
    double *sums = ar_xcalloc(nb, sizeof(double));
    int32_t *in = ar_xmalloc((size_t)m->maxB * T * sizeof(int32_t));
    int32_t *tg = ar_xmalloc((size_t)m->maxB * T * sizeof(int32_t));
    int stats = m->collect_stats;
    for (size_t i = (size_t)c->rank; i < nb; i += (size_t)c->size) {
        size_t w0 = i * (size_t)m->maxB;
        int B = (int)(nw - w0 < (size_t)m->maxB ? nw - w0 : (size_t)m->maxB);
        for (int b = 0; b < B; b++)
            ar_eval_window(x, w0 + b, T, in + (size_t)b * T, tg + (size_t)b * T);
        ar_model_forward(m, in, tg, B, &sums[i]);
        if (hook)
            hook(m, B, ud);
        m->collect_stats = 0;
    }
    m->collect_stats = stats;
    free(in);
    free(tg);
    int rc = c->ops->sum_doubles(c, sums, nb, e);
    double total = 0;
    for (size_t i = 0; i < nb; i++)
        total += sums[i];
    free(sums);
    if (rc != 0)
        return -1;
    r->windows = (long)nw;
    r->tokens = (long)nw * T;
    r->sum_nats = total;
    r->loss = total / (double)r->tokens;
    return 0;
}
