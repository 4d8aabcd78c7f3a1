/* The AttnRes report's Table 4, as published, and its comparison with an
 * ablation measured here (attnres-ablate(1), results.md and --json). */
#ifndef AR_EXPERIMENTS_TABLE4_H
#define AR_EXPERIMENTS_TABLE4_H

#include "ablate.h"

/* The report's baseline loss in Table 4 (nats), which its deltas are
 * against. */
#define AR_TABLE4_BASELINE 1.766

/* One published row: the ablate variant that builds the same model, the
 * report's setting in words, and its loss minus the baseline's. */
typedef struct {
    const char *variant, *setting;
    double delta;
} ar_table4_row;

/* The published rows (*n of them), in the report's order. */
const ar_table4_row *ar_table4_rows(int *n);
/* The row of an ablate variant, or NULL where the report has none. */
const ar_table4_row *ar_table4_find(const char *variant);

/* Spearman's rank correlation of n pairs (x_i, y_i): the Pearson
 * correlation of their ranks, tied values taking the mean of the ranks
 * they span.  NaN for n < 2 or where either side is constant. */
double ar_spearman(const double *x, const double *y, int n);

/* One variant of an ablation set against the report: the measured delta
 * (the paired mean difference where a seed of both finished, else the
 * difference of means; NaN without results), whether its sign is the
 * published one's (an exact 0 matches only 0). */
typedef struct {
    const ar_table4_row *pub; /* NULL: not in the report */
    double measured;
    int same_sign;            /* -1: no measured delta */
} ar_table4_cmp;

/* The comparison of every variant v > 0 of an ablation (names[v], stats
 * st[v]) into cmp[v] (cmp[0] is the baseline's: pub NULL), and Spearman's
 * rho over the variants with both a published and a measured delta
 * (*nboth of them); NaN with fewer than 2. */
double ar_table4_compare(char (*names)[AR_SWEEP_NAME_MAX], const ar_ablate_stat *st, int nvariants,
                         ar_table4_cmp *cmp, int *nboth);

#endif
