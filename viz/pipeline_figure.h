/* Pipeline parallelism as a picture (`attnres plot-pipeline`; the AttnRes
 * report's section 4.1 and its Figure 3), drawn from plain numbers: this
 * file knows nothing of the plan that made them (parallel/pipe_plan.h).
 *
 *   (a) top: one column per chunk c = 0..C-1 in pipeline order (rank
 *       c mod P, virtual stage c / P), one small cell per residual row
 *       (b0, b1', b1, ...): what the chunk's rank holds when the chunk
 *       starts, coloured kept (cached from its earlier virtual stages),
 *       received at this transition, produced by the chunk, or absent;
 *       under each arrow between two columns the rows that transition
 *       sends per micro-batch (and, given, what it would send without
 *       caching: "sent 3 (naive 7)")
 *   (b) bottom: the schedule as a Gantt chart, one lane per rank, a box
 *       per forward (one shade per virtual stage) and backward op,
 *       labelled with its micro-batch, the bubble fraction in the title */
#ifndef AR_VIZ_PIPELINE_FIGURE_H
#define AR_VIZ_PIPELINE_FIGURE_H

#include "../core/error.h"
#include "canvas.h"

/* What a rank holds of one row when a chunk starts. */
enum {
    AR_PFIG_ABSENT = 0,
    AR_PFIG_KEPT,     /* held since one of the rank's earlier chunks (cached) */
    AR_PFIG_RECEIVED, /* moved by the transition into this chunk */
    AR_PFIG_PRODUCED, /* computed by this chunk */
};

typedef struct {
    int rank, virt;              /* where the chunk runs: rank and virtual stage */
    int lo, hi;                  /* its sublayers lo..hi */
    const unsigned char *state;  /* nrows entries, AR_PFIG_*, when the chunk starts */
    int sent;                    /* rows the transition to the next chunk sends (unread for the last chunk) */
    int sent_naive;              /* the same without caching; < 0 = not drawn */
} ar_pfig_chunk;

typedef struct {
    char kind;         /* 'F' or 'B' */
    int mb;            /* micro-batch: the box's label */
    int virt;          /* virtual stage: the box's shade */
    double start, dur; /* in the time axis' units */
} ar_pfig_op;

typedef struct {
    const char *title;            /* on top of the figure and in its metadata; '\n' breaks lines */
    int P, V, C;                  /* ranks, virtual stages a rank (at most 64), chunks (C = P V) */
    int nrows;                    /* residual rows (L + 1) */
    const char *const *row_label; /* nrows labels, top to bottom ("b0", "b1'", "b1", ...) */
    const char *rows_note;        /* one line under panel (a) saying what the labels mean; NULL = none */
    const ar_pfig_chunk *chunk;   /* C chunks in pipeline order */
    const int *nops;              /* P ranks: ops[r][0..nops[r]-1] */
    const ar_pfig_op *const *ops;
    double makespan, bubble;      /* the schedule's length and idle fraction (0..1) */
    const char *sched;            /* panel (b)'s title names it ("1F1B interleaved, M = 4 micro-batches") */
    const char *time_label;       /* under the time axis */
    const ar_fig_meta *meta;      /* NULL = defaults */
} ar_pfig;

/* Where the figure put things, for tests:
 *   panel (a): cell (c, q) covers x = cx + c cpitch .. + cw, y = cy + q ch .. + ch;
 *   panel (b): time t is at x = tx + t tscale; lane r covers y = ly + r lpitch .. + lh. */
typedef struct {
    double cx, cpitch, cw, cy, ch;
    double tx, tscale, ly, lpitch, lh;
    int W, H;
} ar_pfig_geom;

/* The colour of a cell in state s (AR_PFIG_*), and of an op's box, as
 * 0..255 RGB. */
void ar_pfig_state_rgb(int s, int rgb[3]);
void ar_pfig_op_rgb(char kind, int virt, int V, int rgb[3]);

/* Draws f into path (PNG, SVG or PDF by meta->format or the extension).
 * geom (or NULL) receives the layout. */
int ar_pipeline_figure(const char *path, const ar_pfig *f, ar_pfig_geom *geom, ar_err *e);

#endif
