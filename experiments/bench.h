/* Throughput and memory measurements for `attnres bench`: training and
 * inference tokens/s of one config on synthetic token ids, achieved GFLOP/s
 * (docs/reference.md §6.2: 6N + 12 n_layer d T FLOPs per token), peak resident memory,
 * the sgemm ceiling of the machine, and the memory the depth-attention
 * sources are predicted to add over the baseline.
 *
 * Everything here runs in the calling process; the command runs each
 * variant in a child process of its own so that peak memory is per
 * variant. */
#ifndef AR_BENCH_H
#define AR_BENCH_H

#include <stddef.h>

#include "../core/config.h"
#include "../core/error.h"
#include "../lib/backend.h"
#include "op_timer.h"

/* ---- the variants a bench compares ---- */

typedef struct {
    const char *name;  /* command-line name: "baseline", "block8", "block4", "full" */
    const char *label; /* table / JSON label: "baseline", "block N=8", "block S=4", "full" */
    ar_res_kind kind;
    int num_blocks;    /* block: N wanted (0 = not used) */
    int block_size;    /* block: S wanted (0 = not used) */
    int ablate;        /* 1: the residual is attnres ablate's variant of this
                          name (experiments/ablate.h), from the config's own */
} ar_bench_variant_def;

/* The bench's own four (baseline, block8, block4, full: measured by
 * default), then every other attnres ablate variant under its ablate name. */
extern const ar_bench_variant_def ar_bench_variants[];
extern const int ar_bench_n_variants; /* all of them */
extern const int ar_bench_n_default;  /* the first four */

/* The variant by command-line name, or NULL. */
const ar_bench_variant_def *ar_bench_find_variant(const char *name);

/* Replaces c->model.residual with the variant's.  A model with fewer
 * sublayers than the variant asks for is clamped: N = min(N, L),
 * S = min(S, L), so every variant is valid for every model.  An ablate
 * variant takes the block size, window, heads and streams the config sets,
 * as attnres ablate does. */
void ar_bench_apply_variant(ar_config *c, const ar_bench_variant_def *v);

/* ---- measuring ---- */

typedef struct {
    const ar_backend *be; /* NULL: the config's train.device and train.precision
                             (ar_backend_open), opened in the measuring process
                             (a CUDA context does not survive fork) */
    int threads;          /* applied with be->set_threads first (0 = all cores); < 0: left as is */
    int steps;            /* timed steps per repetition, >= 1 */
    int warmup;           /* untimed steps before the first repetition, >= 0 */
    int repeat;           /* timed repetitions, >= 1 */
} ar_bench_opts;

typedef struct {
    int batch, seq_len;     /* B (train.batch_size) and T */
    int threads;            /* compute threads in effect */
    long params;            /* all parameters */
    long nonembed_params;   /* N of the compute formula */
    double flops_per_token; /* ar_model_flops_per_token */
    /* training: zero_grad, forward, backward, grad norm, AdamW step */
    double train_tok_per_s; /* median over the repetitions */
    double train_tok_per_s_min, train_tok_per_s_max;
    double train_step_ms;   /* at the median */
    double gflops;          /* train_tok_per_s * flops_per_token / 1e9 */
    double loss;            /* of the last training step (sanity) */
    /* inference: the forward with its loss (lm_head included) */
    double infer_tok_per_s; /* median over the repetitions */
    double infer_tok_per_s_min, infer_tok_per_s_max;
    long long peak_rss_bytes; /* ar_bench_peak_rss() with the model still allocated */
    long long peak_device_bytes; /* be->mem_peak() likewise: a device's buffers; -1 where not counted */
    char device[96];          /* be->device_name() */
    double peak_flops;        /* be->peak_bf16_flops(): the MFU denominator, 0 = unknown */
} ar_bench_result;

/* Model FLOPs utilisation: achieved training FLOP/s (train_tok_per_s *
 * flops_per_token) over peak FLOP/s; NaN when peak <= 0 (unknown). */
double ar_bench_mfu(const ar_bench_result *r, double peak);

/* Creates the model of cfg->model for train.batch_size sequences, feeds it
 * synthetic token ids (no data files are read) and times o->warmup untimed
 * then o->repeat timed repetitions of o->steps training steps, then the
 * same for forward-only passes; be->sync() comes before every clock read,
 * so a device's queued work is inside the timed interval.  cfg must be
 * valid (ar_config_validate). */
int ar_bench_variant(const ar_config *cfg, const ar_bench_opts *o, ar_bench_result *r, ar_err *e);

/* Paired timing of nv configs in this process (on the device of cfgs[0]
 * when o->be is NULL): every model is created,
 * given o->warmup untimed steps, then timed round-robin, o->repeat rounds in
 * each of which every model runs o->steps training steps (odd rounds in
 * reverse order, so a steady drift favours no variant); then the same for
 * forward-only passes.  train[v*repeat + r] and infer[v*repeat + r] get the
 * tokens/s of variant v in round r.  Measurements of one round are seconds
 * apart, so ratios between variants taken round by round are much steadier
 * than ratios between separate processes on a machine whose speed drifts.
 * train_mm and infer_mm (each may be NULL) get, at the same places, the
 * fraction of that time spent in matmul_fwd and matmul_bwd: measured on the
 * CPU backend, NaN on any other (its ops return before their work is done).
 * ops (or NULL), 2*nv tallies: ops[2v] and ops[2v+1] get what every op of
 * variant v did in training and forward-only steps: on the CPU backend in
 * all its timed rounds (wall and steps 0: the rounds' own); on any other,
 * in `steps` more steps after the rounds, each op waited for, with those
 * steps' wall time and count.  Needs the memory of all nv models at once. */
int ar_bench_paired(const ar_config *cfgs, int nv, const ar_bench_opts *o, double *train,
                    double *infer, double *train_mm, double *infer_mm, ar_op_tally *ops, ar_err *e);

/* A variant's overhead outside the matrix products, in percent of its own
 * time: 100 ((t_v - m_v) - (t_b - m_b)) / t_v, with t = 1 / tok/s the time
 * per token of variant and baseline and m = frac * t the part of it in
 * matrix products.  The products are the same work in every variant, but
 * on a machine whose speed drifts by several percent from one step to the
 * next they carry most of the noise of the end-to-end ratio; this leaves
 * out their difference. */
double ar_bench_overhead_outside_mm(double v_tok_per_s, double v_frac, double b_tok_per_s,
                                    double b_frac);

/* The same difference in milliseconds a step of tokens_per_step tokens:
 * 1000 tokens_per_step ((t_v - m_v) - (t_b - m_b)).  Where the matrix
 * products run faster one hour than another, the percentage above grows
 * although the variant's own work did not; this does not scale with them. */
double ar_bench_extra_ms_outside_mm(double v_tok_per_s, double v_frac, double b_tok_per_s, double b_frac,
                                    double tokens_per_step);

/* Median, minimum and maximum of n values (sorts v). */
void ar_bench_summarize(double *v, int n, double *med, double *lo, double *hi);

/* The square sgemm ceiling: the best GFLOP/s of `reps` row-major
 * cblas_sgemm calls of size n, on the threads currently set. */
#define AR_BENCH_CEILING_N 2048
#define AR_BENCH_CEILING_REPS 5
double ar_bench_sgemm_gflops(int n, int reps);

/* The fp32 FMA peak of the threads currently set, measured: the best
 * GFLOP/s of `reps` runs of independent FMA chains in the widest vectors
 * the CPU has (experiments/fma_peak.c); *isa names them ("AVX-512 FMA"). */
#define AR_BENCH_FMA_REPS 3
double ar_bench_fma_peak_gflops(int reps, const char **isa);

/* Peak resident set size of this process in bytes (VmHWM of
 * /proc/self/status, else getrusage's ru_maxrss); -1 if unknown. */
long long ar_bench_peak_rss(void);

/* The floats that the depth-attention sources are predicted to add over the
 * baseline for a batch of B sequences: nb*B*T*d with nb = ceil(L/S) stored
 * block summaries (L = 2*n_layer, S = ar_cfg_block_size; with block_sizes,
 * the number of blocks) for block, and
 * L*B*T*d for full, static and rescaled (S = 1); 0 for baseline; NaN for
 * swa, mhc and denseformer (no such formula). */
double ar_bench_predicted_extra_floats(const ar_model_cfg *m, int batch);

/* ceil(L/S), or the length of model.residual.block_sizes: the block
 * summaries a block/full model stores (0 for baseline). */
int ar_bench_num_blocks_effective(const ar_model_cfg *m);

#endif
