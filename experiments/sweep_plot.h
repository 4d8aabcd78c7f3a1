/* The architecture-sweep figure (`attnres plot-sweep`, the AttnRes
 * report's Figure 7): the grids of experiments/sweep_grid.h as one heatmap per
 * method side by side, the loss in every cell, each method's lowest loss
 * starred and one colour scale for all methods. */
#ifndef AR_SWEEP_PLOT_H
#define AR_SWEEP_PLOT_H

#include "../core/error.h"
#include "../viz/canvas.h"
#include "sweep_grid.h"

/* Draws g to `out` (format by meta, or by extension): the methods side by
 * side, loss in every cell, optimum starred, axes labelled with the values
 * of the expressions, one colour scale. */
int ar_sweep_grid_plot(const ar_sweep_grid *g, const ar_axis_expr *x, const ar_axis_expr *y, const char *out,
                       const ar_fig_meta *meta, ar_err *e);

#endif
