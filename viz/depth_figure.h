/* What depth mixing learned, as pictures and numbers (`attnres
 * plot-depth-attn`, and depth_attn.png of every AttnRes run):
 *
 *   ar_depth_figure         the AttnRes report's Figure 8: per run, two
 *                           heatmaps side by side, the inputs of the
 *                           attention sublayers (l odd, then h_out) and of
 *                           the MLP sublayers (l even); a row per sublayer,
 *                           a column per source (v_i for Full, block b_n for
 *                           Block AttnRes, the partial sum outlined)
 *   ar_depth_matrix_figure  the depth mixing matrix M of each run (report
 *                           section 6.2; lib/mixing.h), one heatmap per run
 *   ar_depth_stats_figure   routing statistics per mixer (entropy, maximum
 *                           weight, top-source shares; lib/mixing.h)
 * (the same numbers as CSV: run/depth_csv.h) */
#ifndef AR_DEPTH_FIGURE_H
#define AR_DEPTH_FIGURE_H

#include "../core/config.h"
#include "../core/error.h"
#include "../lib/mixing.h"
#include "plot.h"

typedef struct {
    const char *name;        /* the run, as titles name it */
    const char *path;        /* its directory or file, for the metadata; NULL = name */
    long step;               /* training step; < 0 = unknown */
    ar_model_cfg cfg;        /* kind, block size, n_layer */
    const ar_depth_attn *w;  /* token-averaged weights (NULL for kinds without) */
    const double *M;         /* (L+1) x (L+1) mixing matrix (matrix figure and CSV only) */
    const char *what;        /* where the weights come from, under the panels; NULL = none */
    const ar_depth_route *route; /* routing statistics (stats figure and CSV only) */
} ar_depth_run;

/* "baseline", "full AttnRes", "block AttnRes (S = 4)". */
void ar_depth_variant_name(const ar_model_cfg *cfg, char *buf, size_t cap);

/* geom: 2 * nr entries (attention then MLP panel of each run), or NULL. */
int ar_depth_figure(const char *path, const ar_depth_run *runs, int nr, const ar_fig_meta *meta,
                    ar_heat_geom *geom, ar_err *e);
/* Routing statistics (lib/mixing.h), two heatmaps per run, one row per
 * mixer (1 attn, 2 mlp, ..., out): the normalised entropy and mean maximum
 * weight, and the share of tokens whose top source is each source (columns
 * as in ar_depth_figure).  geom: 2 * nr entries, or NULL. */
int ar_depth_stats_figure(const char *path, const ar_depth_run *runs, int nr, const ar_fig_meta *meta,
                          ar_heat_geom *geom, ar_err *e);
/* geom: nr entries, or NULL. */
int ar_depth_matrix_figure(const char *path, const ar_depth_run *runs, int nr, const ar_fig_meta *meta,
                           ar_heat_geom *geom, ar_err *e);

#endif
