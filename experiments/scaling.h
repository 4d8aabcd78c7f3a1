/* Scaling-law fits (what `attnres fit-scaling` computes).
 *
 * Forms, with C the compute and L the loss:
 *   power   L = A * C^-alpha
 *   offset  L = E + A * C^-alpha
 * fitted by unweighted nonlinear least squares in linear space
 * (gsl_multifit_nlinear, trust region with Levenberg-Marquardt steps).  The
 * power form starts from the log-log linear regression (gsl_fit_linear);
 * the offset form starts from several values of E below the smallest loss
 * and keeps the best converged fit.  Internally C is divided by the
 * geometric mean of the data's C, which keeps the problem well conditioned
 * whether C is in FLOPs or in PFLOP/s-days.
 *
 * Uncertainties: the covariance of the parameters is (J^T J)^-1 at the
 * optimum scaled by the residual variance s^2 = RSS/(n-p)
 * (gsl_multifit_nlinear_covar), the standard errors its diagonal's square
 * roots, and the 95% intervals theta +- t * se with t the 0.975 quantile of
 * Student's t with n-p degrees of freedom (gsl_cdf_tdist_Pinv).  With
 * n = p the fit is exact and the uncertainties are NaN.
 *
 * Compute-equivalence ratio of group v against baseline b at compute C:
 * the baseline reaches the loss L_v(C) at C' = (A_b / (L_v(C) - E_b))^(1/alpha_b)
 * (E_b = 0 for the power form) and the ratio is C'/C.  A ratio of 1.25 means
 * the baseline needs 1.25x the compute for the same loss.  Its uncertainty
 * comes from the delta method on ln(ratio) over both groups' parameter
 * covariances (the groups are fitted independently):
 * se(ln r)^2 = g_b' Cov_b g_b + g_v' Cov_v g_v, se(r) = r * se(ln r), and
 * the 95% interval is r * exp(+-1.96 se(ln r)). */
#ifndef AR_SCALING_H
#define AR_SCALING_H

#include <stdio.h>

#include "../core/error.h"

typedef enum { AR_FIT_POWER = 0, AR_FIT_OFFSET } ar_fit_form;

const char *ar_fit_form_name(ar_fit_form f);

/* Parameter order in se, ci and cov. */
enum { AR_FIT_A = 0, AR_FIT_ALPHA = 1, AR_FIT_E = 2 };

typedef struct {
    ar_fit_form form;
    int n, np;          /* points, parameters (2 or 3) */
    double p[3];        /* A, alpha, E (E = 0 for the power form) */
    double se[3];       /* standard errors (0 for E in the power form; NaN when n = np) */
    double ci[3][2];    /* 95% confidence intervals */
    double cov[3][3];   /* covariance of (A, alpha, E) */
    double rss;         /* residual sum of squares */
    double r2;          /* 1 - RSS / sum (y - mean y)^2 */
    int dof;            /* n - np */
    double t95;         /* the t quantile of the intervals (NaN when dof = 0) */
    int iterations;
} ar_fit;

/* Fits n points (x > 0, y > 0, finite; at least np of them, not all with the
 * same x).  Errors name the problem, not a place: callers that know where the
 * points come from check those conditions first. */
int ar_fit_curve(const double *x, const double *y, int n, ar_fit_form form, ar_fit *out, ar_err *e);

/* The fitted loss at x. */
double ar_fit_eval(const ar_fit *f, double x);

typedef struct {
    double at;          /* C, the compute at which the group is compared */
    double loss;        /* L_v(C) */
    double c_base;      /* C' */
    double ratio;       /* C'/C; NaN when the baseline never reaches the loss */
    double se;          /* delta-method standard error of the ratio */
    double se_log;      /* standard error of ln(ratio) */
    double ci[2];       /* 95% interval */
} ar_ratio;

/* Ratio of group v against baseline b at compute at (> 0).  When the
 * baseline's curve never reaches L_v(at) (offset form, L_v(at) <= E_b) the
 * ratio and its uncertainty are NaN and the call still succeeds. */
void ar_fit_ratio(const ar_fit *b, const ar_fit *v, double at, ar_ratio *out);

/* ---- a data set of (group, x, y) points read from CSV tables ---- */

typedef struct {
    char *name;
    int n;
    double *x, *y;
    const char **file;  /* per point: the table it came from (owned by ar_scaling) */
    int *line;          /* per point: its line there */
    ar_fit fit;
    int is_baseline;
    ar_ratio ratio;     /* against the baseline (not for the baseline itself) */
} ar_scaling_group;

typedef struct {
    char gcol[128], xcol[128], ycol[128];
    int nfiles;
    char **files;
    int ng;
    ar_scaling_group *g; /* in order of first appearance */
    ar_fit_form form;
    int baseline;        /* index into g */
    double at;           /* compute at which ratios are evaluated */
} ar_scaling;

/* Reads the tables: each input is a CSV file, or a directory holding
 * results.csv (an `attnres sweep` output directory).  Every table must have
 * the three columns; x and y must be finite positive numbers.  ycol NULL:
 * final_val_loss where the tables have that column (attnres sweep's final
 * evaluations), else val_loss; every table must agree.  Errors:
 *   "FILE:1: no column 'val_loss' (columns: ...)"
 *   "FILE:LINE: column 'val_loss' expects a number, got 'abc'"
 *   "FILE:LINE: column 'pflops_days' must be positive, got '0'" */
int ar_scaling_load(ar_scaling *s, const char *const *inputs, int ninputs, const char *gcol,
                    const char *xcol, const char *ycol, ar_err *e);

/* Fits every group and the ratios against the baseline group (named
 * `baseline`; NULL: the group "baseline" if there is one, else the first) at
 * compute `at` (<= 0 or NaN: the largest x in the data).  A group with fewer
 * points than the form has parameters is an error at its first point:
 *   "FILE:LINE: group 'block' has 1 point, fewer than the 2 parameters of the power form" */
int ar_scaling_fit(ar_scaling *s, ar_fit_form form, const char *baseline, double at, ar_err *e);

void ar_scaling_free(ar_scaling *s);

/* The fit as a plain-text report (parameters, intervals, R^2, ratios,
 * residuals). */
void ar_scaling_print(FILE *f, const ar_scaling *s);

/* The fit as one JSON object (malloc'd, no trailing newline). */
char *ar_scaling_json(const ar_scaling *s);

/* "L = 2.31 * C^-0.0712" or "L = 1.02 + 2.31 * C^-0.0712" */
void ar_fit_formula(const ar_fit *f, char *buf, size_t n);

#endif
