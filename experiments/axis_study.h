/* Studies along one axis (`attnres ablate --depths`, `--tokens`): one
 * ablation (experiments/ablate.h: variants x seeds, seed index k the same
 * train.seed, so the same batches and initial transformer weights, for
 * every variant) at each of several points of the axis, every other key of
 * the config the same:
 *   depth   model.n_layer = the point (width, token budget, schedule fixed);
 *   tokens  train.steps = round(T / tokens per step), at least 1, where
 *           tokens per step = batch_size x grad_accum x seq_len: the same
 *           shape and schedule (warmup, lr, min_lr) with the decay stretched
 *           over the budget, as a scaling study trains each budget.
 * At each point every variant is compared with the baseline over the seeds
 * both finished:
 *
 *   d_k   = loss(variant, seed k) - loss(baseline, seed k)   (final_val_loss)
 *   mean  = sum d_k / n,  sd = sqrt(sum (d_k - mean)^2 / (n - 1)),
 *   se    = sd / sqrt(n),  t = mean / se,  df = n - 1,
 *   95% CI = mean -+ t_{0.975, n-1} se     (Student's t quantile, GSL),
 *   p     = 2 Q_t(|t|; n - 1)              (two-sided, ar_paired_t).
 *
 * A negative difference means the variant reaches a lower loss than the
 * baseline.  With n < 2 only the mean is defined (the rest NaN); with
 * identical differences (sd = 0) the CI is the point and t, p are NaN.
 *
 * Output directory layout:
 *   DIR/L<depth>/ or DIR/T<tokens>/   the ablation at that point
 *                           (ar_ablate_report: runs/, results.csv,
 *                           results.md, ablation.png); T1M, T500k, T16M,
 *                           T1500000 (ar_tokens_label)
 *   DIR/depth_study.csv     one row per point x compared variant
 *   (token_study.csv)       (AR_DEPTH_STUDY_COLUMNS, AR_TOKEN_STUDY_COLUMNS)
 *   DIR/depth_study.md      the same as a markdown table, with the method
 *                           and, per variant, where it pays (and, along
 *                           tokens, whether its lead grows, holds or fades)
 *   DIR/depth_study.png     mean difference against the axis (tokens on a
 *                           log scale), 95% CI error bars, a zero line */
#ifndef AR_AXIS_STUDY_H
#define AR_AXIS_STUDY_H

#include "../core/config.h"
#include "../core/error.h"
#include "ablate.h"

#define AR_DEPTH_STUDY_COLUMNS                                                                               \
    "n_layer,variant,pairs,baseline_mean,variant_mean,mean_diff,sd,se,ci95_lo,ci95_hi,t,df,p"
/* tokens: each run's training tokens (steps x tokens per step, which may
 * differ from the asked budget by under half a step); tokens_per_param:
 * tokens over the baseline's non-embedding parameters. */
#define AR_TOKEN_STUDY_COLUMNS                                                                               \
    "tokens,steps,tokens_per_param,variant,pairs,baseline_mean,variant_mean,mean_diff,sd,se,ci95_lo,ci95_hi,t," \
    "df,p"

typedef enum { AR_AXIS_DEPTH = 0, AR_AXIS_TOKENS } ar_study_axis;

/* The paired difference with its 95% interval (the equations above). */
typedef struct {
    ar_paired t;          /* pairs, mean, sd, se, t, df, p */
    double ci_lo, ci_hi;  /* mean -+ t_{0.975, df} se; NaN with fewer than 2 pairs */
} ar_study_diff;

void ar_study_diff_of(const double *d, int n, ar_study_diff *out);

typedef struct {
    ar_study_axis axis;
    int n;                /* points */
    long *value;          /* each point: n_layer, or the asked token budget */
    ar_ablation *ab;      /* one per point, in the order given */
} ar_axis_study;

/* Plans an ablation of `variants` x seeds at each point, each from base
 * with only the axis's key replaced; seeds_at (NULL, or n entries, 0 for
 * the default) gives a point its own number of seeds, else `seeds`.  A
 * point at which a variant's config fails its checks (a block size that
 * does not fit, say) is an error naming the point.  Points must be
 * distinct and >= 1.  A wrong list or variant name is an AR_ERR_BAD_VALUE
 * (a wrong command line); a config that fails its checks is not. */
int ar_axis_study_plan(ar_axis_study *s, ar_study_axis axis, const ar_config *base, const long *values,
                       const int *seeds_at, int n, const char *variants, int seeds, ar_err *e);
void ar_axis_study_free(ar_axis_study *s);

/* "1M", "500k", "2G" when the count is a whole number of those (decimal:
 * k = 1e3, M = 1e6, G = 1e9), else the number. */
void ar_tokens_label(long tokens, char *buf, size_t n);
/* Parses "1M", "4m", "500k", "2.5M", "1000000" (a positive count of
 * tokens, at most 1e15): 0, or -1. */
int ar_tokens_parse(const char *s, long *tokens);

/* The run directory of point i: DIR/L<depth> or DIR/T<label>. */
void ar_axis_study_dir(const ar_axis_study *s, int i, const char *out_dir, char *buf, size_t n);
/* The point as a reader says it: "n_layer 8", "4M tokens". */
void ar_axis_study_point(const ar_axis_study *s, int i, char *buf, size_t n);

/* Where variant v starts to pay: the smallest point P of the study such
 * that the variant's mean difference is below zero at P and at every
 * larger point of the study (a finite mean at each); -1 where it is not
 * below zero at the largest.  *all_ci (if not NULL): 1 when, moreover, the
 * 95% interval lies below zero at each of those points.  Returns the
 * point's index, or -1. */
int ar_axis_study_onset(const ar_axis_study *s, const ar_study_diff *diff, int v, int *all_ci);

/* How variant v's difference changes from the smallest point to the
 * largest among those with a standard error (2 pairs or more),
 * change = d_last - d_first:
 *   AR_TREND_GROWS  the variant's lead grows: change < 0 by more than
 *                   2 x sqrt(se_first^2 + se_last^2);
 *   AR_TREND_FADES  change > 0 by more than that;
 *   AR_TREND_HOLDS  within it;
 *   AR_TREND_UNKNOWN fewer than two such points: then first, last and
 *                   *change are those of the smallest and largest points
 *                   with a finite mean (one seed), where there are two. */
typedef enum { AR_TREND_UNKNOWN = 0, AR_TREND_GROWS, AR_TREND_HOLDS, AR_TREND_FADES } ar_trend;
ar_trend ar_axis_study_trend(const ar_axis_study *s, const ar_study_diff *diff, int v, int *first, int *last,
                             double *change);

/* The lines "- VARIANT: lower loss than the baseline from ... on ..." on
 * stdout (and in the report's .md). */
void ar_axis_study_summary_print(const ar_axis_study *s, const ar_study_diff *diff);

/* Writes each point's ablation report (DIR/<point>/...) from the runs
 * finished so far, then the study's .csv, .md and .png.  diff (NULL, or
 * n x nvariants entries, [i * nvariants + v], v = 0 the baseline with 0
 * pairs) receives the comparisons. */
int ar_axis_study_report(const ar_axis_study *s, const char *out_dir, ar_study_diff *diff, ar_err *e);

#endif
