/* The numbers behind the depth figures (viz/depth_figure.h), as CSV. */
#ifndef AR_DEPTH_CSV_H
#define AR_DEPTH_CSV_H

#include "../core/error.h"
#include "../viz/depth_figure.h"

/* CSV, one row per (mixer, source):
 *   run,step,kind,mixer,role,source,block,first,last,partial,weight
 * mixer l = 1..L+1; role attn, mlp or output; source = its index in the
 * mixer's list; it sums v_first..v_last of block `block`; partial 1 for a
 * partial sum; weight = the token-averaged alpha. */
int ar_depth_csv(const char *path, const ar_depth_run *runs, int nr, ar_err *e);
/* CSV, one row per entry of M below the diagonal:
 *   run,step,kind,mixer,role,source,m        (source = i of v_i) */
int ar_depth_matrix_csv(const char *path, const ar_depth_run *runs, int nr, ar_err *e);
/* CSV of the routing statistics (lib/mixing.h), one row per mixer:
 *   run,step,kind,mixer,role,n_sources,tokens,entropy,entropy_norm,eff_sources,mean_max,top_share_0,..
 * entropy in nats; top_share_i for i below the most sources of any mixer,
 * empty past the mixer's own n_sources; an undefined value (entropy_norm
 * with one source) is an empty field. */
int ar_depth_stats_csv(const char *path, const ar_depth_run *runs, int nr, ar_err *e);

#endif
