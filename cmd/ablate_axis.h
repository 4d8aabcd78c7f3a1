/* attnres ablate --depths / --tokens (cmd/ablate_axis.c): a study along
 * depth or token budget. */
#ifndef AR_CMD_ABLATE_AXIS_H
#define AR_CMD_ABLATE_AXIS_H

#include "../core/config.h"
#include "../experiments/axis_study.h"

/* Plans, trains and reports the study: cfg the loaded and checked config
 * (config its file, NULL for the defaults; for the default --out),
 * variants the --variant list, out_opt --out or NULL, list the --depths
 * or --tokens list.  Returns an exit status. */
int cli_ablate_axis(ar_study_axis axis, const ar_config *cfg, const char *config, const char *variants, int seeds,
                    int jobs, const char *out_opt, const char *list, const char *usage);

#endif
