/* Sweep files: the YAML grid of `attnres sweep` (attnres-sweep(1)).
 *
 *   base:            # an attnres config (attnres-config(5)), inline, or
 *     model: ...     # the path of one (relative to the sweep file)
 *   sizes:           # one mapping per model size
 *     - {name: xs, d_model: 64, n_layer: 2, n_head: 2, d_ff: 176, lr: 4.0e-3, tokens: 1048576}
 *     - {name: ys, d_model: 96, n_layer: 3, n_head: 2, d_ff: 256, flops: 2.0e13}
 *                    # a compute budget instead: its tokens follow from the
 *                    # size's parameters (ar_sweep_run.flops_budget)
 *   variants:        # residual kinds, or mappings {name, kind, block_size | num_blocks | block_sizes}
 *     - baseline
 *     - {kind: block, block_size: 4}
 *
 * Every value goes through the key table of formats/config.c, so a bad one is
 * reported as "FILE:LINE:COL: 'model.d_model' expects a positive integer,
 * got 'abc'", and a grid point that fails the cross-field checks as
 * "FILE: size 'xs', variant 'block': <the check's message>". */
#ifndef AR_FORMATS_SWEEP_H
#define AR_FORMATS_SWEEP_H

#include <stddef.h>

#include "../core/config.h"
#include "../core/error.h"

/* The grid as plain data: one resolved config per run. */
#define AR_SWEEP_NAME_MAX 64

typedef struct {
    char name[2 * AR_SWEEP_NAME_MAX + 2]; /* "<size>-<variant>": the run directory's name */
    char size[AR_SWEEP_NAME_MAX];
    char variant[AR_SWEEP_NAME_MAX];
    ar_config cfg;   /* resolved and validated */
    long tokens;     /* planned training tokens = steps * batch_size * grad_accum * seq_len */
    double flops_budget; /* the size's `flops:` (0: none).  The parser cannot
                          count parameters (that is the model's, lib/), so
                          steps stay 1 here until experiments/sweep.h's
                          ar_sweep_resolve_budgets sets them from it */
} ar_sweep_run;

typedef struct {
    int nsizes, nvariants;
    int nruns;           /* nsizes * nvariants, size-major: every variant of size 0 first */
    ar_sweep_run *runs;
} ar_sweep;

void ar_sweep_free(ar_sweep *s);

/* Parses a sweep document.  name is used in messages; base_dir resolves a
 * relative `base:` path (NULL: the working directory).  sets are
 * "KEY=VALUE" overrides of the base config (ar_config_set), applied after
 * base: and before each size's and variant's own keys. */
int ar_sweep_parse(ar_sweep *s, const char *text, size_t len, const char *name, const char *base_dir,
                   const char *const *sets, int nsets, ar_err *e);

/* Reads a sweep file (relative base: paths are taken from its directory). */
int ar_sweep_load(ar_sweep *s, const char *path, const char *const *sets, int nsets, ar_err *e);

/* Keeps only the sizes named in list (comma-separated, each once), in the
 * grid's order, with all their variants.  An unknown or repeated name is
 * an error that lists the grid's sizes; s is unchanged then. */
int ar_sweep_keep_sizes(ar_sweep *s, const char *list, ar_err *e);

/* The built-in grid, used by `attnres sweep` without a CONFIG: the text of
 * configs/scaling.yaml (a test keeps the two equal). */
extern const char ar_sweep_builtin_yaml[];
#define AR_SWEEP_BUILTIN_NAME "<built-in scaling grid>"

#endif
