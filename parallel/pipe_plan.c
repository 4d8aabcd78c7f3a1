/* Pipeline parallelism's plan (pipe_plan.h). */
#include "pipe_plan.h"

#include "../lib/chunks.h"
#include "../lib/residual.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

int ar_pipe_row_block(const ar_pipe_plan *p, int q, int *complete)
{
    if (q == 0) {
        if (complete)
            *complete = 1;
        return 0;
    }
    if (p->baseline) { /* one running sum: "block" q is the state after sublayer q */
        if (complete)
            *complete = 1;
        return q;
    }
    if (complete)
        *complete = ar_blocks_closes(&p->blk, q);
    return p->blk.of[q];
}

/* live[q] = 1 for the rows of H_c, the rows after chunk c that a later
 * chunk reads (pipe_plan.h). */
static void live_rows(const ar_pipe_plan *p, int c, unsigned char *live)
{
    memset(live, 0, (size_t)p->L + 1);
    int hi = p->hi[c];
    live[hi] = 1;
    if (p->baseline)
        return;
    for (int q = 0; q <= hi; q++) {
        int complete;
        ar_pipe_row_block(p, q, &complete);
        if (complete)
            live[q] = 1;
    }
}

/* Rows chunk c computes (chunk 0: the embedding's too). */
static void mark_produced(const ar_pipe_plan *p, int c, unsigned char *have, unsigned char val)
{
    if (c == 0)
        have[0] = val;
    for (int q = p->lo[c]; q <= p->hi[c]; q++)
        have[q] = val;
}

/* Replays the transitions up to chunk `upto` (exclusive of its produced
 * rows): fills send lists when plan is being made (fill = 1), else the
 * holdings of stage(upto) as ar_pipe_held reports them. */
static void replay(ar_pipe_plan *p, int upto, int fill, unsigned char *state)
{
    int L = p->L;
    unsigned char *have = ar_xcalloc((size_t)p->P * (L + 1), 1);
    unsigned char *live = ar_xcalloc((size_t)L + 1, 1);
    int last = upto < p->C - 1 ? upto : p->C - 1;
    for (int c = 0; c <= last; c++) {
        int s = ar_pipe_stage_of(p, c);
        unsigned char *hs = have + (size_t)s * (L + 1);
        if (c == upto) {
            for (int q = 0; q <= L; q++)
                state[q] = state[q] == AR_ROW_RECEIVED ? AR_ROW_RECEIVED
                           : hs[q]                     ? AR_ROW_KEPT
                                                       : AR_ROW_ABSENT;
            if (c == 0)
                state[0] = AR_ROW_PRODUCED;
            for (int q = p->lo[c]; q <= p->hi[c]; q++)
                state[q] = AR_ROW_PRODUCED;
            break;
        }
        if (!p->cache) /* naive: each chunk starts from what it receives */
            memset(hs, 0, (size_t)L + 1);
        mark_produced(p, c, hs, 1);
        if (c == p->C - 1)
            break;
        int r = ar_pipe_stage_of(p, c + 1);
        unsigned char *hr = have + (size_t)r * (L + 1);
        if (!p->cache)
            memset(hr, 0, (size_t)L + 1);
        live_rows(p, c, live);
        int n = 0;
        for (int q = 0; q <= L; q++)
            if (live[q] && !hr[q])
                n++;
        if (fill) {
            p->nsend[c] = n;
            p->send[c] = ar_xcalloc((size_t)n + 1, sizeof(int));
        }
        if (state && c + 1 == upto)
            memset(state, 0, (size_t)L + 1);
        n = 0;
        for (int q = 0; q <= L; q++)
            if (live[q] && !hr[q]) {
                if (fill)
                    p->send[c][n++] = q;
                if (state && c + 1 == upto)
                    state[q] = AR_ROW_RECEIVED;
                hr[q] = 1;
            }
    }
    free(have);
    free(live);
}

/* Megatron's orders (schedules.py): the k-th forward and backward of a
 * stage with interleaving run micro-batch (k / PV) P + k mod P through
 * virtual stage (k mod PV) / P, the backward through V-1 minus that. */
static ar_pipe_op op_at(const ar_pipe_plan *p, int s, int k, char kind)
{
    int P = p->P, V = p->V;
    if (V == 1)
        return (ar_pipe_op){kind, k, s};
    int v = (k % (P * V)) / P;
    if (kind == 'B')
        v = V - 1 - v;
    return (ar_pipe_op){kind, (k / (P * V)) * P + k % P, v * P + s};
}

static void make_ops(ar_pipe_plan *p)
{
    int P = p->P, V = p->V, M = p->M, total = M * V;
    p->nops = ar_xcalloc((size_t)P, sizeof(int));
    p->ops = ar_xcalloc((size_t)P, sizeof(ar_pipe_op *));
    for (int s = 0; s < P; s++) {
        ar_pipe_op *o = p->ops[s] = ar_xcalloc(2 * (size_t)total, sizeof(ar_pipe_op));
        int n = 0;
        if (p->sched == AR_PIPE_GPIPE) {
            for (int v = 0; v < V; v++)
                for (int mb = 0; mb < M; mb++)
                    o[n++] = (ar_pipe_op){'F', mb, v * P + s};
            for (int v = V - 1; v >= 0; v--)
                for (int mb = 0; mb < M; mb++)
                    o[n++] = (ar_pipe_op){'B', mb, v * P + s};
        } else {
            int warm = V == 1 ? P - s - 1 : (M == P ? total : (P - s - 1) * 2 + (V - 1) * P);
            if (warm > total)
                warm = total;
            for (int k = 0; k < warm; k++)
                o[n++] = op_at(p, s, k, 'F');
            for (int i = 0; i < total - warm; i++) {
                o[n++] = op_at(p, s, warm + i, 'F');
                o[n++] = op_at(p, s, i, 'B');
            }
            for (int i = total - warm; i < total; i++)
                o[n++] = op_at(p, s, i, 'B');
        }
        p->nops[s] = n;
    }
    /* activation sets: micro-batches between their first forward and last
     * backward on a stage */
    p->slots = 0;
    for (int s = 0; s < P; s++) {
        int live = 0;
        for (int i = 0; i < p->nops[s]; i++) {
            const ar_pipe_op *o = &p->ops[s][i];
            if (o->kind == 'F' && o->chunk == s)
                live++;
            if (live > p->slots)
                p->slots = live;
            if (o->kind == 'B' && o->chunk == s)
                live--;
        }
    }
}

int ar_pipe_plan_make(ar_pipe_plan *p, int L, int S, int baseline, int P, int V, int M, int cache,
                      ar_pipe_sched sched, ar_err *e)
{
    memset(p, 0, sizeof *p);
    if (!baseline && S < 1)
        return ar_fail(e, "'model.residual.block_size' (%d) must be at least 1", S);
    ar_blocks b;
    ar_blocks_uniform(&b, L, baseline ? L + 1 : S);
    int rc = ar_pipe_plan_make_blocks(p, &b, baseline, P, V, M, cache, sched, e);
    ar_blocks_free(&b);
    return rc;
}

/* S when every block but the last has S sublayers and the last at most S
 * (block_size S), else 0. */
static int uniform_size(const ar_blocks *b)
{
    int S = b->start[2] - b->start[1];
    for (int n = 1; n < b->nb; n++)
        if (b->start[n + 1] - b->start[n] != S)
            return 0;
    return b->L + 1 - b->start[b->nb] <= S ? S : 0;
}

int ar_pipe_plan_make_blocks(ar_pipe_plan *p, const ar_blocks *b, int baseline, int P, int V, int M, int cache,
                             ar_pipe_sched sched, ar_err *e)
{
    int L = b->L;
    memset(p, 0, sizeof *p);
    if (P < 1 || V < 1)
        return ar_fail(e, "'parallel.pipeline' (%d) and 'parallel.virtual' (%d) must be at least 1", P, V);
    if (P * V > L)
        return ar_fail(e, "'parallel.pipeline' x 'parallel.virtual' = %d x %d = %d chunks is more than the model's "
                          "%d sublayers (2 x 'model.n_layer'): every chunk needs a sublayer",
                       P, V, P * V, L);
    if (sched == AR_PIPE_1F1B && V == 1 && M < P)
        return ar_fail(e, "%d micro-batches per pipeline are too few for %d stages: 1F1B needs at least one per "
                          "stage ('train.grad_accum' / data-parallel degree >= 'parallel.pipeline'; raise "
                          "train.grad_accum to %d or more)",
                       M, P, P);
    if (sched == AR_PIPE_1F1B && V > 1 && (M < P || M % P))
        return ar_fail(e, "%d micro-batches per pipeline do not fit the interleaved schedule of %d stages: it runs "
                          "them in groups of 'parallel.pipeline' (train.grad_accum / data-parallel degree must be a "
                          "multiple of %d, as in Megatron)",
                       M, P, P);
    if (M < 1)
        return ar_fail(e, "a step needs at least one micro-batch per pipeline ('train.grad_accum')");
    p->L = L;
    p->S = baseline ? L + 1 : uniform_size(b);
    /* the plan's own copy of the layout; the baseline's is one block */
    if (baseline)
        ar_blocks_uniform(&p->blk, L, L + 1);
    else
        ar_blocks_copy(&p->blk, b);
    p->baseline = baseline;
    p->P = P;
    p->V = V;
    p->C = P * V;
    p->M = M;
    p->cache = cache;
    p->sched = sched;
    p->lo = ar_xcalloc((size_t)p->C, sizeof(int));
    p->hi = ar_xcalloc((size_t)p->C, sizeof(int));
    for (int c = 0; c < p->C; c++) {
        p->lo[c] = ar_chunk_first(L, p->C, c);
        p->hi[c] = ar_chunk_first(L, p->C, c + 1) - 1;
    }
    p->nsend = ar_xcalloc((size_t)p->C, sizeof(int));
    p->send = ar_xcalloc((size_t)p->C, sizeof(int *));
    replay(p, p->C, 1, NULL);
    make_ops(p);
    return 0;
}

void ar_pipe_plan_free(ar_pipe_plan *p)
{
    for (int c = 0; p->send && c < p->C; c++)
        free(p->send[c]);
    for (int s = 0; p->ops && s < p->P; s++)
        free(p->ops[s]);
    free(p->send);
    free(p->nsend);
    free(p->ops);
    free(p->nops);
    free(p->lo);
    free(p->hi);
    ar_blocks_free(&p->blk);
    memset(p, 0, sizeof *p);
}

void ar_pipe_held(const ar_pipe_plan *p, int c, unsigned char *state)
{
    memset(state, 0, (size_t)p->L + 1);
    replay((ar_pipe_plan *)p, c, 0, state);
}

long ar_pipe_rows_per_mb(const ar_pipe_plan *p)
{
    long n = 0;
    for (int c = 0; c + 1 < p->C; c++)
        n += p->nsend[c];
    return n;
}

static double blocks_per_chunk(const ar_pipe_plan *p)
{
    return p->baseline ? NAN : (double)p->blk.nb / p->C;
}

double ar_pipe_eq7(const ar_pipe_plan *p)
{
    return (double)p->C * (p->C - 1) / 2.0 * blocks_per_chunk(p);
}

double ar_pipe_eq8(const ar_pipe_plan *p)
{
    double Np = blocks_per_chunk(p);
    return (double)p->P * (p->P - 1) / 2.0 * Np + (double)(p->V - 1) * p->P * p->P * Np;
}

int ar_pipe_simulate(const ar_pipe_plan *p, double tf, double tb, double *makespan, double *bubble,
                     double **start, ar_err *e)
{
    int C = p->C, M = p->M, P = p->P;
    /* finish times of F and B of (mb, chunk); -1 = not yet */
    double *fdone = ar_xmalloc(sizeof(double) * (size_t)M * C), *bdone = ar_xmalloc(sizeof(double) * (size_t)M * C);
    for (size_t i = 0; i < (size_t)M * C; i++)
        fdone[i] = bdone[i] = -1;
    int *next = ar_xcalloc((size_t)P, sizeof(int));
    double *free_at = ar_xcalloc((size_t)P, sizeof(double));
    double busy = 0, end = 0;
    int left = 0, rc = 0;
    for (int s = 0; s < P; s++)
        left += p->nops[s];
    while (left > 0) {
        int moved = 0;
        for (int s = 0; s < P; s++) {
            while (next[s] < p->nops[s]) {
                const ar_pipe_op *o = &p->ops[s][next[s]];
                int c = o->chunk, at = o->mb * C + c;
                double ready;
                if (o->kind == 'F')
                    ready = c == 0 ? 0 : fdone[at - 1];
                else
                    ready = c == C - 1 ? fdone[at] : bdone[at + 1];
                if (ready < 0)
                    break;
                double t0 = ready > free_at[s] ? ready : free_at[s];
                double cost = (o->kind == 'F' ? tf : tb) * (p->hi[c] - p->lo[c] + 1);
                if (start)
                    start[s][next[s]] = t0;
                free_at[s] = t0 + cost;
                (o->kind == 'F' ? fdone : bdone)[at] = free_at[s];
                busy += cost;
                if (free_at[s] > end)
                    end = free_at[s];
                next[s]++;
                left--;
                moved = 1;
            }
        }
        if (!moved) {
            rc = ar_fail(e, "the pipeline schedule deadlocks (P=%d, V=%d, %d micro-batches)", P, p->V, M);
            break;
        }
    }
    if (rc == 0) {
        *makespan = end;
        *bubble = end > 0 ? 1.0 - busy / (P * end) : 0;
    }
    free(fdone);
    free(bdone);
    free(next);
    free(free_at);
    return rc;
}
