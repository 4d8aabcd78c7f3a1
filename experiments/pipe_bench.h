/* What a pipeline's communication, bubble, speed and memory measure to, for
 * `attnres bench --pipeline P [--virtual V]` under mpirun: one variant of a
 * config run for a few steps by parallel/pipe.c on synthetic token ids, its
 * moved bytes set beside the plan's exact count (parallel/pipe_plan.h) and the
 * report's eqs. 7 and 8.
 *
 * Every rank of the world calls ar_pipe_bench_variant with the same
 * arguments; each rank's errors are agreed (ar_comm_agree), so every rank
 * returns the same status and holds the same result. */
#ifndef AR_PIPE_BENCH_H
#define AR_PIPE_BENCH_H

#include "../core/config.h"
#include "../core/error.h"
#include "../parallel/comm.h"

/* ---- the variants: block sizes in sublayers (unlike experiments/bench.h's
 * block8, which is N = 8 blocks) ---- */

typedef struct {
    const char *name;  /* --variants name: baseline, block2, block4, block8, full */
    const char *label; /* table / JSON label: "baseline", "block S=2", ..., "full" */
    ar_res_kind kind;
    int block_size;    /* block: S wanted in sublayers (clamped to L); else 0 */
} ar_pipe_bench_variant_def;

extern const ar_pipe_bench_variant_def ar_pipe_bench_variants[];
extern const int ar_pipe_bench_n_variants;

/* The variant by --variants name, or NULL. */
const ar_pipe_bench_variant_def *ar_pipe_bench_find_variant(const char *name);

/* Replaces c->model.residual with the variant's (S = min(S, L)) and sets
 * parallel.cache_blocks to cache. */
void ar_pipe_bench_apply_variant(ar_config *c, const ar_pipe_bench_variant_def *v, int cache);

/* The smallest micro-batch count per pipeline >= want that the 1F1B
 * schedule of P stages accepts: P or more for V = 1, a multiple of P for
 * V > 1 (pipe_plan.h). */
int ar_pipe_bench_fit_micro(int P, int V, int want);

/* Resets this process's peak resident set size (VmHWM) to its current
 * size: "5" written to /proc/self/clear_refs (Linux >= 4.0).  1 if it was
 * reset, 0 if not (the peak is then the process's since it started). */
int ar_pipe_bench_reset_peak(void);

/* ---- measuring ---- */

typedef struct {
    int steps;  /* timed steps, >= 1 */
    int warmup; /* untimed steps first, >= 0 */
} ar_pipe_bench_opts;

typedef struct {
    /* the layout (the plan of parallel/pipe_plan.h) */
    int W, P, V, C, D;    /* ranks, stages, virtual stages, chunks P V, data-parallel degree W / P */
    int M, A;             /* micro-batches per pipeline, per step (M D) */
    int L, S, baseline;   /* sublayers, block size (S = 1 for Full; L + 1 for the baseline) */
    int cache;            /* parallel.cache_blocks */
    int B, T, d;
    int threads;          /* compute threads per rank */
    /* the counts; a row is one block representation (or partial sum, or
     * the embedding) of one micro-batch: B T d floats */
    double row_bytes;     /* 4 B T d */
    long rows_per_mb;     /* ar_pipe_rows_per_mb: over all transitions */
    double eq7, eq8;      /* the report's formulas, rows per micro-batch (NaN: baseline) */
    double pred_bytes;    /* rows_per_mb A row_bytes: a step's forward bytes over the world,
                             and as many gradient bytes back */
    double fwd_bytes, bwd_bytes; /* measured: the last step's, summed over the world */
    int bytes_steady;     /* every step (warm-up too) moved exactly those bytes */
    /* time: per step the slowest rank's ar_pipe_step, over the timed steps */
    double step_ms, step_ms_min, step_ms_max; /* median, min, max */
    double bubble;        /* median over the timed steps of the ranks' summed waits over
                             their summed step times (ar_pipe_stats_sum) */
    double sim_bubble, sim_makespan; /* ar_pipe_simulate of the plan with tf = 1, tb = 2 */
    double loss;          /* mean micro-batch loss of the last step (sanity: about ln vocab) */
    /* memory */
    int peak_reset;       /* every rank reset its peak before the variant */
    double *rank_peak_mib; /* W values: each rank's VmHWM after the steps, MiB (-1 unknown) */
} ar_pipe_bench_result;

/* cfg: the variant's config, valid (ar_config_validate) and a pipeline
 * over world (ar_pipe_check): parallel.pipeline, parallel.virtual and
 * train.grad_accum = M D set.  Resets the peak memory of every rank,
 * creates the model (ar_pipe_nchunks chunks) on the CPU backend with
 * train.threads threads and its pipeline, runs o->warmup then o->steps
 * steps (ar_pipe_step; no optimizer), each followed by ar_pipe_stats_sum,
 * reads every rank's peak memory and frees the model.  r->rank_peak_mib is
 * allocated whatever the outcome: ar_pipe_bench_result_free. */
int ar_pipe_bench_variant(ar_comm *world, const ar_config *cfg, const ar_pipe_bench_opts *o,
                          ar_pipe_bench_result *r, ar_err *e);
void ar_pipe_bench_result_free(ar_pipe_bench_result *r);

#endif
