/* attnres ablate --depths (cmd/ablate_depths.c): a depth study. */
#ifndef AR_CMD_ABLATE_DEPTHS_H
#define AR_CMD_ABLATE_DEPTHS_H

#include "../core/config.h"

/* Plans, trains and reports the study: cfg the loaded and checked config
 * (config its file, NULL for the defaults; for the default --out),
 * variants the --variant list, out_opt --out or NULL, depths the --depths
 * list.  Returns an exit status. */
int cli_ablate_depths(const ar_config *cfg, const char *config, const char *variants, int seeds, int jobs,
                      const char *out_opt, const char *depths, const char *usage);

#endif
