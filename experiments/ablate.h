/* Ablation studies (`attnres ablate`): one base config trained once per
 * residual variant x seed, every run with the same hyperparameters, token
 * budget, evaluation set and, for seed index k, the same train.seed (so the
 * same data order and the same initial transformer weights) — only
 * model.residual differs.  The runs are an ar_sweep (experiments/sweep.h), so a
 * rerun reuses finished runs and resumes interrupted ones exactly as
 * `attnres sweep` does.
 *
 * Output directory layout:
 *   DIR/runs/<variant>-seed<k>/  the run directories (DIR/runs/results.csv is
 *                                the sweep's own table)
 *   DIR/results.csv              one row per finished run: AR_ABLATE_COLUMNS
 *   DIR/results.md               one row per variant, of the runs' final
 *                                evaluations (experiments/sweep.h): mean, std,
 *                                difference from baseline, Welch t-test
 *                                p-value, and the paired comparison with the
 *                                baseline over matched seeds
 *   DIR/ablation.png             bar chart of mean val loss, error bars 1 std
 *   DIR/block_sizes.png          with block sizes: val loss against S, Full
 *                                and baseline as reference lines */
#ifndef AR_ABLATE_H
#define AR_ABLATE_H

#include "../core/config.h"
#include "../core/error.h"
#include "sweep.h"

#define AR_ABLATE_COLUMNS                                                                                    \
    "variant,seed,nonembed_params,tokens,flops,val_loss,tok_per_s,wall_s,run,final_val_loss,"               \
    "final_eval_windows,final_eval_tokens,n_layer,d_model,n_head"

/* The variant names, in table order, as "baseline, full, ..." */
const char *ar_ablate_variant_list(void);
int ar_ablate_nvariants(void);
const char *ar_ablate_variant_name(int i);
const char *ar_ablate_variant_what(int i);

/* Sets m->residual for variant `name` (a table name, "block-s<S>" for a
 * block size, or "block-l<S1>-<S2>-..." for blocks of S1, S2, ...
 * sublayers: model.residual.block_sizes) from the base model (which lends its block_size, window,
 * heads and streams where it sets them).  -1 with the valid names in e for
 * an unknown name (AR_ERR_BAD_VALUE). */
int ar_ablate_apply(ar_model_cfg *m, const ar_model_cfg *base, const char *name, ar_err *e);

typedef struct {
    ar_sweep sweep;        /* runs: variant-major, seeds 1..nseeds within */
    int nvariants, nseeds;
    char (*variant)[AR_SWEEP_NAME_MAX]; /* baseline first */
    int nblock;            /* block sizes of --block-sizes (variants "block-s<S>") */
    int *block_size;
} ar_ablation;

/* Plans the runs.  variants: comma-separated names or "all"; block_sizes
 * (nblock of them) adds "block-s<S>" variants and, for the reference lines,
 * full.  baseline is always included, first.  An unknown or malformed name
 * is an AR_ERR_BAD_VALUE; a variant whose config fails its checks is not. */
int ar_ablate_plan(ar_ablation *a, const ar_config *base, const char *variants, int seeds,
                   const int *block_sizes, int nblock, ar_err *e);
void ar_ablate_free(ar_ablation *a);

/* --block-layouts: adds, after ar_ablate_plan, one Block AttnRes variant per
 * layout of "2,2,4,8;4,4,4,4" (layouts separated by ';', each the sizes of
 * its blocks in sublayers, summing to L), named "block-l2-2-4-8" (a safe
 * directory and CSV name), with nseeds runs each.  Errors name the option
 * and the layout: AR_ERR_BAD_VALUE for a layout that is not a list of
 * positive integers (or too long to name), not for one that does not sum
 * to L. */
int ar_ablate_add_layouts(ar_ablation *a, const ar_config *base, const char *layouts, ar_err *e);
/* "2,2,4,8" with sep ',' (or "2-2-4-8" with '-') into out: 0, or -1 unless
 * it is a list of integers in 1..100000 (at most AR_LIST_MAX). */
int ar_ablate_parse_layout(const char *s, char sep, ar_int_list *out);
/* The variant name of a layout: "block-l2-2-4-8". */
void ar_ablate_layout_name(const ar_int_list *l, char *buf, size_t n);

/* The paired t-test of n differences d_i (variant - baseline at seed i):
 * mean, sample sd (n-1), se = sd / sqrt(n), t = mean / se with df = n-1,
 * two-sided p = 2 Q_t(|t|; df) (GSL).  With n < 2 everything but pairs
 * (and mean, for n = 1) is NaN; with sd = 0, t and p are NaN. */
typedef struct {
    int pairs;             /* n */
    double mean, sd, se, t, df, p;
} ar_paired;

void ar_paired_t(const double *d, int n, ar_paired *out);

/* Summary of one variant over its finished seeds. */
typedef struct {
    int n;                 /* finished seeds */
    double mean, sd;       /* of final val loss (sd: sample, n-1; 0 for n = 1) */
    double diff;           /* mean - baseline mean */
    double p;              /* Welch two-sided p against baseline; NaN when n < 2 or undefined */
    ar_paired paired;      /* against the baseline over the seeds both finished (baseline: 0 pairs) */
} ar_ablate_stat;

/* The statistics of the table from loss[v * nseeds + k], the loss of
 * variant v (0: the baseline) at seed index k, NaN where that run has not
 * finished: st[v] for v < nvariants. */
void ar_ablate_stats(const double *loss, int nvariants, int nseeds, ar_ablate_stat *st);

/* Welch's t-test of two samples (GSL's t distribution): two-sided p, NaN
 * with fewer than 2 values in either or zero variance in both. */
double ar_welch_p(const double *a, int na, const double *b, int nb);

/* Reads the finished runs under DIR/runs and writes results.csv,
 * results.md, ablation.png and (with block sizes) block_sizes.png.  stats
 * (nvariants entries) may be NULL. */
int ar_ablate_report(const ar_ablation *a, const char *out_dir, ar_ablate_stat *stats, ar_err *e);

#endif
