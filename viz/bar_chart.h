/* A bar chart with error bars (ablation results), drawn with cairo and
 * written as PNG with metadata (viz/canvas.h). */
#ifndef AR_VIZ_BAR_CHART_H
#define AR_VIZ_BAR_CHART_H

#include "../core/error.h"
#include "canvas.h"

typedef struct {
    const char *title, *ylabel;
    double ref;              /* a dashed horizontal reference line; NaN = none */
    const char *ref_label;   /* its label */
    const ar_fig_meta *meta; /* NULL = defaults */
} ar_bar_opts;

/* n bars: value[i] with an error bar of +- err[i] (0 = none), labelled
 * label[i].  The value axis spans the data (bars start at its bottom), so
 * small differences between losses stay visible. */
int ar_plot_bars(const char *path, const ar_bar_opts *o, const char *const *label, const double *value,
                 const double *err, int n, ar_err *e);

#endif
