/* The pipeline plan (parallel/pipe_plan.h) against hand counts, the report's
 * eq. 7 and eq. 8, and the bubble formulas of 1F1B, interleaved 1F1B and
 * GPipe; the figure drawn from it (viz/pipeline_figure.h); and the
 * command `attnres plot-pipeline` through the real binary ($AR_BIN).
 *
 * The hand-counted case: L = 8 sublayers, P = 2 ranks, V = 2 virtual
 * stages, so C = 4 chunks of 2 sublayers:
 *
 *     chunk   sublayers   rank
 *     c0      1-2         0
 *     c1      3-4         1
 *     c2      5-6         0
 *     c3      7-8         1
 *
 * Rows q = 0..8, row 0 the embedding b0.  The live rows after chunk c are
 * the completed blocks up to hi[c] and hi[c] itself (the partial sum the
 * next chunk continues).
 *
 * S = 2 (blocks end at rows 2, 4, 6, 8: on every chunk boundary):
 *     H_0 = {0, 2}, H_1 = {0, 2, 4}, H_2 = {0, 2, 4, 6}
 *   naive sends H_c:                 {0,2} {0,2,4} {0,2,4,6}   = 2+3+4 = 9
 *   cached, less what the receiver holds:
 *     c0 -> c1: rank 1 holds nothing          sends {0, 2}
 *     c1 -> c2: rank 0 holds 0, 1, 2 (c0)     sends {4}
 *     c2 -> c3: rank 1 holds 0, 2 (received), 3, 4 (c1)  sends {6}   = 2+1+1 = 4
 *   when c3 starts rank 1 keeps 0, 2, 3, 4, received 6, produces 7, 8;
 *   rows 1 and 5 are absent.
 *
 * S = 4 (blocks end at rows 4, 8: chunk c0 ends inside block 1):
 *     H_0 = {0, 2} (2 is block 1's partial sum), H_1 = {0, 4}, H_2 = {0, 4, 6}
 *   naive: 2+2+3 = 7; cached: {0,2} {4} {6} = 4.
 *
 * Full (S = 1), L = 8: every row is a block.  H_c = {0..hi[c]}:
 *   naive 3+5+7 = 15; cached {0,1,2} {3,4} {5,6} = 7.
 *
 * Unit-time bubbles (every chunk the same size, forward = backward = 1 a
 * chunk, messages free).  1F1B with V = 1: rank P-1 starts P-1 chunk
 * times late and every rank then works M(F+B) with no gap, so the step
 * takes (M+P-1)(F+B) and the bubble is (P-1)/(M+P-1); GPipe the same.
 * Interleaving V chunks a rank cuts each op to 1/V and the ramp to
 * (P-1)/V of the old chunk time: bubble (P-1)/(VM+P-1) (Megatron's
 * estimate, exact in this model). */
#define _GNU_SOURCE /* memmem */
#include <cairo.h>
#include <criterion/criterion.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "parallel/pipe_plan.h"
#include "testutil.h"
#include "viz/pipeline_figure.h"

TestSuite(pipe_plan, .timeout = 120);

static void make(ar_pipe_plan *p, int L, int S, int baseline, int P, int V, int M, int cache, ar_pipe_sched sched)
{
    ar_err e = {{0}};
    cr_assert_eq(ar_pipe_plan_make(p, L, S, baseline, P, V, M, cache, sched, &e), 0,
                 "plan L=%d S=%d P=%d V=%d M=%d: %s", L, S, P, V, M, e.msg);
}

/* Transition c's send list is exactly want[0..n-1]. */
static void expect_sends(const ar_pipe_plan *p, int c, const int *want, int n)
{
    char got[256] = "";
    for (int i = 0, k = 0; i < p->nsend[c]; i++)
        k += snprintf(got + k, sizeof got - (size_t)k, "%d ", p->send[c][i]);
    cr_assert_eq(p->nsend[c], n, "transition %d sends %d rows (%s), expected %d", c, p->nsend[c], got, n);
    for (int i = 0; i < n; i++)
        cr_assert_eq(p->send[c][i], want[i], "transition %d sends %s, expected row %d at %d", c, got, want[i], i);
}

#define SENDS(p, c, ...)                                                                                  \
    do {                                                                                                  \
        const int w_[] = {__VA_ARGS__};                                                                   \
        expect_sends(p, c, w_, (int)(sizeof w_ / sizeof *w_));                                            \
    } while (0)

/* ---------------------------------------------------------- hand counts */

Test(pipe_plan, chunks_and_stages_of_the_hand_counted_case)
{
    ar_pipe_plan p;
    make(&p, 8, 2, 0, 2, 2, 2, 1, AR_PIPE_1F1B);
    static const int lo[] = {1, 3, 5, 7}, hi[] = {2, 4, 6, 8}, stage[] = {0, 1, 0, 1};
    cr_assert_eq(p.C, 4);
    for (int c = 0; c < 4; c++) {
        cr_assert_eq(p.lo[c], lo[c], "chunk %d starts at %d", c, p.lo[c]);
        cr_assert_eq(p.hi[c], hi[c], "chunk %d ends at %d", c, p.hi[c]);
        cr_assert_eq(ar_pipe_stage_of(&p, c), stage[c]);
    }
    ar_pipe_plan_free(&p);
}

Test(pipe_plan, block_size_2_on_chunk_boundaries)
{
    ar_pipe_plan p;
    make(&p, 8, 2, 0, 2, 2, 2, 1, AR_PIPE_1F1B);
    SENDS(&p, 0, 0, 2);
    SENDS(&p, 1, 4);
    SENDS(&p, 2, 6);
    cr_assert_eq(ar_pipe_rows_per_mb(&p), 4);
    /* what rank 1 holds when c3 starts */
    unsigned char st[9];
    ar_pipe_held(&p, 3, st);
    static const unsigned char want3[9] = {AR_ROW_KEPT,     AR_ROW_ABSENT,   AR_ROW_KEPT,
                                           AR_ROW_KEPT,     AR_ROW_KEPT,     AR_ROW_ABSENT,
                                           AR_ROW_RECEIVED, AR_ROW_PRODUCED, AR_ROW_PRODUCED};
    for (int q = 0; q <= 8; q++)
        cr_assert_eq(st[q], want3[q], "c3, row %d: state %d, expected %d", q, st[q], want3[q]);
    /* and rank 0 at c2: keeps c0's rows 0-2, receives 4, produces 5-6 */
    ar_pipe_held(&p, 2, st);
    static const unsigned char want2[9] = {AR_ROW_KEPT,   AR_ROW_KEPT,     AR_ROW_KEPT,
                                           AR_ROW_ABSENT, AR_ROW_RECEIVED, AR_ROW_PRODUCED,
                                           AR_ROW_PRODUCED, AR_ROW_ABSENT, AR_ROW_ABSENT};
    for (int q = 0; q <= 8; q++)
        cr_assert_eq(st[q], want2[q], "c2, row %d: state %d, expected %d", q, st[q], want2[q]);
    /* c0 starts with nothing but what it computes: the embedding, rows 1-2 */
    ar_pipe_held(&p, 0, st);
    for (int q = 0; q <= 8; q++)
        cr_assert_eq(st[q], q <= 2 ? AR_ROW_PRODUCED : AR_ROW_ABSENT, "c0, row %d", q);
    ar_pipe_plan_free(&p);

    make(&p, 8, 2, 0, 2, 2, 2, 0, AR_PIPE_1F1B);
    SENDS(&p, 0, 0, 2);
    SENDS(&p, 1, 0, 2, 4);
    SENDS(&p, 2, 0, 2, 4, 6);
    cr_assert_eq(ar_pipe_rows_per_mb(&p), 9);
    /* naive: nothing is kept, the whole history is received */
    ar_pipe_held(&p, 3, st);
    for (int q = 0; q <= 8; q++)
        cr_assert_eq(st[q], q == 0 || q == 2 || q == 4 || q == 6 ? AR_ROW_RECEIVED
                            : q >= 7                              ? AR_ROW_PRODUCED
                                                                  : AR_ROW_ABSENT,
                     "naive c3, row %d: state %d", q, st[q]);
    ar_pipe_plan_free(&p);
}

Test(pipe_plan, block_size_4_across_chunk_boundaries)
{
    ar_pipe_plan p;
    make(&p, 8, 4, 0, 2, 2, 2, 1, AR_PIPE_1F1B);
    SENDS(&p, 0, 0, 2); /* row 2: block 1's partial sum, which c1 continues */
    SENDS(&p, 1, 4);
    SENDS(&p, 2, 6);
    int complete;
    cr_assert_eq(ar_pipe_row_block(&p, 2, &complete), 1);
    cr_assert_eq(complete, 0, "row 2 does not end block 1 (S = 4)");
    cr_assert_eq(ar_pipe_row_block(&p, 4, &complete), 1);
    cr_assert_eq(complete, 1);
    cr_assert_eq(ar_pipe_row_block(&p, 5, &complete), 2);
    ar_pipe_plan_free(&p);
    make(&p, 8, 4, 0, 2, 2, 2, 0, AR_PIPE_1F1B);
    SENDS(&p, 0, 0, 2);
    SENDS(&p, 1, 0, 4); /* the partial row 2 is dead once block 1 is complete */
    SENDS(&p, 2, 0, 4, 6);
    cr_assert_eq(ar_pipe_rows_per_mb(&p), 7);
    ar_pipe_plan_free(&p);
}

Test(pipe_plan, full_attnres_sends_every_sublayer_once)
{
    ar_pipe_plan p;
    make(&p, 8, 1, 0, 2, 2, 2, 1, AR_PIPE_1F1B);
    SENDS(&p, 0, 0, 1, 2);
    SENDS(&p, 1, 3, 4);
    SENDS(&p, 2, 5, 6);
    ar_pipe_plan_free(&p);
    make(&p, 8, 1, 0, 2, 2, 2, 0, AR_PIPE_1F1B);
    cr_assert_eq(ar_pipe_rows_per_mb(&p), 3 + 5 + 7);
    ar_pipe_plan_free(&p);
}

Test(pipe_plan, baseline_sends_one_row_a_transition)
{
    static const int PV[][2] = {{2, 1}, {2, 2}, {4, 2}, {4, 1}, {8, 2}, {3, 3}};
    for (size_t i = 0; i < sizeof PV / sizeof *PV; i++)
        for (int cache = 0; cache < 2; cache++) {
            int P = PV[i][0], V = PV[i][1];
            ar_pipe_plan p;
            make(&p, 16 + (int)i, 0, 1, P, V, P, cache, AR_PIPE_1F1B);
            cr_assert_eq(ar_pipe_rows_per_mb(&p), p.C - 1, "baseline P=%d V=%d cache=%d sends %ld rows", P, V,
                         cache, ar_pipe_rows_per_mb(&p));
            for (int c = 0; c + 1 < p.C; c++)
                SENDS(&p, c, p.hi[c]);
            ar_pipe_plan_free(&p);
        }
}

/* ------------------------------------------ every case: counts and holdings */

/* The plans exercised: (L, S, baseline, P, V); S = 1 is Full AttnRes. */
static const int cases[][5] = {
    {16, 2, 0, 2, 1}, {16, 2, 0, 2, 2}, {16, 2, 0, 4, 2}, {16, 4, 0, 2, 1}, {16, 4, 0, 2, 2}, {16, 4, 0, 4, 2},
    {16, 1, 0, 2, 1}, {16, 1, 0, 2, 2}, {16, 1, 0, 4, 2}, {16, 0, 1, 2, 1}, {16, 0, 1, 2, 2}, {16, 0, 1, 4, 2},
    {16, 3, 0, 4, 2}, {16, 5, 0, 2, 3}, {14, 2, 0, 4, 1}, {14, 3, 0, 2, 3}, {24, 4, 0, 3, 2}, {32, 2, 0, 8, 2},
    {32, 16, 0, 4, 2}, {12, 2, 0, 4, 3}, {16, 1, 0, 4, 4}, {48, 6, 0, 4, 3},
};
#define NCASES (int)(sizeof cases / sizeof *cases)

Test(pipe_plan, cached_never_sends_more_than_naive)
{
    for (int i = 0; i < NCASES; i++) {
        const int *k = cases[i];
        ar_pipe_plan a, b;
        make(&a, k[0], k[1], k[2], k[3], k[4], k[3], 1, AR_PIPE_1F1B);
        make(&b, k[0], k[1], k[2], k[3], k[4], k[3], 0, AR_PIPE_1F1B);
        for (int c = 0; c + 1 < a.C; c++)
            cr_assert_leq(a.nsend[c], b.nsend[c], "case %d, transition %d: cached %d > naive %d", i, c,
                          a.nsend[c], b.nsend[c]);
        cr_assert_leq(ar_pipe_rows_per_mb(&a), ar_pipe_rows_per_mb(&b));
        /* within the first round the receiver holds nothing: the two agree */
        for (int c = 0; c + 1 < a.C && c + 1 < a.P; c++)
            cr_assert_eq(a.nsend[c], b.nsend[c], "case %d: first-round transition %d", i, c);
        /* with V > 1 and blocks, caching saves something */
        if (k[4] > 1 && !k[2] && k[3] > 1)
            cr_assert_lt(ar_pipe_rows_per_mb(&a), ar_pipe_rows_per_mb(&b), "case %d: caching saved nothing", i);
        ar_pipe_plan_free(&a);
        ar_pipe_plan_free(&b);
    }
}

/* Rows chunk c+1 reads from earlier chunks (pipe_plan.h's H_c), by the
 * definition, independently of the plan's own code. */
static int needed(const ar_pipe_plan *p, int c, int q)
{
    int hi = p->hi[c];
    if (q > hi)
        return 0;
    if (q == hi)
        return 1;
    if (p->baseline)
        return 0;
    return q == 0 || q % p->S == 0;
}

Test(pipe_plan, held_rows_are_what_the_chunk_needs_and_received_is_what_was_sent)
{
    for (int i = 0; i < NCASES; i++)
        for (int cache = 0; cache < 2; cache++) {
            const int *k = cases[i];
            ar_pipe_plan p;
            make(&p, k[0], k[1], k[2], k[3], k[4], k[3], cache, AR_PIPE_1F1B);
            unsigned char *st = calloc((size_t)p.L + 1, 1);
            for (int c = 1; c < p.C; c++) {
                ar_pipe_held(&p, c, st);
                int nrecv = 0;
                for (int q = 0; q <= p.L; q++) {
                    if (needed(&p, c - 1, q))
                        cr_assert_neq(st[q], AR_ROW_ABSENT, "case %d cache %d: chunk %d lacks row %d", i, cache, c,
                                      q);
                    if (q >= p.lo[c] && q <= p.hi[c])
                        cr_assert_eq(st[q], AR_ROW_PRODUCED, "case %d: chunk %d, row %d", i, c, q);
                    else
                        cr_assert_neq(st[q], AR_ROW_PRODUCED, "case %d: chunk %d, row %d", i, c, q);
                    if (!cache)
                        cr_assert_neq(st[q], AR_ROW_KEPT, "case %d naive: chunk %d keeps row %d", i, c, q);
                    if (st[q] == AR_ROW_RECEIVED) {
                        cr_assert(nrecv < p.nsend[c - 1] && p.send[c - 1][nrecv] == q,
                                  "case %d cache %d: chunk %d received row %d, which transition %d did not send", i,
                                  cache, c, q, c - 1);
                        nrecv++;
                    }
                }
                cr_assert_eq(nrecv, p.nsend[c - 1], "case %d cache %d: chunk %d received %d of %d rows", i, cache,
                             c, nrecv, p.nsend[c - 1]);
            }
            free(st);
            ar_pipe_plan_free(&p);
        }
}

/* Chunks ending on block boundaries (S divides L/C): the naive count is
 * eq. 7 plus the embedding on each of the C-1 transitions, and the cached
 * count is eq. 8 with its bound made exact, P(P-1)/2 N_p + (V-1) P (P-1)
 * N_p, plus the embedding sent once to each of the P-1 other ranks.
 * N_p = L / (S C) is then a whole number, so every count and formula here
 * is a small integer, exact in double: exact compares. */
Test(pipe_plan, aligned_counts_are_eq7_and_eq8_exactly)
{
    static const int al[][4] = {{16, 2, 2, 1}, {16, 2, 2, 2}, {16, 2, 4, 2}, {16, 4, 2, 2}, {16, 4, 4, 1},
                                {16, 1, 2, 1}, {16, 1, 2, 2}, {16, 1, 4, 2}, {24, 3, 4, 2}, {32, 2, 4, 4}};
    for (size_t i = 0; i < sizeof al / sizeof *al; i++) {
        int L = al[i][0], S = al[i][1], P = al[i][2], V = al[i][3], C = P * V;
        double Np = (double)(L / S) / C;
        ar_pipe_plan a, b;
        make(&a, L, S, 0, P, V, P, 1, AR_PIPE_1F1B);
        make(&b, L, S, 0, P, V, P, 0, AR_PIPE_1F1B);
        cr_assert_eq(Np, (double)(L / (S * C)), "L=%d S=%d C=%d: not aligned", L, S, C);
        cr_assert_eq(ar_pipe_eq7(&b), C * (C - 1) / 2.0 * Np);
        cr_assert_eq(ar_pipe_eq8(&a), P * (P - 1) / 2.0 * Np + (V - 1) * P * P * Np);
        cr_assert_eq((double)ar_pipe_rows_per_mb(&b), ar_pipe_eq7(&b) + (C - 1),
                     "L=%d S=%d P=%d V=%d: naive %ld rows, eq. 7 %g", L, S, P, V, ar_pipe_rows_per_mb(&b),
                     ar_pipe_eq7(&b));
        double exact = P * (P - 1) / 2.0 * Np + (V - 1) * P * (P - 1) * Np + (P - 1);
        cr_assert_eq((double)ar_pipe_rows_per_mb(&a), exact, "L=%d S=%d P=%d V=%d: cached %ld, want %g", L, S, P, V,
                     ar_pipe_rows_per_mb(&a), exact);
        cr_assert_leq((double)ar_pipe_rows_per_mb(&a) - (P - 1), ar_pipe_eq8(&a), "eq. 8 is an upper bound");
        ar_pipe_plan_free(&a);
        ar_pipe_plan_free(&b);
    }
    /* the report's case, as the figure shows it */
    ar_pipe_plan a, b;
    make(&a, 16, 2, 0, 4, 2, 4, 1, AR_PIPE_1F1B);
    make(&b, 16, 2, 0, 4, 2, 4, 0, AR_PIPE_1F1B);
    cr_assert_eq(ar_pipe_rows_per_mb(&a), 21);
    cr_assert_eq(ar_pipe_rows_per_mb(&b), 35);
    /* N_p = 8 blocks / 8 chunks = 1: small integers, exact in double */
    cr_assert_eq(ar_pipe_eq7(&a), 28);
    cr_assert_eq(ar_pipe_eq8(&a), 22);
    for (int c = 3; c < 7; c++)
        cr_assert_eq(a.nsend[c], 3, "later rounds send the P-1 = 3 blocks the receiver lacks (transition %d)", c);
    ar_pipe_plan_free(&a);
    ar_pipe_plan_free(&b);
}

Test(pipe_plan, errors_name_the_keys)
{
    ar_pipe_plan p;
    ar_err e = {{0}};
    cr_assert_eq(ar_pipe_plan_make(&p, 16, 2, 0, 8, 4, 8, 1, AR_PIPE_1F1B, &e), -1);
    cr_assert(strstr(e.msg, "'parallel.pipeline'") && strstr(e.msg, "'parallel.virtual'") && strstr(e.msg, "32"),
              "%s", e.msg);
    cr_assert_eq(ar_pipe_plan_make(&p, 16, 2, 0, 4, 1, 3, 1, AR_PIPE_1F1B, &e), -1);
    cr_assert(strstr(e.msg, "train.grad_accum"), "%s", e.msg);
    cr_assert_eq(ar_pipe_plan_make(&p, 16, 2, 0, 4, 2, 6, 1, AR_PIPE_1F1B, &e), -1);
    cr_assert(strstr(e.msg, "multiple of 4"), "%s", e.msg);
    cr_assert_eq(ar_pipe_plan_make(&p, 16, 2, 0, 0, 2, 4, 1, AR_PIPE_1F1B, &e), -1);
    cr_assert(strstr(e.msg, "'parallel.pipeline'"), "%s", e.msg);
    /* GPipe takes any number of micro-batches */
    make(&p, 16, 2, 0, 4, 2, 3, 1, AR_PIPE_GPIPE);
    ar_pipe_plan_free(&p);
}

/* ------------------------------------------------------------ schedules */

/* Every op once, and each op after its inputs (forward of the chunk
 * before; backward of the chunk after, or the last chunk's forward).
 * The callers' tf and tb are whole numbers, so every start and end time is
 * a sum of small integers, exact in double: exact compares. */
static void check_run(const ar_pipe_plan *p, double tf, double tb, double *bubble)
{
    double **start = calloc((size_t)p->P, sizeof *start);
    for (int s = 0; s < p->P; s++)
        start[s] = calloc((size_t)p->nops[s] + 1, sizeof **start);
    double mk;
    ar_err e = {{0}};
    cr_assert_eq(ar_pipe_simulate(p, tf, tb, &mk, bubble, start, &e), 0, "P=%d V=%d M=%d sched %d: %s", p->P, p->V,
                 p->M, p->sched, e.msg);
    int C = p->C, M = p->M;
    double *fend = calloc((size_t)M * C, sizeof *fend), *bend = calloc((size_t)M * C, sizeof *bend);
    int *seen = calloc((size_t)M * C * 2, sizeof *seen);
    for (int s = 0; s < p->P; s++) {
        cr_assert_eq(p->nops[s], 2 * M * p->V, "stage %d runs %d ops", s, p->nops[s]);
        for (int i = 0; i < p->nops[s]; i++) {
            const ar_pipe_op *o = &p->ops[s][i];
            cr_assert_eq(ar_pipe_stage_of(p, o->chunk), s, "stage %d runs chunk %d", s, o->chunk);
            int at = o->mb * C + o->chunk;
            seen[2 * at + (o->kind == 'B')]++;
            double d = (o->kind == 'F' ? tf : tb) * (p->hi[o->chunk] - p->lo[o->chunk] + 1);
            (o->kind == 'F' ? fend : bend)[at] = start[s][i] + d;
            if (i > 0)
                cr_assert_geq(start[s][i], start[s][i - 1], "stage %d runs its ops in order", s);
        }
    }
    for (int i = 0; i < 2 * M * C; i++)
        cr_assert_eq(seen[i], 1, "op %d runs %d times", i, seen[i]);
    for (int s = 0; s < p->P; s++)
        for (int i = 0; i < p->nops[s]; i++) {
            const ar_pipe_op *o = &p->ops[s][i];
            int c = o->chunk, at = o->mb * C + c;
            double ready = o->kind == 'F' ? (c ? fend[at - 1] : 0) : (c == C - 1 ? fend[at] : bend[at + 1]);
            cr_assert_geq(start[s][i], ready, "%c mb %d chunk %d starts before its input", o->kind, o->mb, c);
            cr_assert_leq(o->kind == 'F' ? fend[at] : bend[at], mk, "an op ends after the makespan");
        }
    for (int s = 0; s < p->P; s++)
        free(start[s]);
    free(start);
    free(fend);
    free(bend);
    free(seen);
}

Test(pipe_plan, no_schedule_deadlocks)
{
    for (int P = 1; P <= 6; P++)
        for (int V = 1; V <= 3; V++)
            for (int sched = 0; sched < 2; sched++)
                for (int M = 1; M <= 3 * P + 2; M++) {
                    if (sched == AR_PIPE_1F1B && (M < P || (V > 1 && M % P)))
                        continue; /* refused (errors_name_the_keys) */
                    for (int L = P * V; L <= P * V + 3; L += 3) { /* equal and unequal chunks */
                        ar_pipe_plan p;
                        make(&p, L, 2, 0, P, V, M, 1, (ar_pipe_sched)sched);
                        double b;
                        check_run(&p, 1, 2, &b);
                        cr_assert(b >= 0 && b < 1, "bubble %g", b);
                        ar_pipe_plan_free(&p);
                    }
                }
}

Test(pipe_plan, bubbles_match_the_formulas)
{
    for (int P = 1; P <= 8; P++)
        for (int M = P; M <= 4 * P; M += P)
            for (int V = 1; V <= 3; V++)
                for (int sched = 0; sched < 2; sched++) {
                    ar_pipe_plan p;
                    make(&p, 2 * P * V, 2, 0, P, V, M, 1, (ar_pipe_sched)sched);
                    double b;
                    check_run(&p, 1, 1, &b);
                    /* The simulation's busy time and makespan are sums of
                     * small integers, exact; b = 1 - busy / (P makespan)
                     * rounds twice and want once, on values in [0, 1]:
                     * within 3 x 2^-53 of each other. */
                    double want = (P - 1.0) / (V * M + P - 1.0);
                    cr_assert_float_eq(b, want, 3 * TU_U_DOUBLE, "P=%d V=%d M=%d %s: bubble %.6f, expected %.6f", P, V, M,
                                       sched ? "gpipe" : "1f1b", b, want);
                    if (V == 1) {
                        /* 1F1B and GPipe with V = 1 keep (P-1)/(M+P-1) for any backward cost */
                        check_run(&p, 1, 2, &b);
                        cr_assert_float_eq(b, (P - 1.0) / (M + P - 1.0), 3 * TU_U_DOUBLE, "P=%d M=%d, tb = 2 tf", P,
                                           M);
                    }
                    ar_pipe_plan_free(&p);
                }
}

Test(pipe_plan, interleaving_shrinks_the_bubble)
{
    for (int P = 2; P <= 8; P++)
        for (int M = P; M <= 3 * P; M += P) {
            ar_pipe_plan a, b;
            make(&a, 4 * P, 2, 0, P, 1, M, 1, AR_PIPE_1F1B);
            make(&b, 4 * P, 2, 0, P, 2, M, 1, AR_PIPE_1F1B);
            double ba, bb;
            check_run(&a, 1, 2, &ba);
            check_run(&b, 1, 2, &bb);
            cr_assert_lt(bb, ba, "P=%d M=%d: interleaved bubble %g, plain %g", P, M, bb, ba);
            ar_pipe_plan_free(&a);
            ar_pipe_plan_free(&b);
        }
}

Test(pipe_plan, micro_batches_in_flight)
{
    for (int P = 1; P <= 8; P++)
        for (int M = P; M <= 3 * P + 1; M++) {
            ar_pipe_plan p;
            make(&p, 2 * P, 2, 0, P, 1, M, 1, AR_PIPE_1F1B);
            cr_assert_eq(p.slots, P, "1F1B P=%d M=%d keeps %d micro-batches, expected P", P, M, p.slots);
            ar_pipe_plan_free(&p);
            make(&p, 2 * P, 2, 0, P, 1, M, 1, AR_PIPE_GPIPE);
            cr_assert_eq(p.slots, M, "GPipe P=%d M=%d keeps %d micro-batches, expected M", P, M, p.slots);
            ar_pipe_plan_free(&p);
        }
}

/* ------------------------------------------------------------ the figure */

typedef struct {
    cairo_surface_t *s;
    const unsigned char *d;
    int w, h, stride;
} image;

static void load(image *im, const char *path)
{
    im->s = cairo_image_surface_create_from_png(path);
    cr_assert_eq(cairo_surface_status(im->s), CAIRO_STATUS_SUCCESS, "cairo cannot read %s", path);
    cairo_surface_flush(im->s);
    im->d = cairo_image_surface_get_data(im->s);
    im->w = cairo_image_surface_get_width(im->s);
    im->h = cairo_image_surface_get_height(im->s);
    im->stride = cairo_image_surface_get_stride(im->s);
}

static void expect_pixel(const image *im, double x, double y, const int want[3], const char *what)
{
    int xi = (int)floor(x), yi = (int)floor(y);
    cr_assert(xi >= 0 && xi < im->w && yi >= 0 && yi < im->h, "%s: (%d, %d) outside the image", what, xi, yi);
    uint32_t px = *(const uint32_t *)(im->d + (size_t)yi * im->stride + 4 * (size_t)xi);
    int got[3] = {(int)(px >> 16) & 255, (int)(px >> 8) & 255, (int)px & 255};
    cr_assert(abs(got[0] - want[0]) <= 1 && abs(got[1] - want[1]) <= 1 && abs(got[2] - want[2]) <= 1,
              "%s: #%02x%02x%02x, expected #%02x%02x%02x", what, got[0], got[1], got[2], want[0], want[1], want[2]);
}

/* The hand-counted plan drawn: every cell has its state's colour, every
 * op box its kind's and virtual stage's. */
Test(pipe_plan, figure_cells_and_boxes_have_their_colours)
{
    ar_pipe_plan p;
    make(&p, 8, 2, 0, 2, 2, 2, 1, AR_PIPE_1F1B);
    int C = p.C, nrows = p.L + 1;
    unsigned char st[4][9];
    ar_pfig_chunk ch[4];
    static const char *const labels[9] = {"b0", "b1'", "b1", "b2'", "b2", "b3'", "b3", "b4'", "b4"};
    for (int c = 0; c < C; c++) {
        ar_pipe_held(&p, c, st[c]);
        for (int q = 0; q < nrows; q++) /* AR_ROW_* and AR_PFIG_* by name, not by value */
            st[c][q] = st[c][q] == AR_ROW_KEPT       ? AR_PFIG_KEPT
                       : st[c][q] == AR_ROW_RECEIVED ? AR_PFIG_RECEIVED
                       : st[c][q] == AR_ROW_PRODUCED ? AR_PFIG_PRODUCED
                                                     : AR_PFIG_ABSENT;
        ch[c] = (ar_pfig_chunk){.rank = c % 2, .virt = c / 2, .lo = p.lo[c], .hi = p.hi[c], .state = st[c],
                                .sent = c + 1 < C ? p.nsend[c] : 0, .sent_naive = 9};
    }
    double *start[2];
    ar_pfig_op *ops[2];
    for (int s = 0; s < 2; s++) {
        start[s] = calloc((size_t)p.nops[s], sizeof **start);
        ops[s] = calloc((size_t)p.nops[s], sizeof **ops);
    }
    double mk, bubble;
    ar_err e = {{0}};
    cr_assert_eq(ar_pipe_simulate(&p, 1, 2, &mk, &bubble, start, &e), 0, "%s", e.msg);
    for (int s = 0; s < 2; s++)
        for (int i = 0; i < p.nops[s]; i++) {
            const ar_pipe_op *o = &p.ops[s][i];
            ops[s][i] = (ar_pfig_op){o->kind, o->mb, o->chunk / 2, start[s][i], (o->kind == 'F' ? 1 : 2) * 2.0};
        }
    const char *dir = tu_tmpdir(), *path = tu_path(dir, "pipe.png");
    ar_fig_meta meta = {.command = "attnres plot-pipeline (test)"};
    ar_pfig f = {.title = "test\nplan", .P = 2, .V = 2, .C = C, .nrows = nrows, .row_label = labels,
                 .rows_note = "rows", .chunk = ch, .nops = p.nops, .ops = (const ar_pfig_op *const *)ops,
                 .makespan = mk, .bubble = bubble, .sched = "1F1B", .time_label = "time", .meta = &meta};
    ar_pfig_geom g;
    cr_assert_eq(ar_pipeline_figure(path, &f, &g, &e), 0, "%s", e.msg);
    image im;
    load(&im, path);
    cr_assert_eq(im.w, g.W);
    cr_assert_eq(im.h, g.H);
    for (int c = 0; c < C; c++)
        for (int q = 0; q < nrows; q++) {
            int rgb[3];
            ar_pfig_state_rgb(st[c][q], rgb);
            char what[64];
            snprintf(what, sizeof what, "cell (chunk %d, row %d)", c, q);
            expect_pixel(&im, g.cx + c * g.cpitch + g.cw / 2, g.cy + (q + 0.5) * g.ch, rgb, what);
        }
    /* the four states' colours differ */
    int a[3], b[3];
    for (int s1 = 0; s1 < 4; s1++)
        for (int s2 = s1 + 1; s2 < 4; s2++) {
            ar_pfig_state_rgb(s1, a);
            ar_pfig_state_rgb(s2, b);
            cr_assert(a[0] != b[0] || a[1] != b[1] || a[2] != b[2], "states %d and %d share a colour", s1, s2);
        }
    /* each box's colour, sampled off its label (a quarter in, near the top) */
    for (int s = 0; s < 2; s++)
        for (int i = 0; i < p.nops[s]; i++) {
            const ar_pfig_op *o = &ops[s][i];
            int rgb[3];
            ar_pfig_op_rgb(o->kind, o->virt, 2, rgb);
            char what[64];
            snprintf(what, sizeof what, "rank %d, op %d (%c mb %d)", s, i, o->kind, o->mb);
            expect_pixel(&im, g.tx + (o->start + 0.25 * o->dur) * g.tscale, g.ly + s * g.lpitch + 3, rgb, what);
        }
    ar_pfig_op_rgb('F', 0, 2, a);
    ar_pfig_op_rgb('F', 1, 2, b);
    cr_assert(a[0] != b[0] || a[1] != b[1] || a[2] != b[2], "virtual stages share a shade");
    cairo_surface_destroy(im.s);
    for (int s = 0; s < 2; s++) {
        free(start[s]);
        free(ops[s]);
    }
    ar_pipe_plan_free(&p);
}

/* ----------------------------------------------------------- the command */

static char *run(int *st, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static char *run(int *st, const char *fmt, ...)
{
    const char *bin = tu_bin();
    if (!bin)
        cr_skip_test("AR_BIN is not set");
    char args[4096], cmd[8192];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    snprintf(cmd, sizeof cmd, "'%s' plot-pipeline %s", bin, args);
    return tu_run(cmd, st);
}

static void expect(char *out, int st, int want, const char *needle)
{
    cr_assert_eq(st, want, "exit status %d, expected %d; output:\n%s", st, want, out);
    if (needle)
        cr_assert(strstr(out, needle) != NULL, "expected '%s' in:\n%s", needle, out);
    free(out);
}

/* `attnres plot-pipeline ARGS...` exits with want, printing needle. */
#define EXPECT(want, needle, ...)                                                                         \
    do {                                                                                                  \
        int st_;                                                                                          \
        char *out_ = run(&st_, __VA_ARGS__);                                                              \
        expect(out_, st_, want, needle);                                                                  \
    } while (0)

Test(pipe_plan, command_writes_the_default_figure)
{
    const char *dir = tu_tmpdir(), *path = tu_path(dir, "x.png");
    int st;
    char *out = run(&st, "--out '%s'", path);
    cr_assert_eq(st, 0, "exit %d:\n%s", st, out);
    cr_assert(strstr(out, "wrote '") && strstr(out, "x.png'"), "%s", out);
    cr_assert(strstr(out, "21 cached, 35 naive") && strstr(out, "eq. 8: 22") && strstr(out, "eq. 7: 28"), "%s", out);
    free(out);
    size_t n;
    char *raw = tu_read_file(path, &n);
    cr_assert(raw != NULL, "%s was not written", path);
    static const unsigned char sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    cr_assert(n > 20000 && memcmp(raw, sig, 8) == 0, "%s: %zu bytes, no PNG", path, n);
    cr_assert(memmem(raw, n, "tEXt", 4) != NULL, "no tEXt chunk");
    cr_assert(memmem(raw, n, "attnres:command", 15) != NULL, "no command in the metadata");
    cr_assert(memmem(raw, n, "plot-pipeline", 13) != NULL, "the command line is not recorded");
    cr_assert(memmem(raw, n, "Pipeline parallelism with cross-stage caching", 45) != NULL, "no title");
    free(raw);
    image im;
    load(&im, path);
    cr_assert(im.w >= 1000 && im.w <= 4000 && im.h >= 500 && im.h <= 2000, "%d x %d", im.w, im.h);
    cairo_surface_destroy(im.s);
}

Test(pipe_plan, command_variants_and_formats)
{
    const char *dir = tu_tmpdir();
    /* Full AttnRes, P = 2, V = 2, L = 8: the hand count (15 naive, 7 cached) */
    EXPECT(0, "7 cached, 15 naive", "--residual full --n-layer 4 --pipeline 2 --out '%s'", tu_path(dir, "full.png"));
    EXPECT(0, "3 cached, 3 naive", "--residual baseline --virtual 1 --micro-batches 8 --schedule gpipe --out '%s'",
           tu_path(dir, "base.png"));
    EXPECT(0, "4 cached, 7 naive", "--no-cache --block-size 4 --n-layer 4 --pipeline 2 --out '%s'",
           tu_path(dir, "s4.png"));
    EXPECT(0, "p.svg", "--format svg --out '%s'", tu_path(dir, "p.svg"));
    char *svg = tu_read_file(tu_path(dir, "p.svg"), NULL);
    cr_assert(svg && strstr(svg, "<svg") && strstr(svg, "<title>Pipeline parallelism"), "not an SVG with a title");
    free(svg);
    /* a config: its model and parallel sections */
    const char *cfg = tu_path(dir, "pipe.yaml");
    const char *yaml = "model:\n  n_layer: 4\n  residual:\n    kind: full\nparallel:\n  pipeline: 2\n  virtual: 2\n";
    tu_write_file(cfg, yaml, strlen(yaml));
    EXPECT(0, "7 cached, 15 naive", "'%s' --out '%s'", cfg, tu_path(dir, "cfg.png"));
    const char *mhc = tu_path(dir, "mhc.yaml");
    const char *y2 = "model:\n  residual:\n    kind: denseformer\n";
    tu_write_file(mhc, y2, strlen(y2));
    EXPECT(1, "'model.residual.kind'", "'%s' --out '%s'", mhc, tu_path(dir, "no.png"));
    EXPECT(0, "cached", "'%s' --residual block --out '%s'", mhc, tu_path(dir, "yes.png"));
}

Test(pipe_plan, command_errors)
{
    const char *dir = tu_tmpdir(), *out = tu_path(dir, "never.png");
    EXPECT(2, "'--pipeline'", "--pipeline 0 --out '%s'", out);
    EXPECT(2, "'--virtual'", "--virtual abc --out '%s'", out);
    EXPECT(2, "'--micro-batches'", "--micro-batches -3 --out '%s'", out);
    EXPECT(2, "'--residual' expects baseline, full or block", "--residual mhc --out '%s'", out);
    EXPECT(2, "'--schedule' expects 1f1b or gpipe", "--schedule zb --out '%s'", out);
    EXPECT(2, "'--block-size' (40)", "--block-size 40 --out '%s'", out);
    EXPECT(2, "'--block-size'", "--residual full --block-size 2 --out '%s'", out);
    EXPECT(2, "'--format'", "--format gif --out '%s'", out);
    EXPECT(2, "usage: attnres plot-pipeline", "--bogus");
    EXPECT(2, "unexpected argument", "a.yaml b.yaml");
    EXPECT(2, "needs a value", "--pipeline");
    /* plan errors: exit 1, naming the keys */
    int st;
    char *o = run(&st, "--pipeline 8 --virtual 4 --out '%s'", out);
    cr_assert_eq(st, 1, "exit %d:\n%s", st, o);
    cr_assert(strstr(o, "attnres: error: ") && strstr(o, "'parallel.pipeline' x 'parallel.virtual'") &&
                  strstr(o, "16 sublayers"),
              "%s", o);
    free(o);
    EXPECT(1, "train.grad_accum", "--micro-batches 6 --out '%s'", out);
    EXPECT(1, "none.yaml", "'%s/none.yaml' --out '%s'", dir, out);
    FILE *f = fopen(out, "rb");
    cr_assert(f == NULL, "a failed command wrote %s", out);
}

/* A config with block_sizes: its blocks are drawn ([1, 3, 2, 2] at P = 2,
 * V = 2: the hand count of tests/test_blocks.c, 5 cached and 10
 * naive); --block-size and --residual replace them; --n-layer must keep
 * their sum. */
Test(pipe_plan, command_with_block_sizes)
{
    const char *dir = tu_tmpdir();
    const char *cfg = tu_path(dir, "uneven.yaml");
    const char *yaml = "model:\n  n_layer: 4\n  residual:\n    kind: block\n    block_sizes: [1, 3, 2, 2]\n"
                       "parallel:\n  pipeline: 2\n  virtual: 2\n";
    tu_write_file(cfg, yaml, strlen(yaml));
    EXPECT(0, "5 cached, 10 naive", "'%s' --out '%s'", cfg, tu_path(dir, "u.png"));
    /* block_size 2 at L = 8, P = 2, V = 2: the blocks end at every chunk's end */
    EXPECT(0, "4 cached, 9 naive", "'%s' --block-size 2 --out '%s'", cfg, tu_path(dir, "s2.png"));
    EXPECT(0, "7 cached, 15 naive", "'%s' --residual full --out '%s'", cfg, tu_path(dir, "f.png"));
    EXPECT(1, "'model.residual.block_sizes' [1, 3, 2, 2] sums to 8 sublayers, expected L = 2*'model.n_layer' = 10",
           "'%s' --n-layer 5 --out '%s'", cfg, tu_path(dir, "never.png"));
}
