/* Training dynamics of one or more runs from their metrics.jsonl (`attnres
 * plot`, and dynamics.png of every run), in the manner of the AttnRes
 * report's Figure 5: three panels side by side,
 *   (a) training and validation loss against training tokens,
 *   (b) RMS of each sublayer's output v_l across depth,
 *   (c) RMS of each sublayer's parameter gradients across depth,
 * (b) and (c) at each run's last evaluation; each run keeps one colour in
 * every panel.  Where a run logged routing statistics (depth_routing,
 * lib/mixing.h), a fourth panel,
 *   (d) depth routing against training tokens: the normalised entropy
 *       H / ln n (line) and the mean largest weight (dots on a line), each
 *       averaged over the mixers with more than one source,
 * makes the figure AR_DYNAMICS_ROUTING_WIDTH wide. */
#ifndef AR_DYNAMICS_H
#define AR_DYNAMICS_H

#include "../core/error.h"
#include "../formats/run_record.h"
#include "canvas.h"

#define AR_DYNAMICS_WIDTH 1650
#define AR_DYNAMICS_HEIGHT 520
#define AR_DYNAMICS_ROUTING_WIDTH 2200

typedef struct {
    const char *name; /* legend label */
    const char *path; /* the run directory, for the metadata; NULL = name */
    const ar_run_record *rec;
} ar_dyn_run;

/* An AR_DYNAMICS_WIDTH x AR_DYNAMICS_HEIGHT figure.  A run with no training record
 * is an error naming it. */
int ar_dynamics_figure(const char *path, const ar_dyn_run *runs, int nr, const ar_fig_meta *meta, ar_err *e);

#endif
