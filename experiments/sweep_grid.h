/* The grids of an architecture sweep (`attnres plot-sweep`; drawn by
 * experiments/sweep_plot.h): a sweep's results.csv (experiments/sweep.h) laid out per
 * method (the `variant` column) over the distinct values of two axis
 * expressions of the run's shape, such as d_model/L_b against n_head/L_b.
 * Reading only: no drawing here.
 *
 * Axis expressions: a column of the table, or COLUMN/COLUMN, with L_b (the
 * number of transformer blocks) another name for n_layer.  Every value must
 * be a finite number, and a denominator non-zero. */
#ifndef AR_SWEEP_GRID_H
#define AR_SWEEP_GRID_H

#include "../core/error.h"

#define AR_AXIS_EXPR_MAX 64

/* A parsed axis expression: num, or num / den (den[0] == 0: no division). */
typedef struct {
    char text[AR_AXIS_EXPR_MAX]; /* as given */
    char num[AR_AXIS_EXPR_MAX], den[AR_AXIS_EXPR_MAX]; /* column names, L_b replaced by n_layer */
} ar_axis_expr;

/* Parses "NAME" or "NAME/NAME" (names of letters, digits and '_', spaces
 * around '/' allowed): 0, or -1 with the expected form in e. */
int ar_axis_expr_parse(const char *s, ar_axis_expr *x, ar_err *e);

/* The methods' grids over the distinct x values (columns, ascending) and y
 * values (rows, descending: the largest y on top, as on a y axis). */
typedef struct {
    int nm, nx, ny;
    char **method;    /* nm names, in order of first appearance */
    double *xs, *ys;  /* nx and ny axis values */
    double *v;        /* nm * ny * nx, v[(m * ny + r) * nx + c]; NaN = no run, or no value */
    int *best;        /* nm: index r * nx + c of the method's lowest value, -1 if none */
    char metric[128];
    int seeds;        /* the most runs (seeds) averaged into one cell: 1 for one seed */
    double flops;     /* the runs' common compute (`flops` column, all within 2%: their midrange), else NaN */
} ar_sweep_grid;

/* Reads the tables inputs[0..ninputs-1] (each a results.csv, or a
 * directory holding one) into g, as one table.  metric NULL: final_val_loss
 * where the first table has it, else val_loss.  Errors name the file and
 * what was expected: a missing table, no data rows, a missing column (with
 * the columns there), a value that is not a number, a zero denominator,
 * and two runs of one method in the same cell not told apart by a `seed`
 * column (runs of different seeds in a cell are averaged: ablate's table,
 * a sweep's, or one sweep per seed given together).  A row whose metric is
 * empty or nan leaves its cell empty, or out of its cell's mean. */
int ar_sweep_grid_load(ar_sweep_grid *g, const char *const *inputs, int ninputs, const ar_axis_expr *x,
                       const ar_axis_expr *y, const char *metric, ar_err *e);
void ar_sweep_grid_free(ar_sweep_grid *g);

/* The results table that a command given PATH reads (fit-scaling,
 * plot-sweep): PATH/results.csv where PATH is a directory (a sweep's --out),
 * else PATH itself, into file (n bytes); an error naming both where that
 * file cannot be read. */
int ar_sweep_table_file(const char *path, char *file, size_t n, ar_err *e);

#endif
