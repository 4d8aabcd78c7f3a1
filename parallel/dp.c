/* Data parallelism: the deterministic, overlapped gradient reduction of
 * dp.h. */
#include "dp.h"

#include <stdlib.h>
#include <string.h>

#include "watchdog.h"
#include "../core/clock.h"

/* One gradient bucket's reduction.  Its floats are cut into P parts at
 * AR_NORM_CHUNK boundaries (so the norm's chunks are whole on one rank),
 * laid out by position: rank r owns position bitrev(r), which makes every
 * set of parts a step of recursive halving keeps one contiguous range. */
typedef struct {
    size_t off, len;
    size_t *part;     /* P + 1 offsets into the bucket, by position */
    float *recv;      /* the partner's half, step 0's size at most */
    int step, nsteps; /* exchanges done, and to do */
    int started;
    ar_comm_req req[2];
} bucket;

struct ar_dp {
    ar_comm *c;
    ar_model *m;
    const ar_backend *be;
    int P, L2, rank, pos;
    int k, q, j;      /* micro-batches of this rank: k = 2^j q, q odd */
    int shard;
    /* the local tree: a binary counter of q-unit sums */
    float **stk;
    int *lvl, top;
    float *unit;
    bucket *b;
    int nb;
    int nor;
    size_t *olo, *ohi; /* the optimizer's ranges */
    ar_err err;        /* the first failure of a grad_ready callback */
    int failed;
    double wait_s;     /* the last step's wait in ar_dp_finish: reduction not hidden */
    double reduce_s;   /* one whole-gradient reduction, blocking (ar_dp_measure) */
};

static int bitrev(int x, int bits)
{
    int r = 0;
    for (int i = 0; i < bits; i++)
        r |= ((x >> i) & 1) << (bits - 1 - i);
    return r;
}

static int log2_exact(int p)
{
    int l = 0;
    while ((1 << l) < p)
        l++;
    return (1 << l) == p ? l : -1;
}

int ar_dp_check(const ar_comm *c, const ar_train_cfg *tc, ar_err *e)
{
    if (c->size == 1)
        return 0;
    if (log2_exact(c->size) < 0)
        return ar_fail(e, "data-parallel training needs a power of two ranks (1, 2, 4, 8, ...), so that every "
                          "number of ranks sums the gradient the same way; mpirun started %d",
                       c->size);
    if (tc->grad_accum % c->size)
        return ar_fail(e, "'train.grad_accum' (%d) is not a multiple of the %d ranks: each rank computes "
                          "grad_accum / P micro-batches of the step (set train.grad_accum to a multiple of %d)",
                       tc->grad_accum, c->size, c->size);
    return 0;
}

ar_dp *ar_dp_create(ar_comm *c, ar_model *m, int grad_accum, int shard, ar_err *e)
{
    ar_train_cfg tc = {.grad_accum = grad_accum};
    if (ar_dp_check(c, &tc, e) != 0)
        return NULL;
    ar_dp *d = ar_xcalloc(1, sizeof *d);
    d->c = c;
    d->m = m;
    d->be = m->be;
    d->P = c->size;
    d->L2 = log2_exact(c->size);
    d->rank = c->rank;
    d->pos = bitrev(c->rank, d->L2);
    d->k = grad_accum / c->size;
    d->shard = shard && c->size > 1;
    for (d->q = d->k; d->q % 2 == 0; d->q /= 2)
        d->j++;
    d->stk = ar_xcalloc((size_t)d->j + 2, sizeof(float *));
    d->lvl = ar_xcalloc((size_t)d->j + 2, sizeof(int));
    d->nb = m->nbuckets;
    d->b = ar_xcalloc((size_t)d->nb, sizeof(bucket));
    d->olo = ar_xcalloc((size_t)d->nb + 1, sizeof(size_t));
    d->ohi = ar_xcalloc((size_t)d->nb + 1, sizeof(size_t));
    for (int i = 0; i < d->nb; i++) {
        bucket *b = &d->b[i];
        b->off = m->bucket_off[i];
        b->len = m->bucket_len[i];
        b->part = ar_xcalloc((size_t)d->P + 1, sizeof(size_t));
        size_t nc = ar_norm_chunks(m, i, NULL);
        for (int p = 0; p <= d->P; p++) {
            size_t at = nc * (size_t)p / (size_t)d->P * AR_NORM_CHUNK;
            b->part[p] = at < b->len ? at : b->len;
        }
        b->nsteps = d->L2 * (d->shard ? 1 : 2);
        if (d->P > 1)
            b->recv = d->be->alloc((b->len / 2 + AR_NORM_CHUNK + 1) * sizeof(float));
    }
    /* optimizer ranges: everything, or this rank's part of each bucket in
     * ascending order of offset */
    if (!d->shard) {
        d->nor = 1;
        d->olo[0] = 0;
        d->ohi[0] = m->pt.total;
    } else {
        for (int i = 0; i < d->nb; i++) {
            const bucket *b = &d->b[i];
            size_t lo = b->off + b->part[d->pos], hi = b->off + b->part[d->pos + 1];
            if (lo == hi)
                continue;
            int at = d->nor++;
            while (at > 0 && d->olo[at - 1] > lo) {
                d->olo[at] = d->olo[at - 1];
                d->ohi[at] = d->ohi[at - 1];
                at--;
            }
            d->olo[at] = lo;
            d->ohi[at] = hi;
        }
    }
    return d;
}

void ar_dp_free(ar_dp *d)
{
    if (!d)
        return;
    for (int i = 0; i < d->j + 2; i++)
        d->be->free(d->stk[i]);
    d->be->free(d->unit);
    for (int i = 0; i < d->nb; i++) {
        free(d->b[i].part);
        if (d->b[i].recv)
            d->be->free(d->b[i].recv);
    }
    free(d->stk);
    free(d->lvl);
    free(d->b);
    free(d->olo);
    free(d->ohi);
    d->m->grad_ready = NULL;
    free(d);
}

int ar_dp_sharded(const ar_dp *d) { return d->shard; }

int ar_dp_local(const ar_dp *d, int *first)
{
    if (first)
        *first = d->rank * d->k;
    return d->k;
}

/* ---------------------------------------------------------------- exchanges */

/* The positions [lo, lo + n) this rank holds before exchange `step` of a
 * reduce-scatter (steps 0..L2-1) or an all-gather (steps L2..2 L2-1), and
 * the partner of that step. */
static void plan_step(const ar_dp *d, int step, int *keep_lo, int *keep_n, int *give_lo, int *give_n,
                      int *partner)
{
    if (step < d->L2) { /* halving: keep the half with my position */
        int s = step, half = d->P >> (s + 1);
        *keep_lo = d->pos & ~(half - 1);
        *give_lo = *keep_lo ^ half;
        *keep_n = *give_n = half;
        *partner = d->rank ^ (1 << s);
    } else { /* doubling, the halving's steps backwards: send mine, take theirs */
        int s = 2 * d->L2 - 1 - step, size = d->P >> (s + 1);
        *give_lo = d->pos & ~(size - 1);   /* what I hold: sent */
        *keep_lo = *give_lo ^ size;        /* what the partner holds: received */
        *keep_n = *give_n = size;
        *partner = d->rank ^ (1 << s);
    }
}

/* Posts exchange `step` of bucket i over array x (device floats of the
 * whole parameter layout): halving sends the half given away and receives
 * the partner's copy of the kept half into recv; doubling receives the
 * partner's range straight into x. */
static int post(ar_dp *d, int i, float *x, int step, ar_err *e)
{
    bucket *b = &d->b[i];
    int klo, kn, glo, gn, partner;
    plan_step(d, step, &klo, &kn, &glo, &gn, &partner);
    size_t g0 = b->part[glo], g1 = b->part[glo + gn], k0 = b->part[klo], k1 = b->part[klo + kn];
    int tag = (i << 6) | step;
    const ar_comm_ops *ops = d->c->ops;
    b->req[0].h = b->req[1].h = NULL;
    float *into = step < d->L2 ? b->recv : x + b->off + k0;
    if (ops->group && ops->group(d->c, 1, e) != 0)
        return -1;
    if (k1 > k0 && ops->irecv(d->c, into, (k1 - k0) * sizeof(float), partner, tag, &b->req[0], e) != 0)
        return -1;
    if (g1 > g0 && ops->isend(d->c, x + b->off + g0, (g1 - g0) * sizeof(float), partner, tag, &b->req[1], e) != 0)
        return -1;
    return ops->group ? ops->group(d->c, 0, e) : 0;
}

/* Completes exchange `step` of bucket i if its messages have arrived:
 * 1 done, 0 not yet, -1 failed. */
static int complete(ar_dp *d, int i, float *x, int step, int wait, ar_err *e)
{
    bucket *b = &d->b[i];
    for (int r = 0; r < 2; r++) {
        int done = 1;
        while (b->req[r].h) {
            if (d->c->ops->test(d->c, &b->req[r], &done, e) != 0)
                return -1;
            if (!done && !wait)
                return 0;
        }
    }
    if (step < d->L2) { /* halving: x_kept = x_kept + partner's, the same sum on both sides */
        int klo, kn, glo, gn, partner;
        plan_step(d, step, &klo, &kn, &glo, &gn, &partner);
        size_t k0 = b->part[klo], k1 = b->part[klo + kn];
        if (k1 > k0 && d->c->ops->add) /* queued after the receive */
            d->c->ops->add(d->c, x + b->off + k0, b->recv, k1 - k0);
        else if (k1 > k0)
            d->be->add(x + b->off + k0, b->recv, k1 - k0);
    }
    return 1;
}

/* Moves the started gradient buckets on as far as their messages allow. */
static int progress(ar_dp *d, int wait, ar_err *e)
{
    for (int i = 0; i < d->nb; i++) {
        bucket *b = &d->b[i];
        while (b->started && b->step < b->nsteps) {
            int rc = complete(d, i, d->m->grads, b->step, wait, e);
            if (rc < 0)
                return -1;
            if (rc == 0)
                break; /* its messages are still on the way: the next bucket */
            if (++b->step < b->nsteps && post(d, i, d->m->grads, b->step, e) != 0)
                return -1;
        }
    }
    return 0;
}

/* Waits for what the communicator queued on the device (NCCL). */
static int comm_sync(ar_dp *d, ar_err *e) { return d->c->ops->sync ? d->c->ops->sync(d->c, e) : 0; }

/* Runs exchanges [from, to) of every bucket over x, blocking. */
static int exchange_steps(ar_dp *d, float *x, int from, int to, ar_err *e)
{
    for (int step = from; step < to; step++) {
        for (int i = 0; i < d->nb; i++)
            if (post(d, i, x, step, e) != 0)
                return -1;
        for (int i = 0; i < d->nb; i++)
            if (complete(d, i, x, step, 1, e) < 0)
                return -1;
    }
    return comm_sync(d, e);
}

static int exchange_all(ar_dp *d, float *x, int from, int to, ar_err *e)
{
    if (d->c->ops->sync)
        d->be->sync(); /* x is final on the device before the exchanges queue behind it */
    ar_watchdog_arm("the gradient's exchange");
    int rc = exchange_steps(d, x, from, to, e);
    ar_watchdog_disarm();
    return rc;
}

/* ---------------------------------------------------------------- the local tree */

static float *spare(ar_dp *d, int slot)
{
    if (!d->stk[slot])
        d->stk[slot] = d->be->alloc(d->m->pt.total * sizeof(float));
    return d->stk[slot];
}

/* Pushes a finished unit sum (taking its buffer) and merges equal levels:
 * left + right, nearest first, as T's halving does. */
static void push_unit(ar_dp *d, float **buf)
{
    float *t = d->stk[d->top];
    d->stk[d->top] = *buf;
    *buf = t;
    d->lvl[d->top++] = 0;
    while (d->top >= 2 && d->lvl[d->top - 1] == d->lvl[d->top - 2]) {
        d->be->add(d->stk[d->top - 2], d->stk[d->top - 1], d->m->pt.total);
        d->lvl[d->top - 2]++;
        d->top--;
    }
}

/* The last micro-batch's bucket is final: finish its local tree sum into
 * grads (unit, then the counter's entries from the nearest), then start its
 * exchanges. */
static void bucket_ready(ar_model *m, int i, void *ud)
{
    ar_dp *d = ud;
    bucket *b = &d->b[i];
    if (d->failed)
        return;
    if (d->q > 1)
        d->be->add(m->grads + b->off, d->unit + b->off, b->len);
    for (int s = d->top - 1; s >= 0; s--)
        d->be->add(m->grads + b->off, d->stk[s] + b->off, b->len);
    if (d->c->ops->sync)
        d->be->sync(); /* the bucket is final on the device before its exchanges queue */
    b->started = 1;
    b->step = 0;
    if ((b->nsteps > 0 && post(d, i, m->grads, 0, &d->err) != 0) || progress(d, 0, &d->err) != 0)
        d->failed = 1;
}

void ar_dp_begin(ar_dp *d, int i)
{
    ar_model_zero_grad(d->m);
    if (i == 0)
        d->top = 0;
    for (int b = 0; b < d->nb; b++)
        d->b[b].started = 0;
    d->m->grad_ready = i == d->k - 1 ? bucket_ready : NULL;
    d->m->grad_ready_ud = d;
}

int ar_dp_end(ar_dp *d, int i, ar_err *e)
{
    if (i == d->k - 1)
        return 0; /* bucket_ready did this micro-batch's part */
    size_t n = d->m->pt.total;
    if (d->q == 1) {
        float *leaf = spare(d, d->j + 1);
        d->be->copy(leaf, d->m->grads, n);
        push_unit(d, &d->stk[d->j + 1]);
    } else {
        if (!d->unit)
            d->unit = d->be->alloc(n * sizeof(float));
        if (i % d->q == 0)
            d->be->copy(d->unit, d->m->grads, n);
        else
            d->be->add(d->unit, d->m->grads, n);
        if (i % d->q == d->q - 1) {
            spare(d, d->j + 1);
            /* the unit's buffer goes on the stack, a spare becomes the unit */
            float *u = d->unit;
            d->unit = d->stk[d->j + 1];
            d->stk[d->j + 1] = u;
            push_unit(d, &d->stk[d->j + 1]);
        }
    }
    (void)e;
    return 0;
}

int ar_dp_finish(ar_dp *d, ar_err *e)
{
    d->m->grad_ready = NULL;
    if (d->failed) {
        *e = d->err;
        return -1;
    }
    double t0 = ar_now_s();
    ar_watchdog_arm("the gradient's exchange");
    int rc = progress(d, 1, e);
    if (rc == 0)
        rc = comm_sync(d, e);
    ar_watchdog_disarm();
    d->wait_s = ar_now_s() - t0;
    return rc;
}

int ar_dp_measure(ar_dp *d, ar_err *e)
{
    if (d->P == 1)
        return 0;
    /* the same exchanges as a step's, on a scratch copy of the gradient */
    float *x = d->be->alloc(d->m->pt.total * sizeof(float));
    double t0 = ar_now_s();
    int rc = exchange_all(d, x, 0, 2 * d->L2, e);
    d->reduce_s = ar_now_s() - t0;
    d->be->free(x);
    return rc;
}

void ar_dp_times(const ar_dp *d, double *wait_s, double *reduce_s)
{
    *wait_s = d->wait_s;
    *reduce_s = d->reduce_s;
}

int ar_dp_grad_norm(ar_dp *d, double *norm, ar_err *e)
{
    if (!d->shard) {
        *norm = ar_grad_norm(d->m);
        return 0;
    }
    size_t total = 0, first;
    for (int i = 0; i < d->nb; i++)
        total += ar_norm_chunks(d->m, i, NULL);
    double *s = ar_xcalloc(total + 1, sizeof(double));
    for (int i = 0; i < d->nb; i++) {
        size_t nc = ar_norm_chunks(d->m, i, &first);
        size_t c0 = nc * (size_t)d->pos / (size_t)d->P, c1 = nc * (size_t)(d->pos + 1) / (size_t)d->P;
        ar_norm_chunk_sumsq(d->m, i, c0, c1, s + first + c0);
    }
    /* each chunk's sum is non-zero on its owner only: the sum is exact */
    int rc = d->c->ops->sum_doubles(d->c, s, total, e);
    if (rc == 0)
        *norm = ar_norm_from_chunks(s, total);
    free(s);
    return rc;
}

void ar_dp_opt_ranges(const ar_dp *d, int *n, const size_t **lo, const size_t **hi)
{
    *n = d->nor;
    *lo = d->olo;
    *hi = d->ohi;
}

int ar_dp_gather_params(ar_dp *d, ar_err *e)
{
    return d->shard ? exchange_all(d, d->m->params, d->L2, 2 * d->L2, e) : 0;
}

int ar_dp_gather_grads(ar_dp *d, ar_err *e)
{
    return d->shard ? exchange_all(d, d->m->grads, d->L2, 2 * d->L2, e) : 0;
}

int ar_dp_full_moments(ar_dp *d, const ar_adamw *o, float *m, float *v, ar_err *e)
{
    size_t total = d->m->pt.total;
    ar_adamw_moments_to_full(o, total, m, v);
    if (!d->shard)
        return 0;
    /* the all-gather sends the backend's memory (a GPU's, with NCCL) */
    float *x = d->be->alloc(total * sizeof(float));
    int rc = 0;
    for (int k = 0; k < 2 && rc == 0; k++) {
        float *host = k ? v : m;
        d->be->upload(x, host, total * sizeof(float));
        rc = exchange_all(d, x, d->L2, 2 * d->L2, e);
        if (rc == 0)
            d->be->download(host, x, total * sizeof(float));
    }
    d->be->free(x);
    return rc;
}
