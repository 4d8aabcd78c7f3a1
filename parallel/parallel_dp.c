/* Data parallelism behind parallel.h: every rank a whole model, the step's
 * micro-batches split over the ranks and the gradient summed by dp.h (the
 * same bits for every P; one process is P = 1). */
#include "parallel.h"

#include <stdlib.h>

#include "dp.h"

typedef struct {
    ar_dp *dp;
    int B, A;          /* micro-batch size, micro-batches per step */
    int32_t *in, *tg;  /* one micro-batch: B x T inputs and targets */
} dp_par;

static ar_dp *dp_of(const ar_parallel *p) { return ((dp_par *)p->impl)->dp; }

/* Micro-batches [first, first + k) of the step on this rank, each's
 * gradient scaled by 1 / (B T A) and summed as dp.h's tree; the losses of
 * every rank's micro-batches gathered to every rank in micro-batch order. */
static int dp_step(ar_parallel *p, ar_parallel_sample_fn sample, void *ud, double *loss, ar_err *e)
{
    dp_par *d = p->impl;
    int T = p->m->T, first;
    int k = ar_dp_local(d->dp, &first);
    float scale = (float)(1.0 / ((double)d->B * T * d->A));
    int rc = 0;
    ar_model_loss_on_device(p->m, p->loss_on_device);
    for (int i = 0; i < k && rc == 0; i++) {
        int a = first + i;
        sample(ud, a, d->in, d->tg);
        ar_dp_begin(d->dp, i);
        ar_model_set_loss_slot(p->m, a);
        loss[a] = ar_model_forward_backward(p->m, d->in, d->tg, d->B, scale, NULL);
        rc = ar_dp_end(d->dp, i, e);
    }
    ar_model_loss_on_device(p->m, 0);
    if (rc == 0)
        rc = ar_dp_finish(d->dp, e);
    if (rc == 0)
        rc = p->comm->ops->allgather(p->comm, loss + first, loss, (size_t)k * sizeof(double), e);
    return rc;
}

static int dp_grad_norm(ar_parallel *p, double *norm, ar_err *e) { return ar_dp_grad_norm(dp_of(p), norm, e); }

static void dp_opt_ranges(const ar_parallel *p, int *n, const size_t **lo, const size_t **hi)
{
    ar_dp_opt_ranges(dp_of(p), n, lo, hi);
}

/* a sharded update's shards to every rank */
static int dp_updated(ar_parallel *p, ar_err *e) { return ar_dp_gather_params(dp_of(p), e); }

/* every rank holds the same parameters: the same check everywhere */
static int dp_agree(ar_parallel *p, int rc, ar_err *e)
{
    (void)p;
    (void)e;
    return rc;
}

/* the parameters are whole since dp_updated; a sharded gradient is not */
static int dp_gather_model(ar_parallel *p, ar_err *e) { return ar_dp_gather_grads(dp_of(p), e); }

static int dp_eval_model(ar_parallel *p, ar_model **em, ar_err *e)
{
    (void)e;
    *em = p->m;
    return 0;
}

static int dp_full_state(ar_parallel *p, const ar_adamw *o, float *m, float *v, ar_err *e)
{
    return ar_dp_full_moments(dp_of(p), o, m, v, e);
}

static int dp_measure(ar_parallel *p, ar_err *e) { return ar_dp_measure(dp_of(p), e); }

/* the reduction's cost: blocking, and what the backward left waiting */
static int dp_metrics(ar_parallel *p, ar_jw *w, long tok_per_step, ar_err *e)
{
    (void)tok_per_step;
    (void)e;
    if (p->comm->size == 1)
        return 0;
    double wait_s, reduce_s;
    ar_dp_times(dp_of(p), &wait_s, &reduce_s);
    ar_jw_key(w, "ranks");
    ar_jw_int(w, p->comm->size);
    ar_jw_key(w, "reduce_s");
    ar_jw_num(w, reduce_s);
    ar_jw_key(w, "reduce_wait_s");
    ar_jw_num(w, wait_s);
    return 0;
}

static void dp_free(ar_parallel *p)
{
    dp_par *d = p->impl;
    ar_dp_free(d->dp);
    free(d->in);
    free(d->tg);
    free(d);
    free(p);
}

static const ar_parallel_ops dp_ops = {
    .name = "data",
    .step = dp_step,
    .grad_norm = dp_grad_norm,
    .opt_ranges = dp_opt_ranges,
    .updated = dp_updated,
    .agree = dp_agree,
    .gather_model = dp_gather_model,
    .eval_model = dp_eval_model,
    .full_state = dp_full_state,
    .measure = dp_measure,
    .metrics = dp_metrics,
    .free = dp_free,
};

ar_parallel *ar_parallel_dp(ar_comm *c, const ar_config *cfg, ar_model *m, ar_err *e)
{
    const ar_train_cfg *tc = &cfg->train;
    ar_dp *dp = ar_dp_create(c, m, tc->grad_accum, cfg->parallel.shard_optimizer, e);
    if (!dp)
        return NULL;
    dp_par *d = ar_xcalloc(1, sizeof *d);
    size_t N = (size_t)tc->batch_size * m->T;
    *d = (dp_par){.dp = dp, .B = tc->batch_size, .A = tc->grad_accum, .in = ar_xmalloc(N * sizeof(int32_t)),
                  .tg = ar_xmalloc(N * sizeof(int32_t))};
    ar_parallel *p = ar_xcalloc(1, sizeof *p);
    *p = (ar_parallel){.ops = &dp_ops, .comm = c, .m = m, .whole_opt = !ar_dp_sharded(dp), .impl = d};
    return p;
}
