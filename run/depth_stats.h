/* Token-averaged depth-attention weights (what `attnres plot-depth-attn`
 * draws): for each mixer l = 1..L+1 (L+1 = the final state h_out), the mean
 * over every evaluated token of its weights alpha_i over its sources,
 *     abar_{l,i} = (1 / #tokens) sum_tokens alpha_{l,i}(token),
 * on the windows of the evaluation protocol (run/eval.h). */
#ifndef AR_DEPTH_STATS_H
#define AR_DEPTH_STATS_H

#include <stddef.h>
#include <stdint.h>

#include "../core/error.h"
#include "../formats/json.h"
#include "../lib/mixing.h"
#include "../lib/model.h"
#include "eval.h"

/* Runs m on the evaluation windows of d (max_windows <= 0: all) and
 * averages every mixer's weights over all their tokens (each batch's mean
 * weighted by its token count, so the result is the exact mean over
 * tokens).  r, if non-NULL, gets the evaluation result.  A model without
 * depth attention (baseline) is an error. */
int ar_depth_attn_measure(ar_model *m, const ar_eval_data *d, long max_windows, ar_depth_attn *a,
                          ar_eval_result *r, ar_err *e);
/* The same, also summing the routing statistics (lib/mixing.h) of every
 * evaluated token into route (NULL: not measured; else initialised here,
 * free with ar_depth_route_free; the model's scheme gives per-token
 * weights wherever it has depth attention). */
int ar_depth_measure(ar_model *m, const ar_eval_data *d, long max_windows, ar_depth_attn *a,
                     ar_depth_route *route, ar_eval_result *r, ar_err *e);

/* Routing statistics over an evaluation: an ar_eval_hook (run/eval.h)
 * adding each batch's weights to ud, an ar_depth_route set up by
 * ar_depth_route_init (lib/mixing.h). */
void ar_depth_route_hook(ar_model *m, int B, void *ud);
/* Sums a over the ranks of c (NULL or one rank: nothing to do), so that
 * every rank holds the statistics of all the evaluated windows. */
struct ar_comm;
int ar_depth_route_reduce(ar_depth_route *a, struct ar_comm *c, ar_err *e);
/* Writes `key: {...}` into the object being written by w, per mixer
 * l = 1..L+1 (list item l-1; L+1 = the final aggregation h_out):
 *   {"tokens": T, "sources": [n_l], "entropy": [..], "entropy_norm": [..],
 *    "eff_sources": [..], "mean_max": [..], "top_share": [[share_0 .. share_{n_l - 1}], ..]}
 * (definitions in lib/mixing.h; undefined values, such as entropy_norm of a
 * mixer with one source, are null). */
void ar_depth_route_json(ar_jw *w, const char *key, const ar_depth_route *a);

#endif
