/* Token-averaged depth-attention weights (what `attnres plot-depth-attn`
 * draws): for each mixer l = 1..L+1 (L+1 = the final state h_out), the mean
 * over every evaluated token of its weights alpha_i over its sources,
 *     abar_{l,i} = (1 / #tokens) sum_tokens alpha_{l,i}(token),
 * on the windows of the evaluation protocol (study/eval.h). */
#ifndef AR_DEPTH_STATS_H
#define AR_DEPTH_STATS_H

#include <stddef.h>
#include <stdint.h>

#include "../core/error.h"
#include "../lib/mixing.h"
#include "../lib/model.h"
#include "eval.h"

/* Runs m on the evaluation windows of x[0..n) (max_windows <= 0: all) and
 * averages every mixer's weights over all their tokens (each batch's mean
 * weighted by its token count, so the result is the exact mean over
 * tokens).  r, if non-NULL, gets the evaluation result.  A model without
 * depth attention (baseline) is an error. */
int ar_depth_attn_measure(ar_model *m, const int32_t *x, size_t n, long max_windows, ar_depth_attn *a,
                          ar_eval_result *r, ar_err *e);

#endif
