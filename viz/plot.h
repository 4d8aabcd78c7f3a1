/* PNG figures drawn with cairo (text through cairo's font renderer),
 * written atomically (temporary file, then rename). */
#ifndef AR_PLOT_H
#define AR_PLOT_H

#include "../lib/error.h"

typedef struct {
    const char *label;      /* legend entry; NULL = no legend entry */
    const double *x, *y;    /* n points; non-finite y values are skipped */
    int n;
    int markers;            /* 1: draw a dot at every point */
    int no_line;            /* 1: points only, no line between them (with markers) */
    int color;              /* 0: the series' own colour (by index); k >= 1: that of series k-1 */
} ar_series;

typedef struct {
    const char *title, *xlabel, *ylabel;
    int logx, logy;
    int width, height;      /* pixels; 0 = 900 x 560 */
    const char *note;       /* text drawn in a box inside the axes ('\n' breaks lines); NULL = none */
} ar_plot_opts;

/* Line plot of ns series with axes, ticks, tick labels, grid and legend. */
int ar_plot_lines(const char *path, const ar_plot_opts *o, const ar_series *s, int ns, ar_err *e);

/* Heatmap of a rows x cols matrix (row 0 at the top), NaN = empty cell,
 * colour bar with the value range, optional row/col labels (NULL = indices). */
int ar_plot_heatmap(const char *path, const char *title, const char *xlabel, const char *ylabel,
                    const double *m, int rows, int cols, const char *const *row_labels,
                    const char *const *col_labels, ar_err *e);

#endif
