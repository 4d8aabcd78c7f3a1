/* Pipeline parallelism (pipe.h): the engine that runs a stage's ops of the
 * plan over MPI. */
#include "pipe.h"

#include <stdlib.h>
#include <string.h>

#include "../lib/chunks.h"
#include "../core/clock.h"

/* A message in flight: its request and its packed rows. */
typedef struct {
    ar_comm_req req;
    float *buf;
} msg;

struct ar_pipe {
    ar_comm *world, *pc, *dc; /* the world; this replica's stages; this stage's replicas */
    ar_pipe_plan plan;
    int stage, replica, D, A, M, B, T, d, L;
    size_t row_floats;        /* B T d */
    ar_model *m;              /* slot 0; the others share its parameters */
    ar_model **slot;
    int *slot_of;             /* micro-batch -> slot, -1 */
    unsigned char *runs;
    /* parameter ranges owned by stage s: nr[s] ranges lo[s][i]..hi[s][i] */
    int *nr;
    size_t **lo, **hi;
    int32_t *in, *tg;
    /* receives: posted for op i (and i+1 ahead) into two buffers */
    msg rx[2];
    int rx_op[2];             /* op index each buffer holds, -1 */
    msg *tx;                  /* sends in flight */
    int ntx, captx;
    float **pool;             /* free send buffers of max message size */
    int npool, cappool;
    size_t max_rows;
    double fwd_bytes, bwd_bytes, step_s, wait_s;
};

int ar_pipe_nchunks(const ar_config *cfg)
{
    int P = cfg->parallel.pipeline > 1 ? cfg->parallel.pipeline : 1;
    return P * (cfg->parallel.virtual_stages > 1 ? cfg->parallel.virtual_stages : 1);
}

void ar_pipe_model_split(const ar_config *cfg, int world_rank, unsigned char *runs, ar_model_split *sp)
{
    int C = ar_pipe_nchunks(cfg), L = ar_cfg_sublayers(&cfg->model);
    *sp = (ar_model_split){.nchunks = C};
    if (C == 1)
        return;
    int P = cfg->parallel.pipeline > 1 ? cfg->parallel.pipeline : 1, s = world_rank % P;
    memset(runs, 0, (size_t)L + 2);
    for (int c = s; c < C; c += P) {
        for (int l = ar_chunk_first(L, C, c); l < ar_chunk_first(L, C, c + 1); l++)
            runs[l] = 1;
        if (c == 0)
            runs[0] = 1;
        if (c == C - 1)
            runs[L + 1] = 1;
    }
    sp->runs = runs;
}

static ar_pipe_sched sched_of(const ar_config *cfg)
{
    return cfg->parallel.schedule == AR_PIPE_SCHED_GPIPE ? AR_PIPE_GPIPE : AR_PIPE_1F1B;
}

static int make_plan(ar_pipe_plan *pl, const ar_comm *world, const ar_config *cfg, ar_err *e)
{
    const ar_model_cfg *mc = &cfg->model;
    int P = cfg->parallel.pipeline, D = world->size / P;
    ar_blocks b; /* block_size S, or the blocks of model.residual.block_sizes */
    ar_blocks_of_cfg(&b, mc);
    int rc = ar_pipe_plan_make_blocks(pl, &b, mc->residual.kind == AR_RES_BASELINE, P, cfg->parallel.virtual_stages,
                                      cfg->train.grad_accum / D, cfg->parallel.cache_blocks, sched_of(cfg), e);
    ar_blocks_free(&b);
    return rc;
}

int ar_pipe_check(const ar_comm *world, const ar_config *cfg, ar_err *e)
{
    const ar_parallel_cfg *pc = &cfg->parallel;
    int P = pc->pipeline, W = world->size;
    if (P <= 1 && pc->virtual_stages > 1)
        return ar_fail(e, "'parallel.virtual' (%d) interleaves the chunks of a pipeline: it needs "
                          "'parallel.pipeline' of 2 or more",
                       pc->virtual_stages);
    if (P <= 1)
        return 0;
    if (W % P)
        return ar_fail(e, "'parallel.pipeline' (%d) does not divide the %d rank%s %s: the world is 'parallel.pipeline' x "
                          "data-parallel degree ranks (mpirun -np %d, %d, ...; --set parallel.pipeline=1 trains, or "
                          "resumes, without a pipeline)",
                       P, W, W == 1 ? "" : "s", ar_comm_launched() ? "mpirun started" : "of this process (not under mpirun)",
                       P, 2 * P);
    int D = W / P;
    if (cfg->train.grad_accum % D)
        return ar_fail(e, "'train.grad_accum' (%d) is not a multiple of the data-parallel degree %d (%d ranks / "
                          "'parallel.pipeline' %d): each pipeline runs grad_accum / %d micro-batches",
                       cfg->train.grad_accum, D, W, P, D);
    const ar_model_cfg *mc = &cfg->model;
    ar_res_kind k = mc->residual.kind;
    if ((k != AR_RES_BASELINE && k != AR_RES_FULL && k != AR_RES_BLOCK) || ar_cfg_depth_flags(mc))
        return ar_fail(e, "'model.residual.kind' %s%s cannot pipeline: 'parallel.pipeline' runs baseline, full and "
                          "block AttnRes (without the ablation flags score, key_norm, query, heads); train it with "
                          "'parallel.pipeline' 1, or with data parallelism alone",
                       ar_res_kind_name(k), ar_cfg_depth_flags(mc) ? " with ablation flags" : "");
    if (cfg->train.device != AR_DEVICE_CPU)
        return ar_fail(e, "'parallel.pipeline' runs on 'train.device' cpu: the stages exchange host memory over MPI "
                          "(GPUs would need CUDA-aware MPI or NCCL point-to-point, which this build does not use)");
    if (pc->shard_optimizer)
        return ar_fail(e, "'parallel.shard_optimizer' does not combine with 'parallel.pipeline': a stage's optimizer "
                          "already keeps the moments of its own chunks alone");
    ar_pipe_plan pl;
    if (make_plan(&pl, world, cfg, e) != 0)
        return -1;
    ar_pipe_plan_free(&pl);
    return 0;
}

/* The chunk that owns parameter group g (0 the embedding, l sublayer l,
 * L+1 the head and final mixer). */
static int chunk_of_group(const ar_pipe_plan *pl, int g)
{
    if (g <= 0)
        return 0;
    if (g > pl->L)
        return pl->C - 1;
    for (int c = 0; c < pl->C; c++)
        if (g >= pl->lo[c] && g <= pl->hi[c])
            return c;
    return pl->C - 1;
}

static void plan_ranges(ar_pipe *p)
{
    const ar_param_table *pt = &p->m->pt;
    int P = p->plan.P;
    p->nr = ar_xcalloc((size_t)P, sizeof(int));
    p->lo = ar_xcalloc((size_t)P, sizeof(size_t *));
    p->hi = ar_xcalloc((size_t)P, sizeof(size_t *));
    for (int s = 0; s < P; s++) {
        p->lo[s] = ar_xcalloc((size_t)pt->n + 1, sizeof(size_t));
        p->hi[s] = ar_xcalloc((size_t)pt->n + 1, sizeof(size_t));
    }
    /* the table lists tensors in ascending offset */
    for (int i = 0; i < pt->n; i++) {
        int s = ar_pipe_stage_of(&p->plan, chunk_of_group(&p->plan, pt->p[i].group));
        size_t lo = pt->p[i].offset, hi = lo + pt->p[i].numel;
        int n = p->nr[s];
        if (n > 0 && p->hi[s][n - 1] == lo)
            p->hi[s][n - 1] = hi;
        else {
            p->lo[s][n] = lo;
            p->hi[s][n] = hi;
            p->nr[s]++;
        }
    }
}

ar_pipe *ar_pipe_create(ar_comm *world, const ar_config *cfg, ar_model *m, ar_err *e)
{
    if (ar_pipe_check(world, cfg, e) != 0)
        return NULL;
    if (!world->ops->split || !world->ops->sum_floats || world->ops->group) {
        ar_fail(e, "'parallel.pipeline' needs the plain MPI communicator (this one is '%s'%s)", world->ops->name,
                world->ops->group ? ": unset ATTNRES_TEST_STREAM_ORDER" : "");
        return NULL;
    }
    ar_pipe *p = ar_xcalloc(1, sizeof *p);
    p->world = world;
    if (make_plan(&p->plan, world, cfg, e) != 0) {
        free(p);
        return NULL;
    }
    int P = p->plan.P;
    p->stage = world->rank % P;
    p->replica = world->rank / P;
    p->D = world->size / P;
    p->A = cfg->train.grad_accum;
    p->M = p->plan.M;
    p->B = cfg->train.batch_size;
    p->T = m->T;
    p->d = m->d;
    p->L = m->L;
    p->m = m;
    p->row_floats = (size_t)p->B * p->T * p->d;
    if (world->ops->split(world, p->replica, p->stage, &p->pc, e) != 0 ||
        world->ops->split(world, p->stage, p->replica, &p->dc, e) != 0) {
        ar_pipe_free(p);
        return NULL;
    }
    /* the parts of the model this stage runs */
    p->runs = ar_xcalloc((size_t)p->L + 2, 1);
    ar_model_split sp;
    ar_pipe_model_split(cfg, world->rank, p->runs, &sp);
    sp.share = m;
    p->slot = ar_xcalloc((size_t)p->plan.slots + 1, sizeof(ar_model *));
    p->slot[0] = m;
    for (int i = 1; i < p->plan.slots; i++)
        if (ar_model_create_split(&p->slot[i], &m->cfg, m->be, p->B, &sp, e) != 0) {
            ar_pipe_free(p);
            return NULL;
        }
    p->slot_of = ar_xcalloc((size_t)p->M, sizeof(int));
    plan_ranges(p);
    p->in = ar_xcalloc((size_t)p->B * p->T, sizeof(int32_t));
    p->tg = ar_xcalloc((size_t)p->B * p->T, sizeof(int32_t));
    for (int c = 0; c + 1 < p->plan.C; c++)
        if ((size_t)p->plan.nsend[c] > p->max_rows)
            p->max_rows = (size_t)p->plan.nsend[c];
    for (int i = 0; i < 2; i++) {
        p->rx[i].buf = m->be->alloc((p->max_rows * p->row_floats + 1) * sizeof(float));
        p->rx_op[i] = -1;
    }
    return p;
}

void ar_pipe_free(ar_pipe *p)
{
    if (!p)
        return;
    const ar_backend *be = p->m->be;
    for (int i = 1; p->slot && i < p->plan.slots; i++)
        ar_model_free(p->slot[i]);
    free(p->slot);
    free(p->slot_of);
    free(p->runs);
    for (int s = 0; p->lo && s < p->plan.P; s++) {
        free(p->lo[s]);
        free(p->hi[s]);
    }
    free(p->lo);
    free(p->hi);
    free(p->nr);
    free(p->in);
    free(p->tg);
    for (int i = 0; i < 2; i++)
        if (p->rx[i].buf)
            be->free(p->rx[i].buf);
    for (int i = 0; i < p->ntx; i++)
        be->free(p->tx[i].buf);
    free(p->tx);
    for (int i = 0; i < p->npool; i++)
        be->free(p->pool[i]);
    free(p->pool);
    if (p->pc && p->pc != p->world && p->pc->ops->release)
        p->pc->ops->release(p->pc);
    if (p->dc && p->dc != p->world && p->dc->ops->release)
        p->dc->ops->release(p->dc);
    ar_pipe_plan_free(&p->plan);
    free(p);
}

/* ------------------------------------------------------------ messages */

/* Forward messages of transition c -> c+1 carry tag c, their gradients
 * C + c; between two stages, messages of one tag go in micro-batch order,
 * which MPI keeps (it does not overtake). */
static int tag_of(const ar_pipe *p, char kind, int c) { return kind == 'F' ? c : p->plan.C + c; }

/* The message op i of this stage receives: its transition (or -1 when it
 * receives none), the peer stage and the rows. */
static int incoming(const ar_pipe *p, int i, int *peer, int *tag, int *nrows)
{
    const ar_pipe_plan *pl = &p->plan;
    if (i >= pl->nops[p->stage])
        return -1;
    const ar_pipe_op *o = &pl->ops[p->stage][i];
    int t = o->kind == 'F' ? o->chunk - 1 : o->chunk; /* transition t -> t+1 */
    if (t < 0 || t + 1 >= pl->C)
        return -1;
    *peer = ar_pipe_stage_of(pl, o->kind == 'F' ? t : t + 1);
    *tag = tag_of(p, o->kind, t);
    *nrows = pl->nsend[t];
    return t;
}

static int post_recv(ar_pipe *p, int i, ar_err *e)
{
    int peer, tag, nrows;
    if (incoming(p, i, &peer, &tag, &nrows) < 0 || nrows == 0)
        return 0;
    for (int b = 0; b < 2; b++)
        if (p->rx_op[b] == i)
            return 0;
    int b = p->rx_op[0] < 0 ? 0 : p->rx_op[1] < 0 ? 1 : -1;
    if (b < 0)
        return ar_fail(e, "internal: stage %d has no free receive buffer for op %d", p->stage, i);
    p->rx_op[b] = i;
    return p->pc->ops->irecv(p->pc, p->rx[b].buf, (size_t)nrows * p->row_floats * sizeof(float), peer, tag,
                             &p->rx[b].req, e);
}

/* Waits for op i's message: its buffer index, or -1 (e set). */
static int wait_recv(ar_pipe *p, int i, ar_err *e)
{
    for (int b = 0; b < 2; b++)
        if (p->rx_op[b] == i) {
            double t0 = ar_now_s();
            int rc = ar_comm_waitall(p->pc, &p->rx[b].req, 1, e);
            p->wait_s += ar_now_s() - t0;
            return rc == 0 ? b : -1;
        }
    return ar_fail(e, "internal: stage %d never posted the receive of op %d", p->stage, i);
}

static float *send_buf(ar_pipe *p)
{
    if (p->npool > 0)
        return p->pool[--p->npool];
    return p->m->be->alloc((p->max_rows * p->row_floats + 1) * sizeof(float));
}

/* Returns the buffers of completed sends to the pool (all of them with
 * wait). */
static int reap_sends(ar_pipe *p, int wait, ar_err *e)
{
    int k = 0;
    for (int i = 0; i < p->ntx; i++) {
        int done = 1;
        if (wait) {
            if (ar_comm_waitall(p->pc, &p->tx[i].req, 1, e) != 0)
                return -1;
        } else if (p->pc->ops->test(p->pc, &p->tx[i].req, &done, e) != 0) {
            return -1;
        }
        if (done) {
            if (p->npool == p->cappool) {
                p->cappool = p->cappool ? 2 * p->cappool : 8;
                p->pool = realloc(p->pool, (size_t)p->cappool * sizeof *p->pool);
            }
            p->pool[p->npool++] = p->tx[i].buf;
        } else {
            p->tx[k++] = p->tx[i];
        }
    }
    p->ntx = k;
    return 0;
}

static int send_rows(ar_pipe *p, float *buf, int nrows, int peer, int tag, ar_err *e)
{
    if (p->ntx == p->captx) {
        p->captx = p->captx ? 2 * p->captx : 8;
        p->tx = realloc(p->tx, (size_t)p->captx * sizeof *p->tx);
    }
    msg *t = &p->tx[p->ntx++];
    t->buf = buf;
    t->req.h = NULL;
    return p->pc->ops->isend(p->pc, buf, (size_t)nrows * p->row_floats * sizeof(float), peer, tag, &t->req, e);
}

/* ------------------------------------------------------------ the ops */

static ar_model *slot_for(ar_pipe *p, int mb, int first)
{
    if (first) {
        unsigned char *used = ar_xcalloc((size_t)p->plan.slots, 1);
        for (int j = 0; j < p->M; j++)
            if (p->slot_of[j] >= 0)
                used[p->slot_of[j]] = 1;
        int s = 0;
        while (s < p->plan.slots - 1 && used[s])
            s++;
        free(used);
        p->slot_of[mb] = s;
    }
    return p->slot[p->slot_of[mb]];
}

static int run_forward(ar_pipe *p, const ar_pipe_op *o, int i, ar_pipe_sample_fn sample, void *ud, double *loss,
                       ar_err *e)
{
    const ar_pipe_plan *pl = &p->plan;
    const ar_backend *be = p->m->be;
    int c = o->chunk, a = p->replica * p->M + o->mb;
    ar_model *m = slot_for(p, o->mb, c == p->stage);
    ar_residual *r = m->res;
    size_t rf = p->row_floats;
    if (c == p->stage)
        ar_model_set_batch(m, p->B);
    if (c == 0) {
        sample(ud, a, p->in, p->tg);
        ar_model_forward_embed(m, p->in);
    } else if (pl->nsend[c - 1] > 0) {
        int b = wait_recv(p, i, e);
        if (b < 0)
            return -1;
        for (int k = 0; k < pl->nsend[c - 1]; k++)
            be->copy(r->vt->row(r, pl->send[c - 1][k]), p->rx[b].buf + k * rf, rf);
        p->rx_op[b] = -1;
    }
    if (post_recv(p, i + 1, e) != 0)
        return -1;
    ar_model_forward_sublayers(m, pl->lo[c], pl->hi[c]);
    if (c == pl->C - 1) {
        if (c != 0)
            sample(ud, a, p->in, p->tg);
        loss[a] = ar_model_forward_head(m, p->tg, NULL);
        return 0;
    }
    float *buf = send_buf(p);
    int n = pl->nsend[c];
    for (int k = 0; k < n; k++)
        be->copy(buf + k * rf, r->vt->row(r, pl->send[c][k]), rf);
    p->fwd_bytes += (double)n * rf * sizeof(float);
    be->sync();
    return send_rows(p, buf, n, ar_pipe_stage_of(pl, c + 1), tag_of(p, 'F', c), e);
}

static int run_backward(ar_pipe *p, const ar_pipe_op *o, int i, ar_err *e)
{
    const ar_pipe_plan *pl = &p->plan;
    const ar_backend *be = p->m->be;
    int c = o->chunk, N = p->B * p->T;
    ar_model *m = p->slot[p->slot_of[o->mb]];
    ar_residual *r = m->res;
    size_t rf = p->row_floats;
    /* the stage's first backward of this micro-batch is its last chunk */
    if (c + pl->P >= pl->C)
        r->vt->zero_row_grads(r, N);
    if (c == pl->C - 1) {
        ar_model_backward_head(m, (float)(1.0 / ((double)N * p->A)));
    } else if (pl->nsend[c] > 0) {
        int b = wait_recv(p, i, e);
        if (b < 0)
            return -1;
        for (int k = 0; k < pl->nsend[c]; k++)
            be->add(r->vt->row_grad(r, pl->send[c][k]), p->rx[b].buf + k * rf, rf);
        p->rx_op[b] = -1;
    }
    if (post_recv(p, i + 1, e) != 0)
        return -1;
    ar_model_backward_sublayers(m, pl->hi[c], pl->lo[c]);
    int rc = 0;
    if (c == 0) {
        ar_model_backward_embed(m);
    } else {
        /* the gradients of the rows this chunk received go back; this
         * stage's copies are spent */
        float *buf = send_buf(p);
        int n = pl->nsend[c - 1];
        for (int k = 0; k < n; k++) {
            float *g = r->vt->row_grad(r, pl->send[c - 1][k]);
            be->copy(buf + k * rf, g, rf);
            be->zero(g, rf * sizeof(float));
        }
        p->bwd_bytes += (double)n * rf * sizeof(float);
        be->sync();
        rc = send_rows(p, buf, n, ar_pipe_stage_of(pl, c - 1), tag_of(p, 'B', c - 1), e);
    }
    if (c == p->stage)
        p->slot_of[o->mb] = -1; /* the micro-batch is done here */
    return rc;
}

int ar_pipe_step(ar_pipe *p, ar_pipe_sample_fn sample, void *ud, double *loss, ar_err *e)
{
    const ar_pipe_plan *pl = &p->plan;
    double t0 = ar_now_s();
    p->fwd_bytes = p->bwd_bytes = p->wait_s = 0;
    ar_model_zero_grad(p->m);
    for (int j = 0; j < p->M; j++)
        p->slot_of[j] = -1;
    memset(loss, 0, (size_t)p->A * sizeof(double));
    int rc = post_recv(p, 0, e);
    for (int i = 0; rc == 0 && i < pl->nops[p->stage]; i++) {
        const ar_pipe_op *o = &pl->ops[p->stage][i];
        rc = o->kind == 'F' ? run_forward(p, o, i, sample, ud, loss, e) : run_backward(p, o, i, e);
        if (rc == 0)
            rc = reap_sends(p, 0, e);
    }
    if (rc == 0) {
        double tw = ar_now_s();
        rc = reap_sends(p, 1, e);
        p->wait_s += ar_now_s() - tw;
    }
    /* the stage's replicas sum their gradient */
    for (int k = 0; rc == 0 && p->D > 1 && k < p->nr[p->stage]; k++)
        rc = p->dc->ops->sum_floats(p->dc, p->m->grads + p->lo[p->stage][k],
                                    p->hi[p->stage][k] - p->lo[p->stage][k], e);
    /* each loss is non-zero on one rank: the sum is exact */
    if (rc == 0)
        rc = p->world->ops->sum_doubles(p->world, loss, (size_t)p->A, e);
    p->step_s = ar_now_s() - t0;
    return rc;
}

int ar_pipe_grad_norm(ar_pipe *p, double *norm, ar_err *e)
{
    size_t total;
    double *s = ar_norm_chunk_sums(p->m, &total);
    /* grads are zero outside this stage's chunks */
    int rc = p->pc->ops->sum_doubles(p->pc, s, total, e);
    if (rc == 0)
        *norm = ar_norm_from_chunks(s, total);
    free(s);
    return rc;
}

void ar_pipe_opt_ranges(const ar_pipe *p, int *n, const size_t **lo, const size_t **hi)
{
    *n = p->nr[p->stage];
    *lo = p->lo[p->stage];
    *hi = p->hi[p->stage];
}

int ar_pipe_gather(ar_pipe *p, float *x, ar_err *e)
{
    int rc = 0;
    for (int s = 0; s < p->plan.P && rc == 0; s++)
        for (int k = 0; k < p->nr[s] && rc == 0; k++)
            rc = ar_comm_bcast_floats(p->pc, p->m->be, x + p->lo[s][k], p->hi[s][k] - p->lo[s][k], s, e);
    return rc;
}

int ar_pipe_full_moments(ar_pipe *p, const ar_adamw *o, float *m, float *v, ar_err *e)
{
    ar_adamw_moments_to_full(o, p->m->pt.total, m, v);
    int rc = 0;
    for (int s = 0; s < p->plan.P && rc == 0; s++)
        for (int k = 0; k < p->nr[s] && rc == 0; k++) {
            size_t lo = p->lo[s][k], n = p->hi[s][k] - lo;
            rc = p->pc->ops->bcast(p->pc, m + lo, n * sizeof(float), s, e);
            if (rc == 0)
                rc = p->pc->ops->bcast(p->pc, v + lo, n * sizeof(float), s, e);
        }
    return rc;
}

int ar_pipe_stats_sum(ar_pipe *p, ar_pipe_stats *st, ar_err *e)
{
    double x[4] = {p->fwd_bytes, p->bwd_bytes, p->wait_s, p->step_s};
    int rc = p->world->ops->sum_doubles(p->world, x, 4, e);
    if (rc != 0)
        return -1;
    st->fwd_bytes = x[0];
    st->bwd_bytes = x[1];
    st->bubble = x[3] > 0 ? x[2] / x[3] : 0;
    st->step_s = p->step_s;
    st->wait_s = p->wait_s;
    return 0;
}

const ar_pipe_plan *ar_pipe_plan_of(const ar_pipe *p) { return &p->plan; }
int ar_pipe_stage(const ar_pipe *p) { return p->stage; }
int ar_pipe_replicas(const ar_pipe *p) { return p->D; }
