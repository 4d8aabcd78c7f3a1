/* Figures drawn with cairo (text through cairo's font renderer), written
 * atomically as PNG with metadata, SVG or PDF (viz/canvas.h). */
#ifndef AR_PLOT_H
#define AR_PLOT_H

#include "../core/error.h"
#include "canvas.h"

typedef struct {
    const char *label;      /* legend entry; NULL = no legend entry */
    const double *x, *y;    /* n points; non-finite y values are skipped */
    int n;
    int markers;            /* 1: draw a dot at every point */
    int no_line;            /* 1: points only, no line between them (with markers) */
    int color;              /* 0: the series' own colour (by index); k >= 1: that of series k-1 */
    const double *ylo, *yhi; /* NULL, or n error-bar ends: a capped vertical bar at each point where both are finite */
} ar_series;

typedef struct {
    const char *title, *xlabel, *ylabel;
    int logx, logy;
    int width, height;      /* pixels; 0 = 900 x 560 (ar_plot_lines only) */
    const char *note;       /* text drawn in a box inside the axes ('\n' breaks lines); NULL = none */
    const char *empty;      /* with nothing drawable: this text in empty axes; NULL = an error */
    const ar_fig_meta *meta; /* what the file records (ar_plot_lines only); NULL = defaults */
} ar_plot_opts;

/* Line plot of ns series with axes, ticks, tick labels, grid and legend. */
int ar_plot_lines(const char *path, const ar_plot_opts *o, const ar_series *s, int ns, ar_err *e);

/* Several line plots side by side on one width x height canvas (each
 * width/np wide); title is the figure's title in its metadata. */
typedef struct {
    const ar_plot_opts *o;
    const ar_series *s;
    int ns;
} ar_line_panel;
int ar_plot_line_panels(const char *path, const char *title, const ar_line_panel *p, int np, int width,
                        int height, const ar_fig_meta *meta, ar_err *e);

/* One heatmap of a matrix, for ar_plot_heatmaps. */
typedef struct {
    const char *title;      /* above the panel; '\n' breaks lines */
    const char *xlabel, *ylabel;
    const double *m;        /* rows x cols, row 0 at the top; NaN = empty cell */
    int rows, cols;
    const char *const *row_labels, *const *col_labels; /* NULL = indices */
    double vmin, vmax;      /* colour range; NaN = the data's own minimum / maximum */
    const unsigned char *marked; /* rows x cols flags or NULL: 1 = cell outlined (dashed) */
    const unsigned char *starred; /* rows x cols flags or NULL: 1 = a star in the cell's top right corner */
    const char *mark_note;  /* what an outline or a star means, printed under the panel */
    const char *cbar_label; /* beside the colour bar; NULL = none */
    int decimals;           /* > 0: digits after the point of the values printed in cells; 0: by their size */
    int gap_before;         /* > 0: a gap above this row (e.g. before an output row) */
} ar_heat_panel;

/* Where a panel's cells landed: cell (r, c) covers x + c*cw .. x + (c+1)*cw,
 * y + r*ch .. y + (r+1)*ch, plus `gap` px for rows at or below gap_before. */
typedef struct {
    double x, y, cw, ch, gap;
    int W, H;               /* the whole figure's size */
} ar_heat_geom;

/* Heatmaps in a grid of `cols` columns (row-major), each with its colour
 * bar, cells of one size across the figure and values printed in cells
 * that are large enough.  title is the figure's title in its metadata.
 * geom (np entries, or NULL) receives where each panel's cells are. */
int ar_plot_heatmaps(const char *path, const char *title, const ar_heat_panel *p, int np, int cols,
                     const ar_fig_meta *meta, ar_heat_geom *geom, ar_err *e);

/* A single heatmap with a colour bar over the data's own range, optional
 * row/col labels (NULL = indices). */
int ar_plot_heatmap(const char *path, const char *title, const char *xlabel, const char *ylabel,
                    const double *m, int rows, int cols, const char *const *row_labels,
                    const char *const *col_labels, ar_err *e);

#endif
