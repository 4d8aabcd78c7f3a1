/* The figures every training run leaves in its directory. */
#ifndef AR_RUN_FIGURES_H
#define AR_RUN_FIGURES_H

#include "../core/error.h"

/* Writes the run's figures from metrics.jsonl: loss.png, dynamics.png and,
 * for AttnRes kinds, depth_attn.png (run_figures.c). */
int ar_train_figures(const char *run_dir, ar_err *e);

#endif
