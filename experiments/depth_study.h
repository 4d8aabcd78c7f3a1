/* Depth studies (`attnres ablate --depths`): where AttnRes starts to pay.
 * One ablation (experiments/ablate.h: variants x seeds, seed index k the same
 * train.seed, so the same batches and initial transformer weights, for
 * every variant) at each of several depths n_layer, every other key of the
 * config the same (width, token budget, schedule).  At each depth every
 * variant is compared with the baseline over the seeds both finished:
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
 *   DIR/L<depth>/           the ablation at that depth (ar_ablate_report:
 *                           runs/, results.csv, results.md, ablation.png)
 *   DIR/depth_study.csv     one row per depth x compared variant
 *   DIR/depth_study.md      the same as a markdown table, with the method
 *   DIR/depth_study.png     mean difference against depth, 95% CI error
 *                           bars, a zero line */
#ifndef AR_DEPTH_STUDY_H
#define AR_DEPTH_STUDY_H

#include "../core/config.h"
#include "../core/error.h"
#include "ablate.h"

#define AR_DEPTH_STUDY_COLUMNS                                                                               \
    "n_layer,variant,pairs,baseline_mean,variant_mean,mean_diff,sd,se,ci95_lo,ci95_hi,t,df,p"

/* The paired difference with its 95% interval (the equations above). */
typedef struct {
    ar_paired t;          /* pairs, mean, sd, se, t, df, p */
    double ci_lo, ci_hi;  /* mean -+ t_{0.975, df} se; NaN with fewer than 2 pairs */
} ar_depth_diff;

void ar_depth_diff_of(const double *d, int n, ar_depth_diff *out);

typedef struct {
    int ndepths;
    int *depth;           /* n_layer of each ablation */
    ar_ablation *ab;      /* one per depth, in the order given */
} ar_depth_study;

/* Plans an ablation of `variants` x `seeds` at each depth (n_layer), each
 * from base with only model.n_layer replaced; a depth at which a variant's
 * config fails its checks (a block size that does not fit, say) is an
 * error naming the depth.  Depths must be distinct and >= 1.  A wrong
 * depths list or variant name is an AR_ERR_BAD_VALUE (a wrong command
 * line); a config that fails its checks is not. */
int ar_depth_study_plan(ar_depth_study *s, const ar_config *base, const int *depths, int ndepths,
                        const char *variants, int seeds, ar_err *e);
void ar_depth_study_free(ar_depth_study *s);

/* The run directory of depth index i: DIR/L<depth>. */
void ar_depth_study_dir(const ar_depth_study *s, int i, const char *out_dir, char *buf, size_t n);

/* Where variant v starts to pay: the smallest depth D of the study such
 * that the variant's mean difference is below zero at D and at every
 * deeper depth of the study (a finite mean at each); -1 where it is not
 * below zero at the deepest.  *all_ci (if not NULL): 1 when, moreover, the
 * 95% interval lies below zero at each of those depths. */
int ar_depth_study_onset(const ar_depth_study *s, const ar_depth_diff *diff, int v, int *all_ci);
/* The same as lines "- VARIANT: lower loss than the baseline from n_layer D on ..." on stdout
 * (and in depth_study.md). */
void ar_depth_study_onset_print(const ar_depth_study *s, const ar_depth_diff *diff);

/* Writes each depth's ablation report (DIR/L<depth>/...) from the runs
 * finished so far, then depth_study.csv, .md and .png.  diff (NULL, or
 * ndepths x nvariants entries, [i * nvariants + v], v = 0 the baseline
 * with 0 pairs) receives the comparisons. */
int ar_depth_study_report(const ar_depth_study *s, const char *out_dir, ar_depth_diff *diff, ar_err *e);

#endif
