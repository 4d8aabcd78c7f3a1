/* Pipeline parallelism's plan: which sublayers each stage runs, which
 * residual rows each transition moves, and in what order each stage runs
 * its work.  Pure functions of the configuration (no MPI, no model): the
 * engine (parallel/pipe.c) follows the plan, `attnres bench --pipeline` checks
 * the bytes it moved against the plan's count, and `attnres plot-pipeline`
 * draws it.
 *
 * Chunks.  The L sublayers are cut into C = P*V contiguous chunks,
 * chunk c = sublayers lo[c]..hi[c], lo[c] = 1 + floor(c L / C); chunk 0
 * also runs the embedding, chunk C-1 the final mixer, final_norm, lm_head
 * and the loss.  Chunk c runs on stage c mod P (Megatron's interleaving):
 * stage s holds chunks s, s+P, ..., s+(V-1)P, its virtual stages.
 *
 * Rows.  A stage's residual state is a set of rows P_q, q = 0..L: P_q is
 * the running sum of the block holding sublayer q after it (P_0 = v_0, the
 * embedding, is block 0).  Block n (n >= 1: S sublayers a block, or the
 * sizes of model.residual.block_sizes; core/blocks.h) ends at sublayer
 * end(n); its summary b_n is the row end(n); a row q that ends no block is
 * the partial sum of the block holding q.
 *   baseline: one running sum; the row a transition after chunk c moves is
 *             hi[c] alone (P_q is then h_{q+1});
 *   Block / Full AttnRes (Full: S = 1): every later mixer reads every
 *             completed block, and the first sublayer of chunk c+1 the
 *             partial sum P_{hi[c]}: the live rows after chunk c are
 *             H_c = {end(n) <= hi[c]} u {hi[c]}.
 * Transition c -> c+1 moves, per micro-batch,
 *   naive (cache_blocks false): H_c, the full history (the report's eq. 7);
 *   cached (cache_blocks true): H_c less the rows the receiving stage already
 *             holds: those it received or produced in its earlier chunks
 *             c+1-P, c+1-2P, ... of the same micro-batch (eq. 8).
 * The backward moves the gradient of exactly the rows the forward moved,
 * back along the same transition: each row's gradient reaches the stage
 * that produced the row, summed there once. */
#ifndef AR_PIPE_PLAN_H
#define AR_PIPE_PLAN_H

#include "../core/blocks.h"
#include "../core/error.h"

typedef enum {
    AR_PIPE_1F1B = 0, /* one forward, one backward (interleaved when V > 1) */
    AR_PIPE_GPIPE,    /* every forward, then every backward */
} ar_pipe_sched;

/* One unit of a stage's work: the forward or backward of one chunk for one
 * micro-batch. */
typedef struct {
    char kind; /* 'F' or 'B' */
    int mb;    /* micro-batch 0..M-1 */
    int chunk; /* 0..C-1 */
} ar_pipe_op;

/* Row states for ar_pipe_held. */
enum {
    AR_ROW_ABSENT = 0,
    AR_ROW_KEPT,     /* held from the stage's earlier chunks (cached) */
    AR_ROW_RECEIVED, /* moved by the transition into this chunk */
    AR_ROW_PRODUCED, /* computed by this chunk */
};

typedef struct {
    int L, S;        /* sublayers; block size in sublayers (S = 1: Full; 0: blocks of
                        different sizes, model.residual.block_sizes) */
    ar_blocks blk;   /* the block layout (the plan's own copy) */
    int baseline;    /* one running sum instead of blocks */
    int P, V, C, M;  /* stages, virtual stages per stage, chunks, micro-batches a step */
    int cache;       /* cross-stage caching */
    ar_pipe_sched sched;
    int *lo, *hi;    /* chunk c: sublayers lo[c]..hi[c] (1-based, inclusive) */
    int *nsend;      /* transition c -> c+1 (c = 0..C-2): nsend[c] rows, */
    int **send;      /* send[c][0..nsend[c]-1], ascending */
    int *nops;       /* stage s runs nops[s] ops, */
    ar_pipe_op **ops;/* ops[s][0..nops[s]-1] in order */
    int slots;       /* most micro-batches in flight on one stage (activation sets) */
} ar_pipe_plan;

/* The plan of L sublayers with block size S (ignored for baseline) over P
 * stages of V virtual stages, M micro-batches a step.  Errors name the
 * keys: P*V larger than L ("'parallel.pipeline' x 'parallel.virtual' ..."),
 * too few micro-batches ("... 'train.grad_accum' ..."; 1F1B needs M >= P,
 * interleaved M a multiple of P, as Megatron's). */
int ar_pipe_plan_make(ar_pipe_plan *p, int L, int S, int baseline, int P, int V, int M, int cache,
                      ar_pipe_sched sched, ar_err *e);
/* The same for any block layout b (core/blocks.h: blocks of different
 * sizes, model.residual.block_sizes); ar_pipe_plan_make is this with
 * ar_blocks_uniform(L, S). */
int ar_pipe_plan_make_blocks(ar_pipe_plan *p, const ar_blocks *b, int baseline, int P, int V, int M, int cache,
                             ar_pipe_sched sched, ar_err *e);
void ar_pipe_plan_free(ar_pipe_plan *p);

static inline int ar_pipe_stage_of(const ar_pipe_plan *p, int c) { return c % p->P; }

/* Block of row q (0 = the embedding) and whether q ends it (is b_n). */
int ar_pipe_row_block(const ar_pipe_plan *p, int q, int *complete);

/* The rows stage ar_pipe_stage_of(c) holds when chunk c starts (after its
 * receive) and those chunk c adds: state[q], q = 0..L, one of AR_ROW_*.
 * Rows of no use to chunk c or later are reported as held all the same
 * (a cached stage keeps what it has until the micro-batch ends). */
void ar_pipe_held(const ar_pipe_plan *p, int c, unsigned char *state);

/* Rows moved per micro-batch over all transitions (the forward; the
 * backward moves as many gradient rows). */
long ar_pipe_rows_per_mb(const ar_pipe_plan *p);

/* The report's formulas, in rows (block representations of d floats) per
 * micro-batch, with N_p = nb / C, nb blocks after the embedding (ceil(L/S)
 * for block size S; mean blocks one chunk produces):
 *   eq. 7 (naive):  C(C-1)/2 N_p
 *   eq. 8 (cached): P(P-1)/2 N_p + (V-1) P^2 N_p
 * They leave out the embedding b_0 and partial blocks (which the exact
 * count includes), and eq. 8's second term counts P chunks of blocks a
 * transition in later rounds where P-1 are new to the receiver; so the
 * exact count differs either way.  NaN for the baseline, which has no
 * blocks (it moves C-1 rows). */
double ar_pipe_eq7(const ar_pipe_plan *p);
double ar_pipe_eq8(const ar_pipe_plan *p);

/* Runs the ops of every stage in unit time (a chunk's forward takes tf per
 * sublayer, its backward tb per sublayer; messages are instant): the step's
 * makespan and the bubble fraction 1 - busy / (P makespan).  start (or
 * NULL): start time of ops[s][i] at start[s][i] (caller's arrays of
 * nops[s]).  -1 with e set if the schedule deadlocks. */
int ar_pipe_simulate(const ar_pipe_plan *p, double tf, double tb, double *makespan, double *bubble,
                     double **start, ar_err *e);

#endif
